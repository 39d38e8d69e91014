package snapshot

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
	"wsfs/internal/workspace"
)

// TestCreateServing takes snapshots of a workspace while a writer keeps
// changing it. Each snapshot must hold every write that completed before
// snapshot create was called, with the content it had then, and nothing
// the writer had not started (the file count is at most what the writer
// had begun); each equals a prefix of the writer's history.
func TestCreateServing(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	defer w.Close()
	var done atomic.Int64  // files whose write completed
	var begun atomic.Int64 // files whose write began
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 3000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			begun.Store(int64(i + 1))
			writeFile(t, w, workspace.RootIno, fmt.Sprintf("f%05d", i), []byte(fmt.Sprint("content ", i)))
			done.Store(int64(i + 1))
		}
	}()
	for k := 0; k < 10; k++ {
		time.Sleep(2 * time.Millisecond)
		before := done.Load()
		in, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
		noErr(t, err)
		after := begun.Load()
		v := viewOfSnapshot(t, e.pool, in)
		n := int64(len(v) - 1) // minus the root
		if n < before || n > after {
			t.Fatalf("snapshot %d holds %d files; %d had completed before create, %d begun after", in.ID, n, before, after)
		}
		for i := int64(0); i < n; i++ {
			p := fmt.Sprintf("/f%05d", i)
			want := fmt.Sprint("content ", i)
			// A write in flight during create may be in as its create
			// only (empty) or complete; one completed before must be
			// complete.
			if got := v[p].data; got != want && (i < before || got != "") {
				t.Fatalf("snapshot %d: %s = %q, want %q (%d writes completed before create)", in.ID, p, got, want, before)
			}
		}
	}
	close(stop)
	wg.Wait()
	if done.Load() < 10 {
		t.Fatalf("the writer completed only %d files", done.Load())
	}
}

// TestCreateServingIncremental: after the first online snapshot, the next
// ones encode only the changed directories and their ancestors, still
// equal a full build of the tree, and survive a cached manifest vanishing
// from the pool (a full build then).
func TestCreateServingIncremental(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	defer w.Close()
	var leaves []workspace.Ino
	for i := 0; i < 5; i++ {
		top := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, fmt.Sprint("top", i), 0o755, me)).Ino
		for j := 0; j < 4; j++ {
			d := must[workspace.Attr](t)(w.Mkdir(top, fmt.Sprint("d", j), 0o755, me)).Ino
			leaves = append(leaves, d)
			for k := 0; k < 5; k++ {
				writeFile(t, w, d, fmt.Sprint("f", k), []byte(fmt.Sprint(i, j, k)))
			}
		}
	}
	take := func(want int) Info {
		t.Helper()
		in, st, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
		noErr(t, err)
		if want >= 0 && st.Dirs != want {
			t.Fatalf("snapshot %d encoded %d directories, want %d", in.ID, st.Dirs, want)
		}
		if d := diffViews(viewOfWorkspace(t, e.pool, w), viewOfSnapshot(t, e.pool, in)); d != "" {
			t.Fatalf("snapshot %d differs from the tree:\n%s", in.ID, d)
		}
		return in
	}
	take(26)                                                    // root + 5 tops + 20 leaves
	writeFile(t, w, leaves[7], "f1", []byte("changed"))         // top1/d3
	take(3)                                                     // leaf, its top, the root
	take(0)                                                     // nothing changed
	noErr(t, w.Rename(leaves[0], "f0", leaves[19], "moved", 0)) // top0/d0 -> top4/d3
	take(5)                                                     // two leaves, two tops, root
	// A cached manifest disappears from the pool (GC after its snapshots
	// were removed): the snapshot still succeeds, with a full build.
	r, err := manifest.ReadRoot(&manifest.PoolStore{Pool: e.pool}, take(0).Root)
	noErr(t, err)
	es, err := manifest.ReadDir(&manifest.PoolStore{Pool: e.pool}, r.Entry.Dir)
	noErr(t, err)
	noErr(t, e.fs.Remove(e.pool.Path(es[2].Dir))) // top2
	writeFile(t, w, leaves[0], "f2", []byte("again"))
	take(-1)
	take(0)
}

