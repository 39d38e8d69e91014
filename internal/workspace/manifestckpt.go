package workspace

import (
	"fmt"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
)

// A checkpoint payload is either the namespace encoding (the tree itself)
// or a manifest reference (manifest.EncodeRef: the tree named by a
// snapshot's manifest root), which fork and restore publish so that their
// cost does not depend on the tree's size. See docs/format.md.

// decodeCheckpoint builds the live tree and the durable shadow (two
// independent trees) from a checkpoint payload. For a manifest
// reference it remembers the root, so that ForEachObject keeps its
// manifests from GC while the checkpoint may still be read.
func (w *Workspace) decodeCheckpoint(payload []byte) (tree, shadow *namespace.Tree, err error) {
	if !manifest.IsRef(payload) {
		if tree, err = namespace.DecodeCheckpoint(payload); err == nil {
			shadow, err = namespace.DecodeCheckpoint(payload)
		}
		return tree, shadow, err
	}
	root, minNext, base, err := manifest.DecodeRefBase(payload)
	if err != nil {
		return nil, nil, err
	}
	if tree, err = loadRef(w.pool, root, minNext, base); err == nil {
		shadow, err = cloneTree(tree)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint names manifest root %s: %w", root, err)
	}
	w.manifestRoot, w.hasManifestRoot = root, true
	return tree, shadow, nil
}

// DecodeCheckpointPayload rebuilds the tree of a checkpoint payload of
// either form (for readers of a workspace's durable state other than
// Open: GC, fsck). Manifests are read from p.
func DecodeCheckpointPayload(p *pool.Pool, payload []byte) (*namespace.Tree, error) {
	if !manifest.IsRef(payload) {
		return namespace.DecodeCheckpoint(payload)
	}
	root, minNext, base, err := manifest.DecodeRefBase(payload)
	if err != nil {
		return nil, err
	}
	return loadRef(p, root, minNext, base)
}

// loadRef loads the tree of a manifest reference: the manifests of root,
// renumbered from base if base is not 0 (online restore), with next inode
// number at least minNext.
func loadRef(p *pool.Pool, root objid.ID, minNext, base uint64) (*namespace.Tree, error) {
	if base == 0 {
		t, _, err := manifest.LoadTreeMin(&manifest.PoolStore{Pool: p}, root, namespace.Ino(minNext))
		return t, err
	}
	t, _, err := manifest.LoadTree(&manifest.PoolStore{Pool: p}, root)
	if err != nil {
		return nil, err
	}
	t = t.Renumber(namespace.Ino(base))
	t.RaiseNextIno(namespace.Ino(minNext))
	return t, nil
}

// forEachManifestObject lists the manifests (and contents) of the
// manifest root the workspace was opened from, if any. A manifest that
// can no longer be read is skipped: there is nothing left to protect.
func (w *Workspace) forEachManifestObject(fn func(objid.ID)) {
	if w.hasManifestRoot {
		_ = manifest.ForEachObject(&manifest.PoolStore{Pool: w.pool}, w.manifestRoot, nil, fn)
	}
}

// cloneTree returns an independent copy of a still tree (see
// namespace.Tree.Clone).
func cloneTree(t *namespace.Tree) (*namespace.Tree, error) { return t.Clone(), nil }
