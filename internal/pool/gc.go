package pool

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"wsfs/internal/vfs"
)

// GCStats reports what one GC pass did.
type GCStats struct {
	Scanned int   // objects examined
	Removed int   // objects removed
	Bytes   int64 // bytes of the removed objects (reclaimed)
	// TempsRemoved counts stale temps removed from POOL/tmp (left by
	// crashed publishers and repairs, interrupted GC).
	TempsRemoved int
	TempBytes    int64
	// Kept counts unreferenced objects GC found protected while it was
	// removing them (a concurrent dedup hit) and put back.
	Kept int
	// Restored counts objects an interrupted earlier pass had moved to its
	// graveyard after they were protected, and that this pass put back.
	Restored int
}

// GCOptions configure one GC pass.
type GCOptions struct {
	// Grace: unreferenced objects whose mtime is within Grace of MarkStart
	// are kept. At least the pool's minimum (MinGrace; see TestMinGraceEnv).
	Grace time.Duration
	// MarkStart is when the caller began computing the referenced set
	// (before it read any workspace's state). Zero means now. The cutoff is
	// MarkStart-Grace: an object is removed only if nobody put or protected
	// it within Grace before the marking began.
	MarkStart time.Time
}

// gcLockName is the lock file that keeps two GC passes (in any processes)
// from running at once.
const gcLockName = "gc.lock"

// ErrGCRunning is wrapped by the error of a GC pass that found another
// pass holding POOL/gc.lock.
var ErrGCRunning = errors.New("another wsfs gc holds the pool's gc.lock")

// GC is Collect with GCOptions{Grace: grace} (marking began now).
func (p *Pool) GC(referenced func(ID) bool, grace time.Duration) (GCStats, error) {
	return p.Collect(referenced, GCOptions{Grace: grace})
}

// Collect removes every object for which referenced returns false and
// whose mtime is older than opts.MarkStart-opts.Grace (by Options.Clock),
// and every temp in POOL/tmp older than that. referenced must answer for
// every workspace that uses the pool, from state read after MarkStart; it
// is called without any pool lock held.
//
// The safety argument (why a concurrent daemon never loses an object it
// references or is about to reference; see also cmd/wsfs/gc.go):
//
//   - An object a daemon references only in memory (a group not yet
//     committed) was put or protected by Put when the reference was made,
//     so its mtime is at most one commit window (plus any wait for log
//     space, during which each retry of the drain protects it again; see
//     SyncObjects) old. Since Grace far exceeds that, the object is newer
//     than the cutoff, unless its group committed before the marking
//     began, in which case referenced reports it.
//   - The mtime is read after the marking (each candidate is stat'ed after
//     referenced said no), and the cutoff is relative to MarkStart, so an
//     object protected at any time after MarkStart-Grace is kept.
//   - A candidate is first renamed into POOL/tmp (gc-<id>) and its mtime
//     read again there. Protect sets the mtime and then checks that the
//     name still resolves: if it does, the time was set before the rename,
//     GC sees it and links the object back (then syncs its directory); if
//     it does not, Protect reports the object missing and Put publishes its
//     own copy. So a dedup hit and a removal cannot both succeed.
//   - A pass interrupted between the rename and the removal leaves
//     gc-<id>; the next pass puts a protected one back and removes an old
//     one.
//
// Fan-out directories are never removed. Only one pass runs at a time per
// pool; a second one fails at once with an error wrapping ErrGCRunning.
func (p *Pool) Collect(referenced func(ID) bool, opts GCOptions) (GCStats, error) {
	var st GCStats
	if opts.Grace < p.minGrace {
		return st, fmt.Errorf("pool: gc: grace period %v is shorter than the minimum %v: "+
			"objects that a group is about to reference would not be safe", opts.Grace, p.minGrace)
	}
	lockPath := filepath.Join(p.dir, gcLockName)
	lock, err := p.fs.Lock(lockPath)
	if errors.Is(err, vfs.ErrLocked) {
		return st, fmt.Errorf("pool: gc: %w (%s): wait for it to finish: %v", ErrGCRunning, lockPath, err)
	}
	if err != nil {
		return st, fmt.Errorf("pool: gc %s: %w", p.dir, err)
	}
	defer lock.Close()
	start := opts.MarkStart
	if now := p.now(); start.IsZero() || now.Before(start) {
		start = now
	}
	cutoff := start.Add(-opts.Grace)

	if err := p.recoverGraves(cutoff, &st); err != nil {
		return st, err
	}

	fanouts, err := p.fs.List(p.objects)
	if err != nil {
		return st, fmt.Errorf("pool: gc: list %s: %w", p.objects, err)
	}
	for _, fan := range fanouts {
		if _, ok := parseFanout(fan); !ok {
			p.log.Warn("pool: gc: ignoring stray entry in objects/", "path", filepath.Join(p.objects, fan))
			continue
		}
		dir := filepath.Join(p.objects, fan)
		names, err := p.fs.List(dir)
		if err != nil {
			return st, fmt.Errorf("pool: gc: list %s: %w", dir, err)
		}
		for _, name := range names {
			id, err := ParseID(name)
			if err != nil || name[:fanoutDigits] != fan {
				p.log.Warn("pool: gc: ignoring stray file in a fan-out directory", "path", filepath.Join(dir, name))
				continue
			}
			st.Scanned++
			if referenced(id) {
				continue
			}
			removed, size, err := p.collect(id, cutoff)
			if err != nil {
				return st, err
			}
			if removed {
				st.Removed++
				st.Bytes += size
			} else if size < 0 {
				st.Kept++
			}
		}
	}

	temps, err := p.fs.List(p.tmp)
	if err != nil {
		return st, fmt.Errorf("pool: gc: list %s: %w", p.tmp, err)
	}
	for _, name := range temps {
		if strings.HasPrefix(name, gravePrefix) {
			continue // recoverGraves' business, and none is left
		}
		path := filepath.Join(p.tmp, name)
		fi, err := p.fs.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // published or removed meanwhile
		}
		if err != nil {
			return st, fmt.Errorf("pool: gc: stat temp: %w", err)
		}
		if fi.IsDir() || !fi.ModTime().Before(cutoff) {
			continue
		}
		if err := p.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return st, fmt.Errorf("pool: gc: remove stale temp: %w", err)
		}
		st.TempsRemoved++
		st.TempBytes += fi.Size()
	}
	return st, nil
}

