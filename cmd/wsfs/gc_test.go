package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"wsfs/internal/layout"
	"wsfs/internal/mountinfo"
	"wsfs/internal/objid"

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
	keptID := objid.Sum(kept)
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

// gcHost makes a host with workspace "ws" holding one fsynced pooled file
// (its object referenced) and one unreferenced object, all backdated past
// any grace. It returns the home, the host and the two object paths.
func gcHost(t *testing.T) (home string, h *host.Host, keptPath, garbagePath string) {
	t.Helper()
	home = newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	ws, p := openHostWorkspace(t, h)
	kept := bytes.Repeat([]byte("K"), 300_000)
	writeFile(t, ws, "big", kept)
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	gid, _, err := p.Put(bytes.Repeat([]byte("g"), 100_000))
	if err != nil {
		t.Fatal(err)
	}
	backdate(t, h.PoolDir(), 48*time.Hour)
	return home, h, p.Path(objid.Sum(kept)), p.Path(gid)
}

// writeFile creates name in the root of ws with data and fsyncs it.
func writeFile(t *testing.T, ws *workspace.Workspace, name string, data []byte) workspace.Ino {
	t.Helper()
	a, err := ws.Create(workspace.RootIno, name, 0o644, workspace.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	fh, err := ws.OpenFile(a.Ino, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Release()
	if _, err := fh.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := fh.Fsync(false); err != nil {
		t.Fatal(err)
	}
	return a.Ino
}

// backdate sets the mtime of every object in the pool to age ago.
func backdate(t *testing.T, poolDir string, age time.Duration) {
	t.Helper()
	old := time.Now().Add(-age)
	err := filepath.WalkDir(filepath.Join(poolDir, "objects"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(path, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stubMounts makes checkLayoutMounted see no mounts at all.
func stubMounts(t *testing.T) {
	t.Helper()
	orig := mountsForCheck
	mountsForCheck = func() ([]mountinfo.Mount, error) { return nil, nil }
	t.Cleanup(func() { mountsForCheck = orig })
}

// writeLayoutRecord records a dedicated layout whose state filesystem is
// mounted at the host's state directory.
func writeLayoutRecord(t *testing.T, h *host.Host) {
	t.Helper()
	rec := layout.Record{Version: 1, Filesystems: []layout.Filesystem{
		{Role: "state", Image: filepath.Join(h.Home(), "layout", "state.img"), MountPoint: h.StateDir()},
		{Role: "pool", Image: filepath.Join(h.Home(), "layout", "pool.img"), MountPoint: h.PoolDir()},
	}}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(h.Home(), "layout"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.Home(), "layout", layout.RecordName), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGCRefuses is hardening issue item 1: whenever gc cannot positively
// know every workspace that uses the pool it refuses with exit 3, says
// what is wrong, and removes nothing.
func TestGCRefuses(t *testing.T) {
	tests := []struct {
		name     string
		sabotage func(t *testing.T, h *host.Host)
		want     string
	}{
		{"state directory deleted", func(t *testing.T, h *host.Host) {
			os.RemoveAll(h.StateDir())
		}, "has no wsfs-id marker although pool"},
		{"state directory empty", func(t *testing.T, h *host.Host) {
			os.RemoveAll(h.StateDir())
			os.MkdirAll(filepath.Join(h.StateDir(), "workspaces"), 0o755)
		}, "is its filesystem mounted?"},
		{"state of another pool", func(t *testing.T, h *host.Host) {
			id, _, _ := host.ReadIdentity(h.StateDir())
			data, _ := json.Marshal(map[string]any{"version": 1, "host_id": id.HostID, "pool_id": "0123"})
			os.WriteFile(filepath.Join(h.StateDir(), host.IDFile), data, 0o644)
		}, "belongs to pool 0123"},
		{"registered workspace missing", func(t *testing.T, h *host.Host) {
			os.RemoveAll(h.WorkspaceDir("ws"))
		}, "workspace ws is registered in"},
		{"pool without its marker", func(t *testing.T, h *host.Host) {
			os.Remove(filepath.Join(h.PoolDir(), host.IDFile))
		}, "has no wsfs-id marker, but state"},
		{"layout filesystem not mounted", func(t *testing.T, h *host.Host) {
			writeLayoutRecord(t, h)
			stubMounts(t)
		}, "is not mounted at"},
		{"pool shared with an unreachable host", func(t *testing.T, h *host.Host) {
			d := filepath.Join(h.PoolDir(), "hosts", "feedface")
			os.MkdirAll(filepath.Join(d, "workspaces"), 0o755)
			os.WriteFile(filepath.Join(d, "host.json"), []byte(`{"state_dir": "/nonexistent/state"}`), 0o644)
		}, "is used by host feedface"},
		{"host from an older wsfs, state lost", func(t *testing.T, h *host.Host) {
			os.RemoveAll(filepath.Join(h.PoolDir(), "hosts"))
			os.Remove(filepath.Join(h.PoolDir(), host.IDFile))
			os.RemoveAll(h.StateDir())
		}, "wsfs init"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home, h, kept, garbage := gcHost(t)
			tt.sabotage(t, h)
			code, out := wsfsRun(ctx, "gc", "--home", home)
			if code != exitPrecondition || !strings.Contains(out, tt.want) {
				t.Fatalf("gc: exit %d, %s\nwant exit %d mentioning %q", code, out, exitPrecondition, tt.want)
			}
			for _, p := range []string{kept, garbage} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("refused gc removed %s: %v", p, err)
				}
			}
		})
	}
}

// TestGCLegacyHost: a host made before the markers has none; gc refuses
// until one `wsfs init` writes them (registering the workspaces present),
// and init refuses to bless a host whose state is gone.
func TestGCLegacyHost(t *testing.T) {
	ctx := context.Background()
	home, h, kept, garbage := gcHost(t)
	os.RemoveAll(filepath.Join(h.PoolDir(), "hosts"))
	os.Remove(filepath.Join(h.PoolDir(), host.IDFile))
	os.Remove(filepath.Join(h.StateDir(), host.IDFile))
	if code, out := wsfsRun(ctx, "gc", "--home", home); code != exitPrecondition || !strings.Contains(out, "wsfs init") {
		t.Fatalf("gc on a legacy host: exit %d, %s", code, out)
	}
	// With the state moved away, init refuses to adopt the host.
	aside := h.StateDir() + ".aside"
	if err := os.Rename(h.StateDir(), aside); err != nil {
		t.Fatal(err)
	}
	if code, out := wsfsRun(ctx, "init", "--home", home); code != exitPrecondition || !strings.Contains(out, "holds objects but state directory") {
		t.Fatalf("init with the state gone: exit %d, %s", code, out)
	}
	os.RemoveAll(h.StateDir())
	if err := os.Rename(aside, h.StateDir()); err != nil {
		t.Fatal(err)
	}
	if code, out := wsfsRun(ctx, "init", "--home", home); code != 0 {
		t.Fatalf("init: exit %d, %s", code, out)
	}
	code, out := wsfsRun(ctx, "gc", "--home", home)
	if code != 0 || !strings.Contains(out, "1 workspaces") || !strings.Contains(out, "removed 1 ") {
		t.Fatalf("gc after init: exit %d, %s", code, out)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("referenced object: %v", err)
	}
	if _, err := os.Stat(garbage); !os.IsNotExist(err) {
		t.Errorf("garbage survived: %v", err)
	}
}

// TestGCTwoAtOnce is hardening issue item 12: a second gc names the real
// holder of the lock.
func TestGCTwoAtOnce(t *testing.T) {
	home, h, _, garbage := gcHost(t)
	l, err := vfs.Default.Lock(filepath.Join(h.PoolDir(), "gc.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, out := wsfsRun(context.Background(), "gc", "--home", home)
	if code != exitPrecondition || !strings.Contains(out, "another wsfs gc holds") || strings.Contains(out, "served by") {
		t.Fatalf("second gc: exit %d, %s", code, out)
	}
	if _, err := os.Stat(garbage); err != nil {
		t.Errorf("refused gc removed an object: %v", err)
	}
}

// TestUnmountedLayoutRefused: create, mount, up, init and gc refuse to use
// a state or pool directory that the layout mounts a filesystem on while
// nothing is mounted there.
func TestUnmountedLayoutRefused(t *testing.T) {
	ctx := context.Background()
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	writeLayoutRecord(t, h)
	stubMounts(t)
	mp := filepath.Join(t.TempDir(), "mnt")
	for _, args := range [][]string{
		{"create", "--home", home, "ws-2"},
		{"mount", "--home", home, "ws", mp},
		{"up", "--home", home},
		{"init", "--home", home},
		{"gc", "--home", home},
		// Every other command that reads the host: underneath an
		// unmounted layout "no workspaces" (or "no such workspace: create
		// it") is a lie, and fsck's silence an exit 0.
		{"ls", "--home", home},
		{"status", "--home", home},
		{"rm", "--home", home, "ws"},
		{"fsck", "--home", home},
		{"fsck", "--home", home, "ws"},
		{"snapshot", "create", "--home", home, "ws"},
		{"snapshot", "ls", "--home", home, "ws"},
		{"snapshot", "rm", "--home", home, "ws@1"},
		{"snapshot", "prune", "--home", home, "ws", "--keep-last", "1"},
		{"fork", "--home", home, "ws@1", "ws-3"},
		{"diff", "--home", home, "ws@1"},
		{"restore", "--home", home, "ws@1"},
		{"state", "sync", "--home", home, "ws", "--timeout", "1s"},
		{"state", "restore", "--home", home, "ws", "--to", filepath.Join(t.TempDir(), "r.db")},
		{"sidecar", "--home", home, "ws"},
	} {
		// Bounded: a command that does not refuse may serve (sidecar).
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		code, out := wsfsRun(cctx, args...)
		cancel()
		if code != exitPrecondition || !strings.Contains(out, "not mounted at "+h.StateDir()) {
			t.Errorf("%v: exit %d, %s", args, code, out)
		}
	}
	if _, err := os.Stat(h.WorkspaceDir("ws-2")); !os.IsNotExist(err) {
		t.Errorf("create made ws-2 underneath the unmounted layout: %v", err)
	}
}
