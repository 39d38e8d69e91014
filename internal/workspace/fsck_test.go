package workspace

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
)

// fsckFixture is a workspace with a small file, a pooled file, a chunked
// file and a directory, closed; groups is what each file's write became.
type fsckFixture struct {
	e        *env
	small    []byte
	pooled   []byte
	chunked  []byte
	pooledID objid.ID
	chunkID  objid.ID // chunk 1 of /d/chunked
}

func newFsckFixture(t *testing.T, tune func(o *Options)) *fsckFixture {
	e := memEnv(t)
	if tune != nil {
		tune(&e.opts)
	}
	f := &fsckFixture{e: e, small: []byte("small file"), pooled: make([]byte, 200<<10), chunked: make([]byte, 3<<20)}
	for i := range f.pooled {
		f.pooled[i] = byte(i*13 + i>>9)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range f.chunked {
		f.chunked[i] = byte(r.Uint32()) // no two chunks alike
	}
	w := e.open()
	d := A(t)(w.Mkdir(RootIno, "d", 0o755, me))
	noErr(t, w.Sync())
	writeFile(t, w, RootIno, "small", f.small)
	noErr(t, w.Sync())
	p := writeFile(t, w, RootIno, "pooled", f.pooled)
	noErr(t, w.Sync())
	c := writeFile(t, w, d.Ino, "chunked", f.chunked)
	noErr(t, w.Sync())
	w.tree.Get(namespace.Ino(p.Ino)).Mu.Lock()
	f.pooledID = w.tree.Get(namespace.Ino(p.Ino)).Content.Object
	w.tree.Get(namespace.Ino(p.Ino)).Mu.Unlock()
	n := w.tree.Get(namespace.Ino(c.Ino))
	n.Mu.Lock()
	f.chunkID = n.Content.Chunks[1]
	n.Mu.Unlock()
	noErr(t, w.Close())
	return f
}

func (f *fsckFixture) opts() CheckOptions {
	return CheckOptions{FS: f.e.fs, Dir: f.e.opts.Dir, Pool: f.e.pool}
}

func (f *fsckFixture) check(t *testing.T, verify bool) *Report {
	t.Helper()
	o := f.opts()
	o.VerifyData = verify
	rep, err := Check(o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// only returns the problems of rep, failing unless their kinds are kinds.
func only(t *testing.T, rep *Report, kinds ...ProblemKind) []Problem {
	t.Helper()
	var got []ProblemKind
	for _, p := range rep.Problems {
		got = append(got, p.Kind)
	}
	if !slices.Equal(got, kinds) {
		t.Fatalf("problems %v, want %v: %+v", got, kinds, rep.Problems)
	}
	return rep.Problems
}

// flipAt flips one byte of a file.
func flipAt(t *testing.T, fsys vfs.FS, path string, off int64) {
	t.Helper()
	fl, err := fsys.OpenReadWrite(path)
	noErr(t, err)
	b := make([]byte, 1)
	_, err = fl.ReadAt(b, off)
	noErr(t, err)
	_, err = fl.WriteAt([]byte{b[0] ^ 0x20}, off)
	noErr(t, err)
	noErr(t, fl.Close())
}

func TestFsckClean(t *testing.T) {
	f := newFsckFixture(t, nil)
	rep := f.check(t, true)
	only(t, rep)
	if rep.Corrupt() || rep.Files != 3 || rep.Objects != 4 || rep.VerifiedObjects != 4 || rep.LastGroup == 0 {
		t.Fatalf("clean report %+v", rep)
	}
}

// TestFsckObjects: a flipped byte in an object is found with VerifyData
// (only), a deleted object always; both name the object and the path, and
// the workspace still mounts and reads everything else.
func TestFsckObjects(t *testing.T) {
	f := newFsckFixture(t, nil)
	f.e.damaged = true // objects stay damaged: repair cannot bring content back
	flipAt(t, f.e.fs, objectPath(f.e, f.pooledID), 1000)
	noErr(t, f.e.fs.Remove(objectPath(f.e, f.chunkID)))
	fresh, err := pool.Open(f.e.fs, filepath.Join(f.e.root, "pool"), pool.Options{})
	noErr(t, err)
	f.e.pool, f.e.opts.Pool = fresh, fresh

	ps := only(t, f.check(t, false), ProblemObjectMissing)
	if ps[0].Object != f.chunkID || !slices.Equal(ps[0].Paths, []string{"/d/chunked"}) || !strings.Contains(ps[0].Where, f.chunkID.String()) {
		t.Fatalf("missing object problem %+v", ps[0])
	}
	rep := f.check(t, true)
	if len(rep.Problems) != 2 {
		t.Fatalf("problems %+v", rep.Problems)
	}
	for _, p := range rep.Problems {
		want := map[ProblemKind]objid.ID{ProblemObjectMissing: f.chunkID, ProblemObjectCorrupt: f.pooledID}[p.Kind]
		path := map[ProblemKind]string{ProblemObjectMissing: "/d/chunked", ProblemObjectCorrupt: "/pooled"}[p.Kind]
		if p.Object != want || !slices.Equal(p.Paths, []string{path}) {
			t.Fatalf("object problem %+v, want %s at %s", p, want, path)
		}
	}
	if !rep.Corrupt() {
		t.Fatal("report not corrupt")
	}
	// Repair has nothing to do for objects; the mount works regardless.
	did, err := Repair(f.opts(), rep, "/host/saved")
	if err != nil || len(did) != 0 {
		t.Fatalf("Repair = %q, %v", did, err)
	}
	w := f.e.open()
	defer w.Close()
	eq(t, readAll(t, w, A(t)(w.Lookup(RootIno, "small")).Ino), f.small, "small")
	h := H(t)(w.OpenFile(A(t)(w.Lookup(RootIno, "pooled")).Ino, syscall.O_RDONLY))
	_, err = h.ReadAt(make([]byte, 10), 0)
	mustErrno(t, err, syscall.EIO)
	h.Release()
}

// TestFsckTornTail: a torn tail is a note, not damage; the mount repairs it.
func TestFsckTornTail(t *testing.T) {
	f := newFsckFixture(t, nil)
	segs := segments(t, f.e)
	last := segs[len(segs)-1]
	fl, err := f.e.fs.OpenReadWrite(last.Path)
	noErr(t, err)
	noErr(t, fl.Truncate(last.Size-7))
	noErr(t, fl.Close())
	rep := f.check(t, false)
	only(t, rep, ProblemTornTail)
	if rep.Corrupt() {
		t.Fatal("a torn tail reported as damage")
	}
	w := f.e.open()
	defer w.Close()
	eq(t, readAll(t, w, A(t)(w.Lookup(RootIno, "small")).Ino), f.small, "small")
}

// TestFsckCorruptGroup: a flipped byte in a group before the tail makes
// the mount refuse (naming wsfs fsck --repair); fsck names segment and
// offset; Repair saves a copy, cuts the log and the workspace mounts with
// every group before the damage.
func TestFsckCorruptGroup(t *testing.T) {
	f := newFsckFixture(t, nil)
	seg := segments(t, f.e)[0].Path
	// Flip a byte of /small's inline content (group 3, after the root's
	// setattr and the mkdir), so groups 1-2 survive.
	b, err := f.e.fs.Open(seg)
	noErr(t, err)
	st, _ := b.Stat()
	data := make([]byte, st.Size())
	_, _ = b.ReadAt(data, 0)
	b.Close()
	at := int64(strings.Index(string(data), "small file")) // inline content of /small, in group 3 (after mkdir, create)
	if at < 0 {
		t.Fatal("content not found in the segment")
	}
	flipAt(t, f.e.fs, seg, at)

	_, err = Open(f.e.opts)
	var ce *seglog.CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "wsfs fsck --repair") {
		t.Fatalf("Open = %v, want a CorruptError naming wsfs fsck --repair", err)
	}
	rep := f.check(t, false)
	ps := only(t, rep, ProblemLog)
	if !strings.Contains(ps[0].Where, seg) || !strings.Contains(ps[0].Where, fmt.Sprintf("offset %d", ce.Offset)) || !ps[0].Repairable {
		t.Fatalf("log problem %+v, want %s offset %d", ps[0], seg, ce.Offset)
	}
	// The files the lost groups changed, from their records that verify
	// (the damaged record itself, /small's content, is unknown).
	for _, p := range []string{"/pooled", "/d/chunked"} {
		if !slices.Contains(ps[0].Paths, p) {
			t.Fatalf("affected paths %q lack %s", ps[0].Paths, p)
		}
	}
	did, err := Repair(f.opts(), rep, "/host/saved")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(did, "\n"), "saved a copy") || !strings.Contains(strings.Join(did, "\n"), "truncated") {
		t.Fatalf("Repair did %q", did)
	}
	if saved, err := f.e.fs.Stat(filepath.Join("/host/saved/log", filepath.Base(seg))); err != nil || saved.Size() != st.Size() {
		t.Fatalf("saved copy: %v %v", saved, err)
	}
	only(t, f.check(t, true))
	w := f.e.open()
	defer w.Close()
	// The groups before the damage survive (the directory), the damaged
	// one and every later one are gone.
	A(t)(w.Lookup(RootIno, "d"))
	if _, err := w.Lookup(RootIno, "pooled"); err == nil {
		t.Fatal("pooled, of a group after the damage, survived the cut")
	}
	// /small's create may have committed in a group of its own before its
	// content (the commit window can close between them on a loaded
	// machine): it may survive, but only empty.
	if a, err := w.Lookup(RootIno, "small"); err == nil && a.Size != 0 {
		t.Fatalf("small survived the cut with %d bytes: the damaged group's content", a.Size)
	}
}

// TestFsckCorruptCheckpoint: a damaged checkpoint makes the mount refuse;
// while the log still holds every group, repair removes it (copy saved)
// and the workspace mounts whole; once the log was trimmed, fsck says the
// state is lost and to restore from a backup.
func TestFsckCorruptCheckpoint(t *testing.T) {
	t.Run("log-still-whole", func(t *testing.T) {
		f := newFsckFixture(t, func(o *Options) { o.CheckpointBytes = 1 })
		cks, err := seglog.ListCheckpoints(f.e.fs, filepath.Join(f.e.opts.Dir, "checkpoint"))
		noErr(t, err)
		if len(cks) == 0 {
			t.Fatal("no checkpoint written")
		}
		if segs := segments(t, f.e); len(segs) != 1 {
			t.Fatalf("want the log in one segment, got %d", len(segs))
		}
		flipAt(t, f.e.fs, cks[len(cks)-1].Path, 50)
		f.e.damaged = true // a lost checkpoint may leave damage repair cannot undo
		if _, err := Open(f.e.opts); err == nil {
			t.Fatal("Open with a damaged only checkpoint succeeded")
		}
		rep := f.check(t, false)
		ps := only(t, rep, ProblemCheckpoint)
		if !ps[0].Repairable || ps[0].Where != cks[len(cks)-1].Path {
			t.Fatalf("checkpoint problem %+v", ps[0])
		}
		did, err := Repair(f.opts(), rep, "/host/saved")
		if err != nil || len(did) != 1 {
			t.Fatalf("Repair = %q %v", did, err)
		}
		only(t, f.check(t, true))
		w := f.e.open()
		defer w.Close()
		eq(t, readAll(t, w, A(t)(w.Lookup(RootIno, "pooled")).Ino), f.pooled, "pooled")
	})
	t.Run("log-trimmed", func(t *testing.T) {
		f := newFsckFixture(t, func(o *Options) { o.CheckpointBytes = 1; o.SegmentSize = 64 })
		cks, err := seglog.ListCheckpoints(f.e.fs, filepath.Join(f.e.opts.Dir, "checkpoint"))
		noErr(t, err)
		l, err := seglog.OpenReadOnly(f.e.fs, filepath.Join(f.e.opts.Dir, "log"))
		noErr(t, err)
		if l.FirstGroup() == 1 {
			t.Fatal("want a log whose first segments were deleted")
		}
		flipAt(t, f.e.fs, cks[len(cks)-1].Path, 50)
		f.e.damaged = true // a lost checkpoint may leave damage repair cannot undo
		ps := only(t, f.check(t, false), ProblemCheckpoint)
		if ps[0].Repairable || !strings.Contains(ps[0].Do, "backup") {
			t.Fatalf("checkpoint problem %+v, want unrepairable with backup advice", ps[0])
		}
	})
}

// TestFsckLogBehindCheckpoint: the loop of issue 11 item 15. Following the
// old advice (moving the damaged segment aside) left a checkpoint newer
// than the log and a mount that refused forever; fsck names it and the
// repair restarts the log after the checkpoint, so the workspace mounts.
func TestFsckLogBehindCheckpoint(t *testing.T) {
	for _, mountFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("mount-tried-first=%v", mountFirst), func(t *testing.T) {
			f := newFsckFixture(t, func(o *Options) { o.CheckpointBytes = 1 })
			for _, s := range segments(t, f.e) {
				noErr(t, f.e.fs.Rename(s.Path, s.Path+".aside"))
			}
			if mountFirst { // the mount creates a fresh segment 1, then refuses
				if _, err := Open(f.e.opts); err == nil || !strings.Contains(err.Error(), "wsfs fsck --repair") {
					t.Fatalf("Open = %v, want the refusal naming fsck", err)
				}
			}
			rep := f.check(t, false)
			ps := only(t, rep, ProblemReplay)
			if !ps[0].Repairable {
				t.Fatalf("%+v", ps[0])
			}
			did, err := Repair(f.opts(), rep, "/host/saved")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(did, "\n"), "created") {
				t.Fatalf("Repair did %q", did)
			}
			only(t, f.check(t, false))
			w := f.e.open()
			defer w.Close()
			A(t)(w.Lookup(RootIno, "d"))
			writeFile(t, w, RootIno, "after", []byte("new"))
			noErr(t, w.Sync())
		})
	}
}

