package pool

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/vfs"
)

// Options configure a Pool. The zero value is valid.
type Options struct {
	// Logger receives warnings (objects repaired, GC races, stray files).
	// Nil discards them.
	Logger *slog.Logger
	// Clock is the time source for Protect and GC. Nil means time.Now. It
	// must agree with the file system's clock: new objects get the file
	// system's mtime, and GC compares mtimes with Clock()-grace. Tests
	// advance it to age objects.
	Clock func() time.Time
	// Fetcher, if set, is where objects that are not local come from
	// (a workspace pulled lazily from the remote tier): Open, ReadAll,
	// Protect and SyncObjects fetch a missing object from it, verify it
	// and publish it before going on; Open and ReadAll also replace a
	// corrupt local object from it. See fetch.go.
	Fetcher Fetcher
}

// Names under the pool directory and prefixes of temps in tmp/.
const (
	objectsDir = "objects"
	tmpDir     = "tmp"
	formatName = "format" // the layout version file, see Open

	// formatContent is the whole content of POOL/format for this layout:
	// objects fanned out by their first hex digit (16 directories). The
	// first layout (objects/<2 hex digits>/, 256 directories) had no
	// format file; see the package doc for why it changed.
	formatContent = "wsfs-pool-layout 2\n"
	fanoutDigits  = 1  // hex digits in a fan-out directory's name
	fanouts       = 16 // 16^fanoutDigits

	putPrefix       = "put-"    // Put's temp, linked into place then removed
	repairPrefix    = "repair-" // Republish and healing
	gravePrefix     = "gc-"     // GC's graveyard: an object being removed
	objectPerm      = 0o400     // objects are immutable; private to the user running wsfs
	dirPerm         = vfs.PrivateDir
	maxCacheEntries = 1 << 20 // per cache; a full cache is cleared (costs re-verifying / re-syncing)
)

// Fan-out directory states (Pool.mu.fanout).
const (
	fanoutExists  uint8 = 1 << iota // this process made sure objects/<x> exists
	fanoutDurable                   // this process synced objects/ after objects/<x> existed
)

// Pool is a content pool directory. Its methods are safe for concurrent use
// by many goroutines; many processes may open the same directory.
type Pool struct {
	fs      vfs.FS
	dir     string
	objects string // dir/objects
	tmp     string // dir/tmp
	log     *slog.Logger
	now     func() time.Time
	// writeback: Put starts writeback of new content of writebackMin bytes
	// or more (vfs.File.StartWriteback). Always true outside
	// BenchmarkDrainWriteback's comparison.
	writeback bool
	// minGrace is the shortest grace period GC accepts (MinGrace, or the
	// test override TestMinGraceEnv); trust is how long a sync of this
	// process is trusted past the object's mtime (durableWindow, shorter
	// under the override so that the argument of durableWindow still
	// holds); refresh is the age of an object's mtime past which the drain
	// protects it again (see SyncObjects).
	minGrace, trust, refresh time.Duration
	// fetcher is Options.Fetcher (nil: none); fetchStats counts its use.
	fetcher    Fetcher
	fetchStats fetchCounters

	mu struct {
		sync.Mutex
		// verified maps an ID whose bytes this process has checked (or
		// written itself) to the object's size then. Open skips the hash
		// while the size is unchanged.
		verified map[ID]int64
		// durable maps an ID this process made durable (data and entry) to
		// the time until which it trusts that: the object's mtime at the
		// sync plus durableWindow. See durableWindow for why a removal and
		// re-publication (by GC and another process) cannot happen before.
		durable map[ID]time.Time
		// corrupt holds IDs whose object failed verification here; the next
		// Put of that content repairs it.
		corrupt map[ID]struct{}
		// fanout is the state of objects/<x> for each fan-out directory,
		// indexed by fanoutIndex.
		fanout [fanouts]uint8
		// fetching holds the fetch in flight of each object (fetch.go).
		fetching map[ID]*fetchCall
	}
}

// durableWindow is how long after an object's mtime (as seen when this
// process synced it) SyncObjects trusts that sync and skips the object.
//
// Why it is safe: the trusted state can only go stale if the object is
// removed and published again (a new, unsynced inode under the same name).
// Only GC removes objects, and only those whose mtime is older than its
// grace period, which GC refuses to make shorter than MinGrace. mtime only
// moves forward (Protect sets it to now), so the object cannot be removed
// before mtime+MinGrace, long after the trust expired.
const durableWindow = 10 * time.Minute

