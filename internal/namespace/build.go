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
