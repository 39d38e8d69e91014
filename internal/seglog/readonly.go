package seglog

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"wsfs/internal/vfs"
)

// ErrChanged is wrapped by the errors of ReadCommitted that a retry may
// resolve: the log changed while it was read (a segment deleted after a
// checkpoint, a segment being created, a tail being written over damage).
// A caller that sees it persist must treat it as damage.
var ErrChanged = errors.New("seglog: the log changed while it was read")

// ReadCommitted reads the log in dir without a lock and without changing
// anything, while the process that owns it may be appending, cutting back a
// failed append, rolling over to a new segment or deleting segments a
// checkpoint covers. It calls fn, in order, for every complete group
// numbered above after that it finds, and returns the last group it handed
// out (after, if none). records alias a buffer that is not reused.
//
// What it guarantees: every group that was complete in the log before
// ReadCommitted listed the directory (in particular every group whose
// commit had returned) and is above after is handed to fn, or an error is
// returned. Groups appended later may or may not be seen. A group whose
// append is later cut back (a full filesystem) may be seen: a reader that
// collects references errs on the side of keeping.
//
// Errors wrapping ErrChanged: the log no longer covers after (segments
// were deleted: read the newest checkpoint again), a listed segment
// vanished, a sealed segment does not chain or verify, or damage in the
// last segment is followed by a valid later commit marker (not the
// damaged group's own over an unwritten sector: a torn tail, which Open
// drops, and which a power cut leaves until the log is opened again;
// found by TestPowerCutSectors). A *CorruptError reports what no race
// produces: a commit marker that contradicts its group; a last segment
// whose header is bad although bytes follow it, or although it is the
// log's only segment and groups after a checkpoint (after > 0) are needed;
// an existing log directory with no segment while after > 0. (A segment
// being created holds only its header, which is synced before any group
// goes in, and a log's previous segment is deleted only once the next
// one's header is synced; a log never loses its last segment, and `wsfs
// rm` renames the whole workspace directory away.) A missing dir is an
// empty log.
func ReadCommitted(fsys vfs.FS, dir string, after uint64, fn func(group uint64, records [][]byte) error) (uint64, error) {
	names, err := fsys.List(dir)
	missing := errors.Is(err, fs.ErrNotExist)
	if missing {
		names = nil
	} else if err != nil {
		return after, fmt.Errorf("seglog: list log directory: %w", err)
	}
	var seqs []uint64
	for _, n := range names {
		if seq, ok := parseSegName(n); ok {
			seqs = append(seqs, seq)
		}
	}
	changed := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrChanged, dir, fmt.Sprintf(format, args...))
	}
	if len(seqs) == 0 {
		if after > 0 && !missing {
			return after, &CorruptError{Segment: filepath.Join(dir, segName(1)), Offset: 0,
				Reason: fmt.Sprintf("the log holds no segment, yet the checkpoint of group %d needs the groups after it "+
					"(segments were removed or moved aside: put them back)", after)}
		}
		if after > 0 {
			return after, changed("no segment, but groups after %d are needed", after)
		}
		return after, nil
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			return after, changed("segment %d is missing between %d and %d", seqs[i-1]+1, seqs[i-1], seqs[i])
		}
	}
	last := after
	next := uint64(0) // the first group the next segment must start with; 0: unknown
	for i, seq := range seqs {
		isLast := i == len(seqs)-1
		path := filepath.Join(dir, segName(seq))
		buf, err := vfs.ReadFile(fsys, path)
		if errors.Is(err, fs.ErrNotExist) {
			return after, changed("segment %s vanished (deleted after a checkpoint?)", path)
		}
		if err != nil {
			return after, fmt.Errorf("seglog: read segment: %w", err)
		}
		h, status, reason := decodeHeader(buf)
		if status != headerOK {
			if isLast && status != headerUnsupported {
				// Being created: its header is written and synced before
				// any group goes into it, so it holds none yet, and it
				// follows the segment before it, which is deleted only
				// after that sync. Anything else is damage that hides
				// groups: a reader that skipped them would drop their
				// references (gc would remove their objects).
				switch {
				case len(buf) > segHeaderLen:
					return after, &CorruptError{Segment: path, Offset: 0,
						Reason: reason + "; yet bytes follow the header (a segment being created holds none): its groups cannot be read"}
				case i == 0 && after > 0:
					return after, &CorruptError{Segment: path, Offset: 0,
						Reason: fmt.Sprintf("%s; it is the log's only segment, yet the checkpoint of group %d needs the groups after it", reason, after)}
				}
				break
			}
			return after, changed("%s: %s", path, reason)
		}
		if h.seq != seq || h.firstGroup == 0 || (next != 0 && h.firstGroup != next) {
			return after, changed("%s: segment %d starts at group %d, expected %d", path, h.seq, h.firstGroup, next)
		}
		if i == 0 && h.firstGroup > after+1 {
			return after, changed("groups after %d are needed but the log starts at group %d (segments deleted after a newer checkpoint)", after, h.firstGroup)
		}
		res, err := scanFrames(path, buf, h, func(g uint64, recs [][]byte) error {
			if g <= after {
				return nil
			}
			last = g
			return fn(g, recs)
		})
		if err != nil {
			return after, err
		}
		if !isLast && (res.damageAt >= 0 || res.validEnd != int64(len(buf))) {
			return after, changed("%s: sealed segment damaged or incomplete at offset %d", path, res.validEnd)
		}
		if isLast && res.damageAt >= 0 {
			// As in Open: the damaged group's own marker over a sector
			// that never reached the disk (a power cut during its
			// append) is a torn tail, not a later group.
			if off, g := laterCommit(buf, res.damageAt+1, res.lastGroup); off >= 0 && !unwrittenLastGroup(buf, res, off, g) {
				return after, changed("%s: damage at offset %d, yet a valid commit marker for group %d follows at offset %d",
					path, res.damageAt, g, off)
			}
		}
		next = res.lastGroup + 1
	}
	return last, nil
}
