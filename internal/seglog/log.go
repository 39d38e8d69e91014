package seglog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"wsfs/internal/vfs"
)

// DefaultSegmentSize is the rollover threshold when Options.SegmentSize is 0.
const DefaultSegmentSize = 64 << 20

// Options configure a Log.
type Options struct {
	// SegmentSize: Append starts a new segment once the current one has
	// reached this many bytes (default 64 MiB). A segment holds at least
	// one group, so a group larger than SegmentSize makes one large
	// segment. Smaller segments let DeleteThrough reclaim space sooner but
	// cost two extra syncs per rollover.
	SegmentSize int64
	// Logger receives torn-tail repairs (Warn) and rollovers (Debug).
	// nil discards.
	Logger *slog.Logger
	// Base, if not nil, is the background sync of the unsynced base
	// checkpoint this log continues (see unsynced.go): Sync waits for it
	// before anything else, so that no group is acknowledged before the
	// base is durable, and fails the log for good with its error.
	Base *BaseSync
	// Checkpoint is the group of the checkpoint the caller recovers from
	// (0: none). A log that holds no group can continue only a
	// checkpoint of group 0: with Checkpoint > 0, a log directory with no
	// segment (segments removed or moved aside) or whose segment 1 has a
	// torn header (segment 1 held group 1, synced long before) is refused
	// with a *CorruptError before Open writes anything, instead of being
	// given a fresh segment 1 that a lock-free reader (gc) would take for
	// a complete log.
	Checkpoint uint64
}

// segInfo describes one segment file of the log.
type segInfo struct {
	seq   uint64
	path  string
	first uint64 // first group number (from the header)
	last  uint64 // last committed group; first-1 if it holds none
	size  int64  // bytes of complete groups (the file length after Open)
}

// Log is an open segment log. See the package documentation for the file
// format, the recovery rules and the (single-goroutine) concurrency model.
type Log struct {
	fs     vfs.FS
	dir    string
	opts   Options
	logger *slog.Logger

	// Owned by the single user goroutine.
	segs   []segInfo // ascending seq; the last one is active
	active vfs.File  // open read-write on segs[len(segs)-1]
	// fileEnd is the length of the active segment's file: its last
	// complete group's end plus the runway of zeros after it (runway.go).
	fileEnd  int64
	dirty    bool  // active has writes not yet covered by a successful SyncData
	failed   error // sticky *failedError; nil while healthy
	closed   bool
	buf      []byte // reused frame buffer
	repaired *TornTail

	// readOnly (OpenReadOnly): nothing is written, repaired or synced; a
	// torn tail is only reported (repaired then says what Open would do)
	// and damage stops the scan (damage) instead of failing.
	readOnly bool
	damage   *CorruptError

	lastGroup atomic.Uint64 // readable from any goroutine
}

func segName(seq uint64) string { return fmt.Sprintf("%020d.seg", seq) }

// parseSegName returns the sequence number of a segment file name.
func parseSegName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, ".seg")
	if !ok || len(base) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(base, 10, 64)
	if err != nil || seq == 0 {
		return 0, false
	}
	return seq, true
}

