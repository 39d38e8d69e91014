package pool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/vfs"
)

// DefaultSyncParallel is the number of objects SyncObjects syncs at once
// when called with parallel < 1 (docs/benchmarks.md, "Drain parallelism"):
// concurrent syncs let the block layer batch the flushes, and 16 is within
// about 10 % of 64 while holding a quarter of the OS threads (each blocked
// fdatasync occupies one), which matters with one daemon per workspace on
// a host.
const DefaultSyncParallel = 16

// SyncObjects is the drain: it makes every object in ids durable, with at
// most parallel (DefaultSyncParallel if < 1) syncs in flight.
//
// Steps: SyncData every object in ids (duplicates are synced once), then
// Sync each distinct fan-out directory holding them once, and objects/
// itself if any of those fan-out directories is not yet known durable to
// this process (see the package doc). An object this process already made
// durable is skipped for a while (see durableWindow). ids must
// hold the objects the group published and the ones it deduplicated
// against: another process may have published those and not synced them.
//
// On success every object in ids is durable. On any failure SyncObjects
// returns a *SyncError naming each failed object or directory and listing
// the objects to Republish, and marks nothing durable. A missing object is
// listed in SyncError.Missing, with a *MissingObjectError in its Errs
// (Republish cannot help it: the content must be Put again).
func (p *Pool) SyncObjects(ids []ID, parallel int) error {
	if parallel < 1 {
		parallel = DefaultSyncParallel
	}
	todo := make([]ID, 0, len(ids))
	seen := make(map[ID]struct{}, len(ids))
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		if !p.knownDurable(id) {
			todo = append(todo, id)
		}
	}
	if len(todo) == 0 {
		return nil
	}

	// Phase 1: object data.
	mtimes := make([]time.Time, len(todo))
	errs := make([]error, len(todo))
	runBounded(len(todo), parallel, func(i int) {
		mtimes[i], errs[i] = p.syncObject(todo[i])
	})
	var se SyncError
	for i, err := range errs {
		if err == nil {
			continue
		}
		se.Errs = append(se.Errs, err)
		if errors.As(err, new(*MissingObjectError)) || errors.As(err, new(*FetchError)) {
			se.Missing = append(se.Missing, todo[i])
		} else {
			se.Republish = append(se.Republish, todo[i])
		}
	}
	if len(se.Errs) > 0 {
		return &se
	}

	// Phase 2: publication directories, each once (at most 16 fan-out
	// directories and objects/).
	type dirJob struct {
		path string
		ids  []ID // the objects whose entries this sync makes durable
	}
	var jobs []dirJob
	var byFanout [fanouts]int // fan-out index -> 1 + index in jobs
	var pendingFanouts []int  // fan-outs not yet known durable: objects/ must be synced
	var pendingIDs []ID
	p.mu.Lock()
	for _, id := range todo {
		k := fanoutIndex(id)
		if byFanout[k] == 0 {
			jobs = append(jobs, dirJob{path: p.fanoutDir(id)})
			byFanout[k] = len(jobs)
			if p.mu.fanout[k]&fanoutDurable == 0 {
				pendingFanouts = append(pendingFanouts, k)
			}
		}
		j := byFanout[k] - 1
		jobs[j].ids = append(jobs[j].ids, id)
		if p.mu.fanout[k]&fanoutDurable == 0 {
			pendingIDs = append(pendingIDs, id)
		}
	}
	p.mu.Unlock()
	if len(pendingFanouts) > 0 {
		jobs = append(jobs, dirJob{path: p.objects, ids: pendingIDs})
	}
	derrs := make([]error, len(jobs))
	runBounded(len(jobs), parallel, func(i int) {
		derrs[i] = vfs.SyncDir(p.fs, jobs[i].path)
	})
	republish := make(map[ID]struct{})
	for i, err := range derrs {
		if err == nil {
			continue
		}
		se.Errs = append(se.Errs, fmt.Errorf("pool: drain: %w (entries of %d object(s) not durable)", err, len(jobs[i].ids)))
		for _, id := range jobs[i].ids {
			if _, dup := republish[id]; !dup {
				republish[id] = struct{}{}
				se.Republish = append(se.Republish, id)
			}
		}
	}
	if len(se.Errs) > 0 {
		return &se
	}

	p.mu.Lock()
	for i, id := range todo {
		setCache(p.mu.durable, id, mtimes[i].Add(p.trust))
	}
	for _, b := range pendingFanouts {
		p.mu.fanout[b] |= fanoutDurable
	}
	p.mu.Unlock()
	return nil
}

