package workspace

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/namespace"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
)

// The pulled-base tests: a workspace laid out as a lazy pull leaves it
// (internal/ship writeWorkspace): a checkpoint written unsynced beside its
// .unsynced marker, and an empty log continuing after it (see
// seglog/unsynced.go for the invariant they check).

const pulledOrigin = "s3://bucket/prefix?endpoint=http://127.0.0.1:1"

// pullInto writes into e's workspace directory what a pull of a small
// workspace writes: its tree ("a" inline, "b" pooled) as an unsynced
// checkpoint, and the log after it. It returns the base's group and the
// contents.
func pullInto(t *testing.T, e *env) (uint64, map[string][]byte) {
	t.Helper()
	src := e.opts
	src.Dir = filepath.Join(filepath.Dir(e.opts.Dir), "src")
	w, err := Open(src)
	noErr(t, err)
	files := map[string][]byte{"a": []byte("pulled inline"), "b": pattern(5000, 3)}
	for name, data := range files {
		writeFile(t, w, RootIno, name, data)
	}
	var payload []byte
	var group uint64
	noErr(t, w.DurableTree(func(tr *namespace.Tree, g uint64) error {
		payload, group = tr.EncodeCheckpoint(), g
		return nil
	}))
	noErr(t, w.Close())
	noErr(t, vfs.MkdirAllDurable(e.fs, e.opts.Dir, vfs.PrivateDir))
	noErr(t, seglog.WriteUnsyncedCheckpoint(e.fs, filepath.Join(e.opts.Dir, "checkpoint"), group, payload, pulledOrigin))
	noErr(t, seglog.CreateAfter(e.fs, filepath.Join(e.opts.Dir, "log"), group))
	return group, files
}

