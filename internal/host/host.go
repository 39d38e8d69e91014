// Package host is the on-disk layout of one wsfs host: the home directory,
// its config file and the registry of workspaces.
//
//	HOME/wsfs.json                   Config (paths relative to HOME)
//	STATE/workspaces/NAME/           one directory per workspace (log, checkpoints, lock)
//	STATE/workspaces/NAME/lock       flock held by the daemon serving NAME
//	STATE/workspaces/NAME/agent/     the agent's state (internal/agentstate)
//	POOL/                            content pool shared by every daemon of the host
//	MNT/NAME                         default mount point of NAME
//
// STATE, POOL and MNT default to HOME/state, HOME/pool and HOME/mnt and are
// movable through the config (the dedicated layout mounts filesystems there).
//
// A workspace exists exactly when its directory STATE/workspaces/NAME exists.
// The package is deliberately small: the CLI, the supervisor, the layout tool
// and the agent-state sidecar all import it.
package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"regexp"

	"wsfs/internal/vfs"
)

// ConfigFile is the name of the host config inside HOME.
const ConfigFile = "wsfs.json"

// Config is the content of HOME/wsfs.json. Relative paths are resolved
// against HOME, so a host directory can be moved as a whole.
//
// Unknown fields are ignored when reading, so older binaries can open a
// config that newer ones extended. New sections are added as new fields.
type Config struct {
	// StateDir holds the per-workspace logs, checkpoints, locks and agent
	// state. Default "state".
	StateDir string `json:"state_dir"`
	// PoolDir holds the content pool shared by every workspace of the host.
	// Default "pool".
	PoolDir string `json:"pool_dir"`
	// MountDir holds the default mount points, one per workspace.
	// Default "mnt".
	MountDir string `json:"mount_dir"`
}

// DefaultConfig is the config Init writes.
func DefaultConfig() Config {
	return Config{StateDir: "state", PoolDir: "pool", MountDir: "mnt"}
}

// ErrNoHost is wrapped by Open when HOME has no config file.
var ErrNoHost = errors.New("no wsfs host")

// ErrNoWorkspace is wrapped by the errors naming an unknown workspace.
var ErrNoWorkspace = errors.New("no such workspace")

// ErrWorkspaceExists is wrapped by CreateWorkspace when the name is taken.
var ErrWorkspaceExists = errors.New("workspace exists")

// Host is an opened host directory. It holds no open files; it is safe for
// concurrent use.
type Host struct {
	home   string // absolute
	config Config
	state  string // absolute STATE
	pool   string // absolute POOL
	mnt    string // absolute MNT
}

// Init creates the host layout under home (and home itself) and writes the
// default config if none exists. It is idempotent: on an existing host it
// keeps the config and only creates missing directories.
func Init(home string) (*Host, error) {
	abs, err := filepath.Abs(home)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", home, err)
	}
	// Every directory of the layout is made durably (vfs.MkdirAllSync):
	// a power cut after init and create must not take the workspaces
	// (and what was fsynced in them) with STATE/workspaces or STATE.
	if err := vfs.MkdirAllSync(vfs.Default, abs, 0o755); err != nil {
		return nil, fmt.Errorf("create host directory: %w", err)
	}
	cfgPath := filepath.Join(abs, ConfigFile)
	if _, err := vfs.Default.Stat(cfgPath); errors.Is(err, fs.ErrNotExist) {
		data, err := json.MarshalIndent(DefaultConfig(), "", "  ")
		if err != nil {
			return nil, err
		}
		data = append(data, '\n')
		if err := vfs.Publish(vfs.Default, cfgPath, true, func(f vfs.File) error {
			_, err := f.Write(data)
			return err
		}); err != nil {
			return nil, fmt.Errorf("write host config: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("host config %s: %w", cfgPath, err)
	}
	h, err := Open(abs)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(h.state, "workspaces"), h.pool, h.mnt} {
		if err := vfs.MkdirAllSync(vfs.Default, d, 0o755); err != nil {
			return nil, fmt.Errorf("create host directory: %w", err)
		}
	}
	return h, nil
}

// Open reads the config of the host at home. It does not create anything.
func Open(home string) (*Host, error) {
	abs, err := filepath.Abs(home)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", home, err)
	}
	cfgPath := filepath.Join(abs, ConfigFile)
	f, err := vfs.Default.Open(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s: run `wsfs init --home %s`", ErrNoHost, home, home)
	}
	if err != nil {
		return nil, fmt.Errorf("read host config: %w", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read host config %s: %w", cfgPath, err)
	}
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("host config %s is not valid JSON (%v): fix or remove it and run `wsfs init --home %s`", cfgPath, err, home)
	}
	def := DefaultConfig()
	for _, p := range []struct {
		v   *string
		def string
	}{{&cfg.StateDir, def.StateDir}, {&cfg.PoolDir, def.PoolDir}, {&cfg.MountDir, def.MountDir}} {
		if *p.v == "" {
			*p.v = p.def
		}
	}
	resolve := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(abs, p)
	}
	return &Host{
		home:   abs,
		config: cfg,
		state:  resolve(cfg.StateDir),
		pool:   resolve(cfg.PoolDir),
		mnt:    resolve(cfg.MountDir),
	}, nil
}

