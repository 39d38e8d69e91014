package host

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestIdentityLifecycle: markers are written with the first workspace,
// the registry follows create and remove, and CheckRegistry tells a
// workspace being removed from one whose directory is gone.
func TestIdentityLifecycle(t *testing.T) {
	h, err := Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.StateDir(), IDFile)); !os.IsNotExist(err) {
		t.Fatalf("init wrote a marker before any workspace (layout create needs empty directories): %v", err)
	}
	for _, n := range []string{"a", "b"} {
		if err := h.CreateWorkspace(n); err != nil {
			t.Fatal(err)
		}
	}
	id, err := h.CheckIdentity()
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := PoolHosts(h.PoolDir())
	if err != nil || len(hosts) != 1 || hosts[0].ID != id.HostID || hosts[0].StateDir != h.StateDir() ||
		!slices.Equal(hosts[0].Workspaces, []string{"a", "b"}) {
		t.Fatalf("PoolHosts = %+v, %v", hosts, err)
	}
	if err := h.RemoveWorkspace("a"); err != nil {
		t.Fatal(err)
	}
	hosts, _ = PoolHosts(h.PoolDir())
	if !slices.Equal(hosts[0].Workspaces, []string{"b"}) {
		t.Fatalf("after remove: %v", hosts[0].Workspaces)
	}

	// A crash between rename and unregister: being removed, accepted.
	if err := h.CreateWorkspace("c"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(h.WorkspaceDir("c"), h.RemovingDir("c")); err != nil {
		t.Fatal(err)
	}
	// A directory made without registration (older wsfs, or a crash).
	if err := os.MkdirAll(h.WorkspaceDir("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	hosts, _ = PoolHosts(h.PoolDir())
	present, unreg, err := CheckRegistry(hosts[0], h.PoolDir(), true)
	if err != nil || !slices.Equal(present, []string{"b", "d"}) || !slices.Equal(unreg, []string{"d"}) {
		t.Fatalf("CheckRegistry = %v %v %v", present, unreg, err)
	}
	hosts, _ = PoolHosts(h.PoolDir())
	if !slices.Contains(hosts[0].Workspaces, "d") {
		t.Errorf("unregistered workspace not registered: %v", hosts[0].Workspaces)
	}
	// Gone for real: refused.
	os.RemoveAll(h.RemovingDir("c"))
	if _, _, err := CheckRegistry(hosts[0], h.PoolDir(), false); !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), "workspace c is registered") {
		t.Fatalf("registered workspace gone: %v", err)
	}
}

// TestEnsureIdentityRefusals: EnsureIdentity never blesses a state
// directory that may not be the real one.
func TestEnsureIdentityRefusals(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, h *Host)
		want  string // "" = accepted
	}{
		{"fresh host", func(t *testing.T, h *Host) {}, ""},
		{"state replaced by an empty directory", func(t *testing.T, h *Host) {
			mustCreate(t, h, "ws")
			os.RemoveAll(h.StateDir())
			os.MkdirAll(filepath.Join(h.StateDir(), "workspaces"), 0o755)
		}, "records it as the state of host"},
		{"pool replaced", func(t *testing.T, h *Host) {
			mustCreate(t, h, "ws")
			os.RemoveAll(h.PoolDir())
			os.MkdirAll(h.PoolDir(), 0o755)
		}, "pool directory"},
		{"legacy host with workspaces", func(t *testing.T, h *Host) {
			os.MkdirAll(h.WorkspaceDir("old-1"), 0o755)
		}, ""},
		{"legacy host, state lost, pool has objects", func(t *testing.T, h *Host) {
			os.MkdirAll(filepath.Join(h.PoolDir(), "objects", "a"), 0o755)
			os.WriteFile(filepath.Join(h.PoolDir(), "objects", "a", "a0"), nil, 0o444)
		}, "holds objects but state directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Init(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			tt.setup(t, h)
			err = h.EnsureIdentity()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.CheckIdentity(); err != nil {
					t.Fatalf("CheckIdentity after EnsureIdentity: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("EnsureIdentity: %v; want ErrIdentity mentioning %q", err, tt.want)
			}
		})
	}
}

func mustCreate(t *testing.T, h *Host, name string) {
	t.Helper()
	if err := h.CreateWorkspace(name); err != nil {
		t.Fatal(err)
	}
}

// TestCheckRegistryStaleList: a PoolHosts list read before a `wsfs rm`
// finished (directory moved away, unregistered, deleted) still names the
// removed workspace; CheckRegistry with that list accepts it as removed
// instead of refusing (gc under load failed with exit 3 when a fork was
// removed during its pass; found by TestGCUnderLoadLifecycle).
func TestCheckRegistryStaleList(t *testing.T) {
	h, err := Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if err := h.CreateWorkspace(n); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := PoolHosts(h.PoolDir())
	if err != nil || len(stale) != 1 {
		t.Fatalf("PoolHosts = %+v, %v", stale, err)
	}
	if err := h.RemoveWorkspace("a"); err != nil {
		t.Fatal(err)
	}
	present, _, err := CheckRegistry(stale[0], h.PoolDir(), false)
	if err != nil || !slices.Equal(present, []string{"b"}) {
		t.Fatalf("CheckRegistry with a list from before the rm = %v, %v; want [b] and no error", present, err)
	}
}
