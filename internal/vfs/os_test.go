package vfs

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestOSLockExclusive(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	l, err := Default.Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Default.Lock(p); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock: got %v, want ErrLocked", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Default.Lock(p)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	l2.Close()
}

func TestOSPublish(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "x")
	err := Publish(Default, final, true, func(f File) error {
		_, err := f.Write([]byte("hello"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	names, err := Default.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "x" {
		t.Fatalf("List = %v, want [x]", names)
	}
	if err := Default.SyncFS(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := Default.Statfs(dir); err != nil || st.Blocks == 0 {
		t.Fatalf("Statfs = %+v, %v", st, err)
	}
}