// TestFsckDamageBeforeCheckpoint: damage in a group the checkpoint already
// covers (the segment was not deleted: it also holds later groups) fails
// the mount; the repair keeps the checkpoint's state.
func TestFsckDamageBeforeCheckpoint(t *testing.T) {
	f := newFsckFixture(t, func(o *Options) { o.CheckpointBytes = 1 })
	rep := f.check(t, false)
	if rep.CheckpointGroup == 0 {
		t.Fatal("no checkpoint")
	}
	seg := segments(t, f.e)[0].Path
	flipAt(t, f.e.fs, seg, 40) // inside group 1's first frame
	rep = f.check(t, false)
	ps := only(t, rep, ProblemLog)
	if !strings.Contains(ps[0].Do, "afresh") {
		t.Fatalf("%+v", ps[0])
	}
	if _, err := Repair(f.opts(), rep, "/host/saved"); err != nil {
		t.Fatal(err)
	}
	only(t, f.check(t, true))
	w := f.e.open()
	defer w.Close()
	// The checkpoint (written at the fixture's last commit) holds every
	// file: nothing is lost.
	eq(t, readAll(t, w, A(t)(w.Lookup(RootIno, "pooled")).Ino), f.pooled, "pooled")
	eq(t, readAll(t, w, A(t)(w.Lookup(A(t)(w.Lookup(RootIno, "d")).Ino, "chunked")).Ino), f.chunked, "chunked")
}

