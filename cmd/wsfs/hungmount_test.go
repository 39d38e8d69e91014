package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountBesideStuckMount: a wsfs daemon of another host that does not
// answer (stopped with SIGSTOP, its kernel caches off so that nothing is
// answered for it) must not block `wsfs mount`, `wsfs create` or `wsfs
// init` of this host. They used to lstat every wsfs mount point of the
// mount table (to resolve symbolic links in it) and hung in the kernel
// until that daemon answered (found by TestGCUnderLoadLifecycle beside
// another test's stuck mount). Each command is bounded; a hang fails it.
func TestMountBesideStuckMount(t *testing.T) {
	skipWithoutFUSE(t)
	other := newHost(t)
	stuck := startDaemon(t, other, "", "--attr-timeout", "-1s", "--entry-timeout", "-1s")
	if err := stuck.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Registered after startDaemon's cleanup, so it runs before it.
	t.Cleanup(func() { stuck.cmd.Process.Signal(syscall.SIGCONT) })

	bounded := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := wsfsCmd(ctx, args...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("wsfs %v beside a stuck mount: no exit within 30s (killed): %s", args, out)
		}
		if err != nil {
			t.Fatalf("wsfs %v: %v %s", args, err, out)
		}
	}
	home := filepath.Join(t.TempDir(), "home")
	bounded("init", "--home", home)
	bounded("create", "--home", home, "ws")
	d := startDaemon(t, home, "")
	writeSync(t, filepath.Join(d.mp, "f"), []byte("served"), 0o644)
	if got, err := os.ReadFile(filepath.Join(d.mp, "f")); err != nil || string(got) != "served" {
		t.Fatalf("read beside a stuck mount: %q %v", got, err)
	}
	stopOK(t, d)
}

// TestStatusWithStuckDaemon: `wsfs status` of a host whose daemon does
// not answer (SIGSTOP, kernel caches off) finishes and lists the
// workspace; it used to stat each mount point and hang until the daemon
// answered. Dead mounts are still told apart by the bounded statfs probe
// (TestRemountAfterSIGKILL).
func TestStatusWithStuckDaemon(t *testing.T) {
	skipWithoutFUSE(t)
	home := newHost(t)
	d := startDaemon(t, home, "", "--attr-timeout", "-1s", "--entry-timeout", "-1s")
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.cmd.Process.Signal(syscall.SIGCONT) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := wsfsCmd(ctx, "status", "--home", home).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("wsfs status with a stuck daemon: no exit within 30s (killed): %s", out)
	}
	if err != nil || !strings.Contains(string(out), "ws") {
		t.Fatalf("wsfs status: %v\n%s", err, out)
	}
	if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopOK(t, d)
}
