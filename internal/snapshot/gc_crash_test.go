package snapshot

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// big is pooled content (larger than the inline maximum) made from seed.
func big(seed byte) []byte {
	b := bytes.Repeat([]byte{seed}, workspace.DefaultInlineMax+1000)
	copy(b, fmt.Sprint("content ", seed))
	return b
}

// markHost returns every object the open workspaces ws and the snapshots
// of the workspaces in dirs reference (what `wsfs gc` marks).
func markHost(t *testing.T, e *env, ws []*workspace.Workspace, dirs []string) map[objid.ID]bool {
	t.Helper()
	refs := map[objid.ID]bool{}
	for _, w := range ws {
		w.ForEachObject(func(id objid.ID) { refs[id] = true })
	}
	for _, d := range dirs {
		noErr(t, ForEachObject(e.fs, d, e.pool, func(id objid.ID) { refs[id] = true }))
	}
	return refs
}

// TestCrashGC crashes at every sync, rename, link and remove of a pool GC
// pass over a host with snapshots (one of them removed, so its manifests
// and a content only it held are garbage), a fork that was changed after
// it was made, and a restore; the restored workspace is served during the
// pass, and when GC has moved a garbage object aside the workspace writes
// and fsyncs a file with that content (a dedup hit racing the removal).
// After recovery, and again after the next GC pass over the recovered
// host: the catalog holds exactly the acknowledged snapshots and each
// equals the tree it was taken of; both workspaces equal their models
// (the racing file included once its fsync returned); no object that a
// workspace or snapshot references is missing. At the end of the pass the
// garbage is gone.
func TestCrashGC(t *testing.T) {
	t.Setenv(pool.TestMinGraceEnv, "1ms")
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem, "/host")
	wdir, fdir := e.wsDir("w"), e.wsDir("f")
	snaps := map[uint64]view{}
	create := func() Info {
		t.Helper()
		in, _, err := CreateOffline(e.opts("w"), "", time.Now())
		noErr(t, err)
		snaps[in.ID] = viewOfSnapshot(t, e.pool, in)
		return in
	}
	w := e.open("w")
	writeFile(t, w, workspace.RootIno, "keep", big(1))
	writeFile(t, w, workspace.RootIno, "gone", big(2))
	writeFile(t, w, workspace.RootIno, "small", []byte("inline"))
	src := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, "src", 0o755, me))
	for i := range 5 {
		writeFile(t, w, src.Ino, fmt.Sprint("f", i), []byte(fmt.Sprint("source ", i)))
	}
	noErr(t, w.Close())
	s1 := create()

	w = e.open("w")
	noErr(t, w.Unlink(workspace.RootIno, "gone"))
	garbage := big(3) // written and deleted: referenced by nothing
	writeFile(t, w, workspace.RootIno, "tmp", garbage)
	noErr(t, w.Unlink(workspace.RootIno, "tmp"))
	writeFile(t, w, workspace.RootIno, "keep", big(4))
	writeFile(t, w, workspace.RootIno, "s2-only", big(7))
	noErr(t, w.Close())
	s2 := create()
	w = e.open("w")
	noErr(t, w.Unlink(workspace.RootIno, "s2-only"))
	writeFile(t, w, src.Ino, "late", big(6))
	noErr(t, w.Close())
	create() // 3
	noErr(t, Remove(e.fs, wdir, s2.ID))
	delete(snaps, s2.ID)

	must[Info](t)(Fork(e.fs, e.pool, wdir, s1.ID, fdir))
	f := e.open("f")
	writeFile(t, f, workspace.RootIno, "fork-only", big(5))
	noErr(t, f.Unlink(workspace.RootIno, "keep"))
	fView := viewOfWorkspace(t, e.pool, f)
	noErr(t, f.Close())

	before, _, err := Restore(e.opts("w"), s1.ID, time.Now()) // 4
	noErr(t, err)
	snaps[before.ID] = viewOfSnapshot(t, e.pool, before)
	w = e.open("w")
	defer func() { w.Close() }()
	wView := viewOfWorkspace(t, e.pool, w)
	if d := diffViews(snaps[s1.ID], wView); d != "" {
		t.Fatalf("restored workspace differs from snapshot 1:\n%s", d)
	}
	f = e.open("f")
	refs := markHost(t, e, []*workspace.Workspace{w, f}, []string{wdir, fdir})
	noErr(t, f.Close())
	for _, id := range []objid.ID{objid.Sum(garbage), objid.Sum(big(7))} {
		if refs[id] {
			t.Fatalf("object %s should be garbage", id)
		}
	}
	garbageID := objid.Sum(garbage)
	var racedView view

	// Everything is older than the cutoff now.
	time.Sleep(20 * time.Millisecond)
	var acked atomic.Int64 // 1 once the racing file's fsync returned
	var points []crashPoint
	var mu sync.Mutex
	var raced atomic.Bool
	grave := "gc-" + garbageID.String()
	mem.SetHook(func(op vfs.Op, path string) {
		switch op {
		case vfs.OpSync, vfs.OpSyncData, vfs.OpRename, vfs.OpLink, vfs.OpRemove:
		default:
			return
		}
		a := int(acked.Load())
		c := mem.CrashClone()
		mu.Lock()
		points = append(points, crashPoint{fs: c, acked: a, what: fmt.Sprintf("%v %s", op, path)})
		mu.Unlock()
		if op == vfs.OpRename && filepath.Base(path) == grave && raced.CompareAndSwap(false, true) {
			// GC has moved the object aside: the served workspace writes
			// the same bytes now (it deduplicates against them).
			writeFile(t, w, workspace.RootIno, "racer", garbage)
			noErr(t, w.Sync())
			acked.Store(1)
		}
	})
	stats, err := e.pool.Collect(func(id objid.ID) bool { return refs[id] }, pool.GCOptions{Grace: time.Millisecond})
	noErr(t, err)
	mem.SetHook(nil)
	points = append(points, crashPoint{fs: mem.CrashClone(), acked: 1, what: "after the pass"})
	if !raced.Load() {
		t.Fatalf("GC never moved the garbage object aside (%+v)", stats)
	}
	racedView = viewOfWorkspace(t, e.pool, w)
	if _, ok := racedView["/racer"]; !ok {
		t.Fatal("the racing file is not in the workspace")
	}

	// check verifies recovered host r; it returns the violations found.
	check := func(r *env, pt crashPoint, stage string) int {
		at := pt.what + " (" + stage + ")"
		want := maps.Clone(refs)
		if pt.acked > 0 {
			want[garbageID] = true
		}
		var missing []string
		for id := range want {
			if _, err := r.pool.ReadAll(id); err != nil {
				missing = append(missing, id.String())
			}
		}
		if missing != nil {
			t.Errorf("at %s: %d referenced objects missing: %s", at, len(missing), strings.Join(missing, ", "))
			return 1
		}
		v := 0
		all, err := List(r.fs, r.wsDir("w"))
		if err != nil {
			t.Errorf("at %s: catalog: %v", at, err)
			return 1
		}
		var ids []uint64
		for _, in := range all {
			ids = append(ids, in.ID)
			if d := diffViews(snaps[in.ID], viewOfSnapshot(t, r.pool, in)); d != "" {
				t.Errorf("at %s: snapshot %d differs from its tree:\n%s", at, in.ID, d)
				v++
			}
		}
		if !slices.Equal(ids, []uint64{1, 3, 4}) {
			t.Errorf("at %s: catalog holds %v, want [1 3 4]", at, ids)
			v++
		}
		for _, c := range []struct {
			name string
			want view
		}{{"w", racedView}, {"f", fView}} {
			rw, err := workspace.Open(r.opts(c.name))
			if err != nil {
				t.Errorf("at %s: workspace %s does not open: %v", at, c.name, err)
				v++
				continue
			}
			got := viewOfWorkspace(t, r.pool, rw)
			noErr(t, rw.Close())
			want := c.want
			if c.name == "w" && pt.acked == 0 {
				// Before its fsync returned the racing file may be
				// missing or in any state its groups left.
				want, got = wView, maps.Clone(got)
				delete(got, "/racer")
			}
			if d := diffViews(want, got); d != "" {
				t.Errorf("at %s: workspace %s differs from its model:\n%s", at, c.name, d)
				v++
			}
		}
		return v
	}
	violations := 0
	for _, pt := range points {
		r := recovered(t, pt.fs)
		if n := check(r, pt, "recovered"); n > 0 {
			violations += n
			continue
		}
		// The next pass over the recovered host (it finishes an
		// interrupted one: graves put back or removed).
		rw, rf := must[*workspace.Workspace](t)(workspace.Open(r.opts("w"))), must[*workspace.Workspace](t)(workspace.Open(r.opts("f")))
		rrefs := markHost(t, r, []*workspace.Workspace{rw, rf}, []string{r.wsDir("w"), r.wsDir("f")})
		noErr(t, rw.Close())
		noErr(t, rf.Close())
		if _, err := r.pool.Collect(func(id objid.ID) bool { return rrefs[id] }, pool.GCOptions{Grace: time.Millisecond}); err != nil {
			t.Errorf("at %s: the next gc pass: %v", pt.what, err)
			violations++
			continue
		}
		violations += check(r, pt, "after the next pass")
	}
	t.Logf("crash points: %d, violations: %d; the pass removed %d objects (%d bytes)", len(points), violations, stats.Removed, stats.Bytes)
	if _, err := e.pool.ReadAll(objid.Sum(big(7))); err == nil {
		t.Errorf("the content only the removed snapshot held survived the pass")
	}
	if stats.Removed < 2 {
		t.Errorf("the pass removed %d objects; want the removed snapshot's content and manifests", stats.Removed)
	}
	if len(points) < 10 {
		t.Fatalf("only %d crash points", len(points))
	}
}
