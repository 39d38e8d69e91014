package main

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"wsfs/internal/daemon"
	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/unixsock"
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

// TestGCRemovesInterruptedLeftovers: a `wsfs rm` killed while it deleted
// the workspace's directory leaves STATE/workspaces/.tmp-rm-NAME (the
// whole log: 39 MiB in the probe), and a `wsfs fork` killed before its
// rename leaves .tmp-fork-NEW-*; no command removed them (`rm NAME` again
// says there is no such workspace). gc removes both, but not a temp that
// its command still holds (locked: a fork or rm in progress) nor a fork
// temp younger than a minute.
func TestGCRemovesInterruptedLeftovers(t *testing.T) {
	t.Setenv(pool.TestMinGraceEnv, "1s")
	home, h := snapHostWithSnapshots(t, 0)
	wsDirs := filepath.Dir(h.WorkspaceDir("ws"))
	mk := func(name string, age time.Duration) string {
		t.Helper()
		dir := filepath.Join(wsDirs, name)
		if err := os.MkdirAll(filepath.Join(dir, "log"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "log", "x"), []byte("leftover"), 0o600); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-age)
		for _, p := range []string{filepath.Join(dir, "log"), dir} {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	// A removal killed after its rename: the name is still registered.
	if code, out, errs := snapRun("create", "--home", home, "gone"); code != 0 {
		t.Fatalf("create: %d %s%s", code, out, errs)
	}
	rmLeft := mk(".tmp-rm-gone", 0)
	if err := os.RemoveAll(rmLeft); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(h.WorkspaceDir("gone"), rmLeft); err != nil {
		t.Fatal(err)
	}
	forkLeft := mk(".tmp-fork-f-0123456789ab", time.Hour)
	forkYoung := mk(".tmp-fork-g-0123456789ab", 0)
	forkBusy := mk(".tmp-fork-h-0123456789ab", time.Hour)
	l, err := vfs.Default.Lock(forkBusy)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, out, errs := snapRun("gc", "--home", home, "--test-grace", "1s")
	if code != 0 {
		t.Fatalf("gc: exit %d %s%s", code, out, errs)
	}
	for _, c := range []struct {
		dir  string
		gone bool
	}{{rmLeft, true}, {forkLeft, true}, {forkYoung, false}, {forkBusy, false}} {
		_, err := os.Stat(c.dir)
		if gone := errors.Is(err, fs.ErrNotExist); gone != c.gone {
			t.Errorf("after gc, %s removed: %v, want %v (gc said: %s%s)", filepath.Base(c.dir), gone, c.gone, out, errs)
		}
	}
	if !strings.Contains(out, ".tmp-rm-gone") {
		t.Errorf("gc does not say what it removed: %s", out)
	}
	// The removal is complete: the name is no longer registered, so the
	// next gc does not refuse for a registered workspace without a
	// directory.
	if code, out, errs := snapRun("gc", "--home", home, "--test-grace", "1s"); code != 0 {
		t.Fatalf("second gc: exit %d %s%s", code, out, errs)
	}
}

// TestDaemonDiesBeforeReply: the daemon serving ws is killed while it
// works on a snapshot create, restore or diff (here: a control socket that
// takes the request and closes without a reply, with the workspace lock
// held). The command exits 1 saying the daemon stopped before it
// answered, whether the work may have been done, and how to find out;
// before, it printed only "control socket: no reply: EOF".
func TestDaemonDiesBeforeReply(t *testing.T) {
	home, h := snapHostWithSnapshots(t, 1)
	dir := h.WorkspaceDir("ws")
	l, err := workspace.Lock(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ln, err := unixsock.Listen(daemon.ControlSocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			bufio.NewReader(c).ReadBytes('\n')
			c.Close()
		}
	}()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "create", "ws"}, "wsfs snapshot ls ws"},
		{[]string{"restore", "ws@1"}, "before restore to 1"},
		{[]string{"diff", "ws@1"}, "run it again"},
	} {
		code, out, errs := snapRun(append(c.args, "--home", home)...)
		if code != exitFailure || !strings.Contains(errs, "stopped before it answered") || !strings.Contains(errs, c.want) {
			t.Errorf("%v with a daemon that dies: exit %d, %s%s; want exit 1, stopped before it answered, %q", c.args, code, out, errs, c.want)
		}
	}
}
