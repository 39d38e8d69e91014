package ship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/seglog"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
)

// ErrNotShipped is wrapped by Pull when the remote has no head for the
// workspace (nothing was ever shipped).
var ErrNotShipped = errors.New("nothing shipped")

// PullOptions configure Pull.
type PullOptions struct {
	FS    vfs.FS // default vfs.Default
	Store remote.Store
	Name  string // the workspace in the bucket
	// Dir is the workspace directory to create (STATE/workspaces/NAME);
	// it must not exist. Pull builds it beside, as Dir's parent/.wsfs-pull-NAME,
	// and renames it into place last, so a workspace exists only whole.
	Dir string
	// Pool receives the fetched objects; a Lazy pull fetches none and
	// needs none.
	Pool *pool.Pool
	// Parallel object downloads (default 8).
	Parallel int
	// At selects the state to restore (zero: the head). A state older
	// than the head is restored as a new group one past the head's, from
	// a checkpoint, so the workspace's group numbers never go back; its
	// shipper then ships that checkpoint as the new remote head.
	At At
	// Lazy: download no object; write FetchStateName (naming RemoteURL)
	// instead, so that the workspace mounts at once and its daemon fetches
	// contents on first read and in a background prefetch.
	Lazy      bool
	RemoteURL string // the remote as a remote.Config URL (required with Lazy)
	// BeforePublish, if set, is called with the workspace directory under
	// its temporary name, while the tree's checkpoint and log are written
	// into it (at the same time: it must touch neither), before it is
	// synced and renamed to Dir, and with the result so far (AsOf and
	// AsOfTime are set). What it writes there is published with the
	// workspace; an error publishes nothing. wsfs pull restores the agent
	// state here, so that no workspace exists without it.
	BeforePublish func(tmp string, res PullResult) error
}

// PullResult describes a finished Pull.
type PullResult struct {
	Group       uint64 // the group the workspace was restored to
	Inodes      int
	Objects     int   // objects the tree references
	Fetched     int   // of them, downloaded (the rest were in the local pool)
	BytesGot    int64 // bytes downloaded (objects, checkpoint, log)
	FromGroup   uint64
	Checkpoint  uint64 // the remote checkpoint's group (0: none)
	BatchesRead int
	Snapshots   int    // shipped snapshots imported into the local catalog
	Selected    string // the state At chose ("" for the head)
	// Snapshot is the shipped snapshot At chose (nil: the head, or a
	// prefix of its log): its agent state copy is the agent state of
	// the state pulled (the replica as of its time may lack what the
	// sidecar had not uploaded by then).
	Snapshot *snapshot.Info
	// AgentMissing are the shipped snapshots whose agent state copy is
	// not all in the bucket (shipped by a wsfs that did not upload those
	// chunks): the pull goes on without it; their fork or restore here
	// fails on the missing chunk.
	AgentMissing []uint64
	AsOf         uint64 // the group whose state was restored (Group, unless At chose an older one)
	AsOfTime     time.Time
	// TreeTime is the time to read the head, checkpoint and batches and
	// rebuild the tree; WriteTime to write the workspace directory (the
	// log synced, the checkpoint not: its first opener syncs it).
	TreeTime, WriteTime time.Duration
}

// CorruptRemoteError reports a remote file whose bytes do not verify.
type CorruptRemoteError struct {
	Store  string
	Key    string
	Reason string
}

func (e *CorruptRemoteError) Error() string {
	return fmt.Sprintf("remote %s: %s is corrupt: %s (wsfs will not restore from it; repair or re-ship it from a host that has it)", e.Store, e.Key, e.Reason)
}