// MinGrace is the shortest grace period GC accepts. It must exceed
// durableWindow plus a commit window by a wide margin.
const MinGrace = time.Hour

// TestMinGraceEnv names an environment variable that tests set (to a Go
// duration, e.g. "2s") to lower the minimum grace period of every pool the
// process opens, so that GC can be exercised in seconds. It also shortens
// this process's trust in its own syncs (durableWindow) to a sixth of it,
// which keeps the safety argument intact for the processes that see it. No
// production setup sets it: Open logs a warning whenever it is in effect,
// and `wsfs gc` refuses a grace below MinGrace unless it is set.
const TestMinGraceEnv = "WSFS_TEST_MIN_GRACE"

// testMinGrace returns the override of TestMinGraceEnv, or 0.
func testMinGrace() time.Duration {
	v := os.Getenv(TestMinGraceEnv)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > MinGrace {
		return 0
	}
	return d
}

// EffectiveMinGrace is MinGrace, or the test override of TestMinGraceEnv
// when the environment sets one.
func EffectiveMinGrace() time.Duration {
	if d := testMinGrace(); d > 0 {
		return d
	}
	return MinGrace
}

// Open opens the pool in dir, creating dir, dir/objects and dir/tmp if
// needed and syncing dir and its parent (so all three survive a crash;
// directories further up are the caller's). It also syncs dir/objects once, so
// that every fan-out directory existing now is known durable. These syncs
// happen once per process, never in a commit.
//
// dir/format names the on-disk layout. Open writes it (durably) when it is
// missing and objects/ holds no fan-out directory of another layout, and
// refuses a pool whose format file names another layout, or that has none
// but holds objects/<2 hex digits>/ directories (the first layout, which
// had no format file): such a pool must be recreated, since there is no
// migration. A format file that names no layout is damage
// (ErrFormatDamaged), not another version: the error says to write the
// name back.
func Open(fsys vfs.FS, dir string, opts Options) (*Pool, error) {
	p := &Pool{
		fs:      fsys,
		dir:     dir,
		objects: filepath.Join(dir, objectsDir),
		tmp:     filepath.Join(dir, tmpDir),
		log:     opts.Logger,
		now:     opts.Clock,
		fetcher: opts.Fetcher,
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.now == nil {
		p.now = time.Now
	}
	p.mu.verified = make(map[ID]int64)
	p.mu.durable = make(map[ID]time.Time)
	p.mu.corrupt = make(map[ID]struct{})
	p.mu.fetching = make(map[ID]*fetchCall)
	p.writeback = true
	p.minGrace, p.trust = MinGrace, durableWindow
	if d := testMinGrace(); d > 0 {
		p.minGrace, p.trust = d, d/6
		p.log.Warn("pool: test override of the minimum GC grace period in effect; never use it in production",
			"env", TestMinGraceEnv, "min_grace", d)
	}
	p.refresh = p.minGrace / 4

	for _, d := range []string{p.objects, p.tmp} {
		if err := fsys.MkdirAll(d, dirPerm); err != nil {
			return nil, fmt.Errorf("pool: open %s: create %s: %w", dir, d, err)
		}
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := vfs.SyncDir(fsys, d); err != nil {
			return nil, fmt.Errorf("pool: open %s: %w", dir, err)
		}
	}
	names, err := fsys.List(p.objects)
	if err != nil {
		return nil, fmt.Errorf("pool: open %s: list fan-out directories: %w", dir, err)
	}
	if err := p.checkFormat(names); err != nil {
		return nil, err
	}
	if err := vfs.SyncDir(fsys, p.objects); err != nil {
		return nil, fmt.Errorf("pool: open %s: %w", dir, err)
	}
	for _, name := range names {
		if i, ok := parseFanout(name); ok {
			p.mu.fanout[i] = fanoutExists | fanoutDurable
		}
	}
	return p, nil
}

// ErrFormatDamaged is wrapped by the error of Open when POOL/format names
// no layout at all (emptied, a flipped byte): damage to one small file,
// not a pool of another version, so the error says how to write the name
// back and never to remove the pool (which holds every workspace's
// contents and every snapshot's manifests).
var ErrFormatDamaged = errors.New("pool format file damaged")

// formatPrefix starts every layout name a format file may hold
// ("wsfs-pool-layout N").
const formatPrefix = "wsfs-pool-layout "

// checkFormat reads dir/format and refuses another layout; it writes the
// file when it is missing and objects/ (whose entries are names) holds no
// directory of the first, 2-digit layout. Two processes creating a pool at
// once both publish the same content; either rename wins.
func (p *Pool) checkFormat(names []string) error {
	path := filepath.Join(p.dir, formatName)
	b, err := vfs.ReadFile(p.fs, path)
	switch {
	case err == nil:
		if string(b) != formatContent {
			got := strings.TrimSpace(string(b))
			if v, ok := strings.CutPrefix(got, formatPrefix); !ok || !isDecimal(v) {
				return fmt.Errorf("pool: open %s: %w: %s holds %q instead of a layout name (%q). "+
					"Do not remove the pool: it holds every workspace's contents. "+
					"If objects/ holds only one-hex-digit directories (this layout), write the name back "+
					"(printf '%s' > %s); otherwise restore the file from a backup",
					p.dir, ErrFormatDamaged, path, got, strings.TrimSpace(formatContent), strings.TrimSuffix(formatContent, "\n")+"\\n", path)
			}
			return fmt.Errorf("pool: open %s: %s says %q, this wsfs reads only %q; "+
				"the pool was made by another wsfs version: use that version, or remove the pool and let wsfs create a new one",
				p.dir, path, strings.TrimSpace(string(b)), strings.TrimSpace(formatContent))
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("pool: open %s: read %s: %w", p.dir, path, err)
	}
	for _, name := range names {
		if len(name) == 2 && objid.IsLowerHex(name) {
			return fmt.Errorf("pool: open %s: objects/%s is a fan-out directory of the first pool layout "+
				"(objects/<2 hex digits>/, no %s file), which this wsfs does not read; "+
				"remove the pool and let wsfs create a new one", p.dir, name, formatName)
		}
	}
	err = vfs.Publish(p.fs, path, true, func(f vfs.File) error {
		_, err := io.WriteString(f, formatContent)
		return err
	})
	if err != nil {
		return fmt.Errorf("pool: open %s: write layout version: %w", p.dir, err)
	}
	return nil
}

// Dir returns the pool directory.
func (p *Pool) Dir() string { return p.dir }

// Path returns the file name of object id (whether or not it exists).
func (p *Pool) Path(id ID) string {
	s := id.String()
	return filepath.Join(p.objects, s[:fanoutDigits], s)
}

// fanoutDir returns objects/<x>, the directory holding object id: x is
// the first hex digit of the ID.
func (p *Pool) fanoutDir(id ID) string {
	return filepath.Join(p.objects, id.String()[:fanoutDigits])
}

// fanoutIndex returns the index of id's fan-out directory in Pool.mu.fanout
// (the value of its first hex digit).
func fanoutIndex(id ID) int { return int(id[0] >> 4) }

// parseFanout parses a fan-out directory name (one lowercase hex digit)
// into its index.
func parseFanout(name string) (int, bool) {
	if len(name) != fanoutDigits || !objid.IsLowerHex(name) {
		return 0, false
	}
	v, err := strconv.ParseUint(name, 16, 8)
	if err != nil {
		return 0, false
	}
	return int(v), true
}

// ensureFanout makes sure objects/<x> exists for id.
func (p *Pool) ensureFanout(id ID) error {
	p.mu.Lock()
	st := p.mu.fanout[fanoutIndex(id)]
	p.mu.Unlock()
	if st&fanoutExists != 0 {
		return nil
	}
	d := p.fanoutDir(id)
	if err := p.fs.MkdirAll(d, dirPerm); err != nil {
		return fmt.Errorf("pool: create fan-out directory %s: %w", d, err)
	}
	p.mu.Lock()
	p.mu.fanout[fanoutIndex(id)] |= fanoutExists
	p.mu.Unlock()
	return nil
}

// createTemp creates a fresh file POOL/tmp/<prefix><random>.
func (p *Pool) createTemp(prefix string) (vfs.File, string, error) {
	for range 10 {
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, "", fmt.Errorf("pool: temp name: %w", err)
		}
		name := filepath.Join(p.tmp, prefix+hex.EncodeToString(b[:]))
		f, err := p.fs.CreateExcl(name, objectPerm)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, "", fmt.Errorf("pool: create temp in %s: %w", p.tmp, err)
		}
	}
	return nil, "", fmt.Errorf("pool: could not create a unique temp in %s after 10 tries", p.tmp)
}