// graveName is the graveyard name of object id in POOL/tmp.
func (p *Pool) graveName(id ID) string {
	return filepath.Join(p.tmp, gravePrefix+id.String())
}

// recoverGraves deals with the graveyard entries an interrupted pass left
// (GC's lock is held, so no other pass owns them): an object protected
// since the cutoff is linked back, an old one removed.
func (p *Pool) recoverGraves(cutoff time.Time, st *GCStats) error {
	names, err := p.fs.List(p.tmp)
	if err != nil {
		return fmt.Errorf("pool: gc: list %s: %w", p.tmp, err)
	}
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, gravePrefix)
		if !ok {
			continue
		}
		grave := filepath.Join(p.tmp, name)
		id, err := ParseID(rest)
		if err != nil {
			p.removeTemp(grave) // an empty reservation of an older version
			continue
		}
		fi, err := p.fs.Stat(grave)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pool: gc: stat %s: %w", grave, err)
		}
		if fi.ModTime().Before(cutoff) {
			if err := p.fs.Remove(grave); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("pool: gc: remove %s: %w", grave, err)
			}
			st.TempsRemoved++
			st.TempBytes += fi.Size()
			continue
		}
		if err := p.restore(id, grave); err != nil {
			return err
		}
		st.Restored++
		p.log.Warn("pool: gc: put back an object an interrupted gc had moved aside after it was protected", "id", id.String())
	}
	return nil
}

// collect removes unreferenced object id if its mtime is before cutoff. See
// Collect for the protocol. size < 0 with removed=false means the object
// was protected during the removal and put back.
func (p *Pool) collect(id ID, cutoff time.Time) (removed bool, size int64, err error) {
	obj := p.Path(id)
	fi, err := p.fs.Stat(obj)
	if errors.Is(err, fs.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("pool: gc: stat object %s: %w", id, err)
	}
	if !fi.ModTime().Before(cutoff) {
		return false, 0, nil
	}
	grave := p.graveName(id)
	if err := p.fs.Rename(obj, grave); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, 0, nil
		}
		return false, 0, fmt.Errorf("pool: gc: move object %s aside: %w", id, err)
	}
	p.mu.Lock()
	delete(p.mu.verified, id)
	delete(p.mu.durable, id)
	p.mu.Unlock()

	gfi, err := p.fs.Stat(grave)
	if err == nil && gfi.ModTime().Before(cutoff) {
		if err := p.fs.Remove(grave); err != nil {
			return false, 0, fmt.Errorf("pool: gc: remove object %s (moved to %s): %w", id, grave, err)
		}
		return true, gfi.Size(), nil
	}
	// Protected while GC was deciding (or the stat failed): put it back.
	if err := p.restore(id, grave); err != nil {
		return false, 0, err
	}
	p.log.Info("pool: gc: object protected during GC; kept", "id", id.String())
	return false, -1, nil
}

// restore links the graveyard entry grave back to object id's name (unless
// a publisher has put a new copy there meanwhile), syncs the fan-out
// directory and removes grave.
func (p *Pool) restore(id ID, grave string) error {
	obj := p.Path(id)
	if err := p.fs.Link(grave, obj); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pool: gc: object %s was protected during GC but could not be put back from %s: %w; "+
			"move it back by hand (mv %s %s)", id, grave, err, grave, obj)
	}
	if err := vfs.SyncDir(p.fs, p.fanoutDir(id)); err != nil {
		return fmt.Errorf("pool: gc: object %s was protected during GC and put back, but %w", id, err)
	}
	p.removeTemp(grave)
	return nil
}
