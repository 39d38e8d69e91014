package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// Create stores tree t (the still, durable tree of the workspace in wsDir
// at the end of group) as manifests in pool p, makes them durable, and
// publishes a catalog entry durably. It returns the new entry once all of
// that is done: the snapshot then survives a crash. t must stay still for
// the call (see workspace.StillTree).
func Create(fsys vfs.FS, wsDir string, p *pool.Pool, t *namespace.Tree, group uint64, label string, now time.Time) (Info, manifest.BuildStats, error) {
	if err := ValidateNewLabel(label); err != nil {
		return Info{}, manifest.BuildStats{}, fmt.Errorf("snapshot: %w", err)
	}
	cut, err := beginAgentCut(wsDir)
	if err != nil {
		return Info{}, manifest.BuildStats{}, err
	}
	defer closeCut(cut)
	st := &manifest.PoolStore{Pool: p}
	root, stats, err := manifest.Build(t, st)
	if err != nil {
		return Info{}, stats, fmt.Errorf("snapshot: build manifests: %w", err)
	}
	agent, err := storeAgentCut(cut, st)
	if err != nil {
		return Info{}, stats, err
	}
	in, err := publishNew(fsys, wsDir, st, Info{Root: root, Group: group, Label: label, Time: now, Agent: agent})
	return in, stats, err
}

// openOffline opens the workspace of opts; a served workspace is an error
// wrapping vfs.ErrLocked.
func openOffline(opts workspace.Options) (*workspace.Workspace, error) {
	return workspace.Open(opts)
}

// CreateOffline opens the workspace of opts (taking its lock: it fails
// with an error wrapping vfs.ErrLocked while a daemon serves it), takes a
// snapshot of its durable state and closes it.
func CreateOffline(opts workspace.Options, label string, now time.Time) (Info, manifest.BuildStats, error) {
	w, err := openOffline(opts)
	if err != nil {
		return Info{}, manifest.BuildStats{}, err
	}
	var in Info
	var stats manifest.BuildStats
	err = w.StillTree(func(t *namespace.Tree, group uint64) error {
		var err error
		in, stats, err = Create(fsOf(opts), opts.Dir, opts.Pool, t, group, label, now)
		return err
	})
	if cerr := w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return Info{}, stats, err
	}
	return in, stats, nil
}

// CreateServing takes a snapshot of workspace w while it serves (the
// daemon's online path): it contains every operation completed before the
// call (committed first) and is durable when it returns. Its manifests
// come from workspace.DurableManifest: after the first snapshot of the
// process only the directories changed since the previous one are
// encoded, and commits wait only for that; the rest (sync, catalog entry)
// runs beside them.
func CreateServing(w *workspace.Workspace, fsys vfs.FS, wsDir string, p *pool.Pool, label string, now time.Time) (Info, manifest.BuildStats, error) {
	if err := ValidateNewLabel(label); err != nil {
		return Info{}, manifest.BuildStats{}, fmt.Errorf("snapshot: %w", err)
	}
	// The bracket (see AgentCopy): the agent database's read
	// transaction opens before the file cut and is copied after it.
	cut, err := beginAgentCut(wsDir)
	if err != nil {
		return Info{}, manifest.BuildStats{}, err
	}
	defer closeCut(cut)
	st := &manifest.PoolStore{Pool: p}
	root, group, stats, err := w.DurableManifest(st)
	var missing *pool.MissingObjectError
	if errors.As(err, &missing) {
		// A cached manifest was removed (GC after its snapshots went):
		// the cache is invalid now, and this build is a full one.
		st = &manifest.PoolStore{Pool: p}
		root, group, stats, err = w.DurableManifest(st)
	}
	if err != nil {
		return Info{}, stats, fmt.Errorf("snapshot: build manifests: %w", err)
	}
	agent, err := storeAgentCut(cut, st)
	if err != nil {
		return Info{}, stats, err
	}
	in, err := publishNew(fsys, wsDir, st, Info{Root: root, Group: group, Label: label, Time: now, Agent: agent})
	return in, stats, err
}

