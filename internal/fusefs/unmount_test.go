package fusefs

import (
	"os"
	"testing"
	"time"
	"wsfs/internal/mountinfo"
)

// TestUnmountBusy unmounts while a file on the mount is open: the normal
// unmount fails with EBUSY and the adapter detaches lazily, so the mount
// point leaves the mount table while the file is still open; the serve
// loop ends once the last user has gone, and what was written is
// committed.
func TestUnmountBusy(t *testing.T) {
	e := newEnv(t, Options{})
	p := e.path("held")
	mustWrite(t, p, []byte("kept"))
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() { done <- e.srv.Unmount() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("unmount with an open file: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("unmount did not return within 30s")
	}
	// Detached, not unmounted: gone from the table, still serving f.
	if mounted, err := mountinfo.IsMountPoint(e.mnt); err != nil || mounted {
		t.Fatalf("after Unmount with a file open, %s is still a mount point (%v): the lazy detach did not happen", e.mnt, err)
	}
	select {
	case <-e.srv.Done():
		t.Fatal("serve loop ended while a file of the detached mount is open")
	default:
	}
	b := make([]byte, 4)
	if n, err := f.ReadAt(b, 0); err != nil || string(b[:n]) != "kept" {
		t.Fatalf("read through the detached mount: %q, %v", b[:n], err)
	}
	f.Close()
	select {
	case <-e.srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("serve loop still running after the last file closed")
	}
	if err := e.ws.Close(); err != nil {
		t.Fatal(err)
	}
	e.srv, e.ws = nil, nil
	e.mount()
	if got := string(mustRead(t, p)); got != "kept" {
		t.Fatalf("after remount: %q", got)
	}
}

// TestExternalUnmount checks that Done is closed when the mount is removed
// from outside.
func TestExternalUnmount(t *testing.T) {
	e := newEnv(t, Options{})
	mustWrite(t, e.path("x"), []byte("1"))
	forceUnmount(t, e.mnt)
	select {
	case <-e.srv.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed after an external unmount")
	}
	if err := e.ws.Close(); err != nil {
		t.Fatal(err)
	}
	e.srv, e.ws = nil, nil
	e.mount()
	if got := string(mustRead(t, e.path("x"))); got != "1" {
		t.Fatalf("after external unmount and remount: %q", got)
	}
}

// TestUnmountBusyKeptOpen: a file that stays open past BusyGrace does not
// make Unmount fail or wait long: it detaches, returns nil after about
// BusyGrace, and Close commits what was written through the open file.
func TestUnmountBusyKeptOpen(t *testing.T) {
	e := newEnv(t, Options{})
	f, err := os.Create(e.path("open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("not closed")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.srv.Unmount(); err != nil {
		t.Fatalf("unmount with a file kept open: %v", err)
	}
	if took := time.Since(start); took > BusyGrace+5*time.Second {
		t.Errorf("unmount took %v with BusyGrace %v", took, BusyGrace)
	}
	if err := e.ws.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	select {
	case <-e.srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("serve loop still running after the last file closed")
	}
	e.srv, e.ws = nil, nil
	e.mount()
	if got := string(mustRead(t, e.path("open"))); got != "not closed" {
		t.Fatalf("after remount: %q", got)
	}
}
