package snapshot

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// noIno drops inode numbers from a view: an online restore renumbers the
// snapshot's tree above the numbers in use.
func noIno(v view) view {
	out := view{}
	for p, e := range v {
		e.ino = 0
		out[p] = e
	}
	return out
}

// TestRestoreServing: an online restore (the workspace stays open, with an
// open writer holding unflushed content and an open reader) takes an undo
// snapshot holding everything before it (the unflushed write included),
// serves the snapshot's tree at once under new inode numbers, gives the
// old handles and inode numbers ESTALE, keeps working afterwards, and is
// durable: a crash right after it recovers the restored tree.
func TestRestoreServing(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	defer func() { w.Close() }()
	writeFile(t, w, workspace.RootIno, "a", []byte("a at snapshot"))
	writeFile(t, w, workspace.RootIno, "b", []byte("b at snapshot"))
	s1, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "one", time.Now())
	noErr(t, err)
	want := noIno(viewOfSnapshot(t, e.pool, s1))

	aIno := writeFile(t, w, workspace.RootIno, "a", []byte("a changed"))
	noErr(t, w.Unlink(workspace.RootIno, "b"))
	cIno := writeFile(t, w, workspace.RootIno, "c", []byte("c, new"))
	d := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, "d", 0o755, me))
	writeFile(t, w, d.Ino, "e", []byte("in d"))
	wr := must[*workspace.Handle](t)(w.OpenFile(aIno, syscall.O_RDWR))
	if _, err := wr.WriteAt([]byte("A"), 0); err != nil {
		t.Fatal(err)
	}
	rd := must[*workspace.Handle](t)(w.OpenFile(cIno, syscall.O_RDONLY))

	before, target, r, err := RestoreServing(w, e.fs, e.wsDir("w"), e.pool, s1.ID, time.Now(), nil)
	noErr(t, err)
	if target.ID != s1.ID || before.ID == 0 || before.ID == s1.ID {
		t.Fatalf("restore: target %d, undo %d", target.ID, before.ID)
	}
	// The undo snapshot holds the state replaced, the unflushed write too.
	undo := viewOfSnapshot(t, e.pool, before)
	for p, data := range map[string]string{"/a": "A changed", "/c": "c, new", "/d/e": "in d"} {
		if undo[p].data != data {
			t.Errorf("undo snapshot: %s = %q, want %q", p, undo[p].data, data)
		}
	}
	if _, ok := undo["/b"]; ok {
		t.Error("undo snapshot holds /b, removed before the restore")
	}
	if diff := diffViews(want, noIno(viewOfWorkspace(t, e.pool, w))); diff != "" {
		t.Fatalf("after restore the workspace is not the snapshot:\n%s", diff)
	}
	// Old handles and inode numbers are stale; the new tree's are above.
	buf := make([]byte, 16)
	for name, err := range map[string]error{
		"write old handle": func() error { _, err := wr.WriteAt([]byte("x"), 0); return err }(),
		"read old handle":  func() error { _, err := rd.ReadAt(buf, 0); return err }(),
		"flush old handle": wr.Flush(),
		"getattr old ino":  func() error { _, err := w.GetAttr(cIno); return err }(),
		"lookup in old dir": func() error {
			_, err := w.Lookup(d.Ino, "e")
			return err
		}(),
	} {
		if !errors.Is(err, syscall.ESTALE) {
			t.Errorf("%s: %v, want ESTALE", name, err)
		}
	}
	noErr(t, wr.Release())
	noErr(t, rd.Release())
	a := must[workspace.Attr](t)(w.Lookup(workspace.RootIno, "a"))
	if a.Ino < r.Base || r.Base <= cIno {
		t.Fatalf("restored /a is inode %d, base %d, old /c was %d", a.Ino, r.Base, cIno)
	}
	if len(r.Known) == 0 || len(r.RootNames) != 4 { // a b c d
		t.Errorf("restored: known %v, root names %v", r.Known, r.RootNames)
	}
	// The workspace keeps working; a crash now recovers restore + write.
	writeFile(t, w, workspace.RootIno, "after", []byte("written after the restore"))
	noErr(t, w.Sync())
	want["/after"] = ventry{typ: 'f', perm: 0o644, uid: me.Uid, data: "written after the restore"}
	crashed := e.fs.(*vfs.MemFS).CrashClone()
	p2, err := pool.Open(crashed, e.root+"/pool", pool.Options{})
	noErr(t, err)
	o := e.opts("w")
	o.FS, o.Pool = crashed, p2
	w2, err := workspace.Open(o)
	noErr(t, err)
	if diff := diffViews(want, noIno(viewOfWorkspace(t, p2, w2))); diff != "" {
		t.Fatalf("after a crash the restored workspace differs:\n%s", diff)
	}
	noErr(t, w2.Close())
	// Undo: restore the undo snapshot, online again.
	_, _, _, err = RestoreServing(w, e.fs, e.wsDir("w"), e.pool, before.ID, time.Now(), nil)
	noErr(t, err)
	if diff := diffViews(noIno(undo), noIno(viewOfWorkspace(t, e.pool, w))); diff != "" {
		t.Fatalf("undo did not bring the state back:\n%s", diff)
	}
	// A missing snapshot changes nothing.
	if _, _, _, err := RestoreServing(w, e.fs, e.wsDir("w"), e.pool, 99, time.Now(), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("restore of a missing snapshot: %v", err)
	}
	// The hook's error aborts before anything changes.
	hookErr := errors.New("agent state restore failed")
	if _, _, _, err := RestoreServing(w, e.fs, e.wsDir("w"), e.pool, s1.ID, time.Now(), func(before, target Info) error { return hookErr }); !errors.Is(err, hookErr) {
		t.Fatalf("restore with a failing hook: %v", err)
	}
	if diff := diffViews(noIno(undo), noIno(viewOfWorkspace(t, e.pool, w))); diff != "" {
		t.Fatalf("a failed restore changed the workspace:\n%s", diff)
	}
}