// knownDurable reports whether this process made object id durable
// recently enough to trust it (see durableWindow).
func (p *Pool) knownDurable(id ID) bool {
	p.mu.Lock()
	until, ok := p.mu.durable[id]
	p.mu.Unlock()
	return ok && p.now().Before(until)
}

// syncObject opens object id read-only and SyncData's it. It returns the
// object's mtime.
//
// Before the sync it makes sure the bytes are right: unless this process
// verified the object since it last changed (Pool.mu.verified at this
// size: Put verifies every object it publishes or deduplicates against),
// it hashes the object, and a mismatch is a *CorruptObjectError, so a group
// never commits a reference to bytes nobody checked. And if the object's
// mtime is older than the refresh age (a quarter of the minimum grace
// period), it sets it to now: a group that keeps being retried (a full log
// filesystem) keeps its objects out of GC's reach, however long it waits.
func (p *Pool) syncObject(id ID) (time.Time, error) {
	path := p.Path(id)
	f, err := p.fs.Open(path)
	if errors.Is(err, os.ErrNotExist) && p.fetcher != nil {
		// Not local yet (a lazily pulled workspace): fetch it, then sync
		// the fetched copy like any other.
		if ferr := p.fetch(id, false); ferr != nil {
			return time.Time{}, ferr
		}
		f, err = p.fs.Open(path)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return time.Time{}, &MissingObjectError{ID: id, Path: path, Err: err}
		}
		return time.Time{}, fmt.Errorf("pool: sync object %s: open: %w", id, err)
	}
	mtime, err := p.checkAndSync(id, path, f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pool: sync object %s (%s): %w", id, path, cerr)
	}
	return mtime, err
}

// checkAndSync is syncObject's work on the open object f.
func (p *Pool) checkAndSync(id ID, path string, f vfs.File) (time.Time, error) {
	fi, err := f.Stat()
	if err != nil {
		return time.Time{}, fmt.Errorf("pool: sync object %s (%s): stat: %w", id, path, err)
	}
	if !p.isVerified(id, fi.Size()) {
		h := objid.NewHasher()
		if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, fi.Size()+1), make([]byte, 256<<10)); err != nil {
			return time.Time{}, fmt.Errorf("pool: sync object %s: read to verify: %w", id, err)
		}
		if got := h.Sum(); got != id {
			return time.Time{}, p.corruptErr(id, path, got)
		}
		p.mu.Lock()
		setCache(p.mu.verified, id, fi.Size())
		p.mu.Unlock()
	}
	mtime := fi.ModTime()
	if now := p.now(); mtime.Before(now.Add(-p.refresh)) {
		if err := p.fs.Chtimes(path, now, now); err != nil {
			return time.Time{}, fmt.Errorf("pool: sync object %s: protect: %w", id, err)
		}
		mtime = now
	}
	if err := f.SyncData(); err != nil {
		return time.Time{}, fmt.Errorf("pool: sync object %s (%s): %w", id, path, err)
	}
	return mtime, nil
}