// Open opens the log in dir, creating dir and a first segment if needed.
// It reads every segment, checks the whole chain and repairs a torn tail
// (see the package documentation). Damage anywhere else is returned as a
// *CorruptError and nothing is modified. Files in dir whose names are not
// segment names (for example leftover temps) are ignored.
func Open(fsys vfs.FS, dir string, opts Options) (*Log, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Log{fs: fsys, dir: dir, opts: opts, logger: logger}

	if err := vfs.MkdirAllDurable(fsys, dir, vfs.PrivateDir); err != nil {
		return nil, err
	}
	seqs, err := listSegments(fsys, dir)
	if err != nil {
		return nil, err
	}
	if len(seqs) == 0 {
		if opts.Checkpoint > 0 {
			return nil, &CorruptError{Segment: filepath.Join(dir, segName(1)), Offset: 0,
				Reason: fmt.Sprintf("the log holds no segment, yet the checkpoint of group %d needs the groups after it "+
					"(segments were removed or moved aside: put them back)", opts.Checkpoint)}
		}
		if err := l.createSegment(1, 1); err != nil {
			return nil, err
		}
		return l, nil
	}
	if err := l.scan(seqs); err != nil {
		if l.active != nil {
			_ = l.active.Close()
		}
		return nil, err
	}
	a := l.segs[len(l.segs)-1]
	// What Open found may not be durable: the previous process can have
	// appended without syncing before it exited. Sync now, so that every
	// group Open reports (and Replay hands out) is durable; sealed segments
	// were synced before they were sealed.
	if err := l.active.SyncData(); err != nil {
		_ = l.active.Close()
		return nil, fmt.Errorf("seglog: sync %s found at open: %w", a.path, err)
	}
	l.lastGroup.Store(a.last)
	if l.repaired != nil {
		// What the code knows: the dropped bytes were cut short or zeroed
		// as a crash during an unsynced append leaves them (classifyTail),
		// and no complete commit marker was among them. A group is
		// acknowledged only after its log sync, so it is lost only if the
		// storage lost bytes it had reported synced: say exactly that.
		logger.Warn("seglog: repaired torn tail of the log: an incomplete last group (cut short or zero-filled, "+
			"as a crash during an unsynced append leaves it, with no complete commit marker) was dropped; "+
			"it had not been acknowledged unless the storage lost data it reported synced",
			"segment", l.repaired.Segment, "truncated_to", l.repaired.Offset,
			"dropped_bytes", l.repaired.DroppedBytes, "dropped_records", l.repaired.DroppedRecords,
			"last_group", a.last)
	}
	return l, nil
}

// OpenReadOnly opens the log in dir for inspection (wsfs fsck): it checks
// the whole chain as Open does but writes nothing (no repair, no sync, no
// lock needed, so a daemon may be appending meanwhile). The returned Log
// serves FirstGroup, LastGroup, Replay, Segments, Repaired, Damage and
// Close; Append, Sync and DeleteThrough fail.
//
// A torn tail is reported by Repaired (what Open would truncate) and left
// in place; Replay stops before it. Damage stops the scan: Damage returns
// it, and the Log covers the complete groups before it (Replay hands them
// out), so a caller can learn what the log still holds. The error is for
// failures to read, not for what was read. A missing or empty directory
// is an empty log.
func OpenReadOnly(fsys vfs.FS, dir string) (*Log, error) {
	l := &Log{fs: fsys, dir: dir, logger: slog.New(slog.DiscardHandler), readOnly: true}
	seqs, err := listSegments(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		seqs, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := l.scan(seqs); err != nil {
		return nil, err
	}
	if len(l.segs) > 0 {
		l.lastGroup.Store(l.segs[len(l.segs)-1].last)
	}
	return l, nil
}

// Damage returns the corruption OpenReadOnly stopped at, or nil.
func (l *Log) Damage() *CorruptError { return l.damage }

// SegmentInfo describes one segment of an open log.
type SegmentInfo struct {
	Path        string
	Seq         uint64
	First, Last uint64 // group numbers; Last = First-1 if it holds none
	Size        int64  // bytes of complete groups
}

// Segments lists the segments the log covers, oldest first (for
// OpenReadOnly after damage: up to the damaged one, clipped before it).
func (l *Log) Segments() []SegmentInfo {
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = SegmentInfo{Path: s.path, Seq: s.seq, First: s.first, Last: s.last, Size: s.size}
	}
	return out
}

// listSegments returns the sequence numbers of the segments in dir,
// ascending.
func listSegments(fsys vfs.FS, dir string) ([]uint64, error) {
	names, err := fsys.List(dir)
	if err != nil {
		return nil, fmt.Errorf("seglog: list log directory: %w", err)
	}
	var seqs []uint64
	for _, n := range names {
		if seq, ok := parseSegName(n); ok {
			seqs = append(seqs, seq) // List is sorted and names are fixed-width
		}
	}
	return seqs, nil
}

