package ship

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/vfs"
)

// FetchStateName is the file in a workspace directory that a lazy Pull
// writes (FetchState): the workspace's tree was restored, but the pool
// objects it references may not be local yet; they are fetched from the
// remote it names on first read (pool.Fetcher) and by the daemon's
// background prefetch. The file is removed, durably, only once every
// object it lists is local and synced; while it exists, a missing object
// of the workspace is "not yet fetched", not lost (wsfs fsck, gc and the
// shipper treat it so).
const FetchStateName = "remote-fetch.json"

// ErrBadFetchState is wrapped by ReadFetchState when the file is damaged
// (not JSON, or naming objects that do not parse): corrupt data, which
// the caller reports as such.
var ErrBadFetchState = errors.New("damaged " + FetchStateName)

// FetchStateVersion is the version of FetchState's encoding.
const FetchStateVersion = 1

// FetchState is the content of FetchStateName.
type FetchState struct {
	Version int `json:"version"`
	// Remote is the remote the workspace was pulled from, as a
	// remote.Config URL (no credentials: those are the host's).
	Remote string `json:"remote"`
	// Group is the group the workspace was pulled at.
	Group uint64 `json:"group"`
	// Objects lists (hex) every pool object the pulled tree references.
	Objects []string `json:"objects"`
}

