package host

// Identity markers and the pool's registry of workspaces.
//
// GC may remove a pool object only if it knows every workspace that uses
// the pool. A state directory that is missing, empty, or the bare
// directory under an unmounted filesystem looks exactly like a host with
// no workspaces, so the listing of STATE/workspaces alone cannot be
// trusted. These files make the difference visible:
//
//	STATE/wsfs-id                          {"host_id": H, "pool_id": P}: this state directory is host H's, using pool P
//	POOL/wsfs-id                           {"pool_id": P}
//	POOL/hosts/H/host.json                 {"state_dir": STATE, "home": HOME}: host H uses this pool
//	POOL/hosts/H/workspaces/NAME           (empty) NAME is a workspace of host H
//
// Invariants, kept by the order of the writes (each durable before the
// next):
//
//   - STATE/wsfs-id exists only if POOL/hosts/H/host.json was written
//     before it, and POOL/wsfs-id before both.
//   - Every workspace directory STATE/workspaces/NAME of a host with
//     markers was registered in POOL/hosts/H/workspaces/NAME right after
//     it was created (a crash in between leaves an unregistered directory,
//     which CheckRegistry reports so that the caller marks it anyway and
//     registers it); a registration is removed only after the directory
//     was renamed away for removal.
//
// So a registered workspace whose directory is missing (and not being
// removed) means the state directory is not the one the pool knows: GC
// refuses. EnsureIdentity (run by `wsfs init`) writes the markers of a
// host that has none, and refuses where that could bless the wrong
// directory (see its doc).

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"wsfs/internal/vfs"
)

// Marker and registry names.
const (
	IDFile        = "wsfs-id"    // in STATE and in POOL
	poolHostsDir  = "hosts"      // POOL/hosts
	hostRecord    = "host.json"  // POOL/hosts/H/host.json
	registryDir   = "workspaces" // POOL/hosts/H/workspaces
	markerVersion = 1
)

// ErrIdentity is wrapped by every error that says the state or pool
// directory is not the one its markers say (or has none).
var ErrIdentity = errors.New("wsfs identity check failed")

// stateMarker is STATE/wsfs-id.
type stateMarker struct {
	Version int    `json:"version"`
	HostID  string `json:"host_id"`
	PoolID  string `json:"pool_id"`
}

// poolMarker is POOL/wsfs-id.
type poolMarker struct {
	Version int    `json:"version"`
	PoolID  string `json:"pool_id"`
}

// PoolHost is one host registered in a pool.
type PoolHost struct {
	ID       string `json:"-"`
	StateDir string `json:"state_dir"` // absolute
	Home     string `json:"home"`      // absolute, informational
	// Workspaces are the registered names, sorted.
	Workspaces []string `json:"-"`
}

// Identity is what a host's markers say.
type Identity struct {
	HostID, PoolID string
}

func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new host id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// readJSON reads a small JSON file; a missing file is (false, nil).
func readJSON(path string, v any) (bool, error) {
	data, err := vfs.ReadFile(vfs.Default, path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%w: %s is not valid JSON (%v)", ErrIdentity, path, err)
	}
	return true, nil
}

// writeJSON publishes v durably at path, creating and syncing missing
// parent directories up to stop.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	return vfs.Publish(vfs.Default, path, true, func(f vfs.File) error {
		_, err := f.Write(data)
		return err
	})
}

func (h *Host) stateMarkerPath() string { return filepath.Join(h.state, IDFile) }
func (h *Host) poolMarkerPath() string  { return filepath.Join(h.pool, IDFile) }
func (h *Host) hostDir(id string) string {
	return filepath.Join(h.pool, poolHostsDir, id)
}