// Home is the absolute host directory.
func (h *Host) Home() string { return h.home }

// Config is the config as read (with defaults filled in).
func (h *Host) Config() Config { return h.config }

// StateDir is the absolute STATE directory.
func (h *Host) StateDir() string { return h.state }

// PoolDir is the absolute POOL directory.
func (h *Host) PoolDir() string { return h.pool }

// MountDir is the absolute directory holding the default mount points.
func (h *Host) MountDir() string { return h.mnt }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateName checks a workspace name: 1 to 63 characters of [a-z0-9._-],
// starting with a letter or digit (so it is a safe path element and never
// "." or "..").
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("invalid workspace name %q: use 1-63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit", name)
	}
	return nil
}

// WorkspaceDir is STATE/workspaces/NAME (whether or not it exists). The name
// must be valid.
func (h *Host) WorkspaceDir(name string) string {
	return filepath.Join(h.state, "workspaces", name)
}

// LockPath is the flock file held by the daemon serving NAME.
func (h *Host) LockPath(name string) string {
	return filepath.Join(h.WorkspaceDir(name), "lock")
}

// AgentDir is STATE/workspaces/NAME/agent, the agent's state directory.
func (h *Host) AgentDir(name string) string {
	return filepath.Join(h.WorkspaceDir(name), "agent")
}

// MountPoint is the default mount point MNT/NAME.
func (h *Host) MountPoint(name string) string {
	return filepath.Join(h.mnt, name)
}

// CreateWorkspace registers a new, empty workspace. The engine fills the
// directory when the workspace is first opened.
func (h *Host) CreateWorkspace(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	dir := h.WorkspaceDir(name)
	if _, err := vfs.Default.Stat(dir); err == nil {
		return fmt.Errorf("%w: %s (at %s)", ErrWorkspaceExists, name, dir)
	}
	// Durably, also STATE/workspaces when this is the first workspace.
	if err := vfs.MkdirAllSync(vfs.Default, dir, 0o755); err != nil {
		return fmt.Errorf("create workspace %s: %w", name, err)
	}
	return nil
}

// CheckWorkspace returns an error wrapping ErrNoWorkspace unless NAME is a
// valid, registered workspace.
func (h *Host) CheckWorkspace(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	st, err := vfs.Default.Stat(h.WorkspaceDir(name))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w %q on host %s: create it with `wsfs create %s`", ErrNoWorkspace, name, h.home, name)
	}
	if err != nil {
		return fmt.Errorf("workspace %s: %w", name, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("workspace %s: %s is not a directory", name, h.WorkspaceDir(name))
	}
	return nil
}

// Workspaces lists the registered workspaces, sorted by name.
func (h *Host) Workspaces() ([]string, error) {
	names, err := vfs.Default.List(filepath.Join(h.state, "workspaces"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	out := names[:0]
	for _, n := range names {
		if ValidateName(n) != nil {
			continue // temp files and foreign entries
		}
		if st, err := vfs.Default.Stat(h.WorkspaceDir(n)); err == nil && st.IsDir() {
			out = append(out, n)
		}
	}
	return out, nil
}

// Locked reports whether a daemon currently holds NAME's lock.
func (h *Host) Locked(name string) (bool, error) {
	if err := h.CheckWorkspace(name); err != nil {
		return false, err
	}
	l, err := vfs.Default.Lock(h.LockPath(name))
	if errors.Is(err, vfs.ErrLocked) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, l.Close()
}

// RemoveWorkspace deletes NAME and everything in its state directory. It
// refuses (with an error wrapping vfs.ErrLocked) while a daemon serves it.
// Pool objects it referenced stay until the pool's GC removes them.
//
// The lock is held while the directory is removed, so no daemon can open the
// workspace half-deleted; a daemon that starts afterwards finds it unknown.
func (h *Host) RemoveWorkspace(name string) error {
	if err := h.CheckWorkspace(name); err != nil {
		return err
	}
	l, err := vfs.Default.Lock(h.LockPath(name))
	if err != nil {
		return fmt.Errorf("remove workspace %s: %w", name, err)
	}
	defer l.Close()
	// Rename first so the removal is atomic for readers of the registry.
	dir := h.WorkspaceDir(name)
	trash := filepath.Join(filepath.Dir(dir), vfs.TempPrefix+"rm-"+name)
	if err := vfs.Default.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove workspace %s: %w", name, err)
	}
	if err := vfs.Default.Rename(dir, trash); err != nil {
		return fmt.Errorf("remove workspace %s: %w", name, err)
	}
	if err := vfs.Default.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove workspace %s: %w", name, err)
	}
	return vfs.SyncDir(vfs.Default, filepath.Dir(dir))
}