// scan checks the chain of segments seqs and opens each (openSegment).
// In read-only mode a *CorruptError ends the scan and is kept in
// l.damage instead of being returned.
func (l *Log) scan(seqs []uint64) error {
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			ce := &CorruptError{Segment: filepath.Join(l.dir, segName(seqs[i-1]+1)), Offset: 0,
				Reason: fmt.Sprintf("segment %d is missing between %d and %d", seqs[i-1]+1, seqs[i-1], seqs[i])}
			if !l.readOnly {
				return ce
			}
			l.damage, seqs = ce, seqs[:i] // check what precedes the gap
			break
		}
	}
	for i, seq := range seqs {
		var prev *segInfo
		if i > 0 {
			p := l.segs[i-1] // a copy: openSegment appends to l.segs
			prev = &p
		}
		last := i == len(seqs)-1 && l.damage == nil
		if err := l.openSegment(seq, prev, last); err != nil {
			var ce *CorruptError
			if l.readOnly && errors.As(err, &ce) {
				l.damage = ce
				return nil
			}
			return err
		}
	}
	return nil
}

// openSegment validates segment seq (following prev, nil for the first
// present segment) and appends it to l.segs. The last segment gets torn
// tail repair and becomes the active, writable one.
func (l *Log) openSegment(seq uint64, prev *segInfo, last bool) error {
	path := filepath.Join(l.dir, segName(seq))
	buf, err := vfs.ReadFile(l.fs, path)
	if err != nil {
		return fmt.Errorf("seglog: read segment: %w", err)
	}
	sc := &segCheck{path: path}
	if prev != nil {
		sc.goodLast = prev.last
	}
	h, done, err := l.checkHeader(sc, buf, seq, prev, last)
	if done || err != nil {
		return err
	}
	sc.goodEnd, sc.goodLast = segHeaderLen, h.firstGroup-1
	res, err := scanFrames(path, buf, h, nil)
	var ce *CorruptError
	if errors.As(err, &ce) {
		ce.GroupEnd, ce.LastGood = res.validEnd, res.lastGroup
	}
	if err != nil {
		return l.keepGood(seq, path, h.firstGroup, res, err)
	}
	sc.goodEnd, sc.goodLast = res.validEnd, res.lastGroup
	info := segInfo{seq: seq, path: path, first: h.firstGroup, last: res.lastGroup, size: res.validEnd}
	size := int64(len(buf))
	if !last {
		if res.damageAt >= 0 {
			return l.keepGood(seq, path, h.firstGroup, res, sc.corrupt(res.damageAt, "%s (in a sealed segment)", res.damageReason))
		}
		if res.validEnd != size {
			return l.keepGood(seq, path, h.firstGroup, res, sc.corrupt(res.validEnd, "%d records without a commit marker at the end of a sealed segment", res.pendingRecords))
		}
		l.segs = append(l.segs, info)
		return nil
	}
	clean := res.validEnd == size || runwayTail(buf, res)
	if !clean {
		if err := sc.checkTail(buf, res); err != nil {
			return l.keepGood(seq, path, h.firstGroup, res, err)
		}
	}
	return l.activate(info, res, size, clean)
}

// segCheck is what openSegment knows of a segment while it checks it: its
// path, and what of it precedes damage found in it (the end of its last
// complete group and that group), for the *CorruptError.
type segCheck struct {
	path     string
	goodEnd  int64
	goodLast uint64
}

func (sc *segCheck) corrupt(off int64, format string, args ...any) error {
	return &CorruptError{Segment: sc.path, Offset: off, Reason: fmt.Sprintf(format, args...),
		GroupEnd: sc.goodEnd, LastGood: sc.goodLast}
}

// checkHeader validates segment seq's header against the segment before
// it. A bad header in the last segment is a crash during its creation
// (creation is synchronous: the header is synced before any group is
// appended), repaired here (done), unless a later commit marker proves
// groups were there.
func (l *Log) checkHeader(sc *segCheck, buf []byte, seq uint64, prev *segInfo, last bool) (h segHeader, done bool, err error) {
	// The first group this segment must start with, if it is knowable.
	want := uint64(0)
	switch {
	case prev != nil:
		want = prev.last + 1
	case seq == 1:
		want = 1
	}
	h, status, reason := decodeHeader(buf)
	switch status {
	case headerUnsupported:
		return h, false, sc.corrupt(0, "%s", reason)
	case headerIncomplete, headerInvalid:
		if !last {
			return h, false, sc.corrupt(0, "%s", reason)
		}
		if seq == 1 && prev == nil && l.opts.Checkpoint > 0 {
			return h, false, sc.corrupt(0, "%s; segment 1 held group 1, which the checkpoint of group %d follows", reason, l.opts.Checkpoint)
		}
		if off, g := laterCommit(buf, 1, want-1); off >= 0 || want == 0 {
			if off >= 0 {
				return h, false, sc.corrupt(0, "%s; yet a valid commit marker for group %d follows at offset %d", reason, g, off)
			}
			return h, false, sc.corrupt(0, "%s, and with no earlier segment present the first group number of segment %d is unknown", reason, seq)
		}
		if l.readOnly {
			l.repaired = &TornTail{Segment: sc.path, Offset: segHeaderLen, DroppedBytes: int64(len(buf))}
			return h, true, nil // it holds no group
		}
		return h, true, l.repairHeader(seq, sc.path, want, int64(len(buf)))
	}
	if h.seq != seq {
		return h, false, sc.corrupt(0, "header says segment %d but the file is named for segment %d", h.seq, seq)
	}
	if h.firstGroup == 0 || (want != 0 && h.firstGroup != want) {
		return h, false, sc.corrupt(0, "segment starts at group %d, expected group %d (group numbers must be contiguous)", h.firstGroup, want)
	}
	return h, false, nil
}

