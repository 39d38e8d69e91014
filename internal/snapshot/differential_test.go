package snapshot

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/workspace"
)

// mnode is a model inode; hard links share one.
type mnode struct {
	ino    workspace.Ino
	dir    bool
	kids   map[string]*mnode
	sym    string
	perm   uint32
	data   []byte
	xattrs map[string]string
}

func (n *mnode) clone(seen map[*mnode]*mnode) *mnode {
	if c, ok := seen[n]; ok {
		return c
	}
	c := &mnode{ino: n.ino, dir: n.dir, sym: n.sym, perm: n.perm, data: slices.Clone(n.data), xattrs: map[string]string{}}
	seen[n] = c
	for k, v := range n.xattrs {
		c.xattrs[k] = v
	}
	if n.dir {
		c.kids = map[string]*mnode{}
		for k, kid := range n.kids {
			c.kids[k] = kid.clone(seen)
		}
	}
	return c
}

func (n *mnode) view(uid uint32) view {
	out := view{}
	var walk func(n *mnode, path string)
	walk = func(n *mnode, path string) {
		e := ventry{ino: uint64(n.ino), perm: n.perm, uid: uid}
		switch {
		case n.dir:
			e.typ = 'd'
		case n.sym != "":
			e.typ, e.data, e.perm = 'l', n.sym, 0o777
		default:
			e.typ, e.data = 'f', string(n.data)
		}
		var xs []string
		for k, v := range n.xattrs {
			xs = append(xs, k+"="+v)
		}
		sort.Strings(xs)
		e.xattrs = strings.Join(xs, ";")
		if n.ino == workspace.RootIno {
			e.uid = uint32(os.Getuid())
		}
		out[path] = e
		for name, k := range n.kids {
			walk(k, joinPath(path, name))
		}
	}
	walk(n, "/")
	return out
}

// TestDifferential runs random operations on a workspace interleaved with
// snapshots, diffs, forks and offline restores, against a model that
// copies its tree at each snapshot. Each snapshot must equal the model's
// copy, each fork must equal its snapshot, and every diff (snapshot to
// snapshot, snapshot to live) must equal the model's diff computed from
// scratch.
func TestDifferential(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runDifferential(t, seed, 400) })
	}
}

