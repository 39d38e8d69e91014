package manifest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"wsfs/internal/namespace"
)

// TestCacheEqualsFullBuild applies random records to a tree, touching the
// cache with each, and after every few checks that the incremental build
// gives exactly the root ID of a full build, while re-encoding fewer
// directories.
func TestCacheEqualsFullBuild(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 3))
			b := newTB(t)
			tr := b.tree
			c := NewCache()
			var dirs []namespace.Ino
			var files []namespace.Ino
			dirs = append(dirs, namespace.RootIno)
			// A base tree, then a first (full) build.
			for i := 0; i < 30; i++ {
				dirs = append(dirs, b.mkdir(dirs[r.IntN(len(dirs))], fmt.Sprint("d", i)))
			}
			for i := 0; i < 200; i++ {
				files = append(files, b.file(dirs[r.IntN(len(dirs))], fmt.Sprint("f", i), []byte(fmt.Sprint(i))))
			}
			full := func() string {
				id, _, err := Build(tr, &MemStore{})
				if err != nil {
					t.Fatal(err)
				}
				return id.String()
			}
			st := &MemStore{}
			if id, _, err := c.Build(tr, st); err != nil || id.String() != full() {
				t.Fatalf("first build: %v %v", id, err)
			}
			name := func() string { return fmt.Sprint("n", r.IntN(40)) }
			entryOf := func(d namespace.Ino) (string, namespace.Ino, bool) {
				n := tr.Get(d)
				if n == nil || len(n.Entries) == 0 {
					return "", 0, false
				}
				k := r.IntN(len(n.Entries))
				for nm, ino := range n.Entries {
					if k == 0 {
						return nm, ino, true
					}
					k--
				}
				return "", 0, false
			}
			rebuiltLess := 0
			for step := 0; step < 600; step++ {
				live := func(list []namespace.Ino) namespace.Ino {
					for range 10 {
						ino := list[r.IntN(len(list))]
						if n := tr.Get(ino); n != nil && (n.Nlink > 0) {
							return ino
						}
					}
					return namespace.RootIno
				}
				d := live(dirs)
				b.now += 1000
				var rec *namespace.Record
				switch r.IntN(9) {
				case 0:
					rec = &namespace.Record{Op: namespace.OpMkdir, Ino: tr.AllocIno(), Parent: d, Name: name(), Mode: 0o755}
					dirs = append(dirs, rec.Ino)
				case 1:
					rec = &namespace.Record{Op: namespace.OpCreate, Ino: tr.AllocIno(), Parent: d, Name: name(), Mode: namespace.S_IFREG | 0o644}
					files = append(files, rec.Ino)
				case 2:
					f := live(files)
					if tr.Get(f) == nil || !tr.Get(f).IsReg() {
						continue
					}
					data := []byte(fmt.Sprint("v", step))
					rec = &namespace.Record{Op: namespace.OpSetContent, Ino: f, Size: uint64(len(data)), Mtime: namespace.FromNs(b.now), Content: namespace.Content{Inline: data}}
				case 3, 4:
					nm, ino, ok := entryOf(d)
					if !ok {
						continue
					}
					rec = &namespace.Record{Op: namespace.OpRename, Parent: d, Name: nm, Ino: ino, NewParent: live(dirs), NewName: name()}
					if dst := tr.Get(rec.NewParent); dst != nil {
						rec.Replaced = dst.Entries[rec.NewName]
					}
				case 5:
					nm, ino, ok := entryOf(d)
					if !ok {
						continue
					}
					rec = &namespace.Record{Op: namespace.OpUnlink, Parent: d, Name: nm, Ino: ino}
					if tr.Get(ino).IsDir() {
						rec.Op = namespace.OpRmdir
					}
				case 6:
					f := live(files)
					rec = &namespace.Record{Op: namespace.OpLink, Ino: f, Parent: d, Name: name()}
				case 7:
					rec = &namespace.Record{Op: namespace.OpSetAttr, Ino: live(append(dirs, files...)), Mask: namespace.AttrMode, Mode: uint32(0o700 + r.IntN(2)*0o55)}
				case 8:
					rec = &namespace.Record{Op: namespace.OpSetXattr, Ino: live(append(dirs, files...)), Name: "user.x", Value: []byte(fmt.Sprint(r.IntN(3)))}
				}
				rec.Time = b.now
				if err := tr.Apply(rec); err != nil {
					continue // the random op did not fit; nothing changed
				}
				c.Touch(rec)
				if step%7 == 0 {
					id, stats, err := c.Build(tr, st)
					if err != nil {
						t.Fatal(err)
					}
					if want := full(); id.String() != want {
						t.Fatalf("step %d (%v): incremental root %s, full build %s", step, rec.Op, id, want)
					}
					if stats.Dirs < len(dirs)/2 {
						rebuiltLess++
					}
				}
			}
			if rebuiltLess == 0 {
				t.Fatal("no incremental build re-encoded fewer directories than a full one")
			}
		})
	}
}
