package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

type crashPoint struct {
	fs    *vfs.MemFS
	acked int // operations acknowledged before the clone
	what  string
}

// record installs a hook on mem that clones it at every sync, rename, link
// and remove (the moments a power loss can cut off), noting how many
// operations had been acknowledged (acked, read before cloning).
func record(mem *vfs.MemFS, acked *atomic.Int64, points *[]crashPoint) {
	var mu sync.Mutex // hooks run on every goroutine syncing (the drain's too)
	mem.SetHook(func(op vfs.Op, path string) {
		switch op {
		case vfs.OpSync, vfs.OpSyncData, vfs.OpRename, vfs.OpLink, vfs.OpRemove:
		default:
			return
		}
		a := int(acked.Load())
		c := mem.CrashClone()
		mu.Lock()
		*points = append(*points, crashPoint{fs: c, acked: a, what: fmt.Sprintf("%v %s", op, path)})
		mu.Unlock()
	})
}

// recovered opens a crash clone's pool (as a restarted host does).
func recovered(t *testing.T, c *vfs.MemFS) *env {
	t.Helper()
	p, err := pool.Open(c, "/host/pool", pool.Options{})
	noErr(t, err)
	return &env{t: t, fs: c, root: "/host", pool: p}
}

// TestCrashSnapshotCreate crashes at every sync/rename boundary of three
// snapshot creates (each after changes to the workspace). After recovery,
// every snapshot whose create returned exists, and every snapshot in the
// catalog (acknowledged or the one in flight) loads and equals the tree it
// was taken of; the workspace itself still opens.
func TestCrashSnapshotCreate(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem, "/host")
	var want []view // want[i]: the tree of snapshot i+1
	var acked atomic.Int64
	var points []crashPoint
	for round := range 3 {
		w := e.open("w")
		d := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, fmt.Sprint("d", round), 0o755, me))
		writeFile(t, w, d.Ino, "f", []byte(fmt.Sprint("round ", round)))
		writeFile(t, w, workspace.RootIno, "shared", []byte(fmt.Sprint("v", round)))
		want = append(want, viewOfWorkspace(t, e.pool, w))
		noErr(t, w.Close())
		if round == 0 {
			record(mem, &acked, &points)
		}
		in, _, err := CreateOffline(e.opts("w"), "", time.Now())
		noErr(t, err)
		if in.ID != uint64(round+1) {
			t.Fatalf("id %d in round %d", in.ID, round)
		}
		acked.Add(1)
	}
	mem.SetHook(nil)
	violations := 0
	for _, pt := range points {
		r := recovered(t, pt.fs)
		all, err := List(r.fs, r.wsDir("w"))
		if err != nil {
			t.Errorf("at %s: catalog: %v", pt.what, err)
			violations++
			continue
		}
		if len(all) < pt.acked {
			t.Errorf("at %s: %d snapshots acknowledged, %d in the catalog", pt.what, pt.acked, len(all))
			violations++
		}
		for _, in := range all {
			if in.ID > uint64(len(want)) {
				t.Errorf("at %s: unexpected snapshot %d", pt.what, in.ID)
				violations++
				continue
			}
			if d := diffViews(want[in.ID-1], viewOfSnapshot(t, r.pool, in)); d != "" {
				t.Errorf("at %s: snapshot %d differs from its tree:\n%s", pt.what, in.ID, d)
				violations++
			}
		}
		w, err := workspace.Open(r.opts("w"))
		if err != nil {
			t.Errorf("at %s: workspace does not open: %v", pt.what, err)
			violations++
			continue
		}
		noErr(t, w.Close())
	}
	t.Logf("crash points: %d, violations: %d", len(points), violations)
	if len(points) < 10 {
		t.Fatalf("only %d crash points", len(points))
	}
}

// TestCrashFork crashes at every sync/rename boundary of a fork: after
// recovery the new workspace either does not exist (listed by nobody) or
// opens and equals the snapshot; once Fork returned, it exists.
func TestCrashFork(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem, "/host")
	w := e.open("w")
	d := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, "src", 0o755, me))
	for i := range 20 {
		writeFile(t, w, d.Ino, fmt.Sprint("f", i), []byte(fmt.Sprint("content ", i)))
	}
	writeFile(t, w, workspace.RootIno, "obj", make([]byte, 80<<10))
	want := viewOfWorkspace(t, e.pool, w)
	noErr(t, w.Close())
	in, _, err := CreateOffline(e.opts("w"), "", time.Now())
	noErr(t, err)
	var acked atomic.Int64
	var points []crashPoint
	record(mem, &acked, &points)
	must[Info](t)(Fork(e.fs, e.pool, e.wsDir("w"), in.ID, e.wsDir("f")))
	acked.Add(1)
	mem.SetHook(nil)
	points = append(points, crashPoint{fs: mem.CrashClone(), acked: 1, what: "after fork"})
	violations := 0
	for _, pt := range points {
		r := recovered(t, pt.fs)
		_, err := r.fs.Stat(r.wsDir("f"))
		if errors.Is(err, fs.ErrNotExist) {
			if pt.acked > 0 {
				t.Errorf("at %s: fork acknowledged but missing", pt.what)
				violations++
			}
			continue
		}
		fw, err := workspace.Open(r.opts("f"))
		if err != nil {
			t.Errorf("at %s: fork does not open: %v", pt.what, err)
			violations++
			continue
		}
		if d := diffViews(want, viewOfWorkspace(t, r.pool, fw)); d != "" {
			t.Errorf("at %s: fork differs from the snapshot:\n%s", pt.what, d)
			violations++
		}
		noErr(t, fw.Close())
		// The origin's snapshot is untouched.
		if d := diffViews(want, viewOfSnapshot(t, r.pool, in)); d != "" {
			t.Errorf("at %s: origin snapshot damaged:\n%s", pt.what, d)
			violations++
		}
	}
	t.Logf("crash points: %d, violations: %d", len(points), violations)
	if len(points) < 4 {
		t.Fatalf("only %d crash points", len(points))
	}
}

