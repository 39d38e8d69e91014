package ship

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"wsfs/internal/manifest"
	"wsfs/internal/objid"
	"wsfs/internal/remote"
	"wsfs/internal/snapshot"
)

// Snapshots in the bucket
//
// A workspace's snapshots are shipped as copies of their catalog entries
// (the frozen entry format of package snapshot, CRC-checked on read):
//
//	workspaces/NAME/snapshots/<id:%020d>.snap
//	workspaces/NAME/snapshots/last-id      the largest ID the workspace used
//
// Order: an entry is uploaded only after every object its manifests
// reference (the root, every directory manifest, every content object)
// is in the bucket, and only once the head names the snapshot's group or
// a later one. So every shipped entry restores whole, and the remote
// never holds a snapshot of a state newer than its head: the bucket as a
// whole still describes a committed prefix of the workspace. A snapshot
// removed locally (rm, prune) has its entry deleted from the bucket by
// the next round; its objects stay until remote GC finds nothing else
// referencing them. Remote GC marks the objects of every shipped entry.

// SnapshotKey is the key of snapshot id of workspace name.
func SnapshotKey(name string, id uint64) string {
	return remote.WorkspaceKey(name, "snapshots/"+snapshot.EntryName(id))
}

func lastIDKey(name string) string { return remote.WorkspaceKey(name, "snapshots/last-id") }

// RemoteSnapshots returns the shipped snapshots of workspace name,
// ascending by ID, and the largest snapshot ID the workspace used. An
// entry that does not decode is a *CorruptRemoteError.
func RemoteSnapshots(ctx context.Context, st remote.Store, name string) ([]snapshot.Info, uint64, error) {
	ids, lastID, err := remoteSnapshotIDs(ctx, st, name)
	if err != nil {
		return nil, 0, err
	}
	var out []snapshot.Info
	for _, id := range ids {
		key := SnapshotKey(name, id)
		b, err := st.Get(ctx, key)
		if errors.Is(err, remote.ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, 0, err
		}
		in, err := snapshot.DecodeEntry(b)
		if err == nil && in.ID != id {
			err = fmt.Errorf("holds snapshot %d", in.ID)
		}
		if err != nil {
			return nil, 0, &CorruptRemoteError{Store: st.String(), Key: key, Reason: err.Error()}
		}
		out = append(out, in)
	}
	return out, max(lastID, maxID(ids)), nil
}

func maxID(ids []uint64) uint64 {
	if len(ids) == 0 {
		return 0
	}
	return slices.Max(ids)
}

// remoteSnapshotIDs lists the entry IDs in the bucket and reads last-id.
func remoteSnapshotIDs(ctx context.Context, st remote.Store, name string) ([]uint64, uint64, error) {
	prefix := remote.WorkspaceKey(name, "snapshots/")
	keys, err := st.ListInfo(ctx, prefix)
	if err != nil {
		return nil, 0, err
	}
	var ids []uint64
	for _, k := range keys {
		s, ok := strings.CutSuffix(strings.TrimPrefix(k.Key, prefix), ".snap")
		if !ok || len(s) != 20 {
			continue
		}
		if id, err := strconv.ParseUint(s, 10, 64); err == nil && id > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var lastID uint64
	b, err := st.Get(ctx, lastIDKey(name))
	switch {
	case err == nil:
		if lastID, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return nil, 0, &CorruptRemoteError{Store: st.String(), Key: lastIDKey(name), Reason: err.Error()}
		}
	case !errors.Is(err, remote.ErrNotFound):
		return nil, 0, err
	}
	return ids, lastID, nil
}

// remoteManifests reads manifest objects from the bucket, each verified
// against its ID (a manifest.Store that cannot Put).
type remoteManifests struct {
	ctx context.Context
	st  remote.Store
}

func (r remoteManifests) Put([]byte) (objid.ID, error) {
	return objid.ID{}, errors.New("remote manifests are read-only")
}

func (r remoteManifests) Get(id objid.ID) ([]byte, error) {
	key := remote.ObjectKey(id.String())
	data, err := r.st.Get(r.ctx, key)
	if errors.Is(err, remote.ErrNotFound) {
		return nil, fmt.Errorf("remote %s: manifest object %s is missing, yet a shipped snapshot references it: %w", r.st, key, err)
	}
	if err != nil {
		return nil, err
	}
	if got := objid.Sum(data); got != id {
		return nil, &CorruptRemoteError{Store: r.st.String(), Key: key, Reason: fmt.Sprintf("its %d bytes hash to %s", len(data), got)}
	}
	return data, nil
}

