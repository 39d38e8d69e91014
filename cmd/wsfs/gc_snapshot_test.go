package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// TestGCKeepsSnapshots: with every object backdated past the grace, gc
// keeps what only a snapshot references (a file deleted since, and the
// snapshot's manifests), and what only a fork references after the
// snapshot it came from is removed; removing the snapshot and the fork
// makes those objects garbage.
func TestGCKeepsSnapshots(t *testing.T) {
	t.Setenv(pool.TestMinGraceEnv, "1s")
	home, open := snapHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("s", workspace.DefaultInlineMax+100) // a pooled object
	w := open()
	put(t, w, "only-in-snapshot", big)
	put(t, w, "small", "inline")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, errs := snapRun(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
		return out
	}
	mustRun("snapshot", "create", "--home", home, "ws")
	w = open()
	if err := w.Unlink(workspace.RootIno, "only-in-snapshot"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	gc := func() string {
		t.Helper()
		backdate(t, h.PoolDir(), 48*time.Hour)
		return mustRun("gc", "--home", home, "--test-grace", "1s")
	}
	// Only the snapshot references the deleted file's object.
	if out := gc(); !strings.Contains(out, "removed 0 ") {
		t.Fatalf("gc removed what a snapshot references: %s", out)
	}
	mustRun("fork", "--home", home, "ws@1", "forked")
	mustRun("snapshot", "rm", "--home", home, "ws@1")
	// The fork's first checkpoint names the removed snapshot's manifest
	// root: its manifests and the deleted file's object are still needed.
	out := gc()
	if !strings.Contains(out, "removed 0 ") {
		t.Fatalf("gc removed what the fork references: %s", out)
	}
	f := openNamed(t, h, "forked")
	if got := get(t, f, "only-in-snapshot"); got != big {
		t.Fatalf("fork after gc reads %d bytes, want %d", len(got), len(big))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Without the fork nothing references the object or the manifests.
	mustRun("rm", "--home", home, "forked")
	if out := gc(); strings.Contains(out, "removed 0 ") {
		t.Fatalf("gc kept the objects of a removed snapshot and fork: %s", out)
	}
	w = open()
	if got := get(t, w, "small"); got != "inline" {
		t.Fatalf("ws after gc: small = %q", got)
	}
	w.Close()
	if _, err := os.Stat(h.WorkspaceDir("forked")); !os.IsNotExist(err) {
		t.Fatalf("forked workspace still there: %v", err)
	}
}

// openNamed opens workspace name of h offline.
func openNamed(t *testing.T, h *host.Host, name string) *workspace.Workspace {
	t.Helper()
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir(name), Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestFsckFork: a fork's first checkpoint names a snapshot's manifest
// tree. fsck loads it as recovery does (no problem reported), and when a
// manifest is gone it names the checkpoint and --repair leaves it alone:
// removing it would turn the fork into an empty tree.
func TestFsckFork(t *testing.T) {
	home, open := snapHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	w := open()
	put(t, w, "a", "alpha")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"snapshot", "create", "--home", home, "ws"}, {"fork", "--home", home, "ws@1", "forked"}} {
		if code, out, errs := snapRun(args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
	}
	if code, out, errs := snapRun("fsck", "--home", home, "forked"); code != 0 {
		t.Fatalf("fsck of a fresh fork: exit %d\n%s%s", code, out, errs)
	}
	// Remove every pool object: the manifests with them.
	objs, _ := filepath.Glob(filepath.Join(h.PoolDir(), "objects", "*", "*"))
	if len(objs) == 0 {
		t.Fatal("no pool objects (the manifests should be there)")
	}
	for _, o := range objs {
		if err := os.Remove(o); err != nil {
			t.Fatal(err)
		}
	}
	ckpts, _ := filepath.Glob(filepath.Join(h.WorkspaceDir("forked"), "checkpoint", "*"))
	code, out, errs := snapRun("fsck", "--home", home, "--repair", "forked")
	if code != exitCorrupt || !strings.Contains(out+errs, "manifest") {
		t.Fatalf("fsck --repair of a fork without its manifests: exit %d, want %d naming the manifest tree\n%s%s", code, exitCorrupt, out, errs)
	}
	after, _ := filepath.Glob(filepath.Join(h.WorkspaceDir("forked"), "checkpoint", "*"))
	if len(after) != len(ckpts) || len(ckpts) == 0 {
		t.Fatalf("checkpoints before repair %v, after %v: the fork's base must stay", ckpts, after)
	}
}
