package workspace

import (
	"fmt"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
)

// DurableTree commits every operation completed before the call and calls
// fn with a copy of the durable tree (the durable shadow, the state at the
// end of a committed group at or after them) and that group's number. It
// is safe while the workspace serves operations: the copy is taken under
// the lock that the committer's flusher holds while it applies a group to
// the shadow, so commits wait for the copy (O(inodes), no I/O), never for
// fn; readers and writers that do not wait for a commit are not blocked
// at all. Dirty content of open files is not in the tree (it is in no
// group). fn owns the copy; contents are shared, immutable.
func (w *Workspace) DurableTree(fn func(t *namespace.Tree, group uint64) error) error {
	if err := w.Sync(); err != nil {
		return err
	}
	w.shadowMu.Lock()
	if w.shadowErr != nil {
		err := w.shadowErr
		w.shadowMu.Unlock()
		return wsErr("snapshot", 0, "", err)
	}
	t, err := cloneTree(w.shadow)
	group := w.shadowGroup
	w.shadowMu.Unlock()
	if err != nil {
		return wsErr("snapshot", 0, "", fmt.Errorf("durable shadow: %w", err))
	}
	return fn(t, group)
}

// DurableManifest commits every operation completed before the call and
// puts the manifests of the durable tree into st (the daemon's snapshot
// path), returning the tree's root ID and the group it is the end of. It
// re-encodes only the directories changed since its previous call
// (manifest.Cache, told about every group the flusher applies to the
// durable shadow); directories it reuses are protected and added to st's
// sync set (PoolStore.Reuse). The first call copies the durable tree and
// builds everything without holding up commits; later calls build under
// the shadow's lock, so commits wait for the changed directories only.
// Calls are serialized.
func (w *Workspace) DurableManifest(st *manifest.PoolStore) (root objid.ID, group uint64, stats manifest.BuildStats, err error) {
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	if err := w.Sync(); err != nil {
		return root, 0, stats, err
	}
	w.shadowMu.Lock()
	if w.shadowErr != nil {
		err := w.shadowErr
		w.shadowMu.Unlock()
		return root, 0, stats, wsErr("snapshot", 0, "", err)
	}
	group = w.shadowGroup
	c := w.snapCache
	if c == nil || !c.Valid() {
		t := w.shadow.Clone()
		c = manifest.NewCache()
		w.snapCache = c // collects the groups committed from now on
		w.shadowMu.Unlock()
		root, stats, seed, err := manifest.BuildSeed(t, st)
		if err != nil {
			return root, 0, stats, err
		}
		w.shadowMu.Lock()
		if w.snapCache == c {
			c.Install(seed)
		}
		w.shadowMu.Unlock()
		return root, group, stats, nil
	}
	before := len(st.PutIDs())
	root, stats, err = c.Build(w.shadow, st)
	var dirs []objid.ID
	if err == nil {
		c.DirIDs(func(id objid.ID) { dirs = append(dirs, id) })
	} else {
		c.Invalidate()
	}
	w.shadowMu.Unlock()
	if err != nil {
		return root, 0, stats, err
	}
	fresh := map[objid.ID]bool{}
	for _, id := range st.PutIDs()[before:] {
		fresh[id] = true
	}
	// Reused manifests are protected again (pool.Protect: a utimensat
	// that dirties the object's inode, and a stat, for every directory of
	// the tree) only when this process last protected or put them more
	// than reprotectAfter ago; the others are checked to exist (a stat)
	// and join the sync set (a no-op for the ones already durable).
	now := time.Now()
	refresh := reprotectAfter()
	var protect, recent []objid.ID
	for _, id := range dirs {
		switch at, ok := w.protectedAt[id]; {
		case fresh[id]:
		case ok && now.Sub(at) < refresh:
			recent = append(recent, id)
		default:
			protect = append(protect, id)
		}
	}
	err = st.Reuse(protect)
	if err == nil {
		err = st.ReuseRecent(recent)
	}
	if err != nil {
		// A cached manifest is gone (GC): the next call builds everything.
		w.shadowMu.Lock()
		c.Invalidate()
		w.shadowMu.Unlock()
		w.protectedAt = nil
		return root, 0, stats, err
	}
	next := make(map[objid.ID]time.Time, len(dirs))
	for _, id := range dirs {
		if at, ok := w.protectedAt[id]; ok && !fresh[id] && now.Sub(at) < refresh {
			next[id] = at
		} else {
			next[id] = now
		}
	}
	w.protectedAt = next
	return root, group, stats, nil
}

// reprotectAfter is how long after DurableManifest protected or put a
// directory manifest it protects it again when a later build reuses it:
// a twelfth of the pool's minimum GC grace period (5 minutes in
// production). That is well within the grace period, so GC cannot remove
// the manifest before the snapshot reusing it is published, and within
// the time the pool trusts its own sync of an object (a sixth of the
// grace period, or durableWindow), so the sync set stays a no-op for it.
func reprotectAfter() time.Duration { return pool.EffectiveMinGrace() / 12 }