// publishNew syncs the manifests (and agent state chunks) st put or
// reused, allocates an ID and publishes the catalog entry in (its ID
// filled in) durably.
func publishNew(fsys vfs.FS, wsDir string, st *manifest.PoolStore, in Info) (Info, error) {
	// Contents are durable already (committed groups synced them); the
	// manifests are not until this sync.
	if err := st.Sync(); err != nil {
		// A failed sync proves nothing when retried (fsyncgate): rewrite
		// the objects it names from verified bytes, so that a later
		// snapshot reusing them (the daemon's cache) finds them whole.
		var se *pool.SyncError
		if errors.As(err, &se) {
			for _, id := range se.Republish {
				if rerr := st.Pool.Republish(id); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}
		}
		return Info{}, fmt.Errorf("snapshot: sync manifests: %w", err)
	}
	l, err := lockCatalog(fsys, wsDir)
	if err != nil {
		return Info{}, err
	}
	defer l.Close()
	id, err := nextID(fsys, wsDir)
	if err != nil {
		return Info{}, err
	}
	in.ID = id
	if err := publish(fsys, wsDir, in); err != nil {
		return Info{}, fmt.Errorf("snapshot: publish catalog entry: %w", err)
	}
	return in, nil
}

func fsOf(opts workspace.Options) vfs.FS {
	if opts.FS == nil {
		return vfs.Default
	}
	return opts.FS
}