// checkTail judges the damaged or incomplete tail of the last segment
// (see the package doc): nil for a torn tail, else the *CorruptError.
func (sc *segCheck) checkTail(buf []byte, res scanResult) error {
	if res.damageAt >= 0 {
		// A later valid marker means a synced group lies behind the
		// damage, unless it is the damaged (last, unacknowledged)
		// group's own marker over an unwritten sector.
		if off, g := laterCommit(buf, res.damageAt+1, res.lastGroup); off >= 0 && !unwrittenLastGroup(buf, res, off, g) {
			return sc.corrupt(res.damageAt, "%s; yet a valid commit marker for group %d follows at offset %d, so this is not a torn tail",
				res.damageReason, g, off)
		}
	}
	if torn, why := classifyTail(buf, res); !torn {
		return sc.corrupt(res.damageAt, "%s", why)
	}
	return nil
}

// activate makes the checked last segment (info; the file is size bytes)
// the one appends go to, truncating a torn tail after its last complete
// group and syncing the cut; a clean segment (ending at its last group or
// in a runway) is kept as it is. Read-only, it only reports the torn tail.
func (l *Log) activate(info segInfo, res scanResult, size int64, clean bool) error {
	path := info.path
	if l.readOnly {
		l.segs = append(l.segs, info)
		if !clean {
			l.repaired = &TornTail{Segment: path, Offset: res.validEnd, DroppedBytes: size - res.validEnd, DroppedRecords: res.pendingRecords}
		}
		return nil
	}
	f, err := l.fs.OpenReadWrite(path)
	if err != nil {
		return fmt.Errorf("seglog: open active segment: %w", err)
	}
	l.active = f
	l.segs = append(l.segs, info)
	if clean {
		l.fileEnd = size
		return nil
	}
	if err := f.Truncate(res.validEnd); err != nil {
		return fmt.Errorf("seglog: repair torn tail of %s: truncate to %d: %w", path, res.validEnd, err)
	}
	if err := f.SyncData(); err != nil {
		return fmt.Errorf("seglog: repair torn tail of %s: sync after truncate: %w", path, err)
	}
	l.fileEnd = res.validEnd
	l.repaired = &TornTail{Segment: path, Offset: res.validEnd, DroppedBytes: size - res.validEnd, DroppedRecords: res.pendingRecords}
	return nil
}

// keepGood returns err; in read-only mode it first records the complete
// groups of segment seq before the damage (res), so that Replay can hand
// them out for inspection.
func (l *Log) keepGood(seq uint64, path string, first uint64, res scanResult, err error) error {
	if l.readOnly && res.validEnd >= segHeaderLen {
		l.segs = append(l.segs, segInfo{seq: seq, path: path, first: first, last: res.lastGroup, size: res.validEnd})
	}
	return err
}

