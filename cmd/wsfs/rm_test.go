package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