// Pull restores workspace Name from the remote into Dir: it reads the head,
// the checkpoint and the batches it names (each verified), replays them
// into the tree, downloads every object the tree references into the local
// pool (each verified against its hash: a corrupt object is a
// *CorruptRemoteError naming it, never wrong bytes), syncs them, and
// writes a checkpoint of the tree at the head's group plus an empty log
// that continues after it. The shipped snapshots are imported into the
// local catalog, their objects fetched too. With opts.At an earlier state
// is restored instead (see At), as a checkpoint one group past the head.
// The daemon then recovers it like any other workspace.
//
// With Lazy it downloads no object and writes FetchStateName beside the
// checkpoint instead (the snapshots' objects listed too): the daemon
// fetches the objects on first read (each verified by the pool) and in its
// background prefetch (see Prefetch).
func Pull(ctx context.Context, opts PullOptions) (PullResult, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	var res PullResult
	st := opts.Store
	if _, err := opts.FS.Stat(opts.Dir); err == nil {
		return res, fmt.Errorf("pull %s: %s exists: remove the local workspace first (wsfs rm %s)", opts.Name, opts.Dir, opts.Name)
	}
	h, ok, err := ReadHead(ctx, st, opts.Name)
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("pull %s: %s holds no workspace %q (no %s): %w", opts.Name, st, opts.Name, HeadKey(opts.Name), ErrNotShipped)
	}
	t0 := time.Now()
	snaps, lastSnapID, err := RemoteSnapshots(ctx, st, opts.Name)
	if err != nil {
		return res, fmt.Errorf("pull %s: read the shipped snapshots: %w", opts.Name, err)
	}
	var tree *namespace.Tree
	var at uint64
	if opts.At.IsZero() {
		var got int64
		var nb int
		tree, at, got, nb, err = restoreTree(ctx, st, opts.Name, h)
		res.BytesGot, res.BatchesRead = got, nb
		if h.Checkpoint != nil {
			res.Checkpoint = h.Checkpoint.Group
		}
		if err != nil {
			return res, err
		}
		res.AsOf, res.AsOfTime = at, h.ShippedAt
	} else {
		sel, err := selectState(ctx, st, opts.Name, h, snaps, opts.At)
		res.BytesGot += sel.got
		if err != nil {
			return res, err
		}
		tree, at = sel.tree, sel.group
		res.Selected, res.AsOf, res.AsOfTime, res.Snapshot = sel.what, sel.group, sel.time, sel.snap
		if at != h.Group {
			at = h.Group + 1 // a new group: the state as of sel
		}
	}
	res.Group, res.Inodes, res.TreeTime = at, tree.Len(), time.Since(t0)
	importSnaps := func(tmp string) error {
		for _, in := range snaps {
			if err := snapshot.Import(opts.FS, tmp, in, lastSnapID); err != nil {
				return err
			}
		}
		if opts.BeforePublish != nil {
			return opts.BeforePublish(tmp, res)
		}
		return nil
	}
	res.Snapshots = len(snaps)

	// Objects: the tree's and the shipped snapshots' (manifests too), so
	// that the local catalog is whole (local GC and fork read them).
	ids := map[objid.ID]struct{}{}
	for _, n := range tree.Inodes() {
		if n.IsReg() {
			n.Content.Objects(func(id objid.ID) { ids[id] = struct{}{} })
		}
	}
	visited := map[objid.ID]bool{}
	checked := map[objid.ID]bool{} // agent state chunks found in the bucket
	for _, in := range snaps {
		if err := manifest.ForEachObject(remoteManifests{ctx, st}, in.Root, visited, func(id objid.ID) { ids[id] = struct{}{} }); err != nil {
			return res, fmt.Errorf("pull %s: shipped snapshot %d: %w", opts.Name, in.ID, err)
		}
		// The agent state copy's chunks, each checked (HEAD) unless the
		// tree has it: an entry shipped by an older wsfs names chunks
		// that were never uploaded, which must not fail the pull nor
		// keep a lazy workspace's prefetch retrying forever.
		var agent []objid.ID
		snapshot.AgentObjects(in, func(id objid.ID) { agent = append(agent, id) })
		missing := false
		for _, id := range agent {
			if _, ok := ids[id]; ok || checked[id] {
				continue
			}
			ok, err := st.Exists(ctx, remote.ObjectKey(id.String()))
			if err != nil {
				return res, fmt.Errorf("pull %s: shipped snapshot %d: agent state chunk %s: %w", opts.Name, in.ID, id, err)
			}
			if !ok {
				missing = true
				continue
			}
			checked[id] = true
		}
		if missing {
			res.AgentMissing = append(res.AgentMissing, in.ID)
		}
	}
	for id := range checked {
		ids[id] = struct{}{}
	}
	res.Objects = len(ids)
	list := make([]objid.ID, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	if opts.Lazy {
		if opts.RemoteURL == "" {
			return res, fmt.Errorf("pull %s: a lazy pull needs the remote's URL", opts.Name)
		}
		t1 := time.Now()
		err := writeWorkspace(opts, tree, at, func(tmp string) error {
			if err := importSnaps(tmp); err != nil {
				return err
			}
			fst := FetchState{Version: FetchStateVersion, Remote: opts.RemoteURL, Group: at, Objects: make([]string, 0, len(list))}
			for _, id := range list {
				fst.Objects = append(fst.Objects, id.String())
			}
			return writeFetchState(opts.FS, tmp, fst)
		})
		res.WriteTime = time.Since(t1)
		return res, err
	}
	var fetched, fetchedBytes atomic.Int64
	if err := parallel(ctx, opts.Parallel, list, func(ctx context.Context, id objid.ID) error {
		if _, err := opts.Pool.ReadAll(id); err == nil {
			return nil // already local (and verified)
		}
		n, err := fetchObject(ctx, st, opts.Pool, id)
		if err != nil {
			return err
		}
		fetched.Add(1)
		fetchedBytes.Add(int64(n))
		return nil
	}); err != nil {
		return res, err
	}
	res.Fetched, res.BytesGot = int(fetched.Load()), res.BytesGot+fetchedBytes.Load()
	if err := opts.Pool.SyncObjects(list, 0); err != nil {
		return res, fmt.Errorf("pull %s: sync fetched objects: %w", opts.Name, err)
	}
	return res, writeWorkspace(opts, tree, at, importSnaps)
}

