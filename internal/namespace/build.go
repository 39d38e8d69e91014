package namespace

import "fmt"

// FromInodes builds a tree from a complete table of linked inodes (a tree
// read from somewhere else than a checkpoint or the log: a snapshot's
// manifests). It checks the same structural invariants as DecodeCheckpoint
// (every entry names an inode, nlink counts agree, everything reachable
// from the root) and fills in directory Parent fields. next must be above
// every inode number in the table. The tree takes ownership of the inodes.
func FromInodes(inodes map[Ino]*Inode, next Ino) (*Tree, error) {
	for ino, n := range inodes {
		if n.Ino != ino || ino == 0 {
			return nil, fmt.Errorf("namespace: inode table entry %d holds inode %d", ino, n.Ino)
		}
		if ino >= next {
			return nil, fmt.Errorf("namespace: next inode %d not above inode %d", next, ino)
		}
	}
	if err := checkTree(inodes, true); err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	t := &Tree{}
	for _, n := range inodes {
		t.insert(n)
	}
	t.nextIno.Store(uint64(next))
	return t, nil
}

// Clone returns an independent copy of a still tree (no concurrent Apply):
// inodes and their entry and xattr maps are copied; content, target and
// xattr value bytes are shared (immutable once published). Orphans are
// not copied; Aux, Pinned and the locks start fresh.
func (t *Tree) Clone() *Tree {
	c := &Tree{}
	t.inodes.Range(func(_, v any) bool {
		n := v.(*Inode)
		if n.Nlink == 0 && n.Ino != RootIno {
			return true
		}
		m := &Inode{Ino: n.Ino, Mode: n.Mode, Nlink: n.Nlink, Uid: n.Uid, Gid: n.Gid, Rdev: n.Rdev,
			Size: n.Size, Atime: n.Atime, Mtime: n.Mtime, Ctime: n.Ctime, Content: n.Content, Target: n.Target, Parent: n.Parent}
		if n.Entries != nil {
			m.Entries = make(map[string]Ino, len(n.Entries))
			for k, v := range n.Entries {
				m.Entries[k] = v
			}
		}
		if n.Xattrs != nil {
			m.Xattrs = make(map[string][]byte, len(n.Xattrs))
			for k, v := range n.Xattrs {
				m.Xattrs[k] = v
			}
		}
		c.inodes.Store(m.Ino, m)
		c.count.Add(1)
		return true
	})
	c.nextIno.Store(t.nextIno.Load())
	return c
}
