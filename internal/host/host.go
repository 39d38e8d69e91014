// Package host is the on-disk layout of one wsfs host: the home directory,
// its config file and the registry of workspaces.
//
//	HOME/wsfs.json                   Config (paths relative to HOME)
//	STATE/workspaces/NAME/           one directory per workspace (log, checkpoints, lock)
//	STATE/workspaces/NAME/lock       flock held by the daemon serving NAME (with one on the directory)
//	STATE/workspaces/NAME/agent/     the agent's state (internal/agentstate)
//	POOL/                            content pool shared by every daemon of the host
//	MNT/NAME                         default mount point of NAME
//
// STATE, POOL and MNT default to HOME/state, HOME/pool and HOME/mnt and are
// movable through the config (the dedicated layout mounts filesystems there).
//
// A workspace exists exactly when its directory STATE/workspaces/NAME exists.
//
// Privacy: STATE, POOL, HOME/run and HOME/layout hold the content of every
// workspace, so they are private to the user running wsfs (directories
// DirPerm, files FilePerm, pool objects 0400); HOME and MNT stay
// traversable (0755), because the mount points are reached through them and
// a mount's own permissions are what guards it. EnsurePrivate tightens an
// existing host that is more open than that.
// The package is deliberately small: the CLI, the supervisor, the layout tool
// and the agent-state sidecar all import it.
package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/vfs"
)

// ConfigFile is the name of the host config inside HOME.
const ConfigFile = "wsfs.json"

// Config is the content of HOME/wsfs.json. Relative paths are resolved
// against HOME, so a host directory can be moved as a whole.
//
// Unknown fields are ignored when reading, so older binaries can open a
// config that newer ones extended; Open logs a warning naming each
// (configkeys.go). New sections are added as new fields.
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

// DirPerm and FilePerm are the modes of the host's private directories and
// files: only the user running wsfs may read them.
const (
	DirPerm  = vfs.PrivateDir
	FilePerm = vfs.PrivateFile
)

// publicDirPerm is the mode of HOME and MNT, which lead to the mount points.
const publicDirPerm = 0o755

// ErrNoHost is wrapped by Open when HOME has no config file.
var ErrNoHost = errors.New("no wsfs host")

// ErrNotOwner is wrapped by Open when the host's config cannot be read
// for want of permission: the host is private to the user that runs wsfs
// (root in production), and the caller is another user; and by Init and
// Open when the host's directory, config, state or pool belongs to a user
// other than the caller and root (checkOwned).
var ErrNotOwner = errors.New("host belongs to another user")

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
	// Every directory of the layout is made durably: a power cut after
	// init and create must not take the workspaces (and what was fsynced
	// in them) with STATE/workspaces or STATE.
	if err := vfs.MkdirAllDurable(vfs.Default, abs, publicDirPerm); err != nil {
		return nil, fmt.Errorf("create host directory: %w", err)
	}
	if err := checkOwned(home, abs); err != nil {
		return nil, err
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
	for _, d := range []struct {
		path string
		perm fs.FileMode
	}{{filepath.Join(h.state, "workspaces"), DirPerm}, {h.pool, DirPerm}, {h.mnt, publicDirPerm}} {
		if err := vfs.MkdirAllDurable(vfs.Default, d.path, d.perm); err != nil {
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
	data, err := vfs.ReadFile(vfs.Default, cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s: run `wsfs init --home %s`", ErrNoHost, home, home)
	}
	if errors.Is(err, fs.ErrPermission) {
		owner := "another user"
		if fi, serr := os.Stat(cfgPath); serr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				owner = fmt.Sprintf("uid %d", st.Uid)
			}
		}
		return nil, fmt.Errorf("%w: the host at %s is private to %s (its config %s cannot be read by uid %d): run wsfs as that user (the one that runs its daemons, root in production)",
			ErrNotOwner, home, owner, cfgPath, os.Geteuid())
	}
	if err != nil {
		return nil, fmt.Errorf("read host config %s: %w", cfgPath, err)
	}
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("host config %s is not valid JSON (%v): fix or remove it and run `wsfs init --home %s`", cfgPath, err, home)
	}
	warnUnknownKeys(cfgPath, data)
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
	h := &Host{
		home:   abs,
		config: cfg,
		state:  resolve(cfg.StateDir),
		pool:   resolve(cfg.PoolDir),
		mnt:    resolve(cfg.MountDir),
	}
	if err := checkOwned(home, abs, cfgPath, h.state, h.pool); err != nil {
		return nil, err
	}
	// A config others can read (written by an older wsfs) lets another
	// user get this far: its state is still private, which is the same
	// "another user's host", not a failure of each command on its own.
	if err := unix.Access(h.state, unix.R_OK|unix.X_OK); errors.Is(err, unix.EACCES) {
		owner := "another user"
		if fi, serr := os.Stat(h.state); serr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				owner = fmt.Sprintf("uid %d", st.Uid)
			}
		}
		return nil, fmt.Errorf("%w: the host at %s is private to %s (its state %s cannot be read by uid %d): run wsfs as that user (the one that runs its daemons, root in production)",
			ErrNotOwner, home, owner, h.state, os.Geteuid())
	}
	return h, nil
}

