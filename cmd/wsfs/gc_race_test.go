package main

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
	"wsfs/internal/workspace"
)

// raceHost makes a host whose workspace ws has one snapshot, ws@1, holding
// a pooled file ("only-in-snapshot") that the workspace deleted since, so
// that only the snapshot references its object and the snapshot's
// manifests; every object is backdated past the grace. It returns the
// home, the host, the file's content and a run that fails the test unless
// the command exits 0.
func raceHost(t *testing.T) (string, *host.Host, string, func(args ...string)) {
	t.Helper()
	t.Setenv(pool.TestMinGraceEnv, "1s")
	home, open := snapHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("r", workspace.DefaultInlineMax+100)
	w := open()
	put(t, w, "only-in-snapshot", big)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		if code, out, errs := snapRun(append(args, "--home", home)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
	}
	run("snapshot", "create", "ws")
	w = open()
	if err := w.Unlink(workspace.RootIno, "only-in-snapshot"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	backdate(t, h.PoolDir(), 48*time.Hour)
	return home, h, big, run
}

// TestGCRestoreThenSnapshotRm: a gc pass reads workspace ws's durable
// state; before it reads ws's snapshot catalog, `wsfs restore ws@1`
// completes and `wsfs snapshot rm ws@1` removes the snapshot it restored
// (seen with the real binary: the restored workspace then failed to mount
// with exit 4, its checkpoint naming a manifest root gc had removed). Every
// object of the restored tree must survive that pass: the restore
// protects them before it publishes its checkpoint.
func TestGCRestoreThenSnapshotRm(t *testing.T) {
	_, h, big, run := raceHost(t)
	dir := h.WorkspaceDir("ws")
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	fsys := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
		if op == vfs.OpList && path == snapshot.Dir(dir) {
			once.Do(func() {
				run("restore", "ws@1")
				run("snapshot", "rm", "ws@1")
			})
		}
		return nil
	}))
	markStart := time.Now()
	refs := map[objid.ID]bool{}
	ws := []gcWorkspace{{name: "ws", dir: dir}}
	if _, err := markAll(fsys, p, ws, func() ([]gcWorkspace, error) { return ws, nil },
		func(id objid.ID) { refs[id] = true }); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Collect(func(id objid.ID) bool { return refs[id] }, pool.GCOptions{Grace: time.Second, MarkStart: markStart}); err != nil {
		t.Fatal(err)
	}
	w := openNamed(t, h, "ws")
	defer w.Close()
	if got := get(t, w, "only-in-snapshot"); got != big {
		t.Fatalf("restored workspace after gc reads %d bytes of only-in-snapshot, want %d", len(got), len(big))
	}
}

// TestGCForkWhileSnapshotRm: `wsfs fork ws@1 f` runs while `wsfs snapshot
// rm ws@1` and a whole gc pass happen (here: at the fork's rename of its
// new directory into place). The fork must not report success for a
// workspace whose objects gc removed: it either refuses (the snapshot is
// gone, exit 3, nothing created) or makes a workspace that reads back.
func TestGCForkWhileSnapshotRm(t *testing.T) {
	_, h, big, run := raceHost(t)
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	newDir := h.WorkspaceDir("f")
	var once sync.Once
	fsys := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
		if op == vfs.OpRename && path == newDir {
			once.Do(func() {
				run("snapshot", "rm", "ws@1")
				run("gc", "--test-grace", "1s")
			})
		}
		return nil
	}))
	_, err = snapshot.Fork(fsys, p, h.WorkspaceDir("ws"), 1, newDir)
	if err != nil {
		if !errors.Is(err, snapshot.ErrNotFound) {
			t.Fatalf("fork: %v, want an error wrapping ErrNotFound", err)
		}
		t.Logf("fork refused: %v", err)
		if names, _ := filepath.Glob(filepath.Join(filepath.Dir(newDir), "*f*")); len(names) != 0 {
			t.Fatalf("refused fork left %v", names)
		}
		return
	}
	f := openNamed(t, h, "f")
	defer f.Close()
	if got := get(t, f, "only-in-snapshot"); got != big {
		t.Fatalf("fork reads %d bytes of only-in-snapshot, want %d", len(got), len(big))
	}
}

// TestBusyWorkspaceAdvice: while another wsfs command works on workspace
// ws offline (it holds the workspace's lock and, being no daemon, listens
// on no control socket: a restore, say), snapshot create, restore and diff
// of ws are refused with exit 3 and told to wait and run again, not that
// a daemon does not answer and must be stopped or restarted (what the
// real binary said when two restores of ws ran at once).
func TestBusyWorkspaceAdvice(t *testing.T) {
	home, h := snapHostWithSnapshots(t, 1)
	l, err := workspace.Lock(vfs.Default, h.WorkspaceDir("ws"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, args := range [][]string{{"snapshot", "create", "ws"}, {"restore", "ws@1"}, {"diff", "ws@1"}} {
		code, out, errs := snapRun(append(args, "--home", home)...)
		if code != exitPrecondition || !strings.Contains(errs, "wait for it to finish") || !strings.Contains(errs, "held by pid") ||
			strings.Contains(errs, "does not answer") {
			t.Errorf("%v while another command holds the lock: exit %d, %s%s; want exit 3, wait for it to finish, held by pid", args, code, out, errs)
		}
	}
}
