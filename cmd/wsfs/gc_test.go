package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
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
// nothing references, while the workspace is being served (its lock held
// by an open workspace); it reports the bytes reclaimed.
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
	// A chunked file (three 1 MiB chunks, the middle one a hole).
	chunked := make([]byte, 2*workspace.DefaultChunkSize+12345)
	for i := range chunked[:workspace.DefaultChunkSize] {
		chunked[i] = byte(i * 7)
	}
	copy(chunked[2*workspace.DefaultChunkSize:], bytes.Repeat([]byte("tail"), 3000))
	c, err := ws.Create(workspace.RootIno, "chunked", 0o644, workspace.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	fh, err = ws.OpenFile(c.Ino, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt(chunked, 0); err != nil {
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
	// Every object is old: only references keep them.
	old := time.Now().Add(-48 * time.Hour)
	keptID := pool.Sum(kept)
	objects := 0
	err = filepath.WalkDir(filepath.Join(h.PoolDir(), "objects"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		objects++
		return os.Chtimes(path, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
	if objects != 4 { // kept, two chunks, garbage
		t.Fatalf("%d objects in the pool, want 4", objects)
	}

	if code, out := wsfsRun(ctx, "gc", "--home", home, "--grace", "10m"); code != exitUsage {
		t.Fatalf("gc --grace 10m: exit %d, %s", code, out)
	}
	if code, out := wsfsRun(ctx, "gc", "--home", home, "--test-grace", "1s"); code != exitUsage {
		t.Fatalf("gc --test-grace without %s: exit %d, %s", pool.TestMinGraceEnv, code, out)
	}
	// Served: the workspace stays open (locked) during the pass.
	code, out := wsfsRun(ctx, "gc", "--home", home)
	if code != 0 || !strings.Contains(out, "removed 1 ") || !strings.Contains(out, "(100000 bytes)") {
		t.Fatalf("gc while served: exit %d, %s", code, out)
	}
	// The served workspace still reads its pooled file.
	fh, err = ws.OpenFile(a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got0 := make([]byte, len(kept))
	if n, err := fh.ReadAt(got0, 0); n != len(kept) || !bytes.Equal(got0, kept) {
		t.Fatalf("served workspace after gc: %d bytes, %v", n, err)
	}
	fh.Release()
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Path(garbage)); !os.IsNotExist(err) {
		t.Errorf("unreferenced object still there: %v", err)
	}
	if _, err := p.ReadAll(keptID); err != nil {
		t.Errorf("referenced object: %v", err)
	}
	// The chunked file reads back whole: gc kept its chunks.
	ws, err = workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws"), Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	fh, err = ws.OpenFile(c.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Release()
	got := make([]byte, len(chunked)+1)
	n, err := fh.ReadAt(got, 0)
	if err != nil || !bytes.Equal(got[:n], chunked) {
		t.Fatalf("chunked file after gc: %d bytes, %v (want %d bytes, equal)", n, err, len(chunked))
	}
}