// EnsureIdentity makes sure the host's markers exist and agree; `wsfs init`
// calls it (through Init). On a host that has them it only checks them
// (CheckIdentity). On a host without them (new, or made by a wsfs from
// before the markers) it writes them and registers every workspace
// directory present — unless that could bless the wrong directory:
//
//   - POOL has a marker but STATE has none, and the pool records a host
//     whose state directory is this STATE: the real state is elsewhere
//     (an unmounted filesystem?). Refused.
//   - STATE has a marker but POOL has none, or another pool id: the pool
//     directory is not the one this host used. Refused.
//   - Neither has a marker, STATE/workspaces holds no workspace and the
//     pool holds objects: the state is probably missing. Refused (with
//     what to do).
func (h *Host) EnsureIdentity() error {
	var sm stateMarker
	haveState, err := readJSON(h.stateMarkerPath(), &sm)
	if err != nil {
		return err
	}
	if haveState {
		_, err := h.CheckIdentity()
		return err
	}
	var pm poolMarker
	havePool, err := readJSON(h.poolMarkerPath(), &pm)
	if err != nil {
		return err
	}
	names, err := h.Workspaces()
	if err != nil {
		return err
	}
	if havePool {
		hosts, err := PoolHosts(h.pool)
		if err != nil {
			return err
		}
		for _, ph := range hosts {
			if ph.StateDir == h.state {
				return fmt.Errorf("%w: state directory %s has no %s marker, but pool %s records it as the state of host %s "+
					"(with %d workspaces): is its filesystem mounted? (`wsfs layout status`); "+
					"if that state is really gone, remove %s and run `wsfs init` again",
					ErrIdentity, h.state, IDFile, h.pool, ph.ID, len(ph.Workspaces), h.hostDir(ph.ID))
			}
		}
	} else {
		if len(names) == 0 {
			objs, err := poolHasObjects(h.pool)
			if err != nil {
				return err
			}
			if objs {
				return fmt.Errorf("%w: pool %s holds objects but state directory %s holds no workspace and neither has a %s marker: "+
					"is the state filesystem mounted? (`wsfs layout status`); if this host really has no workspaces "+
					"and the objects are garbage, remove %s/objects and run `wsfs init` again",
					ErrIdentity, h.pool, h.state, IDFile, h.pool)
			}
		}
		id, err := newID()
		if err != nil {
			return err
		}
		pm = poolMarker{Version: markerVersion, PoolID: id}
		if err := vfs.Default.MkdirAll(h.pool, DirPerm); err != nil {
			return err
		}
		if err := writeJSON(h.poolMarkerPath(), pm); err != nil {
			return fmt.Errorf("write pool marker: %w", err)
		}
	}
	hostID, err := newID()
	if err != nil {
		return err
	}
	hd := h.hostDir(hostID)
	if err := vfs.Default.MkdirAll(filepath.Join(h.pool, poolHostsDir), DirPerm); err != nil {
		return err
	}
	if err := vfs.SyncDir(vfs.Default, h.pool); err != nil {
		return err
	}
	if err := mkdirPrivate(hd); err != nil {
		return fmt.Errorf("register host in pool: %w", err)
	}
	if err := mkdirPrivate(filepath.Join(hd, registryDir)); err != nil {
		return fmt.Errorf("register host in pool: %w", err)
	}
	for _, n := range names {
		if err := h.registerIn(hostID, n); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(hd, hostRecord), PoolHost{StateDir: h.state, Home: h.home}); err != nil {
		return fmt.Errorf("register host in pool: %w", err)
	}
	if err := writeJSON(h.stateMarkerPath(), stateMarker{Version: markerVersion, HostID: hostID, PoolID: pm.PoolID}); err != nil {
		return fmt.Errorf("write state marker: %w", err)
	}
	return nil
}

// EnsureIdentityIfUsed is EnsureIdentity for a host that has markers, a
// workspace or pool objects; a host with none is left without markers
// (they are written with its first workspace), so that its state and pool
// directories stay empty for `wsfs layout create` to mount over. `wsfs
// init` calls it: that is the one-time step that gives a host made by an
// older wsfs its markers.
func (h *Host) EnsureIdentityIfUsed() error {
	if id, err := h.identity(); err != nil || id != "" {
		if err != nil {
			return err
		}
		_, err = h.CheckIdentity()
		return err
	}
	names, err := h.Workspaces()
	if err != nil {
		return err
	}
	var pm poolMarker
	havePool, err := readJSON(h.poolMarkerPath(), &pm)
	if err != nil {
		return err
	}
	if len(names) == 0 && !havePool {
		objs, err := poolHasObjects(h.pool)
		if err != nil || !objs {
			return err
		}
		// Objects but no workspace: EnsureIdentity says what is wrong.
	}
	return h.EnsureIdentity()
}