// repairHeader rewrites the header of a last segment whose creation was
// interrupted (it holds no group).
func (l *Log) repairHeader(seq uint64, path string, first uint64, size int64) error {
	f, err := l.fs.OpenReadWrite(path)
	if err != nil {
		return fmt.Errorf("seglog: open active segment: %w", err)
	}
	l.active = f
	fail := func(step string, err error) error {
		return fmt.Errorf("seglog: repair torn header of %s: %s: %w", path, step, err)
	}
	if err := f.Truncate(0); err != nil {
		return fail("truncate", err)
	}
	if _, err := f.WriteAt(segHeader{seq: seq, firstGroup: first}.encode(), 0); err != nil {
		return fail("write header", err)
	}
	if err := f.SyncData(); err != nil {
		return fail("sync", err)
	}
	l.segs = append(l.segs, segInfo{seq: seq, path: path, first: first, last: first - 1, size: segHeaderLen})
	l.fileEnd = segHeaderLen
	l.repaired = &TornTail{Segment: path, Offset: segHeaderLen, DroppedBytes: size}
	return nil
}

// createSegment creates segment seq whose first group will be first, and
// makes its header and directory entry durable before returning. It
// becomes the active segment.
//
// If the filesystem is full before anything is synced, the new file is
// removed and a *NoSpaceError returned (a crash before the removal leaves
// a segment with a torn header and no group, which Open repairs).
func (l *Log) createSegment(seq, first uint64) error {
	path := filepath.Join(l.dir, segName(seq))
	f, err := l.fs.CreateExcl(path, vfs.PrivateFile)
	if err != nil {
		err = fmt.Errorf("seglog: create segment: %w", err)
		if isNoSpace(err) {
			return &NoSpaceError{Segment: path, Err: err}
		}
		return err
	}
	if _, err := f.WriteAt(segHeader{seq: seq, firstGroup: first}.encode(), 0); err != nil {
		_ = f.Close()
		err = fmt.Errorf("seglog: write header of %s: %w", path, err)
		if isNoSpace(err) {
			if rerr := l.fs.Remove(path); rerr != nil {
				return fmt.Errorf("%w; removing the half-created segment failed too: %v", err, rerr)
			}
			return &NoSpaceError{Segment: path, Err: err}
		}
		return err
	}
	if err := f.SyncData(); err != nil {
		_ = f.Close()
		return fmt.Errorf("seglog: sync new segment %s: %w", path, err)
	}
	if err := vfs.SyncDir(l.fs, l.dir); err != nil {
		_ = f.Close()
		return fmt.Errorf("seglog: make new segment %s durable: %w", path, err)
	}
	l.active = f
	l.fileEnd = segHeaderLen
	l.segs = append(l.segs, segInfo{seq: seq, path: path, first: first, last: first - 1, size: segHeaderLen})
	l.logger.Debug("seglog: new segment", "segment", path, "first_group", first)
	return nil
}

// Repaired returns the torn tail Open repaired, or nil if the tail was
// clean. Safe for concurrent use.
func (l *Log) Repaired() *TornTail {
	if l.repaired == nil {
		return nil
	}
	t := *l.repaired
	return &t
}

// LastGroup returns the number of the last appended group (0 if none).
// Appended is not durable: only groups appended before a successful Sync
// are. Safe for concurrent use.
func (l *Log) LastGroup() uint64 { return l.lastGroup.Load() }

// FirstGroup returns the number of the oldest group the log still holds
// (or would hold: LastGroup()+1 when it holds none).
func (l *Log) FirstGroup() uint64 {
	if len(l.segs) == 0 {
		return 1 // OpenReadOnly of an empty log
	}
	return l.segs[0].first
}

// fail makes the log failed with err, unless it already is.
func (l *Log) fail(err error) error {
	if l.failed == nil {
		l.failed = &failedError{first: err}
	}
	return l.failed
}

func (l *Log) usable() error {
	if l.readOnly {
		return errors.New("seglog: log opened read-only")
	}
	if l.failed != nil {
		return l.failed
	}
	if l.closed {
		return errors.New("seglog: log is closed")
	}
	return nil
}