// TestFsckTempsAndLock: temps are reported and removed by Repair; Repair
// refuses while the workspace is served, Check works beside the daemon.
func TestFsckTempsAndLock(t *testing.T) {
	f := newFsckFixture(t, nil)
	tmp := filepath.Join(f.e.opts.Dir, "checkpoint", ".tmp-123")
	noErr(t, f.e.fs.MkdirAll(filepath.Dir(tmp), 0o755))
	fl, err := f.e.fs.Create(tmp)
	noErr(t, err)
	fl.Close()
	w := f.e.open()
	rep := f.check(t, true) // beside the daemon
	only(t, rep, ProblemTemp)
	if _, err := Repair(f.opts(), rep, "/host/saved"); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("Repair of a served workspace = %v, want ErrLocked", err)
	}
	noErr(t, w.Close())
	did, err := Repair(f.opts(), rep, "/host/saved")
	if err != nil || len(did) != 1 {
		t.Fatalf("Repair = %q %v", did, err)
	}
	only(t, f.check(t, false))
}

// TestFsckTempsInSnapshotsAndAgent: a catalog entry's temp in snapshots/
// and an agent state copy's temps in agent/ (left by a daemon killed during
// a snapshot or an online restore) are reported and removed like the
// others; before, fsck listed only the workspace, log and checkpoint
// directories, so these stayed forever.
func TestFsckTempsInSnapshotsAndAgent(t *testing.T) {
	f := newFsckFixture(t, nil)
	for _, p := range []string{
		filepath.Join(f.e.opts.Dir, "snapshots", ".tmp-b06c75c26a4f9c2d"),
		filepath.Join(f.e.opts.Dir, "agent", ".tmp-cut-96004306.db"),
		filepath.Join(f.e.opts.Dir, "agent", ".tmp-cut-96004306.db-journal"),
	} {
		noErr(t, f.e.fs.MkdirAll(filepath.Dir(p), 0o755))
		fl, err := f.e.fs.Create(p)
		noErr(t, err)
		fl.Close()
	}
	rep := f.check(t, false)
	only(t, rep, ProblemTemp, ProblemTemp, ProblemTemp)
	did, err := Repair(f.opts(), rep, "/host/saved")
	if err != nil || len(did) != 3 {
		t.Fatalf("Repair = %q %v", did, err)
	}
	only(t, f.check(t, false))
}

