package workspace

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/namespace"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
)

// env is a host for one workspace: an FS, a pool, and options to open with.
//
// When a test that made an env passes, its cleanup checks the workspace the
// way `wsfs fsck` does (Check: log, checkpoints, recovery, every reference
// resolves to an object): a test that leaves damage behind without meaning
// to fails. Tests that damage the store on purpose set damaged.
type env struct {
	t       testing.TB
	fs      vfs.FS
	root    string
	pool    *pool.Pool
	opts    Options
	damaged bool // the test damages the store on purpose: skip the final check
}

// quiet discards logs in tests unless they fail.
var quiet = slog.New(slog.DiscardHandler)

func newEnv(t testing.TB, fs vfs.FS, root string) *env {
	t.Helper()
	// The host directory is made durable first, as host setup does: the
	// pool syncs only its own directory.
	if err := vfs.MkdirAllDurable(fs, filepath.Join(root, "pool"), 0o700); err != nil {
		t.Fatal(err)
	}
	p, err := pool.Open(fs, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, fs: fs, root: root, pool: p, opts: Options{
		FS: fs, Dir: filepath.Join(root, "state", "workspaces", "w"), Pool: p,
		GroupWindow: time.Millisecond, Logger: quiet,
	}}
	t.Cleanup(e.checkStore)
	return e
}

// checkStore fails the test if the workspace it leaves behind does not
// check clean (see env).
func (e *env) checkStore() {
	if e.damaged || e.t.Failed() {
		return
	}
	if _, err := e.fs.Stat(e.opts.Dir); err != nil {
		return // the test never opened the workspace
	}
	rep, err := Check(CheckOptions{FS: e.fs, Dir: e.opts.Dir, Pool: e.pool})
	if err != nil {
		e.t.Errorf("store check after the test: %v", err)
		return
	}
	if rep.Corrupt() {
		for _, p := range rep.Problems {
			e.t.Errorf("store check after the test: %s at %s: %s", p.Kind, p.Where, p.What)
		}
	}
}

func memEnv(t *testing.T) *env  { return newEnv(t, vfs.NewCrashableMem(), "/host") }
func diskEnv(t testing.TB) *env { return newEnv(t, vfs.Default, t.TempDir()) }

// envs runs f against MemFS and the OS file system.
func envs(t *testing.T, f func(t *testing.T, e *env)) {
	t.Run("mem", func(t *testing.T) { f(t, memEnv(t)) })
	t.Run("os", func(t *testing.T) { f(t, diskEnv(t)) })
}

func (e *env) open() *Workspace {
	e.t.Helper()
	w, err := Open(e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// mustErrno fails unless err wraps want inside a *Error.
func mustErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	var we *Error
	if !errors.As(err, &we) {
		t.Fatalf("err = %v (%T), want *workspace.Error wrapping %v", err, err, want)
	}
	var got syscall.Errno
	if !errors.As(err, &got) || got != want {
		t.Fatalf("err = %v, want errno %v (%d)", err, want, int(want))
	}
}

// A and H unwrap (Attr, error) and (*Handle, error), failing the test on error.
func A(t testing.TB) func(Attr, error) Attr {
	return func(a Attr, err error) Attr {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}

func H(t testing.TB) func(*Handle, error) *Handle {
	return func(h *Handle, err error) *Handle {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var me = Caller{Uid: 1000, Gid: 1000}

// writeFile creates (or truncates) name in dir with content and closes it.
func writeFile(t testing.TB, w *Workspace, dir Ino, name string, content []byte) Attr {
	t.Helper()
	a, err := w.Lookup(dir, name)
	if err != nil {
		a = A(t)(w.Create(dir, name, 0o644, me))
	}
	h := H(t)(w.OpenFile(a.Ino, syscall.O_WRONLY|syscall.O_TRUNC))
	if len(content) > 0 {
		if n, err := h.WriteAt(content, 0); err != nil || n != len(content) {
			t.Fatalf("write %s: %d, %v", name, n, err)
		}
	}
	noErr(t, h.Flush())
	noErr(t, h.Release())
	return A(t)(w.GetAttr(a.Ino))
}

// readAll reads a file's whole content through a handle.
func readAll(t *testing.T, w *Workspace, ino Ino) []byte {
	t.Helper()
	a := A(t)(w.GetAttr(ino))
	h := H(t)(w.OpenFile(ino, syscall.O_RDONLY))
	defer h.Release()
	buf := make([]byte, a.Size+10)
	n, err := h.ReadAt(buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(n) != a.Size {
		t.Fatalf("read %d bytes of %d", n, a.Size)
	}
	return buf[:n]
}

func dumpOf(w *Workspace) string { return namespace.DumpString(w.Dump()) }

func eq(t *testing.T, got, want []byte, what string) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes %.40q, want %d bytes %.40q", what, len(got), got, len(want), want)
	}
}
