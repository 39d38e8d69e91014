package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// TestGC: gc keeps what a workspace references and removes an old object
// nothing references; it refuses while a daemon holds a workspace.
func TestGC(t *testing.T) {
	ctx := context.Background()
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A pooled file in the workspace.
	kept := bytes.Repeat([]byte("k"), workspace.DefaultInlineMax+1)
	ws, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws"), Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ws.Create(workspace.RootIno, "big", 0o644, workspace.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	fh, err := ws.OpenFile(a.Ino, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt(kept, 0); err != nil {
		t.Fatal(err)
	}
	if err := fh.Fsync(false); err != nil {
		t.Fatal(err)
	}
	fh.Release()
	// An object nothing references.
	garbage, _, err := p.Put(bytes.Repeat([]byte("g"), 100_000))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	keptID := pool.Sum(kept)
	for _, id := range []pool.ID{keptID, garbage} {
		if err := os.Chtimes(p.Path(id), old, old); err != nil {
			t.Fatal(err)
		}
	}

	// Served: gc refuses and removes nothing.
	if code, out := wsfsRun(ctx, "gc", "--home", home); code != exitPrecondition || !strings.Contains(out, "served by a daemon") {
		t.Fatalf("gc while served: exit %d, %s", code, out)
	}
	if _, err := os.Stat(p.Path(garbage)); err != nil {
		t.Fatalf("gc while served removed an object: %v", err)
	}
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}

	if code, out := wsfsRun(ctx, "gc", "--home", home, "--grace", "10m"); code != exitUsage {
		t.Fatalf("gc --grace 10m: exit %d, %s", code, out)
	}
	code, out := wsfsRun(ctx, "gc", "--home", home)
	if code != 0 || !strings.Contains(out, "removed 1") {
		t.Fatalf("gc: exit %d, %s", code, out)
	}
	if _, err := os.Stat(p.Path(garbage)); !os.IsNotExist(err) {
		t.Errorf("unreferenced object still there: %v", err)
	}
	if _, err := p.ReadAll(keptID); err != nil {
		t.Errorf("referenced object: %v", err)
	}
}