// TestFsckFlippedLastMarker: issue 11 item 16 through the engine. The last
// group (an fsynced file) has all its records intact and one flipped byte
// in its commit marker: the mount refuses instead of dropping it as a torn
// tail, fsck names the segment and the marker's offset, and the repair
// keeps every earlier group.
func TestFsckFlippedLastMarker(t *testing.T) {
	f := newFsckFixture(t, nil)
	segs := segments(t, f.e)
	last := segs[len(segs)-1]
	end := last.Size                    // the groups end here; the runway's zeros follow
	flipAt(t, f.e.fs, last.Path, end-2) // inside the marker's group CRC
	_, err := Open(f.e.opts)
	var ce *seglog.CorruptError
	if !errors.As(err, &ce) || ce.Offset != end-25 || !strings.Contains(err.Error(), "may have been acknowledged") {
		t.Fatalf("Open = %v, want a CorruptError at the marker (offset %d)", err, end-25)
	}
	rep := f.check(t, false)
	ps := only(t, rep, ProblemLog)
	if !strings.Contains(ps[0].Where, fmt.Sprintf("offset %d", end-25)) {
		t.Fatalf("%+v", ps[0])
	}
	if _, err := Repair(f.opts(), rep, "/host/saved"); err != nil {
		t.Fatal(err)
	}
	w := f.e.open()
	defer w.Close()
	eq(t, readAll(t, w, A(t)(w.Lookup(RootIno, "pooled")).Ino), f.pooled, "pooled")
	// The last group held (at least) the chunked file's content.
	if a, err := w.Lookup(A(t)(w.Lookup(RootIno, "d")).Ino, "chunked"); err == nil && a.Size == uint64(len(f.chunked)) {
		t.Fatal("the damaged last group survived")
	}
}

