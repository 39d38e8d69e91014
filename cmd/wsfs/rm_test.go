package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/ship"
	"wsfs/internal/vfs"
)

// TestRmUnshipped: rm refuses a workspace whose shipper reports fewer
// groups in the remote than its log holds (exit 3, naming the groups and
// sync, push and --force), and removes it once the status covers the log,
// once it was pushed, or with --force.
func TestRmUnshipped(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		shipped func(last uint64) uint64 // the status's group; none when nil
		pushed  bool
		args    []string
		refused bool
	}{
		{name: "never shipped from here"},
		{name: "behind", shipped: func(last uint64) uint64 { return last - 1 }, refused: true},
		{name: "nothing shipped", shipped: func(uint64) uint64 { return 0 }, refused: true},
		{name: "caught up", shipped: func(last uint64) uint64 { return last }},
		{name: "pushed", shipped: func(uint64) uint64 { return 0 }, pushed: true},
		{name: "forced", shipped: func(uint64) uint64 { return 0 }, args: []string{"--force"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := newHost(t)
			h, err := host.Open(home)
			if err != nil {
				t.Fatal(err)
			}
			fsckWrite(t, h, map[string][]byte{"a": []byte("committed here")})
			fsckWrite(t, h, map[string][]byte{"b": []byte("and here")})
			dir := h.WorkspaceDir("ws")
			last, err := ship.LocalLast(vfs.Default, dir)
			if err != nil || last < 2 {
				t.Fatalf("local log ends at group %d, %v", last, err)
			}
			if tc.shipped != nil {
				b, _ := json.Marshal(ship.Status{Stats: ship.Stats{Shipped: tc.shipped(last)}})
				if err := os.WriteFile(filepath.Join(dir, ship.StatusName), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.pushed {
				if err := os.WriteFile(filepath.Join(dir, ship.PushedName), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args := append(append([]string{"rm", "--home", home}, tc.args...), "ws")
			code, out, errOut := runCLI(ctx, args...)
			_, statErr := os.Stat(dir)
			if tc.refused {
				if code != exitPrecondition || statErr != nil || !strings.Contains(errOut, "would be lost") ||
					!strings.Contains(errOut, "wsfs sync ws") || !strings.Contains(errOut, "wsfs rm --force ws") {
					t.Fatalf("rm: exit %d, workspace dir %v\n%s%s\nwant exit 3 keeping it, naming sync and --force", code, statErr, out, errOut)
				}
				return
			}
			if code != exitOK || statErr == nil {
				t.Fatalf("rm: exit %d, workspace dir %v\n%s%s\nwant it removed", code, statErr, out, errOut)
			}
		})
	}
}

// TestRmRunningCompanion: rm refuses (exit 3, naming it) while the
// workspace's shipper or sidecar runs, also with --force (which is about
// unshipped groups, not running processes): removed under a running
// shipper, the shipper would go on failing in a directory that is gone,
// holding the workspace's lease. Once the process is gone rm removes it,
// also a workspace that never had an agent state directory.
func TestRmRunningCompanion(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		what string
		lock func(dir string) (io.Closer, error)
	}{
		{"shipper", func(dir string) (io.Closer, error) { return ship.Lock(vfs.Default, dir) }},
		{"sidecar", func(dir string) (io.Closer, error) {
			if err := os.MkdirAll(host.AgentDirIn(dir), 0o700); err != nil {
				return nil, err
			}
			return agentstate.LockSidecar(agentstate.DBIn(dir))
		}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			home := newHost(t)
			h, err := host.Open(home)
			if err != nil {
				t.Fatal(err)
			}
			dir := h.WorkspaceDir("ws")
			l, err := tc.lock(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, args := range [][]string{{"rm", "--home", home, "ws"}, {"rm", "--home", home, "--force", "ws"}} {
				code, out, errOut := runCLI(ctx, args...)
				if _, err := os.Stat(dir); code != exitPrecondition || err != nil || !strings.Contains(errOut, "running "+tc.what) {
					t.Fatalf("%q with its %s running: exit %d, workspace dir %v\n%s%s\nwant exit 3 keeping it, naming the %s", args, tc.what, code, err, out, errOut, tc.what)
				}
			}
			l.Close()
			if code, out, errOut := runCLI(ctx, "rm", "--home", home, "ws"); code != exitOK {
				t.Fatalf("rm once the %s stopped: exit %d\n%s%s", tc.what, code, out, errOut)
			}
		})
	}
	t.Run("no agent dir", func(t *testing.T) {
		home := newHost(t)
		if code, out, errOut := runCLI(ctx, "rm", "--home", home, "ws"); code != exitOK {
			t.Fatalf("rm of a workspace never mounted: exit %d\n%s%s", code, out, errOut)
		}
	})
}

// TestWorkspaceNotADirectory: a workspace entry that is not a directory
// (a damaged host) is a failure (exit 1) naming it, not a usage error.
func TestWorkspaceNotADirectory(t *testing.T) {
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	bad := h.WorkspaceDir("bad")
	if err := os.WriteFile(bad, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"rm", "bad"}, {"snapshot", "ls", "bad"}} {
		code, out, errOut := runCLI(context.Background(), append(args, "--home", home)...)
		if code != exitFailure || !strings.Contains(errOut, "is not a directory") {
			t.Errorf("%q with %s a file: exit %d\n%s%s\nwant exit 1 naming it", args, bad, code, out, errOut)
		}
	}
}
