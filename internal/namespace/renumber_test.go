package namespace

import (
	"reflect"
	"testing"
)

func TestRenumber(t *testing.T) {
	tr := build(t,
		mkdir(2, RootIno, "d"),
		mkdir(3, 2, "e"),
		create(4, 3, "f"),
		create(5, RootIno, "g"),
		&Record{Op: OpLink, Ino: 5, Parent: 2, Name: "g2", Time: 11},
	)
	for _, base := range []Ino{0, 2, 6, 1000} {
		r := tr.Renumber(base)
		if err := r.Check(); err != nil {
			t.Fatalf("base %d: renumbered tree: %v", base, err)
		}
		if !reflect.DeepEqual(r.Dump(sumContent), tr.Dump(sumContent)) {
			t.Fatalf("base %d: renumbered tree differs:\n%v\n%v", base, r.Dump(sumContent), tr.Dump(sumContent))
		}
		lo := max(base, 2)
		for _, n := range r.Inodes() {
			if n.Ino != RootIno && n.Ino < lo {
				t.Errorf("base %d: inode %d below the base", base, n.Ino)
			}
		}
		if r.NextIno() < lo || r.NextIno() <= lo+3 {
			t.Errorf("base %d: next inode %d not above the renumbered inodes", base, r.NextIno())
		}
		if got := r.Get(RootIno).Entries["d"]; got != lo {
			t.Errorf("base %d: /d is inode %d, want %d", base, got, lo)
		}
		// The original is untouched.
		if tr.Get(RootIno).Entries["d"] != 2 || tr.Get(2) == nil {
			t.Fatalf("base %d: Renumber changed the original tree", base)
		}
		// A renumbered tree takes new records at its next number.
		if err := r.Apply(create(r.AllocIno(), RootIno, "new")); err != nil {
			t.Fatalf("base %d: create in the renumbered tree: %v", base, err)
		}
	}
}