// BenchmarkCheck measures wsfs fsck's engine on a workspace of 10,000
// small files and 50 pooled ones on the OS filesystem: presence checks
// only, and with every object hashed.
func BenchmarkCheck(b *testing.B) {
	e := diskEnv(b)
	w := e.open()
	d := A(b)(w.Mkdir(RootIno, "d", 0o755, me))
	for i := range 10000 {
		writeFile(b, w, d.Ino, fmt.Sprintf("f%05d", i), []byte(fmt.Sprintf("content %d", i)))
	}
	big := make([]byte, 256<<10)
	for i := range 50 {
		big[0], big[1] = byte(i), byte(i>>8)
		writeFile(b, w, RootIno, fmt.Sprintf("big%02d", i), big)
	}
	noErr(b, w.Close())
	for _, verify := range []bool{false, true} {
		b.Run(fmt.Sprintf("verify=%v", verify), func(b *testing.B) {
			for b.Loop() {
				fresh, err := pool.Open(e.fs, filepath.Join(e.root, "pool"), pool.Options{})
				noErr(b, err)
				rep, err := Check(CheckOptions{FS: e.fs, Dir: e.opts.Dir, Pool: fresh, VerifyData: verify})
				noErr(b, err)
				if rep.Files != 10050 || len(rep.Problems) != 0 {
					b.Fatalf("report %+v", rep)
				}
			}
		})
	}
}