// remoteSnapshotObjects calls fn for every object the shipped snapshots
// of workspace name reference (manifests included), each manifest read
// from the bucket and verified. Any error means the set is incomplete.
func remoteSnapshotObjects(ctx context.Context, st remote.Store, name string, fn func(objid.ID)) (int, error) {
	snaps, _, err := RemoteSnapshots(ctx, st, name)
	if err != nil {
		return 0, err
	}
	visited := map[objid.ID]bool{}
	for _, in := range snaps {
		if err := manifest.ForEachObject(remoteManifests{ctx, st}, in.Root, visited, fn); err != nil {
			return 0, fmt.Errorf("shipped snapshot %d of %s: %w", in.ID, name, err)
		}
		snapshot.AgentObjects(in, fn)
	}
	return len(snaps), nil
}

// shipSnapshots makes the bucket's snapshot entries follow the local
// catalog (see "Snapshots in the bucket"): new entries whose group the
// head names are shipped after their objects, removed ones deleted, and
// last-id raised. It costs one directory listing when nothing changed
// (the last-id file is read only when the listing changed: a removal
// changes the listing).
func (s *Shipper) shipSnapshots(ctx context.Context) error {
	local, err := snapshot.IDs(s.opts.FS, s.opts.Dir)
	if err != nil {
		return err
	}
	if s.remoteSnaps != nil && s.snapsInSync && len(s.pendingSnaps) == 0 && slices.Equal(local, s.prevLocal) {
		return nil // nothing changed since the last round that completed
	}
	s.snapsInSync = false
	if s.remoteSnaps == nil {
		ids, lastID, err := remoteSnapshotIDs(ctx, s.opts.Store, s.opts.Name)
		if err != nil {
			return err
		}
		s.remoteSnaps = map[uint64]bool{}
		for _, id := range ids {
			s.remoteSnaps[id] = true
		}
		s.remoteLastID = lastID
	}
	isLocal := map[uint64]bool{}
	for _, id := range local {
		isLocal[id] = true
	}
	for id := range s.pendingSnaps {
		if !isLocal[id] {
			delete(s.pendingSnaps, id)
		}
	}
	lastID, err := snapshot.LastID(s.opts.FS, s.opts.Dir)
	if err != nil {
		return err
	}
	if lastID > s.remoteLastID {
		// First, so that the bucket never forgets an ID in use (an entry
		// deleted below may have been the largest).
		if err := s.opts.Store.Put(ctx, lastIDKey(s.opts.Name), []byte(strconv.FormatUint(lastID, 10)+"\n")); err != nil {
			return err
		}
		s.remoteLastID = lastID
	}
	for id := range s.remoteSnaps {
		if isLocal[id] {
			continue
		}
		if err := s.opts.Store.Delete(ctx, SnapshotKey(s.opts.Name, id)); err != nil && !errors.Is(err, remote.ErrNotFound) {
			return err
		}
		delete(s.remoteSnaps, id)
		s.mu.Lock()
		s.stats.SnapshotsRemoved++
		s.mu.Unlock()
	}
	for _, id := range local {
		if s.remoteSnaps[id] || s.pendingSnaps[id] > s.head.Group {
			continue
		}
		in, err := snapshot.Get(s.opts.FS, s.opts.Dir, id)
		if errors.Is(err, snapshot.ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return err
		}
		if in.Group > s.head.Group {
			// Not shipped up to its group yet: later.
			if s.pendingSnaps == nil {
				s.pendingSnaps = map[uint64]uint64{}
			}
			s.pendingSnaps[id] = in.Group
			continue
		}
		delete(s.pendingSnaps, id)
		ids := map[objid.ID]struct{}{}
		if err := manifest.ForEachObject(&manifest.PoolStore{Pool: s.opts.Pool}, in.Root, nil, func(o objid.ID) { ids[o] = struct{}{} }); err != nil {
			return fmt.Errorf("ship %s: snapshot %d: %w", s.opts.Name, id, err)
		}
		// Its agent state copy too: the entry names those chunks, and
		// a pulled snapshot restores or forks with them.
		snapshot.AgentObjects(in, func(o objid.ID) { ids[o] = struct{}{} })
		if err := s.uploadObjects(ctx, ids); err != nil {
			return err
		}
		if err := s.opts.Store.Put(ctx, SnapshotKey(s.opts.Name, id), snapshot.EncodeEntry(in)); err != nil {
			return err
		}
		s.remoteSnaps[id] = true
		s.mu.Lock()
		s.stats.SnapshotsShipped++
		s.stats.BytesUploaded += int64(len(snapshot.EncodeEntry(in)))
		s.mu.Unlock()
		s.lg.Debug("shipped snapshot", "id", id, "group", in.Group)
	}
	s.prevLocal, s.snapsInSync = local, true
	return nil
}
