package main

import (
	"context"
	"os"
	"path/filepath"
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
