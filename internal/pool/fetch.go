package pool

import (
	"fmt"
	"io/fs"
	"sync/atomic"
	"time"

	"wsfs/internal/objid"
)

// Fetcher is a source the pool reads an object from when it is not local:
// the remote tier a workspace was pulled from lazily (internal/ship's
// RemoteFetcher). Fetch returns the object's bytes, or an error naming the
// source and the object; the pool verifies the bytes, so a Fetcher need not.
// It must be safe for concurrent use and must bound its own time (the
// pool's callers are file reads).
type Fetcher interface {
	Fetch(id ID) ([]byte, error)
	// String names the source in messages (never credentials).
	String() string
}

// FetchError reports an object that is not local and could not be fetched
// from the pool's Fetcher: the source failed, does not have it, or returned
// bytes that do not hash to its name (Corrupt). Nothing is published then:
// the object stays missing, and the next read tries again.
type FetchError struct {
	ID      ID
	Source  string
	Corrupt bool // the source's bytes hash to Got, not ID
	Got     ID
	Err     error // the source's error (nil when Corrupt)
}

func (e *FetchError) Error() string {
	if e.Corrupt {
		return fmt.Sprintf("pool: object %s is not local and its copy in %s is corrupt (its bytes hash to %s): "+
			"files that reference it cannot be read; re-ship the object from a host that has it intact, "+
			"or restore or rewrite the files", e.ID, e.Source, e.Got)
	}
	return fmt.Sprintf("pool: object %s is not local and fetching it from %s failed: %v "+
		"(check that the remote is reachable and holds it; the next read tries again)", e.ID, e.Source, e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }

// FetchStats counts the fetches of this process's pool.
type FetchStats struct {
	Fetched  int64 // objects fetched and published
	Bytes    int64 // their bytes
	Failed   int64 // fetches that failed (source error or corrupt copy)
	InFlight int64 // fetches running now
	Shared   int64 // callers that waited for another caller's fetch of the same object
}

// fetchCall is one fetch in flight; callers of the same object wait on done.
type fetchCall struct {
	done chan struct{}
	err  error
}

// fetchCounters are the atomics behind FetchStats.
type fetchCounters struct {
	fetched, bytes, failed, inFlight, shared atomic.Int64
}

// Fetching reports whether the pool has a Fetcher.
func (p *Pool) Fetching() bool { return p.fetcher != nil }

// FetchStats returns the pool's fetch counters.
func (p *Pool) FetchStats() FetchStats {
	c := &p.fetchStats
	return FetchStats{Fetched: c.fetched.Load(), Bytes: c.bytes.Load(), Failed: c.failed.Load(),
		InFlight: c.inFlight.Load(), Shared: c.shared.Load()}
}

// Fetch makes object id local from the pool's Fetcher unless it already
// exists here: the source's bytes are verified against id and published
// with Put (the normal path: link-if-absent, not synced; SyncObjects makes
// them durable). Concurrent calls for one object share one fetch. Without
// a Fetcher, a missing object is a *MissingObjectError.
//
// Fetch does not check an existing object's bytes (Open and ReadAll do,
// and heal a corrupt one through Fetch's refetch path).
func (p *Pool) Fetch(id ID) error {
	ok, err := p.Has(id)
	if err != nil || ok {
		return err
	}
	return p.fetch(id, false)
}

// fetch fetches id from the Fetcher (which the caller checked is set) and
// publishes it; with repair, the local object is known corrupt and Put
// replaces it (see Put).
func (p *Pool) fetch(id ID, repair bool) error {
	if p.fetcher == nil {
		path := p.Path(id)
		return &MissingObjectError{ID: id, Path: path, Err: errNotLocal}
	}
	p.mu.Lock()
	if c, ok := p.mu.fetching[id]; ok {
		p.mu.Unlock()
		p.fetchStats.shared.Add(1)
		<-c.done
		return c.err
	}
	c := &fetchCall{done: make(chan struct{})}
	p.mu.fetching[id] = c
	p.mu.Unlock()

	c.err = p.fetchOne(id, repair)

	p.mu.Lock()
	delete(p.mu.fetching, id)
	p.mu.Unlock()
	close(c.done)
	return c.err
}

// errNotLocal is the cause of a MissingObjectError for an object that is
// not local when the pool has no Fetcher.
var errNotLocal = fmt.Errorf("not in the local pool and no remote to fetch it from: %w", fs.ErrNotExist)

// fetchOne does one fetch (fetch holds the object's slot).
func (p *Pool) fetchOne(id ID, repair bool) error {
	if !repair {
		// Another caller's fetch may have finished between this caller's
		// miss and its taking the slot.
		if ok, err := p.Has(id); err != nil || ok {
			return err
		}
	}
	c := &p.fetchStats
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	start := time.Now()
	data, err := p.fetcher.Fetch(id)
	if err == nil {
		if got := objid.Sum(data); got != id {
			err = &FetchError{ID: id, Source: p.fetcher.String(), Corrupt: true, Got: got}
		}
	} else {
		err = &FetchError{ID: id, Source: p.fetcher.String(), Err: err}
	}
	if err != nil {
		c.failed.Add(1)
		p.log.Error("pool: object not local and not fetched; reads of files that reference it fail with EIO", "id", id.String(), "err", err)
		return err
	}
	if repair {
		// Put replaces a known-corrupt object durably (see Put).
		p.mu.Lock()
		p.setCorrupt(id)
		p.mu.Unlock()
	}
	if _, _, err := p.Put(data); err != nil {
		c.failed.Add(1)
		return fmt.Errorf("pool: publish object %s fetched from %s: %w", id, p.fetcher.String(), err)
	}
	c.fetched.Add(1)
	c.bytes.Add(int64(len(data)))
	p.log.Debug("pool: fetched object", "id", id.String(), "bytes", len(data), "took", time.Since(start))
	return nil
}
