package snapshot

import (
	"bytes"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/pool"
	"wsfs/internal/workspace"
)

// TestForkKeepsObjectsForGC: a fork's checkpoint names the snapshot's
// manifests, so the fork's ForEachObject lists them (and the contents)
// even after the origin's snapshot is removed; once the fork writes a
// checkpoint of its own, the reference is gone and so is the need.
func TestForkKeepsObjectsForGC(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	d := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, "d", 0o755, me))
	writeFile(t, w, d.Ino, "big", bytes.Repeat([]byte("b"), 100<<10))
	writeFile(t, w, d.Ino, "small", []byte("s"))
	noErr(t, w.Close())
	in, _, err := CreateOffline(e.opts("w"), "", time.Now())
	noErr(t, err)
	must[Info](t)(Fork(e.fs, e.pool, e.wsDir("w"), in.ID, e.wsDir("f")))
	noErr(t, Remove(e.fs, e.wsDir("w"), in.ID))

	fw := e.open("f")
	listed := map[pool.ID]bool{}
	fw.ForEachObject(func(id pool.ID) { listed[id] = true })
	noErr(t, manifest.ForEachObject(&manifest.PoolStore{Pool: e.pool}, in.Root, nil, func(id pool.ID) {
		if !listed[id] {
			t.Errorf("object %s the fork's checkpoint needs is not listed by the fork", id)
		}
	}))
	// Changes to the fork recover on top of the reference checkpoint.
	writeFile(t, fw, workspace.RootIno, "new", []byte("n"))
	want := viewOfWorkspace(t, e.pool, fw)
	noErr(t, fw.Close())
	fw = e.open("f")
	if dv := diffViews(want, viewOfWorkspace(t, e.pool, fw)); dv != "" {
		t.Fatalf("fork after reopen:\n%s", dv)
	}
	noErr(t, fw.Close())

	// A fork whose snapshot's manifests are gone does not open (and says
	// which object), instead of mounting an empty or partial tree.
	opts := e.opts("g")
	must[Info](t)(func() (Info, error) {
		in2, _, err := CreateOffline(e.opts("w"), "", time.Now())
		if err != nil {
			return in2, err
		}
		return Fork(e.fs, e.pool, e.wsDir("w"), in2.ID, opts.Dir)
	}())
	r, err := manifest.ReadRoot(&manifest.PoolStore{Pool: e.pool}, mustLatest(t, e).Root)
	noErr(t, err)
	noErr(t, e.fs.Remove(e.pool.Path(r.Entry.Dir)))
	if gw, err := workspace.Open(opts); err == nil {
		gw.Close()
		t.Fatal("a fork with a missing manifest opened")
	}
}

func mustLatest(t *testing.T, e *env) Info {
	all, err := List(e.fs, e.wsDir("w"))
	noErr(t, err)
	return all[len(all)-1]
}