// removeTemp removes a temp, logging (not returning) a failure: a leftover
// temp is harmless and GC removes it after the grace period.
func (p *Pool) removeTemp(name string) {
	if err := p.fs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("pool: could not remove temp; GC will remove it later", "path", name, "err", err)
	}
}

// Put stores data and returns its ID. If the object already exists, Put
// protects it from GC (see Protect) and reports dedup=true. Otherwise it
// publishes a new object (temp in POOL/tmp, then link-if-absent into place;
// see the package doc). Nothing is synced: the caller must include id in
// its drain set (SyncObjects) in both cases.
//
// A dedup hit never makes the caller depend on bytes nobody checked: unless
// this process has verified the existing object since it last changed
// (Pool.mu.verified, same size), Put compares it with data. An object that
// differs (or has the wrong size, or failed verification earlier in this
// process) is damaged: Put logs an ERROR naming it, replaces it durably
// with a synced copy of data (rename over it: a damaged inode is nobody's
// committed data) and reports dedup=false. An object that vanishes under
// Put (GC removed it, see Protect) is published again from data.
func (p *Pool) Put(data []byte) (id ID, dedup bool, err error) {
	id = objid.Sum(data)
	if p.isCorrupt(id) {
		return id, false, p.repairFromBytes(id, data, "it failed verification earlier")
	}
	dedup, err = p.protectExisting(id, int64(len(data)))
	if errors.Is(err, errWrongSize) {
		p.log.Error("pool: corrupt object found by a dedup hit; replacing it with the content being written",
			"id", id.String(), "path", p.Path(id), "err", err)
		return id, false, p.repairFromBytes(id, data, err.Error())
	}
	if err != nil {
		return id, false, err
	}
	if dedup {
		return p.checkDedup(id, data)
	}

	f, tmp, err := p.createTemp(putPrefix)
	if err != nil {
		return id, false, err
	}
	_, werr := f.Write(data)
	if werr == nil && p.writeback && len(data) >= writebackMin {
		// A hint, never proof (see writebackMin): a failure to start
		// fails the Put, since the data may never be written.
		if err := f.StartWriteback(); err != nil {
			werr = fmt.Errorf("start writeback: %w", err)
		}
	}
	cerr := f.Close()
	if werr == nil && cerr != nil {
		werr = cerr
	}
	if werr != nil {
		p.removeTemp(tmp)
		return id, false, fmt.Errorf("pool: put %s: write temp %s: %w", id, tmp, werr)
	}
	dedup, err = p.linkIntoPlace(tmp, id, int64(len(data)))
	if err != nil {
		if errors.Is(err, errWrongSize) {
			p.log.Error("pool: corrupt object found while publishing; replacing it with the content being written",
				"id", id.String(), "path", p.Path(id), "err", err)
			return id, false, p.repairFromTemp(id, tmp, err.Error())
		}
		return id, false, err
	}
	if dedup {
		// Another publisher linked its copy first: check it like any
		// dedup hit.
		return p.checkDedup(id, data)
	}
	// The bytes under the name are the ones this process wrote and
	// hashed.
	p.mu.Lock()
	setCache(p.mu.verified, id, int64(len(data)))
	p.mu.Unlock()
	return id, false, nil
}