// Fork creates a new workspace in newDir (which must not exist) from
// snapshot id of the workspace in srcDir, in time independent of the
// tree's size: its first checkpoint is a manifest reference to the
// snapshot's root (manifest.EncodeRef), so it shares every manifest and
// content object in the pool and copies none; its first Open loads the
// tree from the manifests (and verifies them). Inode numbers are the
// snapshot's. The new directory appears atomically (built under a temp
// name beside it, then renamed and the parent synced): after a crash it
// either exists complete or not at all (a leftover temp named
// .tmp-fork-* may remain, which `wsfs gc` removes: the fork holds a lock
// on it while it runs).
//
// Against GC: the fork reads the catalog entry without a lock, so the
// snapshot may be removed (`wsfs snapshot rm`, `wsfs rm` of the source)
// while it runs. Once the new directory is in place the entry is read
// again. Still there: it was there when the new directory appeared, so a
// GC pass either reads the entry or lists the new directory after it
// (cmd/wsfs gcmark.go, markAll). Gone: a whole pass may have missed both,
// so every object of the tree is protected (protectTree: kept for the
// grace period, and the new checkpoint marks them afterwards); if one is
// gone already the new workspace is removed again and the error wraps
// ErrNotFound. Only this rare case costs time proportional to the tree.
func Fork(fsys vfs.FS, p *pool.Pool, srcDir string, id uint64, newDir string) (Info, error) {
	in, err := Get(fsys, srcDir, id)
	if err != nil {
		return Info{}, err
	}
	if _, err := fsys.Stat(newDir); err == nil {
		return Info{}, fmt.Errorf("snapshot: fork: %s: %w", newDir, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("snapshot: fork: %w", err)
	}
	// The root object must be there (the rest is verified by Open).
	r, err := manifest.ReadRoot(&manifest.PoolStore{Pool: p}, in.Root)
	if err != nil {
		return Info{}, fmt.Errorf("snapshot: fork from %d: %w", id, err)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return Info{}, err
	}
	tmp := filepath.Join(filepath.Dir(newDir), vfs.TempPrefix+"fork-"+filepath.Base(newDir)+"-"+hex.EncodeToString(rnd[:]))
	if err := vfs.MkdirAllDurable(fsys, tmp, vfs.PrivateDir); err != nil {
		return Info{}, fmt.Errorf("snapshot: fork: %w", err)
	}
	// Held until the fork returns (it moves with the rename): `wsfs gc`
	// removes only temps nobody holds (host.RemoveInterrupted), and no
	// daemon opens the new workspace before the fork is done.
	l, err := fsys.Lock(tmp)
	if err != nil {
		_ = fsys.RemoveAll(tmp)
		return Info{}, fmt.Errorf("snapshot: fork: %w", err)
	}
	defer l.Close()
	// Group 0: the new log starts at group 1, after the checkpoint.
	if err := seglog.WriteCheckpoint(fsys, filepath.Join(tmp, "checkpoint"), 0, manifest.EncodeRef(in.Root, r.NextIno)); err != nil {
		_ = fsys.RemoveAll(tmp)
		return Info{}, fmt.Errorf("snapshot: fork: %w", err)
	}
	// The new workspace's agent database is the snapshot's copy, made
	// (durably) before the directory appears under its name.
	if _, err := RestoreAgent(p, tmp, in); err != nil {
		_ = fsys.RemoveAll(tmp)
		return Info{}, fmt.Errorf("snapshot: fork: %w", err)
	}
	// Never over a workspace of that name made meanwhile (`wsfs create`
	// makes an empty directory, which rename(2) would replace).
	if err := vfs.RenameNoReplace(fsys, tmp, newDir); err != nil {
		_ = fsys.RemoveAll(tmp)
		if errors.Is(err, fs.ErrExist) {
			return Info{}, fmt.Errorf("snapshot: fork: %s appeared while the fork ran: %w", newDir, err)
		}
		return Info{}, fmt.Errorf("snapshot: fork: %w", err)
	}
	if err := vfs.SyncDir(fsys, filepath.Dir(newDir)); err != nil {
		return Info{}, fmt.Errorf("snapshot: fork: %w", err)
	}
	if _, err := Get(fsys, srcDir, id); !errors.Is(err, ErrNotFound) {
		return in, nil // still there (or unreadable now: it was read above)
	}
	if err := protectTree(p, in.Root); err != nil {
		err = fmt.Errorf("snapshot: fork: snapshot %d of %s was removed while the fork ran, and a gc removed objects of its tree (%w): %w; nothing was created",
			id, srcDir, err, ErrNotFound)
		// Its lock is still held (l): nobody opened it.
		rerr := fsys.RemoveAll(newDir)
		if rerr == nil {
			rerr = vfs.SyncDir(fsys, filepath.Dir(newDir))
		}
		if rerr != nil {
			return Info{}, fmt.Errorf("%w; removing the new workspace %s failed too: %w", err, newDir, rerr)
		}
		return Info{}, err
	}
	return in, nil
}

// protectTree protects (pool.Protect) every object of the manifest tree
// at root: the manifests and every content object. An object missing
// from the pool is an error (a *pool.MissingObjectError), except, in a
// pool that fetches from a remote tier, a content object never fetched:
// no local GC can remove what is not here, and a read fetches it.
//
// After it returns, a GC pass in progress or later keeps every object of
// the tree for at least the grace period (see pool.Protect), whether or
// not it marks them: the time a fork or restore has to publish its
// reference to the tree.
func protectTree(p *pool.Pool, root objid.ID) error {
	var first error
	walk := manifest.ForEachObject(&manifest.PoolStore{Pool: p}, root, nil, func(id objid.ID) {
		if first != nil {
			return
		}
		if p.Fetching() {
			if ok, err := p.Has(id); err != nil || !ok {
				first = err
				return
			}
		}
		first = p.Protect(id)
	})
	if walk != nil {
		return walk
	}
	return first
}

// Restore returns the workspace of opts (offline: it takes the workspace
// lock) to snapshot id. It first takes a snapshot of the state it
// replaces (returned as before), so a restore is undone by restoring
// that one. It then loads the snapshot's whole tree once (so that a
// damaged snapshot is refused before anything changes) and publishes a
// manifest reference to it as the checkpoint of the last committed group
// G (durably, replacing any checkpoint of G atomically): recovery finds
// it and replays only groups after G. Inode numbers are the snapshot's;
// the next inode number never goes down.
//
// Every object of the snapshot's tree is protected (protectTree) before
// the checkpoint is published: a GC pass may read this workspace's
// durable state before the checkpoint and its catalog after the snapshot
// is removed (`wsfs snapshot rm` right after the restore, or during it),
// marking the tree through neither; the grace period keeps it then.
//
// The agent state database is set to the snapshot's copy (RestoreAgent)
// just before the checkpoint is published, while the workspace lock is
// held; the undo snapshot recorded the agent state it replaces. A
// snapshot without agent state leaves the agent database as it is. A
// crash between the two steps leaves the agent state restored and the
// files not: running the same restore again completes it.
func Restore(opts workspace.Options, id uint64, now time.Time) (before, target Info, err error) {
	fsys := fsOf(opts)
	target, err = Get(fsys, opts.Dir, id)
	if err != nil {
		return Info{}, Info{}, err
	}
	w, err := openOffline(opts)
	if err != nil {
		return Info{}, Info{}, err
	}
	err = w.StillTree(func(t *namespace.Tree, group uint64) error {
		var err error
		before, _, err = Create(fsys, opts.Dir, opts.Pool, t, group, fmt.Sprintf("before restore to %d", id), now)
		if err != nil {
			return err
		}
		if _, _, err := manifest.LoadTree(&manifest.PoolStore{Pool: opts.Pool}, target.Root); err != nil {
			return fmt.Errorf("snapshot: restore %d: %w", id, err)
		}
		if err := protectTree(opts.Pool, target.Root); err != nil {
			return fmt.Errorf("snapshot: restore %d: %w", id, err)
		}
		// The agent state first, in one transaction of the live
		// database: if it fails, the files are unchanged too.
		if _, err := RestoreAgent(opts.Pool, opts.Dir, target); err != nil {
			return err
		}
		return seglog.WriteCheckpoint(fsys, filepath.Join(opts.Dir, "checkpoint"), group, manifest.EncodeRef(target.Root, uint64(t.NextIno())))
	})
	// The open workspace's tree is stale now; closing it writes nothing
	// (no operation ran).
	if cerr := w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return before, target, err
}

// Diff compares snapshot a with snapshot b of the same workspace.
func Diff(p *pool.Pool, a, b Info) ([]manifest.Change, error) {
	return manifest.Diff(&manifest.PoolStore{Pool: p}, a.Root, b.Root)
}

// DiffLive compares snapshot a with the durable tree of the workspace of
// opts (opened offline). The live tree's manifests are built in memory
// only; unchanged subtrees have the snapshot's IDs and are skipped.
func DiffLive(opts workspace.Options, a Info) ([]manifest.Change, error) {
	w, err := openOffline(opts)
	if err != nil {
		return nil, err
	}
	var out []manifest.Change
	err = w.StillTree(func(t *namespace.Tree, group uint64) error {
		var err error
		out, err = DiffTree(opts.Pool, a, t)
		return err
	})
	if cerr := w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return out, err
}

// DiffTree compares snapshot a with tree t (still for the call). t's
// manifests are built in memory only; its unchanged subtrees have the
// snapshot's IDs and are skipped.
func DiffTree(p *pool.Pool, a Info, t *namespace.Tree) ([]manifest.Change, error) {
	st := &manifest.MemStore{Under: &manifest.PoolStore{Pool: p}}
	live, _, err := manifest.Build(t, st)
	if err != nil {
		return nil, err
	}
	return manifest.Diff(st, a.Root, live)
}

// ForEachObject calls fn for every pool object the snapshots of the
// workspace in wsDir reference: each root object, every directory
// manifest, every content object (holes excluded) and every chunk of
// their agent state copies. A manifest shared
// by several snapshots is walked once. For pool GC: the lead's GC marks
// these besides the workspace's own tree. It reads the catalog without
// the workspace lock (a snapshot removed meanwhile is skipped; one created
// meanwhile is protected by the pool's grace period, since Create puts or
// protects every manifest it references). An unreadable manifest is an
// error, so that GC stops before removing anything.
func ForEachObject(fsys vfs.FS, wsDir string, p *pool.Pool, fn func(objid.ID)) error {
	all, err := List(fsys, wsDir)
	if err != nil {
		return err
	}
	st := &manifest.PoolStore{Pool: p}
	visited := map[objid.ID]bool{}
	for _, in := range all {
		if err := manifest.ForEachObject(st, in.Root, visited, fn); err != nil {
			return fmt.Errorf("snapshot %d of %s: %w", in.ID, wsDir, err)
		}
		AgentObjects(in, fn)
	}
	return nil
}

// RestoreServing returns workspace w (served by this process) to snapshot
// id while it serves: the daemon's online restore. It loads and verifies
// the snapshot's whole tree first (a damaged snapshot is refused before
// anything changes) and protects its objects as Restore does, then calls w.ReplaceTree, which holds up operations
// for the rest of the call: once nothing is in flight and everything is
// committed it takes the undo snapshot (returned as before: it contains
// every operation completed before the call), then sets the agent state
// database to the snapshot's copy (RestoreAgent; a snapshot without one
// leaves it), then calls also (if not nil); an error of either aborts the
// restore with only the undo snapshot taken (and, if also failed, the
// agent state restored). Then it publishes a manifest
// reference to the snapshot's tree, renumbered above every inode number
// in use (manifest.EncodeRefBase), as the checkpoint of the last
// committed group. The returned Restored tells the
// FUSE adapter what to invalidate.
func RestoreServing(w *workspace.Workspace, fsys vfs.FS, wsDir string, p *pool.Pool, id uint64, now time.Time, also func(before, target Info) error) (before, target Info, r workspace.Restored, err error) {
	target, err = Get(fsys, wsDir, id)
	if err != nil {
		return Info{}, Info{}, r, err
	}
	t, _, err := manifest.LoadTree(&manifest.PoolStore{Pool: p}, target.Root)
	if err != nil {
		return Info{}, Info{}, r, fmt.Errorf("snapshot: restore %d: %w", id, err)
	}
	if err := protectTree(p, target.Root); err != nil {
		return Info{}, Info{}, r, fmt.Errorf("snapshot: restore %d: %w", id, err)
	}
	r, err = w.ReplaceTree(t, target.Root, func() error {
		var err error
		if before, _, err = CreateServing(w, fsys, wsDir, p, fmt.Sprintf("before restore to %d", id), now); err != nil {
			return err
		}
		// The agent state with the files, while operations are held up
		// (the undo snapshot recorded the state it replaces).
		if _, err := RestoreAgent(p, wsDir, target); err != nil {
			return err
		}
		if also != nil {
			return also(before, target)
		}
		return nil
	})
	return before, target, r, err
}

// DiffServing compares snapshot a with the durable tree of workspace w
// while it serves (the daemon's online diff): every operation completed
// before the call is committed first. The live tree's manifests come from
// workspace.DurableManifest, so after the first snapshot or diff of the
// process only the directories changed since are encoded, and subtrees
// equal to the snapshot's are skipped by ID: O(changes). The manifests it
// encodes are put in the pool unsynced (a later snapshot reuses and syncs
// them; GC removes them if none does).
func DiffServing(w *workspace.Workspace, p *pool.Pool, a Info) ([]manifest.Change, error) {
	st := &manifest.PoolStore{Pool: p}
	root, _, _, err := w.DurableManifest(st)
	var missing *pool.MissingObjectError
	if errors.As(err, &missing) {
		st = &manifest.PoolStore{Pool: p}
		root, _, _, err = w.DurableManifest(st)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: build manifests of the live tree: %w", err)
	}
	return manifest.Diff(st, a.Root, root)
}