// runBounded calls fn(0..n-1) with at most parallel calls running at once.
func runBounded(n, parallel int, fn func(i int)) {
	if parallel > n {
		parallel = n
	}
	if parallel <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// Republish makes object id durable again after a failed sync (SyncError's
// Republish list): it reads the object back and verifies it (a mismatch is
// a *CorruptObjectError: the content is lost and must be Put again from
// another source), writes a new copy to a temp, SyncData's it, renames it
// over the object, and syncs the fan-out directory (and objects/ if the
// fan-out directory is not yet known durable). Only when all of that
// succeeded is the object durable (and marked so). Any error means it is
// not; the caller must not commit anything that references it.
func (p *Pool) Republish(id ID) error {
	p.mu.Lock()
	delete(p.mu.durable, id)
	p.mu.Unlock()
	data, err := p.readVerified(id)
	if err != nil {
		return fmt.Errorf("pool: republish: %w", err)
	}
	return p.repairFromBytes(id, data, "republish after a failed sync")
}

// repairFromBytes durably replaces object id with data, which hashes to id.
func (p *Pool) repairFromBytes(id ID, data []byte, reason string) error {
	f, tmp, err := p.createTemp(repairPrefix)
	if err != nil {
		return fmt.Errorf("pool: repair object %s: %w", id, err)
	}
	_, err = f.Write(data)
	mtime, err := syncAndClose(f, err)
	if err != nil {
		p.removeTemp(tmp)
		return fmt.Errorf("pool: repair object %s (%s): write and sync new copy %s: %w", id, reason, tmp, err)
	}
	return p.replaceDurably(id, tmp, mtime, int64(len(data)), reason)
}

// repairFromTemp durably replaces object id with the temp file tmp, whose
// content the caller says hashes to id.
func (p *Pool) repairFromTemp(id ID, tmp string, reason string) error {
	f, err := p.fs.Open(tmp)
	if err != nil {
		p.removeTemp(tmp)
		return fmt.Errorf("pool: repair object %s (%s): open %s: %w", id, reason, tmp, err)
	}
	mtime, err := syncAndClose(f, nil)
	if err != nil {
		p.removeTemp(tmp)
		return fmt.Errorf("pool: repair object %s (%s): sync %s: %w", id, reason, tmp, err)
	}
	return p.replaceDurably(id, tmp, mtime, -1, reason)
}

// syncAndClose makes a repair temp's data durable and closes it, returning
// its mtime as synced (replaceDurably trusts the sync for a window from it).
// A non-nil err (from writing it) skips the sync; the file is closed anyway.
func syncAndClose(f vfs.File, err error) (time.Time, error) {
	if err == nil {
		err = f.SyncData()
	}
	var mtime time.Time
	if err == nil {
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil {
			mtime = fi.ModTime()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return mtime, err
}

// replaceDurably renames the synced temp tmp (mtime as synced) over object
// id and syncs the directories that make the entry durable. On success it
// marks id durable, no longer corrupt, and verified if verifiedSize >= 0
// (the caller hashed those bytes).
func (p *Pool) replaceDurably(id ID, tmp string, mtime time.Time, verifiedSize int64, reason string) error {
	if err := p.ensureFanout(id); err != nil {
		p.removeTemp(tmp)
		return err
	}
	obj := p.Path(id)
	if err := p.fs.Rename(tmp, obj); err != nil {
		p.removeTemp(tmp)
		return fmt.Errorf("pool: repair object %s (%s): rename %s over %s: %w", id, reason, tmp, obj, err)
	}
	p.mu.Lock()
	delete(p.mu.verified, id)
	delete(p.mu.durable, id)
	fanDurable := p.mu.fanout[fanoutIndex(id)]&fanoutDurable != 0
	p.mu.Unlock()
	if err := vfs.SyncDir(p.fs, p.fanoutDir(id)); err != nil {
		return fmt.Errorf("pool: repair object %s (%s): %w; the object is not durable", id, reason, err)
	}
	if !fanDurable {
		if err := vfs.SyncDir(p.fs, p.objects); err != nil {
			return fmt.Errorf("pool: repair object %s (%s): %w; the object is not durable", id, reason, err)
		}
	}
	p.mu.Lock()
	p.mu.fanout[fanoutIndex(id)] |= fanoutDurable
	setCache(p.mu.durable, id, mtime.Add(p.trust))
	if verifiedSize >= 0 {
		setCache(p.mu.verified, id, verifiedSize)
	}
	delete(p.mu.corrupt, id)
	p.mu.Unlock()
	p.log.Warn("pool: replaced object with a synced copy", "id", id.String(), "reason", reason)
	return nil
}

// SyncFS is the legacy drain (--drain=syncfs): syncfs(2) on the file system
// holding the pool, which flushes every dirty page of every process on it.
// Not used by default. It marks nothing durable in this process's set.
func (p *Pool) SyncFS() error {
	if err := p.fs.SyncFS(p.dir); err != nil {
		return fmt.Errorf("pool: syncfs %s: %w", p.dir, err)
	}
	return nil
}