// TestRestoreServingConcurrentWriters: writers keep creating files while
// the workspace is restored online. Every file whose write was
// acknowledged is in the undo snapshot or in the restored tree (with its
// whole content); a write that raced the restore may fail, but only with
// ESTALE, never silently.
func TestRestoreServingConcurrentWriters(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	defer w.Close()
	writeFile(t, w, workspace.RootIno, "base", []byte("base"))
	s1, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
	noErr(t, err)
	const writers, files = 4, 300
	var acked sync.Map // path -> content
	var stale atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for k := 0; k < writers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < files; i++ {
				name := fmt.Sprintf("w%d-%04d", k, i)
				data := []byte(fmt.Sprint("content of ", name))
				err := func() error {
					a, err := w.Create(workspace.RootIno, name, 0o644, me)
					if err != nil {
						return err
					}
					h, err := w.OpenFile(a.Ino, syscall.O_WRONLY)
					if err != nil {
						return err
					}
					defer h.Release()
					if _, err := h.WriteAt(data, 0); err != nil {
						return err
					}
					return h.Flush()
				}()
				switch {
				case err == nil:
					acked.Store("/"+name, string(data))
				case errors.Is(err, syscall.ESTALE):
					stale.Add(1)
				default:
					errc <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	before, _, _, err := RestoreServing(w, e.fs, e.wsDir("w"), e.pool, s1.ID, time.Now(), nil)
	noErr(t, err)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	undo := viewOfSnapshot(t, e.pool, before)
	now := viewOfWorkspace(t, e.pool, w)
	n, inUndo, inLive := 0, 0, 0
	acked.Range(func(k, v any) bool {
		n++
		p, data := k.(string), v.(string)
		switch {
		case now[p].data == data:
			inLive++
		case undo[p].data == data:
			inUndo++
		default:
			t.Errorf("%s: acknowledged, but neither in the undo snapshot (%q) nor in the restored tree (%q)", p, undo[p].data, now[p].data)
		}
		return true
	})
	t.Logf("%d acknowledged writes: %d in the undo snapshot, %d after the restore; %d ESTALE", n, inUndo, inLive, stale.Load())
	if now["/base"].data != "base" {
		t.Fatalf("restored tree lacks /base: %v", now["/base"])
	}
}

// BenchmarkRestoreServing: an online restore of the benchmark workspace
// (100,000 files by default, see benchWorkspace) to a snapshot taken
// before 10 files changed, and the part of it that holds up operations
// (ReplaceTree: undo snapshot, renumbering, the checkpoint of the whole
// tree) reported as held-ms.
func BenchmarkRestoreServing(b *testing.B) {
	e, w, _ := benchWorkspace(b)
	wsDir := e.wsDir("w")
	in, _, err := CreateServing(w, vfs.Default, wsDir, e.pool, "", time.Now())
	noErr(b, err)
	var held time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		// Inode numbers change with every restore: find the directories
		// by name.
		tops := must[[]workspace.DirEntry](b)(w.ReadDir(workspace.RootIno))
		for k := 0; k < 10; k++ {
			writeFile(b, w, tops[k%len(tops)].Ino, "changed.go", []byte(fmt.Sprint("changed ", i, k)))
		}
		i++
		b.StartTimer()
		var start time.Time
		_, _, _, err := RestoreServing(w, vfs.Default, wsDir, e.pool, in.ID, time.Now(), func(Info, Info) error {
			start = time.Now() // after the undo snapshot, inside the hold
			return nil
		})
		noErr(b, err)
		held += time.Since(start)
	}
	b.ReportMetric(float64(held.Microseconds())/1000/float64(i), "after-undo-held-ms")
}

// BenchmarkDiffServingAfter10Changes: an online diff (the daemon's
// `wsfs diff NAME@A` against the live tree) of the benchmark workspace
// after 10 files changed since snapshot A, the cache warm (what every
// diff after the daemon's first snapshot or diff costs).
func BenchmarkDiffServingAfter10Changes(b *testing.B) {
	e, w, _ := benchWorkspace(b)
	in, _, err := CreateServing(w, vfs.Default, e.wsDir("w"), e.pool, "", time.Now())
	noErr(b, err)
	tops := must[[]workspace.DirEntry](b)(w.ReadDir(workspace.RootIno))
	for k := 0; k < 10; k++ {
		writeFile(b, w, tops[k%len(tops)].Ino, "diffed.go", []byte(fmt.Sprint("changed ", k)))
	}
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		cs, err := DiffServing(w, e.pool, in)
		took = append(took, time.Since(start))
		noErr(b, err)
		if len(cs) == 0 {
			b.Fatal("no changes")
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// TestCrashRestoreServing crashes at every sync/rename boundary of an
// online restore (the workspace open and serving) and of a write after
// it. After recovery the workspace opens and is either the state the
// restore replaced or the snapshot (inode numbers aside); once the restore
// returned, always the snapshot, with the undo snapshot in the catalog
// equal to the replaced state; once the later write's fsync returned, the
// snapshot plus that write.
func TestCrashRestoreServing(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem, "/host")
	w := e.open("w")
	defer w.Close()
	writeFile(t, w, workspace.RootIno, "f", []byte("old"))
	in, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
	noErr(t, err)
	target := noIno(viewOfSnapshot(t, e.pool, in))
	writeFile(t, w, workspace.RootIno, "f", []byte("new"))
	writeFile(t, w, workspace.RootIno, "g", []byte("added"))
	current := noIno(viewOfWorkspace(t, e.pool, w))
	var acked atomic.Int64
	var points []crashPoint
	record(mem, &acked, &points)
	_, _, _, err = RestoreServing(w, e.fs, e.wsDir("w"), e.pool, in.ID, time.Now(), nil)
	noErr(t, err)
	acked.Add(1)
	writeFile(t, w, workspace.RootIno, "after", []byte("after the restore"))
	noErr(t, w.Sync())
	acked.Add(1)
	mem.SetHook(nil)
	points = append(points, crashPoint{fs: mem.CrashClone(), acked: 2, what: "after the write"})
	later := view{}
	for p, x := range target {
		later[p] = x
	}
	later["/after"] = ventry{typ: 'f', perm: 0o644, uid: me.Uid, data: "after the restore"}
	violations := 0
	for _, pt := range points {
		r := recovered(t, pt.fs)
		rw, err := workspace.Open(r.opts("w"))
		if err != nil {
			t.Errorf("at %s: workspace does not open: %v", pt.what, err)
			violations++
			continue
		}
		got := noIno(viewOfWorkspace(t, r.pool, rw))
		noErr(t, rw.Close())
		isCurrent := diffViews(current, got) == ""
		isTarget := diffViews(target, got) == ""
		isLater := diffViews(later, got) == ""
		switch {
		case pt.acked >= 2 && !isLater:
			t.Errorf("at %s: the write after the restore was synced, workspace differs:\n%s", pt.what, diffViews(later, got))
			violations++
		case pt.acked == 1 && !isTarget && !isLater:
			t.Errorf("at %s: restore acknowledged, workspace is not the snapshot:\n%s", pt.what, diffViews(target, got))
			violations++
		case !isCurrent && !isTarget && !isLater:
			t.Errorf("at %s: workspace is neither the old state nor the snapshot:\n%s", pt.what, diffViews(target, got))
			violations++
		}
		if !isCurrent {
			all, err := List(r.fs, r.wsDir("w"))
			noErr(t, err)
			if len(all) != 2 || diffViews(current, noIno(viewOfSnapshot(t, r.pool, all[1]))) != "" {
				t.Errorf("at %s: restored, but the undo snapshot is missing or wrong (%d snapshots)", pt.what, len(all))
				violations++
			}
		}
	}
	t.Logf("crash points: %d, violations: %d", len(points), violations)
}
