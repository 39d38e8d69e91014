package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNotRegular: where wsfs keeps a file, a FIFO is refused by Open at
// once (before, a FIFO in place of the host config or a segment blocked
// every command in open(2), and SIGTERM could not stop it), a directory is
// refused by ReadFile, and a regular file opens in blocking mode as before.
func TestNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}

	err := within(t, func() error { _, err := ReadFile(Default, fifo); return err })
	var nr *NotRegularError
	if !errors.As(err, &nr) || !errors.Is(err, ErrNotRegular) || nr.Path != fifo {
		t.Fatalf("ReadFile of a FIFO: %v, want a NotRegularError for %s", err, fifo)
	}
	if want := fifo + " is a FIFO"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "move it aside") {
		t.Errorf("message %q: want %q and what to do", err, want)
	}
	if err := within(t, func() error { _, err := Default.List(fifo); return err }); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("List of a FIFO: %v, want ENOTDIR", err)
	}

	if _, err := ReadFile(Default, sub); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), sub+" is a directory") {
		t.Errorf("ReadFile of a directory: %v, want ErrNotRegular naming it", err)
	}
	if d, err := Default.Open(sub); err != nil {
		t.Errorf("Open of a directory: %v, want it opened (only ReadFile refuses directories)", err)
	} else {
		d.Close()
	}

	if b, err := ReadFile(Default, file); err != nil || string(b) != "data" {
		t.Fatalf("ReadFile of a regular file: %q, %v", b, err)
	}
	f, err := Default.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl, err := unix.FcntlInt(f.(osFile).Fd(), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		t.Errorf("a regular file opened by Open is left O_NONBLOCK (flags %#x)", fl)
	}
}

// within runs f and returns its error, failing the test if f has not
// returned after 10 s (it is left blocked: the FIFO it waits on is removed
// with the test's directory).
func within(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("still blocked after 10 s")
		return nil
	}
}
