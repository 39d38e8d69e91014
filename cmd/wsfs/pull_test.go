package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/host"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/ship"
	"wsfs/internal/testenv"
)

// writeRemoteConfig writes the host config of a host made by init (the
// default directories) with remote section cfg.
func writeRemoteConfig(t *testing.T, home string, cfg remote.Config) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"state_dir": "state", "pool_dir": "pool", "mount_dir": "mnt", "remote": cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, host.ConfigFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// initRemoteHost makes a host at home (wsfs init) whose config has remote
// section cfg, with no workspace.
func initRemoteHost(t *testing.T, home string, cfg remote.Config) {
	t.Helper()
	if code, out := wsfsRun(context.Background(), "init", "--home", home); code != 0 {
		t.Fatalf("init: %d %s", code, out)
	}
	writeRemoteConfig(t, home, cfg)
}

// TestPullFailedReleasesLease: a pull that fails takes nothing over. The
// lease it took is released, so that the host that creates or serves a
// workspace of that name ships it without --steal; a pull of a name the
// remote does not hold (a typo) used to leave a lease that locked that
// host's shipper out until someone stole it.
func TestPullFailedReleasesLease(t *testing.T) {
	srv := s3test.Start(t)
	home := filepath.Join(t.TempDir(), "home")
	initRemoteHost(t, home, srv.Config(""))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, errOut := runCLI(ctx, "pull", "--home", home, "nothere")
	if code != exitPrecondition {
		t.Fatalf("pull of a workspace the remote does not hold: exit %d\n%s%s\nwant exit 3", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(home, "state", "workspaces", "nothere")); err == nil {
		t.Fatal("the failed pull left a workspace")
	}
	st := srv.Store(t, "")
	if _, err := ship.AcquireLease(ctx, st, "nothere", "another-host", 0, false, time.Now()); err != nil {
		t.Fatalf("another host takes the lease after the failed pull, without --steal: %v", err)
	}
}

// TestPullDiskFull: a pull that runs out of space on this host fails
// (exit 1) with an error naming the workspace and the remote as well as
// the file it hit, leaves no workspace behind and releases the lease.
// HOME is a 1 MiB tmpfs; the workspace holds 4 MiB of content.
func TestPullDiskFull(t *testing.T) {
	testenv.RequireRoot(t) // mounts a tmpfs
	srv := s3test.Start(t)
	src := newHost(t)
	writeRemoteConfig(t, src, srv.Config(""))
	h, err := host.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 4<<20)
	rand.Read(big) // incompressible, never deduplicated
	fsckWrite(t, h, map[string][]byte{"big": big})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if code, out, errOut := runCLI(ctx, "push", "--home", src, "ws"); code != exitOK {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}

	small := t.TempDir()
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Fatalf("mount a 1 MiB tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) })
	home := filepath.Join(small, "home")
	initRemoteHost(t, home, srv.Config(""))
	code, out, errOut := runCLI(ctx, "pull", "--home", home, "--fetch-all", "ws")
	if code != exitFailure || !strings.Contains(errOut, "pull ws") || !strings.Contains(errOut, "no space left on device") {
		t.Fatalf("pull onto a full disk: exit %d\n%s%s\nwant exit 1 naming the workspace and ENOSPC", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(home, "state", "workspaces", "ws")); err == nil {
		t.Fatal("the failed pull left a workspace")
	}
	if _, err := ship.AcquireLease(ctx, srv.Store(t, ""), "ws", "another-host", 0, false, time.Now()); err != nil {
		t.Fatalf("another host takes the lease after the failed pull, without --steal: %v", err)
	}
}

// TestCreateNameBeingRemoved: while another host's 'wsfs rm --remote' of
// a name holds its lease (or left it, stopped part-way), create refuses
// the name (exit 3) saying that a removal is under way or unfinished and
// how to finish it, not that a host serves the workspace.
func TestCreateNameBeingRemoved(t *testing.T) {
	srv := s3test.Start(t)
	home := filepath.Join(t.TempDir(), "home")
	initRemoteHost(t, home, srv.Config(""))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	now := time.Now().UTC()
	b, err := json.Marshal(ship.Lease{Holder: "another-host", Hostname: "elsewhere", Acquired: now, Renewed: now, Expires: now.Add(-time.Minute), Removing: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Store(t, "").Put(ctx, ship.LeaseKey("gone"), b); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(ctx, "create", "--home", home, "gone")
	if code != exitPrecondition || !strings.Contains(errOut, "not free") || !strings.Contains(errOut, "stopped part-way") || !strings.Contains(errOut, "wsfs rm --remote gone") {
		t.Fatalf("create of a name whose removal stopped part-way: exit %d\n%s%s\nwant exit 3 explaining the removal", code, out, errOut)
	}
}