// checkOwned refuses a host (ErrNotOwner) whose directory, config, state
// or pool directory (those of paths that exist) belongs to a user other
// than the one running wsfs and root: that user could replace what wsfs
// reads and writes there (a config pointing the state elsewhere, a
// symbolic link in place of a workspace directory) and so make wsfs, root
// in production, act for them. Mount points are not checked: they may be
// any user's directories.
func checkOwned(home string, paths ...string) error {
	me := uint32(os.Geteuid())
	for _, p := range paths {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("host %s: %w", home, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid == me || st.Uid == 0 {
			continue
		}
		nor := " (nor root)"
		if me == 0 {
			nor = ""
		}
		return fmt.Errorf("%w: %s is owned by uid %d, not by uid %d that runs wsfs%s, so that user could replace what wsfs keeps there: "+
			"give it to uid %d (chown), or run wsfs as uid %d", ErrNotOwner, p, st.Uid, me, nor, me, st.Uid)
	}
	return nil
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

// nameRE is the whole grammar of a workspace name; ValidateName (name.go)
// says which part of it a name breaks.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// WorkspaceDir is STATE/workspaces/NAME (whether or not it exists). The name
// must be valid.
func (h *Host) WorkspaceDir(name string) string {
	return filepath.Join(h.state, "workspaces", name)
}

// LockPath is the flock file held by the daemon serving NAME. The daemon
// also holds a flock on the workspace directory itself, which is what
// keeps a second daemon out when the file has been deleted (see LockNames).
func (h *Host) LockPath(name string) string {
	return filepath.Join(h.WorkspaceDir(name), "lock")
}

// LockNames are what the daemon serving NAME locks, in order (with
// vfs.LockAll): the workspace directory, then the lock file.
func (h *Host) LockNames(name string) []string {
	return []string{h.WorkspaceDir(name), h.LockPath(name)}
}

// AgentDir is STATE/workspaces/NAME/agent, the agent's state directory.
func (h *Host) AgentDir(name string) string { return AgentDirIn(h.WorkspaceDir(name)) }

// AgentDirIn is the agent's state directory of the workspace whose
// directory is wsDir (for code that has the directory, not the host).
func AgentDirIn(wsDir string) string { return filepath.Join(wsDir, "agent") }

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
	if err := h.EnsureIdentity(); err != nil { // identity.go: refuses a state directory the pool does not know
		return err
	}
	// Durably, also STATE/workspaces when this is the first workspace.
	if err := vfs.MkdirAllDurable(vfs.Default, dir, DirPerm); err != nil {
		return fmt.Errorf("create workspace %s: %w", name, err)
	}
	return h.RegisterWorkspace(name) // identity.go: after the directory, so GC never misses it
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
	l, err := vfs.LockAll(vfs.Default, h.LockNames(name)...)
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
	return h.RemoveWorkspaceAfter(name, nil)
}

// RemoveWorkspaceAfter is RemoveWorkspace that first runs first (when not
// nil) under the same locks, and removes nothing if it fails: for work
// that must be done with no daemon serving the workspace, before it goes
// (`wsfs rm --remote` deletes its remote copy there).
func (h *Host) RemoveWorkspaceAfter(name string, first func() error) error {
	if err := h.CheckWorkspace(name); err != nil {
		return err
	}
	l, err := vfs.LockAll(vfs.Default, h.LockNames(name)...)
	if err != nil {
		return fmt.Errorf("remove workspace %s: %w", name, err)
	}
	defer l.Close()
	if first != nil {
		if err := first(); err != nil {
			return err
		}
	}
	// Rename first so the removal is atomic for readers of the registry.
	dir := h.WorkspaceDir(name)
	trash := h.RemovingDir(name)
	if err := vfs.Default.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove workspace %s: %w", name, err)
	}
	if err := vfs.Default.Rename(dir, trash); err != nil {
		return fmt.Errorf("remove workspace %s: %w", name, err)
	}
	if err := h.unregisterWorkspace(name); err != nil { // identity.go: only once the directory is away
		return err
	}
	if err := vfs.Default.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove workspace %s: %w", name, err)
	}
	return vfs.SyncDir(vfs.Default, filepath.Dir(dir))
}