// TestCrashRestore crashes at every boundary of an offline restore: after
// recovery the workspace is either its old state or the snapshot's, and
// once Restore returned, it is the snapshot's and the pre-restore snapshot
// exists and equals the old state.
func TestCrashRestore(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem, "/host")
	w := e.open("w")
	writeFile(t, w, workspace.RootIno, "f", []byte("old"))
	noErr(t, w.Close())
	in, _, err := CreateOffline(e.opts("w"), "", time.Now())
	noErr(t, err)
	w = e.open("w")
	target := viewOfWorkspace(t, e.pool, w)
	writeFile(t, w, workspace.RootIno, "f", []byte("new"))
	writeFile(t, w, workspace.RootIno, "g", []byte("added"))
	current := viewOfWorkspace(t, e.pool, w)
	noErr(t, w.Close())
	var acked atomic.Int64
	var points []crashPoint
	record(mem, &acked, &points)
	_, _, err = Restore(e.opts("w"), in.ID, time.Now())
	noErr(t, err)
	acked.Add(1)
	mem.SetHook(nil)
	points = append(points, crashPoint{fs: mem.CrashClone(), acked: 1, what: "after restore"})
	violations := 0
	for _, pt := range points {
		r := recovered(t, pt.fs)
		rw, err := workspace.Open(r.opts("w"))
		if err != nil {
			t.Errorf("at %s: workspace does not open: %v", pt.what, err)
			violations++
			continue
		}
		got := viewOfWorkspace(t, r.pool, rw)
		noErr(t, rw.Close())
		isTarget, isCurrent := diffViews(target, got) == "", diffViews(current, got) == ""
		switch {
		case pt.acked > 0 && !isTarget:
			t.Errorf("at %s: restore acknowledged, workspace is not the snapshot:\n%s", pt.what, diffViews(target, got))
			violations++
		case !isTarget && !isCurrent:
			t.Errorf("at %s: workspace is neither the old state nor the snapshot", pt.what)
			violations++
		}
		if isTarget {
			// The state it replaced must be recoverable.
			all, err := List(r.fs, r.wsDir("w"))
			noErr(t, err)
			if len(all) != 2 || diffViews(current, viewOfSnapshot(t, r.pool, all[1])) != "" {
				t.Errorf("at %s: restored, but the pre-restore snapshot is missing or wrong (%d snapshots)", pt.what, len(all))
				violations++
			}
		}
	}
	t.Logf("crash points: %d, violations: %d", len(points), violations)
}

// TestCrashSnapshotServing crashes at every sync/rename boundary of online
// snapshots, the incremental ones included (they reuse manifests an
// earlier snapshot synced): every snapshot whose create returned exists
// after recovery and equals the tree it was taken of.
func TestCrashSnapshotServing(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem, "/host")
	w := e.open("w")
	defer w.Close()
	var want []view
	var acked atomic.Int64
	var points []crashPoint
	var leaves []workspace.Ino
	for i := range 4 {
		d := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, fmt.Sprint("d", i), 0o755, me))
		leaves = append(leaves, d.Ino)
		writeFile(t, w, d.Ino, "f", []byte("initial"))
	}
	for round := range 4 {
		if round > 0 {
			writeFile(t, w, leaves[round], "f", []byte(fmt.Sprint("round ", round)))
		}
		want = append(want, viewOfWorkspace(t, e.pool, w))
		if round == 1 {
			record(mem, &acked, &points)
		}
		in, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
		noErr(t, err)
		if in.ID != uint64(round+1) {
			t.Fatalf("id %d in round %d", in.ID, round)
		}
		acked.Add(1)
	}
	mem.SetHook(nil)
	violations := 0
	for _, pt := range points {
		r := recovered(t, pt.fs)
		all, err := List(r.fs, r.wsDir("w"))
		if err != nil {
			t.Errorf("at %s: catalog: %v", pt.what, err)
			violations++
			continue
		}
		if len(all) < pt.acked {
			t.Errorf("at %s: %d snapshots acknowledged, %d in the catalog", pt.what, pt.acked, len(all))
			violations++
		}
		for _, in := range all {
			tr, _, err := manifest.LoadTree(&manifest.PoolStore{Pool: r.pool}, in.Root)
			if err != nil {
				t.Errorf("at %s: snapshot %d does not load: %v", pt.what, in.ID, err)
				violations++
				continue
			}
			if d := diffViews(want[in.ID-1], viewOfTree(t, r.pool, tr)); d != "" {
				t.Errorf("at %s: snapshot %d differs from its tree:\n%s", pt.what, in.ID, d)
				violations++
			}
		}
	}
	t.Logf("crash points: %d, violations: %d", len(points), violations)
	if len(points) < 10 {
		t.Fatalf("only %d crash points", len(points))
	}
}