// TestFsckNoCutBelowShipped: damage in the log of a workspace whose remote
// holds groups past the cut point is not repaired by cutting (the
// workspace would reuse the numbers of groups the remote holds, and its
// remote copy would mix two histories): fsck says to pull it again and
// Repair leaves the log as it is. A remote that holds nothing past the cut
// point does not stop the repair.
func TestFsckNoCutBelowShipped(t *testing.T) {
	f := newFsckFixture(t, nil)
	seg := segments(t, f.e)[0].Path
	b, err := f.e.fs.Open(seg)
	noErr(t, err)
	st, _ := b.Stat()
	data := make([]byte, st.Size())
	_, _ = b.ReadAt(data, 0)
	b.Close()
	flipAt(t, f.e.fs, seg, int64(strings.Index(string(data), "small file")))

	o := f.opts()
	o.Shipped, o.Remote = 1000, "s3://b/p"
	rep, err := Check(o)
	noErr(t, err)
	ps := only(t, rep, ProblemLog)
	if ps[0].Repairable || !strings.Contains(ps[0].What, "s3://b/p holds every group through 1000") || !strings.Contains(ps[0].Do, "wsfs pull NAME") {
		t.Fatalf("log damage below the shipped group: %+v; want not repairable, naming the remote and the pull", ps[0])
	}
	did, err := Repair(o, rep, "/host/saved")
	if err != nil || len(did) != 0 {
		t.Fatalf("Repair did %q, %v; want nothing", did, err)
	}
	if after, err := f.e.fs.Stat(seg); err != nil || after.Size() != st.Size() {
		t.Fatalf("the segment after a refused repair: %v, %v; want it untouched (%d bytes)", after, err, st.Size())
	}

	o.Shipped = rep.LastGroup // the remote holds nothing past the cut
	rep, err = Check(o)
	noErr(t, err)
	if ps := only(t, rep, ProblemLog); !ps[0].Repairable {
		t.Fatalf("log damage above the shipped group: %+v; want repairable", ps[0])
	}
	if _, err := Repair(o, rep, "/host/saved"); err != nil {
		t.Fatal(err)
	}
}