// TestCreateServingSyncFailure: when syncing the manifests fails, the
// snapshot is refused (no catalog entry), and the next one, which reuses
// the cache, is complete and durable.
func TestCreateServingSyncFailure(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var armed atomic.Bool
	fsys := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
		if armed.Load() && op == vfs.OpSyncData && strings.Contains(path, "/pool/objects/") {
			return syscall.EIO
		}
		return nil
	}))
	e := newEnv(t, fsys, "/host")
	w := e.open("w")
	defer w.Close()
	d := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, "d", 0o755, me))
	writeFile(t, w, d.Ino, "f", []byte("one"))
	must[Info](t)(func() (Info, error) {
		in, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
		return in, err
	}())
	writeFile(t, w, d.Ino, "f", []byte("two"))
	armed.Store(true)
	if _, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now()); err == nil {
		t.Fatal("a snapshot whose manifests failed to sync was acknowledged")
	}
	armed.Store(false)
	if all, _ := List(e.fs, e.wsDir("w")); len(all) != 1 {
		t.Fatalf("%d catalog entries after the failed snapshot, want 1", len(all))
	}
	writeFile(t, w, workspace.RootIno, "g", []byte("three"))
	in := must[Info](t)(func() (Info, error) {
		in, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
		return in, err
	}())
	// What a crash now leaves holds the snapshot, whole.
	c := mem.CrashClone()
	p := must[*pool.Pool](t)(pool.Open(c, "/host/pool", pool.Options{}))
	if dv := diffViews(viewOfWorkspace(t, e.pool, w), viewOfSnapshot(t, p, in)); dv != "" {
		t.Fatalf("snapshot after the failure:\n%s", dv)
	}
}

// TestCreateServingProtectsOnce: a manifest that an online snapshot
// reuses shortly after this process put or protected it is not protected
// again (its mtime stays: no inode write for every directory of the tree
// per snapshot), and one that vanished all the same is still noticed
// (the snapshot is then a full build, and complete).
func TestCreateServingProtectsOnce(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	defer w.Close()
	var dirs []workspace.Ino
	for i := 0; i < 3; i++ {
		d := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, fmt.Sprint("d", i), 0o755, me)).Ino
		dirs = append(dirs, d)
		writeFile(t, w, d, "f", []byte(fmt.Sprint(i)))
	}
	take := func() Info {
		t.Helper()
		in, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
		noErr(t, err)
		if d := diffViews(viewOfWorkspace(t, e.pool, w), viewOfSnapshot(t, e.pool, in)); d != "" {
			t.Fatalf("snapshot %d differs from the tree:\n%s", in.ID, d)
		}
		return in
	}
	dirIDs := func(in Info) []objid.ID {
		t.Helper()
		r, err := manifest.ReadRoot(&manifest.PoolStore{Pool: e.pool}, in.Root)
		noErr(t, err)
		es, err := manifest.ReadDir(&manifest.PoolStore{Pool: e.pool}, r.Entry.Dir)
		noErr(t, err)
		var ids []objid.ID
		for _, x := range es {
			ids = append(ids, x.Dir)
		}
		return ids
	}
	mtime := func(id objid.ID) time.Time {
		t.Helper()
		fi, err := e.fs.Stat(e.pool.Path(id))
		noErr(t, err)
		return fi.ModTime()
	}
	take()                  // full build, manifests put
	ids := dirIDs(take())   // first reuse: protected, remembered
	before := mtime(ids[1]) // d1
	time.Sleep(5 * time.Millisecond)
	writeFile(t, w, dirs[0], "f", []byte("changed"))
	if got := dirIDs(take()); got[1] != ids[1] {
		t.Fatal("unchanged d1 got a new manifest")
	}
	if after := mtime(ids[1]); !after.Equal(before) {
		t.Errorf("d1's manifest, reused shortly after it was protected, was protected again: mtime %v -> %v", before, after)
	}
	noErr(t, e.fs.Remove(e.pool.Path(ids[2]))) // d2's manifest vanishes
	writeFile(t, w, dirs[0], "f", []byte("changed again"))
	take()
}