// RemoveInterrupted removes what an interrupted `wsfs rm` or `wsfs fork`
// left in STATE/workspaces: a RemovingDir (.tmp-rm-NAME, the directory of
// a workspace whose removal stopped part-way: its whole log) and a fork's
// temp (.tmp-fork-NEW-*, a new workspace before its rename). A leftover
// that its command still holds is kept: a flock on the directory (rm
// holds the workspace's lock, which moved with the directory; a fork
// locks its temp while it builds it); so is a fork temp modified within
// minAge (a fork between its mkdir and its lock). It returns the paths
// removed and the bytes they held. Nothing else refers to a leftover: a
// removal renamed the directory away before it unregistered the name, and
// a fork's temp is not a workspace until its rename.
func (h *Host) RemoveInterrupted(minAge time.Duration) (removed []string, bytes int64, err error) {
	dir := filepath.Join(h.state, "workspaces")
	names, err := vfs.Default.List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list workspaces: %w", err)
	}
	for _, n := range names {
		isRm := strings.HasPrefix(n, vfs.TempPrefix+"rm-")
		if !isRm && !strings.HasPrefix(n, vfs.TempPrefix+"fork-") {
			continue
		}
		p := filepath.Join(dir, n)
		st, err := os.Lstat(p)
		if err != nil || !st.IsDir() || (!isRm && time.Since(st.ModTime()) < minAge) {
			continue
		}
		l, err := vfs.Default.Lock(p)
		if err != nil {
			continue // held: its command still runs (or gone meanwhile)
		}
		if name := strings.TrimPrefix(n, vfs.TempPrefix+"rm-"); isRm && ValidateName(name) == nil {
			// As the removal would have: no longer registered, unless a
			// workspace of that name was made since (CheckRegistry
			// accepts the registered name only while this exists).
			if _, err := os.Lstat(h.WorkspaceDir(name)); errors.Is(err, fs.ErrNotExist) {
				if err := h.unregisterWorkspace(name); err != nil {
					l.Close()
					return removed, bytes, err
				}
			}
		}
		var size int64
		filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					size += fi.Size()
				}
			}
			return nil
		})
		err = vfs.Default.RemoveAll(p)
		l.Close()
		if err != nil {
			return removed, bytes, fmt.Errorf("remove %s (left by an interrupted wsfs rm or fork): %w", p, err)
		}
		removed = append(removed, p)
		bytes += size
	}
	if len(removed) > 0 {
		if err := vfs.SyncDir(vfs.Default, dir); err != nil {
			return removed, bytes, err
		}
	}
	return removed, bytes, nil
}

// PrivateDirs are the host's directories that must be private to the user
// running wsfs (DirPerm): STATE, POOL, HOME/run and HOME/layout. Everything
// a workspace stores lies below one of them, so with these closed no other
// user can reach a segment, checkpoint, pool object, replica or agent
// state database, whatever the modes of the files (older versions created
// them world-readable).
func (h *Host) PrivateDirs() []string {
	return []string{h.state, h.pool, filepath.Join(h.home, "run"), filepath.Join(h.home, "layout")}
}

// Tightened is a directory EnsurePrivate made private.
type Tightened struct {
	Path     string
	Old, New fs.FileMode // permission bits
}