// checkDedup finishes a dedup hit on the existing, protected object id:
// unless this process verified it since it last changed, it compares the
// object with data, which hashes to id. A match marks it verified and
// reports dedup=true; a mismatch replaces it durably from data (ERROR
// logged); a vanished object is published again from data.
func (p *Pool) checkDedup(id ID, data []byte) (ID, bool, error) {
	if p.isVerified(id, int64(len(data))) {
		return id, true, nil
	}
	same, err := p.sameContent(id, data)
	var missing *MissingObjectError
	switch {
	case errors.As(err, &missing):
		// Removed between Protect and the read (GC: it was old and
		// unreferenced): publish our own copy.
		return p.putNew(id, data)
	case err != nil:
		return id, false, err
	case !same:
		p.log.Error("pool: corrupt object found by a dedup hit (its bytes differ from the content being written); "+
			"replacing it with a synced copy of that content", "id", id.String(), "path", p.Path(id))
		return id, false, p.repairFromBytes(id, data, "a dedup hit found its bytes differ from the content")
	}
	p.mu.Lock()
	setCache(p.mu.verified, id, int64(len(data)))
	p.mu.Unlock()
	return id, true, nil
}

// putNew publishes data (which hashes to id) after the existing object
// vanished; a second dedup hit (another publisher again) is checked too.
func (p *Pool) putNew(id ID, data []byte) (ID, bool, error) {
	f, tmp, err := p.createTemp(putPrefix)
	if err != nil {
		return id, false, err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		p.removeTemp(tmp)
		return id, false, fmt.Errorf("pool: put %s: write temp %s: %w", id, tmp, werr)
	}
	dedup, err := p.linkIntoPlace(tmp, id, int64(len(data)))
	if errors.Is(err, errWrongSize) {
		return id, false, p.repairFromTemp(id, tmp, err.Error())
	}
	if err != nil {
		return id, false, err
	}
	if !dedup {
		p.mu.Lock()
		setCache(p.mu.verified, id, int64(len(data)))
		p.mu.Unlock()
		return id, false, nil
	}
	same, err := p.sameContent(id, data)
	if err != nil {
		return id, false, err
	}
	if !same {
		p.log.Error("pool: corrupt object found by a dedup hit; replacing it", "id", id.String(), "path", p.Path(id))
		return id, false, p.repairFromBytes(id, data, "a dedup hit found its bytes differ from the content")
	}
	p.mu.Lock()
	setCache(p.mu.verified, id, int64(len(data)))
	p.mu.Unlock()
	return id, true, nil
}