// Append writes records as the next group and returns its number. The
// group is written with a single write call but not synced: it is durable
// only after a successful Sync. An empty group (no records) is allowed.
//
// If the active segment has reached Options.SegmentSize, Append first
// rolls over: it syncs the active segment (which becomes sealed), then
// creates the next one and syncs its header and directory entry. That is
// the only case in which Append syncs. A group that ends past the runway
// extends it (runway.go), in a second write.
//
// A full filesystem (ENOSPC, EDQUOT) is the one failure that leaves the
// Log usable: Append cuts the segment back to where the group began (or
// removes the segment it was creating) and returns a *NoSpaceError; the
// same group may be appended again later. Any other write or sync failure,
// or a failure to cut back, fails the Log for good (see ErrFailed).
func (l *Log) Append(records [][]byte) (uint64, error) {
	if err := l.usable(); err != nil {
		return 0, err
	}
	for i, r := range records {
		if int64(len(r)) > maxRecordLen {
			return 0, fmt.Errorf("seglog: record %d is %d bytes, the limit is %d", i, len(r), int64(maxRecordLen))
		}
	}
	a := &l.segs[len(l.segs)-1]
	if a.size >= l.opts.SegmentSize && a.last >= a.first {
		if err := l.rollover(); err != nil {
			return 0, err
		}
		a = &l.segs[len(l.segs)-1]
	}
	group := a.last + 1
	buf := l.buf[:0]
	crcs := make([]uint32, 0, len(records))
	for _, r := range records {
		var c uint32
		buf, c = appendFrame(buf, typeData, r)
		crcs = append(crcs, c)
	}
	buf, _ = appendFrame(buf, typeCommit, encodeCommit(group, uint32(len(records)), groupCRC(crcs)))
	if cap(buf) <= 4<<20 {
		l.buf = buf // keep a modest buffer for the next group
	}
	n, err := l.active.WriteAt(buf, a.size)
	l.dirty = true
	if err == nil && n != len(buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("seglog: append group %d to %s at offset %d: %w", group, a.path, a.size, err)
		if isNoSpace(err) {
			// Unsynced bytes past a.size are the failed group's: cut
			// them off, so that neither a retry nor recovery can mistake
			// them for a group.
			if terr := l.active.Truncate(a.size); terr != nil {
				return 0, l.fail(fmt.Errorf("%w; cutting the segment back to %d failed too: %v", err, a.size, terr))
			}
			l.fileEnd = a.size
			return 0, &NoSpaceError{Segment: a.path, Err: err}
		}
		return 0, l.fail(err)
	}
	if end := a.size + int64(len(buf)); end > l.fileEnd {
		if err := l.extendRunway(a.path, end, len(buf)); err != nil {
			return 0, l.fail(err)
		}
	}
	a.size += int64(len(buf))
	a.last = group
	l.lastGroup.Store(group)
	return group, nil
}

// rollover seals the active segment and creates the next one. If the
// filesystem is full, the half-created segment is removed and the old one
// stays active (a *NoSpaceError; a later Append tries again).
func (l *Log) rollover() error {
	a := l.segs[len(l.segs)-1]
	if err := l.dropRunway(a.path, a.size); err != nil {
		return err
	}
	if err := l.Sync(); err != nil {
		return err
	}
	sealed := l.active
	if err := l.createSegment(a.seq+1, a.last+1); err != nil {
		var ns *NoSpaceError
		if errors.As(err, &ns) {
			return err
		}
		return l.fail(err)
	}
	if err := sealed.Close(); err != nil {
		return l.fail(fmt.Errorf("seglog: close sealed segment %s: %w", a.path, err))
	}
	return nil
}

// Sync makes every group appended so far durable (fdatasync of the active
// segment; segment creation already synced the directory). If it fails,
// the Log is failed for good: nothing appended since the last successful
// Sync may be considered durable, and a retry would prove nothing.
func (l *Log) Sync() error {
	if err := l.usable(); err != nil {
		return err
	}
	// Before the dirty check: a rollover may have synced the groups
	// already, and they still must not be acknowledged before the base.
	if err := l.opts.Base.Wait(); err != nil {
		return l.fail(err)
	}
	if !l.dirty {
		return nil
	}
	a := l.segs[len(l.segs)-1]
	if err := l.active.SyncData(); err != nil {
		return l.fail(fmt.Errorf("seglog: sync %s through group %d: %w", a.path, a.last, err))
	}
	l.dirty = false
	return nil
}

