package host

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"wsfs/internal/testenv"
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

// TestPrivateModes: Init and CreateWorkspace make STATE, POOL and the
// workspace directory 0700 and leave HOME and MNT reachable (0755);
// EnsurePrivate tightens an older host and reports each change once.
func TestPrivateModes(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	h, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CreateWorkspace("a"); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]os.FileMode{
		home: 0o755, h.MountDir(): 0o755,
		h.StateDir(): 0o700, filepath.Join(h.StateDir(), "workspaces"): 0o700, h.WorkspaceDir("a"): 0o700, h.PoolDir(): 0o700,
	} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %04o", d, st.Mode().Perm(), err, want)
		}
	}
	if ch, err := h.EnsurePrivate(); err != nil || len(ch) != 0 {
		t.Fatalf("EnsurePrivate on a new host: %v %v", ch, err)
	}
	run := filepath.Join(home, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{h.StateDir(), h.PoolDir()} {
		if err := os.Chmod(d, 0o775); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := h.EnsurePrivate()
	if err != nil {
		t.Fatal(err)
	}
	want := []Tightened{{h.StateDir(), 0o775, 0o700}, {h.PoolDir(), 0o775, 0o700}, {run, 0o755, 0o700}}
	if !reflect.DeepEqual(ch, want) {
		t.Fatalf("EnsurePrivate: %+v, want %+v", ch, want)
	}
	if ch, err := h.EnsurePrivate(); err != nil || len(ch) != 0 {
		t.Fatalf("second EnsurePrivate: %v %v", ch, err)
	}
}

// TestCheckMountPoint: mount points inside, equal to or around the host's
// own directories are refused (symbolic links resolved), as is a host
// whose state lies on a wsfs mount; the default mount point and an
// unrelated directory are fine.
func TestCheckMountPoint(t *testing.T) {
	base := t.TempDir()
	h, err := Init(filepath.Join(base, "h"))
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(h.PoolDir(), link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mp     string
		mounts []string
		want   string // "" for accepted
	}{
		{h.MountPoint("a"), nil, ""},
		{filepath.Join(base, "elsewhere"), nil, ""},
		{filepath.Join(h.PoolDir(), "tmp"), nil, "is inside the host directory " + h.PoolDir()},
		{h.StateDir(), nil, "is inside the host directory " + h.StateDir()},
		{filepath.Join(h.StateDir(), "workspaces", "a", "x"), nil, "is inside the host directory"},
		{filepath.Join(link, "tmp"), nil, "is inside the host directory " + h.PoolDir()},
		{filepath.Join(h.Home(), "layout", "x"), nil, "is inside the host directory"},
		{h.Home(), nil, "is inside the mount point"},
		{base, nil, "is inside the mount point"},
		{filepath.Join(base, "elsewhere"), []string{base}, "lies on the wsfs mount " + base},
		{filepath.Join(base, "elsewhere"), []string{filepath.Join(base, "other")}, ""},
	} {
		err := h.CheckMountPoint(c.mp, c.mounts)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s (mounts %v): %v", c.mp, c.mounts, err)
		case c.want != "" && (!errors.Is(err, ErrMountInHost) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s (mounts %v): %v, want ErrMountInHost with %q", c.mp, c.mounts, err, c.want)
		}
	}
}

// TestLockedByDirectory: a daemon's lock on the workspace directory keeps
// counting after its lock file was deleted: Locked says so and
// RemoveWorkspace refuses.
func TestLockedByDirectory(t *testing.T) {
	h, err := Init(filepath.Join(t.TempDir(), "h"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CreateWorkspace("a"); err != nil {
		t.Fatal(err)
	}
	l, err := vfs.LockAll(vfs.Default, h.LockNames("a")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h.LockPath("a")); err != nil {
		t.Fatal(err)
	}
	if locked, err := h.Locked("a"); err != nil || !locked {
		t.Fatalf("Locked after the lock file was deleted: %v %v", locked, err)
	}
	if err := h.RemoveWorkspace("a"); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("RemoveWorkspace while the directory is locked: %v", err)
	}
	l.Close()
	if locked, err := h.Locked("a"); err != nil || locked {
		t.Fatalf("Locked after release: %v %v", locked, err)
	}
}

// TestOwnedByAnotherUser: a host whose directory, config, state or pool
// belongs to another user (neither the one running wsfs nor root) is
// refused with ErrNotOwner, naming the path and its owner, before
// anything is written: that user could swap what wsfs reads and writes
// there (a config pointing the state elsewhere, a symbolic link in place
// of a workspace) and make root's daemon act for them.
func TestOwnedByAnotherUser(t *testing.T) {
	testenv.RequireRoot(t)
	const other = 65534
	t.Run("init in another user's directory", func(t *testing.T) {
		home := filepath.Join(t.TempDir(), "home")
		if err := os.Mkdir(home, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(home, other, other); err != nil {
			t.Fatal(err)
		}
		_, err := Init(home)
		if !errors.Is(err, ErrNotOwner) || !strings.Contains(err.Error(), home) || !strings.Contains(err.Error(), "uid 65534") {
			t.Fatalf("Init in a directory of uid %d: %v; want ErrNotOwner naming it and its owner", other, err)
		}
		if _, err := os.Stat(filepath.Join(home, ConfigFile)); err == nil {
			t.Fatal("the refused Init wrote a config")
		}
	})
	for _, which := range []string{"", ConfigFile, "state", "pool"} {
		t.Run("open, owned by another user: home/"+which, func(t *testing.T) {
			home := t.TempDir()
			if _, err := Init(home); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(home, which)
			if err := os.Chown(p, other, other); err != nil {
				t.Fatal(err)
			}
			_, err := Open(home)
			if !errors.Is(err, ErrNotOwner) || !strings.Contains(err.Error(), filepath.Clean(p)) {
				t.Fatalf("Open with %s owned by uid %d: %v; want ErrNotOwner naming it", p, other, err)
			}
			if err := os.Chown(p, 0, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(home); err != nil {
				t.Fatalf("Open once it is root's again: %v", err)
			}
		})
	}
}
