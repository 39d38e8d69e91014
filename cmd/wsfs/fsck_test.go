package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// openHostWorkspace opens the host's pool and its workspace ws directly
// (no daemon; the caller closes the workspace), with opts applied to the
// workspace options.
func openHostWorkspace(t *testing.T, h *host.Host, opts ...func(*workspace.Options)) (*workspace.Workspace, *pool.Pool) {
	t.Helper()
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := workspace.Options{Dir: h.WorkspaceDir("ws"), Pool: p}
	for _, f := range opts {
		f(&o)
	}
	ws, err := workspace.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return ws, p
}

// fsckWrite writes files into workspace ws of the host directly (no
// mount) and closes it.
func fsckWrite(t *testing.T, h *host.Host, files map[string][]byte) {
	t.Helper()
	ws, _ := openHostWorkspace(t, h)
	for name, data := range files {
		a, err := ws.Create(workspace.RootIno, name, 0o644, workspace.Caller{})
		if err != nil {
			t.Fatal(err)
		}
		fh, err := ws.OpenFile(a.Ino, syscall.O_WRONLY)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := fh.Fsync(false); err != nil {
			t.Fatal(err)
		}
		fh.Release()
	}
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFsckCLI: exit codes and messages of wsfs fsck on a clean workspace,
// a corrupt group (the mount's refusal names the repair; a served
// workspace is checked read-only and not repaired, exit 3), the repair
// (copy saved, workspace opens), and a deleted object (named with its
// path, exit 4).
func TestFsckCLI(t *testing.T) {
	ctx := context.Background()
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	fsckWrite(t, h, map[string][]byte{"first": []byte("FIRST-GROUP-CONTENT")})
	fsckWrite(t, h, map[string][]byte{"second": []byte("SECOND-GROUP-CONTENT")})
	if code, out, errOut := runCLI(ctx, "fsck", "--home", home, "--verify-data"); code != exitOK || !strings.Contains(out, "ws: ok") {
		t.Fatalf("clean fsck: %d\n%s%s", code, out, errOut)
	}

	// Damage the second file's group.
	seg := filepath.Join(h.WorkspaceDir("ws"), "log", "00000000000000000001.seg")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte("SECOND-GROUP-CONTENT"))
	if at < 0 {
		t.Fatal("content not in the segment")
	}
	b[at] ^= 1
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p, _ := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	_, oerr := workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws"), Pool: p})
	merr := classifyOpenError("ws", oerr)
	if exitCodeOf(merr) != exitCorrupt || !strings.Contains(merr.Error(), "wsfs fsck --repair ws") || strings.Contains(merr.Error(), "NAME") {
		t.Fatalf("mount's refusal: exit %d: %v", exitCodeOf(merr), merr)
	}

	code, out, _ := runCLI(ctx, "fsck", "--home", home, "ws")
	if code != exitCorrupt || !strings.Contains(out, seg) || !strings.Contains(out, "offset") || !strings.Contains(out, "wsfs fsck --repair ws") {
		t.Fatalf("fsck of the damage: %d\n%s", code, out)
	}

	// Served (lock held): read-only check works, repair refused with 3.
	lk, err := vfs.Default.Lock(h.LockPath("ws"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(ctx, "fsck", "--home", home, "--repair", "ws")
	if code != exitPrecondition || !strings.Contains(out, "read-only") || !strings.Contains(errOut, "served by a daemon") {
		t.Fatalf("repair of a served workspace: %d\n%s%s", code, out, errOut)
	}
	if after, _ := os.ReadFile(seg); !bytes.Equal(after, b) {
		t.Fatal("fsck changed a served workspace")
	}
	lk.Close()

	code, out, errOut = runCLI(ctx, "fsck", "--home", home, "--repair", "ws")
	if code != exitOK || !strings.Contains(out, "saved a copy") || !strings.Contains(out, "truncated") {
		t.Fatalf("repair: %d\n%s%s", code, out, errOut)
	}
	saved, _ := filepath.Glob(filepath.Join(h.WorkspaceDir("ws"), "fsck", "*", "log", "00000000000000000001.seg"))
	if len(saved) != 1 {
		t.Fatalf("saved copy not found: %v\n%s", saved, out)
	}
	if c, _ := os.ReadFile(saved[0]); !bytes.Equal(c, b) {
		t.Fatal("the saved copy is not the damaged segment")
	}
	ws, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws"), Pool: p})
	if err != nil {
		t.Fatalf("open after repair: %v", err)
	}
	if _, err := ws.Lookup(workspace.RootIno, "first"); err != nil {
		t.Fatalf("the group before the damage is gone: %v", err)
	}
	ws.Close()

	// A deleted object: named with its file, exit 4, nothing to repair.
	big := bytes.Repeat([]byte("pooled-content "), 10000)
	fsckWrite(t, h, map[string][]byte{"big": big})
	if err := os.Remove(p.Path(objid.Sum(big))); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI(ctx, "fsck", "--home", home, "--repair")
	if code != exitCorrupt || !strings.Contains(out, "object-missing") || !strings.Contains(out, "/big") || !strings.Contains(out, "nothing --repair can do") {
		t.Fatalf("missing object: %d\n%s", code, out)
	}
	if code, _, _ := runCLI(ctx, "fsck", "--home", home, "nope"); code != exitPrecondition {
		t.Fatalf("unknown workspace: exit %d", code)
	}
}