// isVerified reports whether this process verified object id at this size.
func (p *Pool) isVerified(id ID, size int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.mu.verified[id]
	return ok && v == size
}

// sameContent reads object id and reports whether it equals data. A
// missing object is a *MissingObjectError.
func (p *Pool) sameContent(id ID, data []byte) (bool, error) {
	path := p.Path(id)
	f, err := p.fs.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, &MissingObjectError{ID: id, Path: path, Err: err}
		}
		return false, fmt.Errorf("pool: read object %s to compare: %w", id, err)
	}
	defer f.Close()
	buf := make([]byte, len(data)+1)
	n, err := io.ReadFull(io.NewSectionReader(f, 0, int64(len(buf))), buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return false, fmt.Errorf("pool: read object %s to compare: %w", id, err)
	}
	return n == len(data) && bytes.Equal(buf[:n], data), nil
}

// writebackMin is the smallest new object whose publication (Put) starts
// writeback of its content (vfs.File.StartWriteback: sync_file_range
// SYNC_FILE_RANGE_WRITE on the OS), so that the drain's fdatasync,
// typically tens or hundreds of milliseconds later, finds the data written
// or in flight instead of writing it all itself. It is a hint and proves
// nothing: the drain's fdatasync remains the only proof of durability, and
// a writeback error still reaches it (starting writeback does not wait, so
// it does not consume the error).
//
// From 64 KiB up it halves the drain; below, it does not shorten it and
// slows publication (docs/benchmarks.md, "Pool drain: directory syncs").
const writebackMin = 64 << 10

// errWrongSize marks an existing object whose size differs from the
// content being published: a damaged object, repaired by the caller.
var errWrongSize = errors.New("existing object has the wrong size")

// protectExisting protects object id if it exists. It reports whether it
// exists; when size >= 0 and the object's size differs, it returns an error
// wrapping errWrongSize.
func (p *Pool) protectExisting(id ID, size int64) (bool, error) {
	fi, err := p.protect(id)
	var missing *MissingObjectError
	if errors.As(err, &missing) {
		// Absent, or GC removed it (it was old and unreferenced): the
		// caller publishes a new one.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if size < 0 {
		return true, nil
	}
	if fi.Size() != size {
		return true, fmt.Errorf("%w: object %s is %d bytes, content is %d bytes", errWrongSize, id, fi.Size(), size)
	}
	return true, nil
}

