package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/ship"
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

// TestPullFailedReleasesLease: a pull that fails takes nothing over. The
// lease it took is released, so that the host that creates or serves a
// workspace of that name ships it without --steal; a pull of a name the
// remote does not hold (a typo) used to leave a lease that locked that
// host's shipper out until someone stole it.
func TestPullFailedReleasesLease(t *testing.T) {
	srv := s3test.Start(t)
	home := filepath.Join(t.TempDir(), "home")
	if code, out := wsfsRun(context.Background(), "init", "--home", home); code != 0 {
		t.Fatalf("init: %d %s", code, out)
	}
	writeRemoteConfig(t, home, srv.Config(""))
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