func runDifferential(t *testing.T, seed uint64, steps int) {
	e := memEnv(t)
	r := rand.New(rand.NewPCG(seed, 99))
	w := e.open("w")
	defer func() { w.Close() }()
	root := &mnode{ino: workspace.RootIno, dir: true, kids: map[string]*mnode{}, perm: 0o755, xattrs: map[string]string{}}
	type snap struct {
		info  Info
		model *mnode
	}
	var snaps []snap
	names := []string{"a", "b", "c", "d", "e"}
	// dirs lists the model's directories with their paths.
	dirs := func() (out []*mnode) {
		var walk func(n *mnode)
		walk = func(n *mnode) {
			out = append(out, n)
			for _, name := range sortedNames(n.kids) {
				if k := n.kids[name]; k.dir {
					walk(k)
				}
			}
		}
		walk(root)
		return out
	}
	under := func(d, anc *mnode) bool { // d is anc or inside it
		var found bool
		var walk func(n *mnode) bool
		walk = func(n *mnode) bool {
			if n == d {
				return true
			}
			for _, k := range n.kids {
				if k.dir && walk(k) {
					return true
				}
			}
			return false
		}
		found = walk(anc)
		return found
	}
	randData := func() []byte {
		n := r.IntN(40)
		switch r.IntN(20) {
		case 0, 1:
			n = 70 << 10 // one pool object
		case 2:
			n = 1<<20 + 1000 + r.IntN(3) // chunked: two chunks
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + r.IntN(3))
		}
		return b
	}
	diffs, restores := 0, 0
	checkDiff := func(what string, got []string, want []string) {
		t.Helper()
		diffs++
		if !slices.Equal(got, want) {
			t.Fatalf("%s: diff differs from the model\n got: %q\nwant: %q", what, got, want)
		}
	}
	forks := 0
	for step := 0; step < steps; step++ {
		ds := dirs()
		d := ds[r.IntN(len(ds))]
		name := names[r.IntN(len(names))]
		kid := d.kids[name]
		switch op := r.IntN(20); {
		case op < 5: // write a file
			if kid != nil && (kid.dir || kid.sym != "") {
				continue
			}
			data := randData()
			ino := writeFile(t, w, d.ino, name, data)
			if kid == nil {
				kid = &mnode{ino: ino, perm: 0o644, xattrs: map[string]string{}}
				d.kids[name] = kid
			}
			kid.data = data
		case op < 7: // mkdir
			if kid != nil {
				continue
			}
			a := must[workspace.Attr](t)(w.Mkdir(d.ino, name, 0o755, me))
			d.kids[name] = &mnode{ino: a.Ino, dir: true, kids: map[string]*mnode{}, perm: 0o755, xattrs: map[string]string{}}
		case op < 9: // remove
			if kid == nil {
				continue
			}
			if kid.dir {
				if len(kid.kids) != 0 {
					continue
				}
				noErr(t, w.Rmdir(d.ino, name))
			} else {
				noErr(t, w.Unlink(d.ino, name))
			}
			delete(d.kids, name)
		case op < 12: // rename to a free name
			if kid == nil {
				continue
			}
			nd := ds[r.IntN(len(ds))]
			nn := names[r.IntN(len(names))] + "2"
			if nd.kids[nn] != nil || (kid.dir && under(nd, kid)) {
				continue
			}
			noErr(t, w.Rename(d.ino, name, nd.ino, nn, 0))
			delete(d.kids, name)
			nd.kids[nn] = kid
		case op < 13: // hard link
			if kid == nil || kid.dir {
				continue
			}
			nd := ds[r.IntN(len(ds))]
			nn := names[r.IntN(len(names))] + "L"
			if nd.kids[nn] != nil {
				continue
			}
			must[workspace.Attr](t)(w.Link(kid.ino, nd.ino, nn))
			nd.kids[nn] = kid
		case op < 14: // symlink
			if kid != nil {
				continue
			}
			target := fmt.Sprintf("t%d", r.IntN(3))
			a := must[workspace.Attr](t)(w.Symlink(d.ino, name, target, me))
			d.kids[name] = &mnode{ino: a.Ino, sym: target, perm: 0o777, xattrs: map[string]string{}}
		case op < 15: // chmod
			if kid == nil || kid.sym != "" {
				continue
			}
			perm := uint32(0o600 + r.IntN(2)*0o44)
			must[workspace.Attr](t)(w.SetAttr(kid.ino, workspace.SetAttrIn{Mode: &perm}))
			kid.perm = perm
		case op < 16: // xattr
			if kid == nil || kid.sym != "" {
				continue
			}
			v := fmt.Sprint(r.IntN(2))
			noErr(t, w.SetXattr(kid.ino, "user.k", []byte(v), 0))
			kid.xattrs["user.k"] = v
		case op < 18: // snapshot, and diff it against an earlier one
			var in Info
			noErr(t, w.StillTree(func(tr *namespace.Tree, group uint64) error {
				var err error
				in, _, err = Create(e.fs, e.wsDir("w"), e.pool, tr, group, fmt.Sprint("step ", step), time.Now())
				return err
			}))
			m := root.clone(map[*mnode]*mnode{})
			uid := uint32(me.Uid)
			if d := diffViews(m.view(uid), viewOfSnapshot(t, e.pool, in)); d != "" {
				t.Fatalf("step %d: snapshot %d differs from the model:\n%s", step, in.ID, d)
			}
			if len(snaps) > 0 {
				old := snaps[r.IntN(len(snaps))]
				cs := must[[]manifest.Change](t)(Diff(e.pool, old.info, in))
				checkDiff(fmt.Sprintf("step %d: diff %d..%d", step, old.info.ID, in.ID), renderChanges(cs), modelDiff(old.model.view(uid), m.view(uid)))
			}
			snaps = append(snaps, snap{in, m})
		case op < 19: // diff a snapshot against the live tree; or fork one
			if len(snaps) == 0 {
				continue
			}
			old := snaps[r.IntN(len(snaps))]
			if r.IntN(2) == 0 {
				var live []string
				noErr(t, w.StillTree(func(tr *namespace.Tree, _ uint64) error {
					cs, err := DiffTree(e.pool, old.info, tr)
					live = renderChanges(cs)
					return err
				}))
				checkDiff(fmt.Sprintf("step %d: diff %d..live", step, old.info.ID), live, modelDiff(old.model.view(me.Uid), root.view(me.Uid)))
				continue
			}
			forks++
			fname := fmt.Sprintf("fork%d", forks)
			must[Info](t)(Fork(e.fs, e.pool, e.wsDir("w"), old.info.ID, e.wsDir(fname)))
			fw := e.open(fname)
			if d := diffViews(old.model.view(me.Uid), viewOfWorkspace(t, e.pool, fw)); d != "" {
				t.Fatalf("step %d: fork of %d differs from the snapshot:\n%s", step, old.info.ID, d)
			}
			// The fork is a workspace of its own: writable, and
			// independent of its origin.
			writeFile(t, fw, workspace.RootIno, "only-in-fork", []byte("x"))
			noErr(t, fw.Close())
		default: // restore offline
			if len(snaps) == 0 {
				continue
			}
			old := snaps[r.IntN(len(snaps))]
			restores++
			noErr(t, w.Close())
			before, _, err := Restore(e.opts("w"), old.info.ID, time.Now())
			noErr(t, err)
			prev := root.clone(map[*mnode]*mnode{})
			root = old.model.clone(map[*mnode]*mnode{})
			snaps = append(snaps, snap{before, prev})
			if d := diffViews(prev.view(me.Uid), viewOfSnapshot(t, e.pool, before)); d != "" {
				t.Fatalf("step %d: the pre-restore snapshot differs from the state it replaced:\n%s", step, d)
			}
			w = e.open("w")
			if d := diffViews(root.view(me.Uid), viewOfWorkspace(t, e.pool, w)); d != "" {
				t.Fatalf("step %d: restored workspace differs from snapshot %d:\n%s", step, old.info.ID, d)
			}
		}
	}
	// Recovery after a close replays onto the restored checkpoints.
	noErr(t, w.Close())
	w = e.open("w")
	if d := diffViews(root.view(me.Uid), viewOfWorkspace(t, e.pool, w)); d != "" {
		t.Fatalf("after reopen:\n%s", d)
	}
	if len(snaps) < 5 {
		t.Fatalf("only %d snapshots taken: the test exercised too little", len(snaps))
	}
	t.Logf("seed %d: %d steps, %d snapshots, %d forks, %d restores, %d diffs checked against the model, violations: 0", seed, steps, len(snaps), forks, restores, diffs)
}

func sortedNames(m map[string]*mnode) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