// writeWorkspace writes the workspace directory of a pull, holding a
// checkpoint of tree at group at and an empty log after it (plus what
// extra writes into it), built beside and renamed into place.
//
// Its three parts — the checkpoint (with its durable marker), the log's
// first segment, and extra (the snapshots, the FetchState, the agent
// state) — touch disjoint files, and each is a chain of syncs (a file,
// then its directory). They run at once, so that their syncs share the
// file system's journal commits: on a host where another writer has much
// dirty data, each commit of the chain took 0.05–0.6 s (docs/benchmarks.md,
// "Remote tier under heavy load"). Nothing is visible before the rename:
// it happens only after every part returned and the directories are
// synced, so a pull killed at any point still leaves no workspace or a
// whole one.
func writeWorkspace(opts PullOptions, tree *namespace.Tree, at uint64, extra func(tmp string) error) error {
	parent := filepath.Dir(opts.Dir)
	tmp := filepath.Join(parent, vfs.TempPrefix+"pull-"+filepath.Base(opts.Dir))
	if err := opts.FS.RemoveAll(tmp); err != nil {
		return err
	}
	if err := opts.FS.MkdirAll(filepath.Join(tmp, "log"), vfs.PrivateDir); err != nil {
		return err
	}
	// The checkpoint is not synced here (see seglog.WriteUnsyncedCheckpoint):
	// the workspace's first opener syncs it, and nothing is acknowledged
	// before. Its marker names where to pull from again after a crash.
	origin := opts.RemoteURL
	if origin == "" {
		origin = opts.Store.String()
	}
	parts := []func() error{
		func() error {
			return seglog.WriteUnsyncedCheckpoint(opts.FS, filepath.Join(tmp, "checkpoint"), at, tree.EncodeCheckpoint(), origin)
		},
		func() error { return seglog.CreateAfter(opts.FS, filepath.Join(tmp, "log"), at) },
	}
	if extra != nil {
		parts = append(parts, func() error { return extra(tmp) })
	}
	if err := concurrently(parts...); err != nil {
		return err
	}
	if err := concurrently(
		func() error { return vfs.SyncDir(opts.FS, filepath.Join(tmp, "log")) },
		func() error { return vfs.SyncDir(opts.FS, tmp) },
	); err != nil {
		return err
	}
	if err := opts.FS.Rename(tmp, opts.Dir); err != nil {
		return err
	}
	return vfs.SyncDir(opts.FS, parent)
}

