package workspace

import (
	"errors"
	"fmt"
	"sort"
	"syscall"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/seglog"
)

// Online restore: ReplaceTree swaps the served tree for another one (a
// snapshot's) while the workspace serves, durably, in one checkpoint.
//
// Invariants:
//   - Every operation is either entirely before the swap or entirely
//     after it: the swap holds the gate (see Workspace.gate), so it waits
//     for the operations in flight and holds up new ones until it is done.
//     Before the swap, dirty content of open files is published and every
//     record is committed, so prepare (the undo snapshot) sees all of it.
//   - The new tree's inode numbers are all at or above the old tree's next
//     inode number (namespace.Tree.Renumber): node ids are never reused,
//     so nothing the kernel caches about an old node id (attributes,
//     pages, entries, open files) can be taken for a new file.
//   - An inode of the replaced tree is stale: an open handle's reads,
//     writes and flushes fail with ESTALE, and an old inode number is
//     ESTALE in every operation, instead of ENOENT. Writes are never
//     redirected to the old file silently.
//   - The replacement is durable before ReplaceTree returns: a checkpoint
//     of the last committed group G replaces any checkpoint of G; it is a
//     manifest reference (version 2: the snapshot's root and the inode
//     base, manifest.EncodeRefBase), so its size and cost do not depend on
//     the tree; recovery loads and renumbers the same tree and replays
//     the groups after G onto it. Until a later checkpoint replaces it,
//     ForEachObject lists that root's manifests (GC keeps them even if the
//     snapshot is removed). A background checkpoint of the old shadow that is
//     still in flight is not written afterwards (ckptEpoch). If that
//     checkpoint write fails, the workspace fails (EIO for every later
//     change until a remount), because the durable state may then be
//     either tree and the log must not grow on the wrong one.

// Restored describes a finished ReplaceTree, for the FUSE adapter, which
// must drop what the kernel caches of the replaced tree.
type Restored struct {
	Group uint64 // the checkpoint group (the last committed group)
	Base  Ino    // the new tree's lowest inode number but the root's
	// Known are the replaced tree's inodes the kernel held (lookups or
	// open handles), the root excluded.
	Known []Ino
	// RootNames are the names in the root before and after (the only
	// directory the two trees share), sorted, without duplicates.
	RootNames []string
}

// renumberSlack is the room ReplaceTree leaves above the next inode
// number when it renumbers the new tree before holding operations up
// (inode numbers are 64 bits; a gap costs nothing).
const renumberSlack = 1 << 20

// errStaleIno: an inode number of a replaced tree.
var errStaleIno = syscall.ESTALE

// missing is the error for an inode number that is not in the tree:
// ESTALE for the numbers of a replaced tree, else ENOENT.
func (w *Workspace) missing(ino namespace.Ino) error {
	if ino != 0 && uint64(ino) < w.staleBelow.Load() {
		return errStaleIno
	}
	return syscall.ENOENT
}

// isStale reports whether locked n belongs to a replaced tree.
func isStale(n *namespace.Inode) bool {
	lv := liveOf(n)
	return lv != nil && lv.stale
}

// ReplaceTree replaces the live tree with t, the tree of manifest root
// root as manifest.LoadTree returned it (the caller gives it up; its inode
// numbers are changed), while the workspace serves; see the invariants above. prepare,
// if not nil, runs once no operation is in flight and everything is
// committed, before anything changes (the caller takes the undo snapshot
// there, and restores state kept beside the tree); its error aborts the
// replacement. Operations wait for the whole call.
func (w *Workspace) ReplaceTree(t *namespace.Tree, root objid.ID, prepare func() error) (Restored, error) {
	if t.Get(namespace.RootIno) == nil {
		return Restored{}, wsErr("restore", 0, "", errors.New("the new tree has no root"))
	}
	// Renumber (and copy for the shadow) before holding operations up:
	// the base leaves room for the inodes created meanwhile, and is
	// checked (and the work redone) under the gate.
	w.gate.RLock()
	base := w.tree.NextIno() + renumberSlack
	w.gate.RUnlock()
	nt := t.Renumber(base)
	shadow := nt.Clone()
	w.gate.Lock()
	defer w.gate.Unlock()
	if err := w.usable(); err != nil {
		return Restored{}, wsErr("restore", 0, "", err)
	}
	// Publish dirty content (as Close does), then commit everything.
	if err := errors.Join(w.flushAllLocked()...); err != nil {
		return Restored{}, wsErr("restore", 0, "", err)
	}
	if err := w.barrier(); err != nil {
		return Restored{}, wsErr("restore", 0, "", err)
	}
	if prepare != nil {
		if err := prepare(); err != nil {
			return Restored{}, err
		}
	}
	if next := w.tree.NextIno(); next > base {
		base = next
		nt = t.Renumber(base)
		shadow = nt.Clone()
	}
	payload := manifest.EncodeRefBase(root, uint64(nt.NextIno()), uint64(base))

	w.shadowMu.Lock()
	group := w.shadowGroup
	if w.shadowErr != nil {
		err := w.shadowErr
		w.shadowMu.Unlock()
		return Restored{}, wsErr("restore", 0, "", err)
	}
	if last := w.com.Stats().LastGroup; last != group {
		w.shadowMu.Unlock()
		return Restored{}, wsErr("restore", 0, "", fmt.Errorf("durable shadow at group %d, log at %d", group, last))
	}
	w.ckptMu.Lock()
	w.ckptEpoch++
	err := seglog.WriteCheckpoint(w.fs, w.ckptDir(), group, payload)
	w.ckptMu.Unlock()
	if err != nil {
		w.shadowMu.Unlock()
		w.setFailed(fmt.Errorf("restore: checkpoint of group %d: %w", group, err))
		return Restored{}, wsErr("restore", 0, "", err)
	}
	w.shadow, w.snapCache, w.sinceCkpt = shadow, nil, 0
	w.shadowMu.Unlock()
	w.ckptGrp.Store(group)
	w.ckptErr.Store(nil)

	r := Restored{Group: group, Base: Ino(base)}
	names := map[string]bool{}
	for _, n := range w.tree.Inodes() {
		n.Mu.Lock()
		lv := liveFor(n)
		if n.Ino != namespace.RootIno && (lv.lookups > 0 || lv.opens > 0) {
			r.Known = append(r.Known, Ino(n.Ino))
		}
		if n.Ino == namespace.RootIno {
			for name := range n.Entries {
				names[name] = true
			}
		}
		lv.stale = true
		if lv.opens == 0 {
			w.dropContentLocked(n, true)
		}
		// Out of every table: nothing may release it from the new one.
		n.Dropped = true
		n.Mu.Unlock()
	}
	for name := range nt.Get(namespace.RootIno).Entries {
		names[name] = true
	}
	for name := range names {
		r.RootNames = append(r.RootNames, name)
	}
	sort.Strings(r.RootNames)
	sort.Slice(r.Known, func(i, j int) bool { return r.Known[i] < r.Known[j] })
	w.tree = nt
	w.staleBelow.Store(uint64(base))
	w.manifestRoot, w.hasManifestRoot = root, true
	return r, nil
}
