package fusefs

import (
	"container/list"
	"sync"
	"syscall"
	"time"

	"wsfs/internal/workspace"
)

// Directory listings without directory handles.
//
// The mount answers OPENDIR with ENOSYS when the kernel offers
// FUSE_NO_OPENDIR_SUPPORT: the kernel then opens every directory of the
// mount without a message, sends no RELEASEDIR, and keeps each listing in
// the directory's page cache (FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR are its
// defaults for a handle-less open). A directory listed again therefore
// costs no request at all, and a first listing costs only its READDIRs.
//
// Without handles, READDIR carries nothing but the directory and an
// offset, so the offsets themselves must say where a listing stands. Every
// READDIR at offset 0 takes a snapshot of the directory (a listing) and
// gives it a number; the offset of the entry at index i of listing g is
// g<<32 | i+1. A READDIR at any other offset continues the listing named
// in it. That keeps what the per-open snapshots gave: an entry that exists
// for the whole of a listing is returned exactly once, whatever is created
// or removed meanwhile (TestReadDirConcurrentChanges), and a listing the
// kernel started from its cache continues in the same snapshot the cache
// was filled from (the kernel drops a cache filled from any other state).
//
// Listings are kept in memory after their end too (a process may seek back
// to an offset it got), bounded by listingsMaxCount, listingsMaxEntries and
// listingsIdle, least recently used first out. A listing in progress (not
// yet read to its end, and read within listingsBusy) is dropped only when
// idle: however many readers list large directories at once, each keeps
// its snapshot (25 readers of a 50,000-entry directory already exceed the
// entry bound; dropping theirs made every one of them see entries twice or
// not at all, each replacement snapshot dropping the next). Its memory is
// that of the listings being read, as in the kernel's own page cache, up
// to listingsHardFactor times the bounds (a flood of readers that stop
// early, each of a directory changed since the last, must not exhaust
// memory in listingsBusy). A
// READDIR naming a listing no longer kept (dropped by those bounds, or
// from before a restart of the daemon, which a new mount never sees) is
// served from a new snapshot at the same index: correct when the
// directory did not change, and at worst an entry skipped or repeated
// when it did.
type listings struct {
	mu      sync.Mutex
	next    uint32 // number of the last listing; 1..maxListing
	byNum   map[uint32]*list.Element
	lru     list.List // of *listing, most recently used at the front
	entries int       // sum of len(entries) over lru
	now     func() time.Time
}

// listing is one snapshot of a directory: ".", "..", then the engine's
// entries in its (sorted) order. Immutable once made.
type listing struct {
	num     uint32
	dir     workspace.Ino
	entries []workspace.DirEntry
	used    time.Time // listings.mu
	done    bool      // read to its end once (listings.mu)
}

const (
	listingsMaxCount   = 4096
	listingsMaxEntries = 1 << 20
	listingsIdle       = 5 * time.Minute
	listingsBusy       = 30 * time.Second // a listing in progress read this recently is kept
	listingsHardFactor = 8                // ... unless the bounds are exceeded this many times over
	// maxListing keeps offsets below 2^63: the kernel's directory
	// position is a signed loff_t.
	maxListing = 1<<31 - 1
)

func newListings() *listings {
	return &listings{byNum: make(map[uint32]*list.Element), now: time.Now}
}

// dirOffset is the READDIR offset that follows entry index i of listing num.
func dirOffset(num uint32, i int) uint64 { return uint64(num)<<32 | uint64(i+1) }

// at returns the listing a READDIR of dir at off continues, and the index
// of its next entry. Offset 0 starts a new listing; read takes the
// directory's entries for a new snapshot.
func (l *listings) at(dir workspace.Ino, off uint64, read func() ([]workspace.DirEntry, error)) (*listing, int, error) {
	num, idx := uint32(off>>32), int(off&0xffffffff)
	if off != 0 {
		if idx == 0 || num == 0 || num > maxListing {
			return nil, 0, syscall.EINVAL // never an offset this mount gave
		}
		if ls := l.get(num, dir); ls != nil {
			return ls, idx, nil
		}
	}
	ents, err := read()
	if err != nil {
		return nil, 0, err
	}
	return l.add(dir, withDots(dir, ents)), idx, nil
}

func (l *listings) get(num uint32, dir workspace.Ino) *listing {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.byNum[num]
	if !ok {
		return nil
	}
	ls := e.Value.(*listing)
	if ls.dir != dir {
		return nil
	}
	ls.used = l.now()
	l.lru.MoveToFront(e)
	return ls
}

func (l *listings) add(dir workspace.Ino, entries []workspace.DirEntry) *listing {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	if l.next > maxListing {
		l.next = 1
	}
	if old, ok := l.byNum[l.next]; ok { // wrapped around onto a kept one
		l.remove(old)
	}
	ls := &listing{num: l.next, dir: dir, entries: entries, used: l.now()}
	l.byNum[ls.num] = l.lru.PushFront(ls)
	l.entries += len(entries)
	idle, busy := ls.used.Add(-listingsIdle), ls.used.Add(-listingsBusy)
	// From the least recently used: drop idle listings, and while over a
	// bound, listings not in progress.
	for e := l.lru.Back(); e != nil && e != l.lru.Front(); {
		prev, old := e.Prev(), e.Value.(*listing)
		over := l.lru.Len() > listingsMaxCount || l.entries > listingsMaxEntries
		hard := l.lru.Len() > listingsHardFactor*listingsMaxCount || l.entries > listingsHardFactor*listingsMaxEntries
		switch {
		case old.used.Before(idle):
			l.remove(e)
		case !over:
			return ls // the rest is more recently used: not idle either
		case old.done || old.used.Before(busy) || hard:
			l.remove(e)
		}
		e = prev
	}
	return ls
}

// finished notes that ls was read to its end: it no longer counts as in
// progress.
func (l *listings) finished(ls *listing) {
	l.mu.Lock()
	ls.done = true
	l.mu.Unlock()
}

// remove drops a kept listing. l.mu must be held.
func (l *listings) remove(e *list.Element) {
	ls := e.Value.(*listing)
	l.lru.Remove(e)
	delete(l.byNum, ls.num)
	l.entries -= len(ls.entries)
}

func withDots(ino workspace.Ino, ents []workspace.DirEntry) []workspace.DirEntry {
	all := make([]workspace.DirEntry, 0, len(ents)+2)
	// ".." carries the directory's own inode number: the adapter does not
	// know the parent, and the kernel never uses d_ino of "..".
	all = append(all, workspace.DirEntry{Name: ".", Ino: ino, Mode: syscall.S_IFDIR},
		workspace.DirEntry{Name: "..", Ino: ino, Mode: syscall.S_IFDIR})
	return append(all, ents...)
}