// linkIntoPlace links the temp tmp to object id's name unless the name
// exists, then removes tmp. It reports dedup=true (and protects the object)
// if the name existed. size is the content's size, checked against an
// existing object (-1: do not check); on a mismatch the error wraps
// errWrongSize and tmp is left in place for the caller's repair.
func (p *Pool) linkIntoPlace(tmp string, id ID, size int64) (dedup bool, err error) {
	if err := p.ensureFanout(id); err != nil {
		p.removeTemp(tmp)
		return false, err
	}
	obj := p.Path(id)
	for attempt := 0; ; attempt++ {
		lerr := p.fs.Link(tmp, obj)
		if lerr == nil {
			p.removeTemp(tmp)
			p.mu.Lock()
			delete(p.mu.durable, id) // a new inode: not synced yet
			delete(p.mu.verified, id)
			p.mu.Unlock()
			return false, nil
		}
		if !errors.Is(lerr, fs.ErrExist) {
			p.removeTemp(tmp)
			return false, fmt.Errorf("pool: publish %s: link %s to %s: %w", id, tmp, obj, lerr)
		}
		// Another publisher won the race (or the object was there all
		// along): protect its copy.
		dedup, err := p.protectExisting(id, size)
		if dedup || err != nil || attempt == 2 {
			if !errors.Is(err, errWrongSize) {
				p.removeTemp(tmp)
			}
			if err == nil && !dedup {
				err = fmt.Errorf("pool: publish %s: %s keeps appearing and disappearing (concurrent GC?); retry", id, obj)
			}
			return dedup, err
		}
		// GC removed it between Link and Protect: link again.
	}
}

// Protect sets the object's mtime to now, so that GC's grace period starts
// again: an unreferenced object survives GC for at least the grace period
// after the last Protect. Put calls it on a dedup hit.
// It returns a *MissingObjectError if the object does not exist.
//
// After setting the time Protect checks by name that the object is still
// there. That makes it atomic against GC's removal (see GC): GC moves a
// candidate away and only then reads its mtime again. If the name still
// resolves after the time was set, the time was set before GC moved the
// inode, so GC sees it and puts the object back; if not, Protect reports
// the object missing and the caller publishes its own copy.
//
// With a Fetcher, a missing object is fetched first (Fetch), so that
// protecting it makes it local.
func (p *Pool) Protect(id ID) error {
	_, err := p.protect(id)
	if p.fetcher != nil && errors.As(err, new(*MissingObjectError)) {
		if err := p.fetch(id, false); err != nil {
			return err
		}
		_, err = p.protect(id)
	}
	return err
}

// protect is Protect; it also returns the object's FileInfo as seen by the
// check after setting the time.
func (p *Pool) protect(id ID) (fs.FileInfo, error) {
	now := p.now()
	path := p.Path(id)
	err := p.fs.Chtimes(path, now, now)
	var fi fs.FileInfo
	if err == nil {
		fi, err = p.fs.Stat(path)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &MissingObjectError{ID: id, Path: path, Err: err}
		}
		return nil, fmt.Errorf("pool: protect object %s: %w", id, err)
	}
	// If this process's sync of the object is still trusted, the object
	// cannot have been replaced since, and GC now cannot remove it before
	// now+MinGrace: extend the trust (see durableWindow).
	p.mu.Lock()
	if until, ok := p.mu.durable[id]; ok && now.Before(until) {
		p.mu.durable[id] = now.Add(p.trust)
	}
	p.mu.Unlock()
	return fi, nil
}

// Open opens object id read-only, positioned at offset 0. The first Open of
// an object in this process reads it through and checks its hash (and again
// whenever the file under the name was replaced); a mismatch returns a
// *CorruptObjectError and the file is not returned. A missing object is a
// *MissingObjectError.
//
// With a Fetcher, a missing object is fetched (verified, published) and
// a corrupt one replaced from it before Open tries once more; a failed
// fetch is a *FetchError.
func (p *Pool) Open(id ID) (vfs.File, error) {
	f, err := p.open(id)
	if err = p.refetch(id, err); err != nil {
		return nil, err
	}
	if f == nil {
		f, err = p.open(id)
	}
	return f, err
}

