package pool

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"wsfs/internal/vfs"
)

// GCStats reports what one GC pass did.
type GCStats struct {
	Scanned int   // objects examined
	Removed int   // objects removed
	Bytes   int64 // bytes of the removed objects
	// TempsRemoved counts stale temps removed from POOL/tmp (left by
	// crashed publishers and repairs, interrupted GC).
	TempsRemoved int
	TempBytes    int64
}

// gcLockName is the lock file that keeps two GC passes (in any processes)
// from running at once.
const gcLockName = "gc.lock"

// GC removes every object for which referenced returns false and whose
// mtime is older than grace (by Options.Clock), and every temp in POOL/tmp
// older than grace. referenced must answer for every workspace that uses
// the pool; it is called without any pool lock held.
//
// grace must be at least MinGrace and far longer than a commit window: an object that
// a group deduplicated against is protected only by its mtime until the
// group has committed its reference. (A temp lives only as long as one
// Put or repair, so any temp older than grace was abandoned by a crash.)
//
// A candidate is first moved into POOL/tmp and its mtime checked again
// there: a Protect that raced with GC either happened before the move (then
// the new mtime is seen and the object is linked back and its directory
// synced) or after it (then Protect reports the object missing and the
// publisher publishes it again). Fan-out directories are never removed.
//
// Only one GC runs at a time per pool; a second one fails at once with an
// error wrapping vfs.ErrLocked.
func (p *Pool) GC(referenced func(ID) bool, grace time.Duration) (GCStats, error) {
	var st GCStats
	if grace < MinGrace {
		return st, fmt.Errorf("pool: gc: grace period %v is shorter than the minimum %v: "+
			"objects that a group is about to reference would not be safe", grace, MinGrace)
	}
	lock, err := p.fs.Lock(filepath.Join(p.dir, gcLockName))
	if err != nil {
		return st, fmt.Errorf("pool: gc %s: %w", p.dir, err)
	}
	defer lock.Close()
	cutoff := p.now().Add(-grace)

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
			}
		}
	}

	temps, err := p.fs.List(p.tmp)
	if err != nil {
		return st, fmt.Errorf("pool: gc: list %s: %w", p.tmp, err)
	}
	for _, name := range temps {
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

// collect removes unreferenced object id if its mtime is before cutoff. See
// GC for the protocol.
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
	f, grave, err := p.createTemp(gravePrefix)
	if err != nil {
		return false, 0, fmt.Errorf("pool: gc: %w", err)
	}
	f.Close()
	if err := p.fs.Rename(obj, grave); err != nil {
		p.removeTemp(grave)
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
	if err := p.fs.Link(grave, obj); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, 0, fmt.Errorf("pool: gc: object %s was protected during GC but could not be put back from %s: %w; "+
			"move it back by hand (mv %s %s)", id, grave, err, grave, obj)
	}
	if err := vfs.SyncDir(p.fs, p.fanoutDir(id)); err != nil {
		return false, 0, fmt.Errorf("pool: gc: object %s was protected during GC and put back, but %w", id, err)
	}
	p.removeTemp(grave)
	p.log.Info("pool: gc: object protected during GC; kept", "id", id.String())
	return false, 0, nil
}
