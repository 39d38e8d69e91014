package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"wsfs/internal/host"
	"wsfs/internal/supervisor"
)

// TestOtherHostsMountIgnored: the mount table names only the workspace,
// so a mount of another host's ws must not make this host's rm refuse,
// nor show in its ls; a mount at this host's default mount point, or where
// its daemon said it mounted ws, does.
func TestOtherHostsMountIgnored(t *testing.T) {
	ctx := context.Background()
	orig := mountsOfName
	t.Cleanup(func() { mountsOfName = orig })
	custom := filepath.Join(t.TempDir(), "custom")
	for _, tc := range []struct {
		name   string
		mount  func(h *host.Host) string
		status string // mount point in ws's status file
		ours   bool
	}{
		{"another host's ws", func(*host.Host) string { return filepath.Join(t.TempDir(), "mnt", "ws") }, "", false},
		{"another host's ws, ours elsewhere", func(*host.Host) string { return filepath.Join(t.TempDir(), "mnt", "ws") }, custom, false},
		{"our default mount point", func(h *host.Host) string { return h.MountPoint("ws") }, "", true},
		{"our daemon's mount point", func(*host.Host) string { return custom }, custom, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := newHost(t)
			h, err := host.Open(home)
			if err != nil {
				t.Fatal(err)
			}
			if tc.status != "" {
				b, _ := json.Marshal(supervisor.DaemonStatus{MountPoint: tc.status})
				if err := os.WriteFile(filepath.Join(h.WorkspaceDir("ws"), supervisor.DaemonStatusName), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			mp := tc.mount(h)
			mountsOfName = func(name string) ([]string, error) { return []string{mp}, nil }
			_, ls := wsfsRun(ctx, "ls", "--home", home)
			if strings.Contains(ls, mp) != tc.ours {
				t.Errorf("ls shows %s: %v, want %v:\n%s", mp, strings.Contains(ls, mp), tc.ours, ls)
			}
			code, out := wsfsRun(ctx, "rm", "--home", home, "ws")
			if want := map[bool]int{true: exitPrecondition, false: exitOK}[tc.ours]; code != want {
				t.Errorf("rm: exit %d, want %d: %s", code, want, out)
			}
		})
	}
}
