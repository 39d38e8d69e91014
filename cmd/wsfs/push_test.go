package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/ship"
)

// TestPushTwice: a second push of a workspace (or a sync of it) is refused
// at once with exit 3, saying it was pushed already, instead of retrying
// until --timeout and then blaming the timeout.
func TestPushTwice(t *testing.T) {
	srv := s3test.Start(t)
	home := newHost(t)
	writeRemoteConfig(t, home, srv.Config(""))
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	fsckWrite(t, h, map[string][]byte{"a": []byte("committed")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if code, out, errOut := runCLI(ctx, "push", "--home", home, "ws"); code != exitOK {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	for _, cmd := range []string{"push", "sync"} {
		code, out, errOut := runCLI(ctx, cmd, "--home", home, "--timeout", "10m", "ws")
		if code != exitPrecondition || !strings.Contains(errOut, "was pushed from this host") || ctx.Err() != nil {
			t.Fatalf("%s after push: exit %d\n%s%s\nwant exit 3 at once, saying it was pushed", cmd, code, out, errOut)
		}
	}
}

// TestPushedNotReplicated: the agent state of a workspace moves with
// push, so push refuses (exit 3) while the workspace's sidecar runs (it
// would go on replicating into the replica the next host restores and
// then replicates), and a sidecar refuses to start (exit 3) on a
// workspace pushed from this host, as its daemon does: started by 'wsfs
// up' after the push, it wrote this host's database into the replica of
// the host that pulled the workspace.
func TestPushedNotReplicated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	dir := h.WorkspaceDir("ws")
	if err := os.MkdirAll(host.AgentDirIn(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := agentstate.LockSidecar(agentstate.DBIn(dir))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(ctx, "push", "--home", home, "ws")
	l.Close()
	if code != exitPrecondition || !strings.Contains(errOut, "running sidecar") {
		t.Fatalf("push with the sidecar running: exit %d\n%s%s\nwant exit 3 naming the sidecar", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, ship.PushedName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(ctx, "sidecar", "--home", home, "ws")
	if code != exitPrecondition || !strings.Contains(errOut, "was pushed from this host") {
		t.Fatalf("sidecar of a pushed workspace: exit %d\n%s%s\nwant exit 3 saying it was pushed", code, out, errOut)
	}
	if _, err := os.Stat(agentstate.DBIn(dir)); err == nil {
		t.Fatal("the refused sidecar created the database")
	}
}

// TestUpPushedOnly: 'wsfs up' does not supervise a workspace pushed from
// this host (its daemon, shipper and sidecar refuse to start, so it would
// only restart refusals); a host whose only workspace was pushed is
// refused at once (exit 3), naming it.
func TestUpPushedOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.WorkspaceDir("ws"), ship.PushedName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(ctx, "up", "--home", home)
	if code != exitPrecondition || !strings.Contains(errOut, "was pushed from it (ws)") || !strings.Contains(errOut, "not serving a workspace pushed") {
		t.Fatalf("up with its only workspace pushed: exit %d\n%s%s\nwant exit 3 naming it", code, out, errOut)
	}
}
