package host

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"wsfs/internal/vfs"
)

func TestInitIdempotentAndOpen(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	if _, err := Open(home); !errors.Is(err, ErrNoHost) || !strings.Contains(err.Error(), "wsfs init --home") {
		t.Fatalf("Open before Init: %v", err)
	}
	h, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(home, "state", "workspaces"), filepath.Join(home, "pool"), filepath.Join(home, "mnt")} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			t.Fatalf("%s: %v", d, err)
		}
	}
	if err := h.CreateWorkspace("a"); err != nil {
		t.Fatal(err)
	}
	// A second Init keeps the config and the workspaces.
	h2, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Config() != DefaultConfig() {
		t.Fatalf("config %+v", h2.Config())
	}
	if ws, _ := h2.Workspaces(); !reflect.DeepEqual(ws, []string{"a"}) {
		t.Fatalf("workspaces %v", ws)
	}
}

func TestConfigRelocatesDirs(t *testing.T) {
	home := t.TempDir()
	elsewhere := t.TempDir()
	cfg := `{"state_dir": "s2", "pool_dir": "` + elsewhere + `", "mount_dir": "m", "layout": {"future": 1}}`
	if err := os.WriteFile(filepath.Join(home, ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	if h.StateDir() != filepath.Join(home, "s2") || h.PoolDir() != elsewhere || h.MountPoint("x") != filepath.Join(home, "m", "x") {
		t.Fatalf("dirs: %s %s %s", h.StateDir(), h.PoolDir(), h.MountPoint("x"))
	}
	if h.AgentDir("x") != filepath.Join(home, "s2", "workspaces", "x", "agent") {
		t.Fatalf("agent dir %s", h.AgentDir("x"))
	}
}

func TestInvalidConfig(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ConfigFile), []byte("{nope"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(home)
	if err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("got %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"a", "ws-7", "0.x_y", strings.Repeat("a", 63)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "-a", "A", "a/b", "a b", strings.Repeat("a", 64), ".tmp-x"} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRegistry(t *testing.T) {
	h, err := Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CheckWorkspace("b"); !errors.Is(err, ErrNoWorkspace) {
		t.Fatalf("unknown: %v", err)
	}
	for _, n := range []string{"b", "a"} {
		if err := h.CreateWorkspace(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.CreateWorkspace("a"); !errors.Is(err, ErrWorkspaceExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if ws, _ := h.Workspaces(); !reflect.DeepEqual(ws, []string{"a", "b"}) {
		t.Fatalf("workspaces %v", ws)
	}

	// A held lock (a serving daemon) blocks removal.
	l, err := vfs.Default.Lock(h.LockPath("a"))
	if err != nil {
		t.Fatal(err)
	}
	if locked, err := h.Locked("a"); err != nil || !locked {
		t.Fatalf("Locked: %v %v", locked, err)
	}
	if err := h.RemoveWorkspace("a"); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("remove while locked: %v", err)
	}
	l.Close()
	if err := h.RemoveWorkspace("a"); err != nil {
		t.Fatal(err)
	}
	if ws, _ := h.Workspaces(); !reflect.DeepEqual(ws, []string{"b"}) {
		t.Fatalf("after remove %v", ws)
	}
	if err := h.RemoveWorkspace("a"); !errors.Is(err, ErrNoWorkspace) {
		t.Fatalf("remove twice: %v", err)
	}
}