// refetch decides what a read of id does after its first attempt failed
// with err: with a Fetcher, a missing object is fetched and a corrupt one
// replaced (it returns nil, and the caller tries once more, unless
// the first attempt succeeded); otherwise err stands.
func (p *Pool) refetch(id ID, err error) error {
	if err == nil || p.fetcher == nil {
		return err
	}
	switch {
	case errors.As(err, new(*MissingObjectError)):
		return p.fetch(id, false)
	case errors.As(err, new(*CorruptObjectError)):
		return p.fetch(id, true)
	}
	return err
}

// open is Open without the Fetcher.
func (p *Pool) open(id ID) (vfs.File, error) {
	path := p.Path(id)
	f, err := p.fs.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &MissingObjectError{ID: id, Path: path, Err: err}
		}
		return nil, fmt.Errorf("pool: open object %s: %w", id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pool: open object %s: stat: %w", id, err)
	}
	p.mu.Lock()
	size, ok := p.mu.verified[id]
	p.mu.Unlock()
	if ok && size == fi.Size() {
		return f, nil
	}
	h := objid.NewHasher()
	buf := make([]byte, 256<<10)
	if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, fi.Size()+1), buf); err != nil {
		f.Close()
		return nil, fmt.Errorf("pool: open object %s: read to verify: %w", id, err)
	}
	if got := h.Sum(); got != id {
		f.Close()
		return nil, p.corruptErr(id, path, got)
	}
	p.mu.Lock()
	setCache(p.mu.verified, id, fi.Size())
	p.mu.Unlock()
	return f, nil
}

// ReadAll returns the content of object id, verified against id (always,
// since the bytes are in hand). Errors are as for Open.
//
// With a Fetcher, a missing or corrupt object is fetched as for Open.
func (p *Pool) ReadAll(id ID) ([]byte, error) {
	data, err := p.readVerified(id)
	if err = p.refetch(id, err); err != nil {
		return nil, err
	}
	if data == nil {
		if data, err = p.readVerified(id); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	setCache(p.mu.verified, id, int64(len(data)))
	p.mu.Unlock()
	return data, nil
}

// readVerified reads object id whole and checks its hash.
func (p *Pool) readVerified(id ID) ([]byte, error) {
	path := p.Path(id)
	f, err := p.fs.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &MissingObjectError{ID: id, Path: path, Err: err}
		}
		return nil, fmt.Errorf("pool: read object %s: %w", id, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("pool: read object %s: stat: %w", id, err)
	}
	// Read to EOF rather than trusting the size, so a file that grew is
	// still hashed whole.
	data := make([]byte, 0, fi.Size()+1)
	for {
		n, err := f.ReadAt(data[len(data):cap(data)], int64(len(data)))
		data = data[:len(data)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("pool: read object %s: %w", id, err)
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
	if got := objid.Sum(data); got != id {
		return nil, p.corruptErr(id, path, got)
	}
	return data, nil
}

// corruptErr records id as corrupt (so that the next Put of its content
// repairs it) and returns the error.
func (p *Pool) corruptErr(id ID, path string, got ID) error {
	p.mu.Lock()
	delete(p.mu.verified, id)
	p.setCorrupt(id)
	p.mu.Unlock()
	err := &CorruptObjectError{ID: id, Path: path, Got: got}
	p.log.Error("pool: corrupt object", "id", id.String(), "path", path, "hash", got.String())
	return err
}

func (p *Pool) isCorrupt(id ID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.mu.corrupt[id]
	return ok
}

// setCache stores m[id]=v, clearing m first if it is full (losing only
// the optimisation). p.mu held.
func setCache[V any](m map[ID]V, id ID, v V) {
	if _, ok := m[id]; !ok && len(m) >= maxCacheEntries {
		clear(m)
	}
	m[id] = v
}

// setCorrupt records id as corrupt. p.mu held.
func (p *Pool) setCorrupt(id ID) {
	if len(p.mu.corrupt) >= maxCacheEntries {
		clear(p.mu.corrupt)
	}
	p.mu.corrupt[id] = struct{}{}
}

// isDecimal reports whether s is a non-empty string of decimal digits.
func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