// EnsurePrivate closes each existing PrivateDirs entry that other users
// could enter or list: group and other permission bits are removed
// (0755 becomes 0700), and each change is reported so that the caller logs
// it. It tightens rather than refuses: wsfs never needs those bits, a host
// created by an older version has them, and refusing would stop every
// daemon of such a host at the upgrade. Missing directories are skipped.
func (h *Host) EnsurePrivate() ([]Tightened, error) {
	var out []Tightened
	for _, d := range h.PrivateDirs() {
		st, err := os.Stat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("check host directory: %w", err)
		}
		if !st.IsDir() {
			continue
		}
		old := st.Mode().Perm()
		if old&0o077 == 0 {
			continue
		}
		nw := old &^ 0o077
		if err := os.Chmod(d, nw|(st.Mode()&(fs.ModeSticky|fs.ModeSetgid))); err != nil {
			return out, fmt.Errorf("make host directory %s private (it is %04o, readable by other users): %w", d, old, err)
		}
		out = append(out, Tightened{Path: d, Old: old, New: nw})
	}
	return out, nil
}

// ErrMountInHost is wrapped by CheckMountPoint's refusals.
var ErrMountInHost = errors.New("mount point overlaps the host's own directories")

// CheckMountPoint refuses a mount point mp that lies inside one of the
// host's own directories (PrivateDirs: STATE, POOL, HOME/run,
// HOME/layout) or contains one: the daemon would write its state or pool
// through its own mount and deadlock. Symbolic links are resolved on both
// sides. mounts are the mount points of other live wsfs mounts: a STATE or
// POOL reached through one of them is refused too (two daemons writing
// through each other's mounts).
func (h *Host) CheckMountPoint(mp string, mounts []string) error {
	rmp := resolve(mp)
	for _, d := range h.PrivateDirs() {
		rd := resolve(d)
		switch {
		case within(rmp, rd):
			return fmt.Errorf("%w: %s is inside the host directory %s; the daemon would write into its own mount: use a mount point outside it, such as the default %s", ErrMountInHost, mp, d, h.MountPoint("NAME"))
		case within(rd, rmp):
			return fmt.Errorf("%w: the host directory %s is inside the mount point %s; the daemon would write into its own mount: use a mount point outside it, such as the default %s", ErrMountInHost, d, mp, h.MountPoint("NAME"))
		}
	}
	return h.CheckNotOnWsfs(mounts)
}

// CheckNotOnWsfs refuses a host whose STATE or POOL lies on one of the
// wsfs mounts mounts (CheckMountPoint's second half, for the commands
// that make a host or a workspace: a host there could never be mounted).
// mounts come from the kernel's mount table and are never looked up
// (mountPath).
func (h *Host) CheckNotOnWsfs(mounts []string) error {
	for _, m := range mounts {
		rm := mountPath(m)
		for _, d := range []string{h.state, h.pool} {
			if within(resolve(d), rm) {
				return fmt.Errorf("%w: the host directory %s lies on the wsfs mount %s; state and pool must be on a native filesystem", ErrMountInHost, d, m)
			}
		}
	}
	return nil
}

// CheckHomeNotOnWsfs refuses a HOME that lies on one of the wsfs mounts
// mounts, before a host is made there.
func CheckHomeNotOnWsfs(home string, mounts []string) error {
	rh := resolve(home)
	for _, m := range mounts {
		if within(rh, mountPath(m)) {
			return fmt.Errorf("%w: the host directory %s lies on the wsfs mount %s; a host's state and pool must be on a native filesystem (its daemons would write through a wsfs mount, and 'wsfs mount' refuses such a host)", ErrMountInHost, home, m)
		}
	}
	return nil
}

// mountPath is mount point m of the kernel's mount table, as it is
// compared with resolved paths. The table's mount points are resolved
// already (the kernel records the path of the mounted-on directory), so m
// is used as it is and never stat'ed: a stat of a FUSE mount point asks
// its daemon, and blocks for as long as that daemon does not answer
// (stopped, stuck, or another host's and overloaded).
func mountPath(m string) string { return filepath.Clean(m) }

// resolve makes p absolute and resolves symbolic links in its longest
// existing prefix (a path not created yet resolves as far as it exists).
func resolve(p string) string {
	p, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// within reports whether path p is dir or lies below it (both clean and
// absolute).
func within(p, dir string) bool {
	if p == dir {
		return true
	}
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