// IDs parses Objects.
func (s FetchState) IDs() ([]objid.ID, error) {
	ids := make([]objid.ID, 0, len(s.Objects))
	for _, h := range s.Objects {
		id, err := objid.Parse(h)
		if err != nil {
			return nil, fmt.Errorf("%s: object %q: %w", FetchStateName, h, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// ReadFetchState reads workspace dir's FetchState; ok is false if the
// workspace has none (everything it references is local).
func ReadFetchState(fsys vfs.FS, dir string) (st FetchState, ok bool, err error) {
	path := filepath.Join(dir, FetchStateName)
	b, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if st, err = decodeFetchState(b); err != nil {
		return st, false, fmt.Errorf("%s: %w", path, err)
	}
	return st, true, nil
}

// decodeFetchState decodes a FetchStateName file: a version this wsfs
// reads, and object names that parse.
func decodeFetchState(b []byte) (FetchState, error) {
	var st FetchState
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: %v (remove the workspace and pull it again)", ErrBadFetchState, err)
	}
	if st.Version != FetchStateVersion {
		return st, fmt.Errorf("version %d, this wsfs reads version %d: use a newer wsfs", st.Version, FetchStateVersion)
	}
	if _, err := st.IDs(); err != nil {
		return st, fmt.Errorf("%w: %v (remove the workspace and pull it again)", ErrBadFetchState, err)
	}
	return st, nil
}

// writeFetchState writes st to dir durably (the caller syncs dir).
func writeFetchState(fsys vfs.FS, dir string, st FetchState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return vfs.Publish(fsys, filepath.Join(dir, FetchStateName), true, func(f vfs.File) error {
		_, err := f.Write(b)
		return err
	})
}

// RemoteFetcher is the pool.Fetcher of a lazily pulled workspace: it gets
// objects from the remote store, each Get bounded by Timeout (default
// 60s), so that a read of a not-yet-local object fails with EIO rather
// than hanging while the remote is unreachable.
type RemoteFetcher struct {
	Store   remote.Store
	Timeout time.Duration
}

// Fetch gets object id from the store (the pool verifies it).
func (f *RemoteFetcher) Fetch(id objid.ID) ([]byte, error) {
	d := f.Timeout
	if d <= 0 {
		d = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	key := remote.ObjectKey(id.String())
	data, err := f.Store.Get(ctx, key)
	if errors.Is(err, remote.ErrNotFound) {
		return nil, fmt.Errorf("the remote has no %s (it was never shipped, or was deleted from the bucket): %w", key, err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("get %s: no answer within %v: %w", key, d, err)
	}
	return data, err
}

func (f *RemoteFetcher) String() string { return f.Store.String() }

// PrefetchOptions configure Prefetch.
type PrefetchOptions struct {
	FS   vfs.FS // default vfs.Default
	Dir  string // the workspace directory (holds FetchStateName)
	Pool *pool.Pool
	// Parallel fetches (default 4): bounded, so that the prefetch leaves
	// bandwidth to reads that fetch on demand.
	Parallel int
	// Retry is the wait before another pass over objects whose fetch
	// failed (default 5s, doubling to a minute).
	Retry  time.Duration
	Logger *slog.Logger
}

// PrefetchProgress is a live view of a Prefetch (safe to read while it runs).
type PrefetchProgress struct {
	total, local, failed atomic.Int64
	done                 atomic.Bool
	start                atomic.Int64 // UnixNano
}

// PrefetchStatus is a snapshot of PrefetchProgress.
type PrefetchStatus struct {
	Objects int64   `json:"objects"` // objects the pulled tree references
	Local   int64   `json:"local"`   // of them, local now
	Failed  int64   `json:"failed"`  // fetches that failed in the last pass
	Done    bool    `json:"done"`    // everything local and synced; FetchStateName removed
	Seconds float64 `json:"seconds"`
}

// Status returns the progress so far.
func (p *PrefetchProgress) Status() PrefetchStatus {
	secs := 0.0
	if start := p.start.Load(); start != 0 {
		secs = time.Since(time.Unix(0, start)).Seconds()
	}
	return PrefetchStatus{Objects: p.total.Load(), Local: p.local.Load(), Failed: p.failed.Load(),
		Done: p.done.Load(), Seconds: secs}
}

// Prefetch makes every object of the workspace's FetchState local and
// verified (pool.Open with the pool's Fetcher: a read fetching the same
// object at the same time shares the fetch), retrying failed ones until ctx ends; then it syncs them all
// (SyncObjects) and removes FetchStateName durably, after which the
// workspace is like any other. It returns nil when done or when the
// workspace has no FetchState, ctx's error when stopped first, or the
// error of a failed sync or removal. prog, if not nil, is updated as it
// goes.
func Prefetch(ctx context.Context, opts PrefetchOptions, prog *PrefetchProgress) error {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	if opts.Retry <= 0 {
		opts.Retry = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if prog == nil {
		prog = &PrefetchProgress{}
	}
	start := time.Now()
	prog.start.Store(start.UnixNano())
	st, ok, err := ReadFetchState(opts.FS, opts.Dir)
	if err != nil || !ok {
		prog.done.Store(err == nil)
		return err
	}
	ids, err := st.IDs()
	if err != nil {
		return err
	}
	prog.total.Store(int64(len(ids)))
	todo := ids
	wait := opts.Retry
	for len(todo) > 0 {
		var failed []objid.ID
		failedCh := make(chan objid.ID, len(todo))
		prog.failed.Store(0)
		err := parallel(ctx, opts.Parallel, todo, func(ctx context.Context, id objid.ID) error {
			// Open, not a stat: it verifies an object already here
			// (once per process), so one torn by a crash after an
			// unsynced fetch is fetched again, and fetches a missing one
			// (shared with a read of the same object).
			f, err := opts.Pool.Open(id)
			if err == nil {
				err = f.Close()
			}
			if err != nil {
				prog.failed.Add(1)
				failedCh <- id
				return nil // logged by the pool; retried in the next pass
			}
			prog.local.Add(1)
			return nil
		})
		close(failedCh)
		for id := range failedCh {
			failed = append(failed, id)
		}
		if err != nil {
			return err
		}
		if len(failed) == 0 {
			break
		}
		opts.Logger.Warn("prefetch: some objects could not be fetched; retrying", "failed", len(failed), "retry_in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
		todo = failed
	}
	if err := opts.Pool.SyncObjects(ids, pool.DefaultSyncParallel); err != nil {
		return fmt.Errorf("prefetch %s: sync the fetched objects: %w", opts.Dir, err)
	}
	if err := opts.FS.Remove(filepath.Join(opts.Dir, FetchStateName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("prefetch %s: %w", opts.Dir, err)
	}
	if err := vfs.SyncDir(opts.FS, opts.Dir); err != nil {
		return fmt.Errorf("prefetch %s: %w", opts.Dir, err)
	}
	prog.done.Store(true)
	opts.Logger.Info("prefetch: every object is local", "objects", len(ids), "seconds", time.Since(start).Seconds())
	return nil
}