// poolHasObjects reports whether POOL/objects holds any object file.
func poolHasObjects(pool string) (bool, error) {
	objs := filepath.Join(pool, "objects")
	fans, err := vfs.Default.List(objs)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, f := range fans {
		names, err := vfs.Default.List(filepath.Join(objs, f))
		if err != nil {
			continue // a stray file, not a fan-out directory
		}
		if len(names) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// CheckIdentity checks that STATE and POOL carry markers that agree and
// that the pool records this host with this state directory. Every
// failure wraps ErrIdentity and says what is wrong and what to do.
func (h *Host) CheckIdentity() (Identity, error) {
	var sm stateMarker
	ok, err := readJSON(h.stateMarkerPath(), &sm)
	if err != nil {
		return Identity{}, err
	}
	if !ok {
		var pm poolMarker
		if havePool, _ := readJSON(h.poolMarkerPath(), &pm); havePool {
			return Identity{}, fmt.Errorf("%w: state directory %s has no %s marker although pool %s has one: "+
				"is its filesystem mounted? (`wsfs layout status`)", ErrIdentity, h.state, IDFile, h.pool)
		}
		return Identity{}, fmt.Errorf("%w: state directory %s has no %s marker: is its filesystem mounted? (`wsfs layout status`); "+
			"a host made by an older wsfs gets its markers from one `wsfs init --home %s`", ErrIdentity, h.state, IDFile, h.home)
	}
	var pm poolMarker
	ok, err = readJSON(h.poolMarkerPath(), &pm)
	if err != nil {
		return Identity{}, err
	}
	if !ok {
		return Identity{}, fmt.Errorf("%w: pool directory %s has no %s marker, but state %s says it uses pool %s: "+
			"is the pool's filesystem mounted? (`wsfs layout status`)", ErrIdentity, h.pool, IDFile, h.state, sm.PoolID)
	}
	if pm.PoolID != sm.PoolID {
		return Identity{}, fmt.Errorf("%w: state %s belongs to pool %s but %s is pool %s: the config points at the wrong pool directory",
			ErrIdentity, h.state, sm.PoolID, h.pool, pm.PoolID)
	}
	var ph PoolHost
	ok, err = readJSON(filepath.Join(h.hostDir(sm.HostID), hostRecord), &ph)
	if err != nil {
		return Identity{}, err
	}
	if !ok {
		return Identity{}, fmt.Errorf("%w: pool %s does not record host %s (state %s): %s is missing",
			ErrIdentity, h.pool, sm.HostID, h.state, filepath.Join(h.hostDir(sm.HostID), hostRecord))
	}
	if ph.StateDir != h.state {
		return Identity{}, fmt.Errorf("%w: pool %s records host %s with state directory %s, but its marker is in %s: "+
			"moved the state directory? update %s", ErrIdentity, h.pool, sm.HostID, ph.StateDir, h.state,
			filepath.Join(h.hostDir(sm.HostID), hostRecord))
	}
	return Identity{HostID: sm.HostID, PoolID: sm.PoolID}, nil
}

// PoolHosts lists the hosts registered in the pool directory pool, each
// with its registered workspaces.
func PoolHosts(pool string) ([]PoolHost, error) {
	dir := filepath.Join(pool, poolHostsDir)
	ids, err := vfs.Default.List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []PoolHost
	for _, id := range ids {
		var ph PoolHost
		ok, err := readJSON(filepath.Join(dir, id, hostRecord), &ph)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // being registered (EnsureIdentity writes host.json last)
		}
		ph.ID = id
		names, err := vfs.Default.List(filepath.Join(dir, id, registryDir))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list workspaces of host %s: %w", id, err)
		}
		for _, n := range names {
			if ValidateName(n) == nil {
				ph.Workspaces = append(ph.Workspaces, n)
			}
		}
		slices.Sort(ph.Workspaces)
		out = append(out, ph)
	}
	return out, nil
}

// ReadIdentity reads the state marker of the state directory stateDir.
func ReadIdentity(stateDir string) (Identity, bool, error) {
	var sm stateMarker
	ok, err := readJSON(filepath.Join(stateDir, IDFile), &sm)
	return Identity{HostID: sm.HostID, PoolID: sm.PoolID}, ok, err
}

// identity returns the host's id if it has markers ("" if not).
func (h *Host) identity() (string, error) {
	var sm stateMarker
	ok, err := readJSON(h.stateMarkerPath(), &sm)
	if err != nil || !ok {
		return "", err
	}
	return sm.HostID, nil
}

