package namespace

// Renumber returns a copy of a still tree (see Clone: orphans are not
// copied, contents are shared) in which every inode but the root has a new
// number: ino-2+base, so the copy's numbers are base and above and none of
// them is below base. Entries and Parent fields follow. The copy's next
// inode number is at least base. Online restore uses it: the restored
// tree must not reuse a number the kernel still knows from the tree it
// replaces (node ids are never reused within a workspace).
func (t *Tree) Renumber(base Ino) *Tree {
	if base < RootIno+1 {
		base = RootIno + 1
	}
	re := func(i Ino) Ino {
		if i == RootIno || i == 0 {
			return i
		}
		return i - (RootIno + 1) + base
	}
	c := t.Clone()
	out := &Tree{}
	c.inodes.Range(func(_, v any) bool {
		n := v.(*Inode)
		n.Ino = re(n.Ino)
		n.Parent = re(n.Parent)
		for k, e := range n.Entries {
			n.Entries[k] = re(e)
		}
		out.inodes.Store(n.Ino, n)
		out.count.Add(1)
		return true
	})
	next := Ino(t.nextIno.Load())
	if next < RootIno+1 {
		next = RootIno + 1
	}
	out.nextIno.Store(uint64(re(next-1) + 1))
	if out.NextIno() < base {
		out.nextIno.Store(uint64(base))
	}
	return out
}

// RaiseNextIno makes the next inode number at least n.
func (t *Tree) RaiseNextIno(n Ino) {
	for {
		next := t.nextIno.Load()
		if uint64(n) <= next || t.nextIno.CompareAndSwap(next, uint64(n)) {
			return
		}
	}
}