// concurrently runs fs at once and, once all of them returned, their
// errors joined (nil if none failed).
func concurrently(fs ...func() error) error {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Go(func() { errs[i] = f() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fetchObject downloads object id, verifies it and puts it into the pool
// (unsynced; the caller syncs).
func fetchObject(ctx context.Context, st remote.Store, p *pool.Pool, id objid.ID) (int, error) {
	data, err := ReadObject(ctx, st, id)
	if err != nil {
		return 0, err
	}
	if got, _, err := p.Put(data); err != nil {
		return 0, err
	} else if got != id {
		return 0, fmt.Errorf("pool put of %s stored %s", id, got)
	}
	return len(data), nil
}

// ReadObject reads object id from the bucket st and verifies it against
// its ID: a missing object is an error naming it, a corrupt one a
// *CorruptRemoteError.
func ReadObject(ctx context.Context, st remote.Store, id objid.ID) ([]byte, error) {
	key := remote.ObjectKey(id.String())
	data, err := st.Get(ctx, key)
	if errors.Is(err, remote.ErrNotFound) {
		return nil, fmt.Errorf("remote %s: object %s is missing, yet the workspace references it: %w", st, key, err)
	}
	if err != nil {
		return nil, err
	}
	if got := objid.Sum(data); got != id {
		return nil, &CorruptRemoteError{Store: st.String(), Key: key, Reason: fmt.Sprintf("its %d bytes hash to %s", len(data), got)}
	}
	return data, nil
}

// parallel runs fn over items with n workers; the first error cancels the
// rest and is returned.
func parallel[T any](ctx context.Context, n int, items []T, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan T)
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(n, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if err := fn(ctx, it); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case work <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// restoreTree rebuilds the tree head h names: its checkpoint (or an empty
// tree) and every group of its batches after it, each file verified. It
// returns the tree, its group, the bytes read and the batches read.
func restoreTree(ctx context.Context, st remote.Store, name string, h Head) (tree *namespace.Tree, at uint64, got int64, nread int, err error) {
	tree = namespace.New(0o755, uint32(os.Getuid()), uint32(os.Getgid()), 0)
	if h.Checkpoint != nil {
		b, err := st.Get(ctx, h.Checkpoint.Key)
		if err != nil {
			return nil, 0, got, nread, err
		}
		got += int64(len(b))
		p, err := seglog.DecodeCheckpointFile(h.Checkpoint.Key, h.Checkpoint.Group, b)
		if err != nil {
			return nil, 0, got, nread, &CorruptRemoteError{Store: st.String(), Key: h.Checkpoint.Key, Reason: err.Error()}
		}
		if tree, err = namespace.DecodeCheckpoint(p); err != nil {
			return nil, 0, got, nread, &CorruptRemoteError{Store: st.String(), Key: h.Checkpoint.Key, Reason: err.Error()}
		}
		at = h.Checkpoint.Group
	}
	for _, bt := range h.Batches {
		if bt.Last <= at {
			continue
		}
		b, err := st.Get(ctx, bt.Key)
		if err != nil {
			return nil, 0, got, nread, err
		}
		got += int64(len(b))
		nread++
		first, last, err := seglog.DecodeSegment(bt.Key, b, func(g uint64, records [][]byte) error {
			if g <= at {
				return nil
			}
			if g != at+1 {
				return fmt.Errorf("group %d follows group %d", g, at)
			}
			for i, data := range records {
				r, err := namespace.DecodeRecord(data)
				if err == nil {
					r.Content.Inline = bytes.Clone(r.Content.Inline)
					r.Value = bytes.Clone(r.Value)
					err = tree.Apply(r)
				}
				if err != nil {
					return fmt.Errorf("group %d record %d: %w", g, i, err)
				}
			}
			at = g
			return nil
		})
		if err == nil && (first != bt.First || last != bt.Last) {
			err = fmt.Errorf("holds groups %d-%d, the head says %d-%d", first, last, bt.First, bt.Last)
		}
		if err != nil {
			return nil, 0, got, nread, &CorruptRemoteError{Store: st.String(), Key: bt.Key, Reason: err.Error()}
		}
	}
	if at != h.Group {
		return nil, 0, got, nread, &CorruptRemoteError{Store: st.String(), Key: HeadKey(name),
			Reason: fmt.Sprintf("names group %d, but its checkpoint and batches end at group %d", h.Group, at)}
	}
	if err := tree.Check(); err != nil {
		return nil, 0, got, nread, &CorruptRemoteError{Store: st.String(), Key: HeadKey(name), Reason: "restored tree: " + err.Error()}
	}
	return tree, at, got, nread, nil
}