// MountName is the name workspace name's mounts carry (their source shows
// as "wsfs:" + MountName in the mount table): the workspace name, and after
// an "@" the first 12 digits of the host's id when it has one, so that
// finding this host's mounts of a workspace never matches a workspace of
// the same name on another host directory of the machine.
func (h *Host) MountName(name string) string {
	id, err := h.identity()
	if err != nil || len(id) < 12 {
		return name
	}
	return name + "@" + id[:12]
}

// registerIn registers workspace name for host id, durably.
func (h *Host) registerIn(id, name string) error {
	dir := filepath.Join(h.hostDir(id), registryDir)
	path := filepath.Join(dir, name)
	f, err := vfs.Default.CreateExcl(path, FilePerm)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("register workspace %s in %s: %w", name, dir, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return vfs.SyncDir(vfs.Default, dir)
}

// RegisterWorkspace records NAME in the pool's registry of this host. A
// host without markers (made by an older wsfs, until `wsfs init`) has no
// registry: nothing is done.
func (h *Host) RegisterWorkspace(name string) error {
	id, err := h.identity()
	if err != nil || id == "" {
		return err
	}
	return h.registerIn(id, name)
}

// unregisterWorkspace removes NAME from the pool's registry of this host.
func (h *Host) unregisterWorkspace(name string) error {
	id, err := h.identity()
	if err != nil || id == "" {
		return err
	}
	dir := filepath.Join(h.hostDir(id), registryDir)
	if err := vfs.Default.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unregister workspace %s: %w", name, err)
	}
	return vfs.SyncDir(vfs.Default, dir)
}

// RemovingDir is where RemoveWorkspace moves NAME's directory before it
// deletes it; a registered workspace whose directory is missing but whose
// RemovingDir exists is being (or was being, at a crash) removed.
func (h *Host) RemovingDir(name string) string {
	return filepath.Join(h.state, "workspaces", vfs.TempPrefix+"rm-"+name)
}

// RegistryProblem is one disagreement between a host's registry in the
// pool and its state directory.
type RegistryProblem struct {
	Name string
	// Unregistered: the directory exists but the registry lacks it (a
	// crash between creation and registration, or a workspace created by
	// an older wsfs). The caller must treat it as a workspace.
	// Otherwise it is registered and its directory is missing.
	Unregistered bool
}

// CheckRegistry compares the pool's registry of host ph with the
// workspace directories in ph.StateDir. It returns the directories to
// mark (every present one) and an error wrapping ErrIdentity if a
// registered workspace's directory is missing (and not being removed).
// Unregistered directories are registered (if reg is true) and listed.
func CheckRegistry(ph PoolHost, pool string, reg bool) (present []string, unregistered []string, err error) {
	hs := &Host{state: ph.StateDir, pool: pool, home: ph.Home}
	present, err = hs.Workspaces()
	if err != nil {
		return nil, nil, err
	}
	for _, n := range ph.Workspaces {
		if slices.Contains(present, n) {
			continue
		}
		if _, err := vfs.Default.Stat(hs.RemovingDir(n)); err == nil {
			continue
		}
		// ph may be older than the directory listing: a `wsfs rm` that
		// finished in between moved the directory away, unregistered it
		// and deleted it. Only a name still registered now is missing.
		if _, err := vfs.Default.Stat(filepath.Join(pool, poolHostsDir, ph.ID, registryDir, n)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return nil, nil, fmt.Errorf("%w: workspace %s is registered in %s but %s does not exist: "+
			"is the state filesystem of host %s mounted? (`wsfs layout status`); if the workspace was deleted by hand, "+
			"remove %s", ErrIdentity, n, filepath.Join(pool, poolHostsDir, ph.ID, registryDir), hs.WorkspaceDir(n), ph.ID,
			filepath.Join(pool, poolHostsDir, ph.ID, registryDir, n))
	}
	for _, n := range present {
		if slices.Contains(ph.Workspaces, n) {
			continue
		}
		unregistered = append(unregistered, n)
		if reg {
			if err := hs.registerIn(ph.ID, n); err != nil {
				return nil, nil, err
			}
		}
	}
	return present, unregistered, nil
}

// mkdirPrivate creates dir (and missing parents) private and durably.
func mkdirPrivate(dir string) error { return vfs.MkdirAllDurable(vfs.Default, dir, DirPerm) }
