package fusefs

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"wsfs/internal/pool"
	"wsfs/internal/testenv"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// canMount skips the test unless this process can mount FUSE.
func canMount(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("FUSE mount tests skipped in -short mode")
	}
	testenv.RequireFUSE(t)
	if err := CheckFUSE(); err != nil {
		t.Fatalf("/dev/fuse is present and the process is root, but FUSE cannot be used: %v", err)
	}
}

// env is a workspace mounted for a test. Cleanup unmounts it (lazily if
// the normal unmount fails) and closes the workspace.
type env struct {
	t       testing.TB
	mnt     string
	wsDir   string
	poolDir string
	opts    Options
	pool    *pool.Pool
	ws      *workspace.Workspace
	srv     *Server
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func newEnv(t testing.TB, opts Options) *env {
	t.Helper()
	canMount(t)
	root := t.TempDir()
	e := &env{t: t, mnt: filepath.Join(root, "mnt"), wsDir: filepath.Join(root, "state", "ws"), poolDir: filepath.Join(root, "pool"), opts: opts}
	for _, d := range []string{e.mnt, e.wsDir, e.poolDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if e.opts.Logger == nil {
		e.opts.Logger = testLogger(t)
	}
	if e.opts.Name == "" {
		e.opts.Name = "test"
	}
	// WSFS_TEST_URING=1 runs every mount test over FUSE over io_uring
	// when an administrator has enabled it (the tests never do).
	if os.Getenv("WSFS_TEST_URING") == "1" && CheckURing() == nil {
		e.opts.IOUring = true
	}
	p, err := pool.Open(vfs.Default, e.poolDir, pool.Options{Logger: e.opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	e.pool = p
	e.mount()
	t.Cleanup(e.cleanup)
	return e
}

func (e *env) mount() {
	e.t.Helper()
	ws, err := workspace.Open(workspace.Options{Dir: e.wsDir, Pool: e.pool, Logger: e.opts.Logger, GroupWindow: 5 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	e.ws = ws
	srv, err := Mount(ws, e.mnt, e.opts)
	if err != nil {
		ws.Close()
		e.ws = nil
		e.t.Fatal(err)
	}
	e.srv = srv
}

// unmount unmounts and closes the workspace, failing the test on error.
func (e *env) unmount() {
	e.t.Helper()
	if err := e.srv.Unmount(); err != nil {
		e.t.Errorf("unmount: %v", err)
	}
	if err := e.ws.Close(); err != nil {
		e.t.Errorf("close workspace: %v", err)
	}
	e.srv, e.ws = nil, nil
}

func (e *env) remount() {
	e.t.Helper()
	e.unmount()
	e.mount()
}

func (e *env) cleanup() {
	if e.srv != nil {
		if err := e.srv.Unmount(); err != nil {
			e.t.Errorf("unmount: %v", err)
			forceUnmount(e.t, e.mnt)
		}
	}
	if e.ws != nil {
		if err := e.ws.Close(); err != nil {
			e.t.Errorf("close workspace: %v", err)
		}
	}
}

// forceUnmount detaches a mount that a failed test left behind.
func forceUnmount(t testing.TB, mnt string) {
	if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
		t.Logf("umount -l %s: %v: %s", mnt, err, out)
	}
}

func (e *env) path(name string) string { return filepath.Join(e.mnt, name) }

// errnoOf extracts the errno of an os error, or 0.
func errnoOf(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

// TestSpareProcs checks that a mount with SpareProcs leaves that many Ps
// beyond the readers go-fuse can have blocked in read(2), and that the
// mount serves requests.
func TestSpareProcs(t *testing.T) {
	old := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	want := BlockedReaders() + 2
	e := newEnv(t, Options{SpareProcs: 2})
	if got := runtime.GOMAXPROCS(0); got != want {
		t.Fatalf("GOMAXPROCS %d after a mount with SpareProcs 2, want %d (BlockedReaders %d + 2)", got, want, want-2)
	}
	if err := os.WriteFile(e.path("f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}