// TestPulledBaseNoAckBeforeSync holds the base checkpoint's sync until the
// log has a group appended and then until the fsync waiting on that group
// returns (or, since a correct workspace does not return, a while): an
// fsync acknowledged before the base is durable is caught every time. The
// workspace opens and reads at once, the fsync returns only after the base
// is durable and its marker gone, and a crash at any instant recovers
// everything acknowledged by then, or (only before any acknowledgement)
// fails with the *seglog.UnsyncedBaseError naming wsfs rm and wsfs pull.
func TestPulledBaseNoAckBeforeSync(t *testing.T) {
	mem := vfs.NewCrashableMem()
	appended, returned := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var held atomic.Bool
	inj := errorfs.InjectorFunc(func(op vfs.Op, path string) error {
		switch {
		case op == vfs.OpWrite && strings.HasSuffix(path, ".seg"):
			once.Do(func() { close(appended) })
		case op == vfs.OpSync && strings.HasSuffix(path, ".ckpt"):
			held.Store(true)
			<-appended // the base sync waits until a group is in the log,
			// then for the fsync to return wrongly; the timer only bounds
			// how long a correct workspace is held, it decides nothing.
			select {
			case <-returned:
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	})
	e := newEnv(t, errorfs.Wrap(mem, inj), "/host")
	smallLimits(e)

	type point struct {
		fs    *vfs.MemFS
		acked bool
		desc  string
	}
	var mu sync.Mutex
	var points []point
	var acked atomic.Bool
	mem.SetHook(func(op vfs.Op, path string) {
		p := point{fs: mem.CrashClone(), acked: acked.Load(), desc: op.String() + " " + path}
		mu.Lock()
		points = append(points, p)
		mu.Unlock()
	})
	_, files := pullInto(t, e)

	w := e.open()
	// The mount does not wait for the base: reads work at once.
	for name, data := range files {
		eq(t, readAll(t, w, A(t)(w.Lookup(RootIno, name)).Ino), data, name)
	}
	n := writeFile(t, w, RootIno, "new", []byte("written after the pull"))
	err := w.Fsync(n.Ino)
	acked.Store(true)
	// Acknowledged: the base is durable and its marker gone, now.
	img := mem.CrashClone()
	close(returned)
	noErr(t, err)
	if g, ok, err := seglog.UnsyncedBase(img, filepath.Join(e.opts.Dir, "checkpoint")); err != nil || ok {
		t.Fatalf("the fsync returned while the marker of group %d was still durable (%v)", g, err)
	}
	if !held.Load() {
		t.Fatal("the base checkpoint was never synced")
	}
	select {
	case <-appended:
	default:
		t.Fatal("fsync returned before its group was appended")
	}
	noErr(t, w.Close())
	mem.SetHook(nil)

	torn := 0
	for _, p := range points {
		dump, err := recoverDump(p.fs)
		var ue *seglog.UnsyncedBaseError
		switch {
		case err == nil:
			if p.acked && !strings.Contains(dump, "new") {
				t.Fatalf("crash after %s: the acknowledged file is gone:\n%s", p.desc, dump)
			}
		case errors.As(err, &ue):
			if p.acked {
				t.Fatalf("crash after %s: acknowledged, yet the base is torn: %v", p.desc, err)
			}
			if msg := ue.Error(); !strings.Contains(msg, "wsfs rm NAME") || !strings.Contains(msg, "wsfs pull NAME --from '"+pulledOrigin+"'") {
				t.Fatalf("crash after %s: the error does not name wsfs rm and wsfs pull --from: %v", p.desc, err)
			}
			torn++
		default:
			t.Fatalf("crash after %s: %v", p.desc, err)
		}
	}
	if torn == 0 {
		t.Fatal("no crash image had a torn base: the test proves nothing")
	}
	t.Logf("%d crash images, %d with a torn pulled base", len(points), torn)
}

// TestPulledBaseTornIsNotRepaired: after a crash that tore the pulled base,
// fsck reports it as the pull to redo (not a checkpoint to remove), and
// fsck --repair leaves it alone.
func TestPulledBaseTornIsNotRepaired(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem, "/host")
	pullInto(t, e)
	img := mem.CrashClone() // before any open: the base's data is not durable
	e2 := newEnv(t, img, "/host")
	e2.damaged = true
	_, err := Open(e2.opts)
	var ue *seglog.UnsyncedBaseError
	if !errors.As(err, &ue) || ue.Origin != pulledOrigin {
		t.Fatalf("open of a torn pulled base = %v, want *seglog.UnsyncedBaseError from %s", err, pulledOrigin)
	}
	rep, err := Check(CheckOptions{FS: img, Dir: e2.opts.Dir, Pool: e2.pool})
	noErr(t, err)
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != ProblemTornBase || !rep.Corrupt() || rep.Problems[0].Repairable {
		t.Fatalf("fsck problems = %+v, want one unrepairable %s", rep.Problems, ProblemTornBase)
	}
	did, err := Repair(CheckOptions{FS: img, Dir: e2.opts.Dir, Pool: e2.pool}, rep, "/host/save")
	noErr(t, err)
	if len(did) != 0 {
		t.Fatalf("fsck --repair did %q to a torn pulled base", did)
	}

	// Untorn (no crash), fsck notes the unsynced base and --repair syncs it.
	rep, err = Check(CheckOptions{FS: mem, Dir: e.opts.Dir, Pool: e.pool})
	noErr(t, err)
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != ProblemUnsyncedBase || rep.Corrupt() {
		t.Fatalf("fsck problems = %+v, want the note %s", rep.Problems, ProblemUnsyncedBase)
	}
	_, err = Repair(CheckOptions{FS: mem, Dir: e.opts.Dir, Pool: e.pool}, rep, "/host/save")
	noErr(t, err)
	if _, ok, _ := seglog.UnsyncedBase(mem.CrashClone(), filepath.Join(e.opts.Dir, "checkpoint")); ok {
		t.Fatal("fsck --repair left the marker durable")
	}
	if _, err := recoverDump(mem.CrashClone()); err != nil {
		t.Fatalf("after fsck --repair a crash image does not open: %v", err)
	}
}

// TestPulledBaseSyncFails: a failed sync of the pulled base reaches every
// fsync (EIO, also when nothing is pending) and Close, is never retried
// into a success, and leaves the marker in place.
func TestPulledBaseSyncFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule func() *errorfs.Rule
	}{
		{"checkpoint fsync EIO", func() *errorfs.Rule { return errorfs.Always(errorfs.OpSync, "*.ckpt", syscall.EIO) }},
		{"directory sync EIO", func() *errorfs.Rule {
			return errorfs.Always(errorfs.OpSync, "/host/state/workspaces/w/checkpoint", syscall.EIO)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			inj := &armed{}
			e := newEnv(t, errorfs.Wrap(mem, inj), "/host")
			e.damaged = true // the workspace failed on purpose
			_, files := pullInto(t, e)
			rule := tc.rule()
			inj.r.Store(rule)
			w := e.open()
			a := A(t)(w.Lookup(RootIno, "a"))
			eq(t, readAll(t, w, a.Ino), files["a"], "a")
			mustErrno(t, w.Fsync(a.Ino), syscall.EIO) // nothing pending
			n, err := w.Create(RootIno, "new", 0o644, me)
			if err == nil {
				err = w.Fsync(n.Ino)
			}
			mustErrno(t, err, syscall.EIO)
			mustErrno(t, w.Sync(), syscall.EIO)
			if err := w.Close(); err == nil {
				t.Fatal("Close succeeded after the pulled base failed to sync")
			}
			if rule.Injected() == 0 {
				t.Fatal("no fault was injected")
			}
			if _, ok, _ := seglog.UnsyncedBase(mem, filepath.Join(e.opts.Dir, "checkpoint")); !ok {
				t.Fatal("the marker was removed though the base never synced")
			}
		})
	}
}