// Replay calls fn for every committed group numbered above after, in
// order. records alias a buffer that is not reused: fn may keep them but
// must not modify them. An error from fn stops the replay and is returned.
//
// Replay checks that the log covers what is asked: if groups after
// "after" have already been deleted (after+1 < FirstGroup), or the log
// ends before after (a checkpoint newer than the log), it returns a
// *CorruptError. Replay is meant to run after Open and before Append.
func (l *Log) Replay(after uint64, fn func(group uint64, records [][]byte) error) error {
	if l.closed {
		return errors.New("seglog: log is closed")
	}
	if len(l.segs) == 0 {
		if after > 0 {
			return &CorruptError{Segment: filepath.Join(l.dir, segName(1)), Offset: 0,
				Reason: fmt.Sprintf("replay from group %d asked for, but the log holds no segment", after)}
		}
		return nil
	}
	first, last := l.segs[0].first, l.LastGroup()
	if after+1 < first {
		return &CorruptError{Segment: l.segs[0].path, Offset: 0,
			Reason: fmt.Sprintf("groups after %d are needed but the log starts at group %d (its earlier segments were deleted)", after, first)}
	}
	if after > last {
		a := l.segs[len(l.segs)-1]
		return &CorruptError{Segment: a.path, Offset: a.size,
			Reason: fmt.Sprintf("replay from group %d asked for, but the log ends at group %d (the checkpoint is newer than the log)", after, last)}
	}
	for _, s := range l.segs {
		if s.last <= after {
			continue
		}
		buf, err := vfs.ReadFile(l.fs, s.path)
		if err != nil {
			return fmt.Errorf("seglog: replay: read segment: %w", err)
		}
		if int64(len(buf)) < s.size {
			return &CorruptError{Segment: s.path, Offset: int64(len(buf)), Reason: fmt.Sprintf("segment shrank to %d bytes after open (was %d)", len(buf), s.size)}
		}
		buf = buf[:s.size]
		h, status, reason := decodeHeader(buf)
		if status != headerOK {
			return &CorruptError{Segment: s.path, Offset: 0, Reason: reason + " (changed after open)"}
		}
		res, err := scanFrames(s.path, buf, h, func(g uint64, recs [][]byte) error {
			if g <= after {
				return nil
			}
			return fn(g, recs)
		})
		if err != nil {
			return err
		}
		if res.damageAt >= 0 || res.lastGroup != s.last {
			return &CorruptError{Segment: s.path, Offset: res.validEnd, Reason: "segment changed after open: " + res.damageReason}
		}
	}
	return nil
}

// DeleteThrough deletes, oldest first, every sealed segment whose groups
// are all numbered at or below group, syncing the directory after each
// removal (so the segments left are always a contiguous run, even after a
// crash). The active segment is never deleted. Call it only once the
// groups are covered by a durable checkpoint (see WriteCheckpoint).
//
// A failed Remove returns an error and leaves the log usable (the segment
// is still there and still listed). A failed directory sync fails the log:
// the directory also holds the entries of new segments.
func (l *Log) DeleteThrough(group uint64) error {
	if err := l.usable(); err != nil {
		return err
	}
	for len(l.segs) > 1 && l.segs[0].last <= group {
		s := l.segs[0]
		if err := l.fs.Remove(s.path); err != nil {
			return fmt.Errorf("seglog: delete segment through group %d: %w", group, err)
		}
		l.segs = l.segs[1:]
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			// The directory also holds the entries of new segments; a
			// failed directory sync is as final as a failed data sync.
			return l.fail(fmt.Errorf("seglog: after deleting %s: %w", s.path, err))
		}
	}
	return nil
}

// Close closes the active segment. It does not sync: call Sync first for
// durability. Closing a failed log is allowed.
func (l *Log) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	if l.active == nil {
		return nil
	}
	if err := l.active.Close(); err != nil {
		return fmt.Errorf("seglog: close %s: %w", l.segs[len(l.segs)-1].path, err)
	}
	return nil
}

// CreateAfter creates the first segment of a new, empty log in dir that
// continues after group (a checkpoint of group holds everything before
// it): segment 2 whose first group is group+1 (segment 1 must start at
// group 1), or segment 1 for group 0. The segment and its directory
// entry are synced.
func CreateAfter(fsys vfs.FS, dir string, group uint64) error {
	seq := uint64(2)
	if group == 0 {
		seq = 1
	}
	if err := vfs.MkdirAllDurable(fsys, dir, vfs.PrivateDir); err != nil {
		return err
	}
	seg := EncodeSegment(seq, group+1, nil)
	return vfs.Publish(fsys, filepath.Join(dir, segName(seq)), true, func(f vfs.File) error {
		_, err := f.Write(seg)
		return err
	})
}
