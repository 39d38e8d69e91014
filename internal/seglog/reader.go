package seglog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"wsfs/internal/vfs"
)

// This file serves readers of a log other than its owner: the remote
// shipper (internal/ship) reads the groups a daemon appends, from another
// goroutine or process, without opening the log and without modifying
// anything; and pull (internal/ship) writes the segment and checkpoint
// files a fetched workspace is recovered from.
//
// A Tail tolerates what its owner does concurrently: appends (a group is
// handed out only once its commit marker and group CRC verify, so a
// half-written group is simply not there yet), rollover (a new segment
// appears) and DeleteThrough (a segment disappears: ErrSegmentGone). It
// never repairs: damage is reported as the end of what is readable now,
// and the caller decides whether that is a torn tail still being written
// or corruption (the owner's Open is the judge of that).

// ErrSegmentGone is returned by Tail.Next when the segment was deleted
// (by DeleteThrough, after a checkpoint) before it was read.
var ErrSegmentGone = errors.New("seglog: segment was deleted")

// SegmentName is the file name of segment seq ("%020d.seg").
func SegmentName(seq uint64) string { return segName(seq) }

// ListSegments returns the sequence numbers of the segments in dir,
// ascending. A missing dir holds none.
func ListSegments(fsys vfs.FS, dir string) ([]uint64, error) {
	names, err := fsys.List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("seglog: list log directory: %w", err)
	}
	var seqs []uint64
	for _, n := range names {
		if seq, ok := parseSegName(n); ok {
			seqs = append(seqs, seq)
		}
	}
	return seqs, nil
}

// CheckpointGroups returns the groups of the checkpoint files in dir,
// ascending, without reading them. A missing dir holds none.
func CheckpointGroups(fsys vfs.FS, dir string) ([]uint64, error) { return listCheckpoints(fsys, dir) }

// CheckpointName is the file name of the checkpoint of group
// ("%020d.ckpt").
func CheckpointName(group uint64) string { return ckptName(group) }

// DecodeCheckpointFile verifies the bytes of a checkpoint file (name is
// used in errors) written for group and returns its payload, aliasing b.
// Damage is a *CorruptError.
func DecodeCheckpointFile(name string, group uint64, b []byte) ([]byte, error) {
	return decodeCheckpoint(name, group, b)
}

// EncodeCheckpointFile returns the bytes WriteCheckpoint writes for group.
func EncodeCheckpointFile(group uint64, payload []byte) []byte {
	b := make([]byte, 0, ckptHeaderLen+len(payload))
	return append(append(b, encodeCkptHeader(group, payload)...), payload...)
}

// Tail reads the complete groups of one segment file, from the front,
// as they appear. See the comment at the top of this file.
type Tail struct {
	fs    vfs.FS
	path  string
	seq   uint64
	first uint64 // first group (from the header); 0 until the header is read
	off   int64  // bytes consumed: the end of the last complete group read
	last  uint64 // last group handed out; first-1 before any
}

// NewTail returns a Tail of segment seq in dir. Nothing is read yet.
func NewTail(fsys vfs.FS, dir string, seq uint64) *Tail {
	return &Tail{fs: fsys, path: filepath.Join(dir, segName(seq)), seq: seq}
}

// Path is the segment file's path.
func (t *Tail) Path() string { return t.path }

// First is the segment's first group, 0 until Next has read the header.
func (t *Tail) First() uint64 { return t.first }

// Last is the last group Next handed out (First()-1 before any).
func (t *Tail) Last() uint64 { return t.last }

// Next reads what was appended since the previous call and calls fn for
// every complete group in order (records alias a fresh buffer; fn may keep
// them). It returns the number of groups handed out. A segment that does
// not exist (any more) gives ErrSegmentGone; a header that does not
// verify yet (a segment being created) gives no groups and no error; an
// error from fn stops the scan with that error, and the group is handed
// out again by the next call.
func (t *Tail) Next(fn func(group uint64, records [][]byte) error) (int, error) {
	f, err := t.fs.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, ErrSegmentGone
	}
	if err != nil {
		return 0, fmt.Errorf("seglog: open %s: %w", t.path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("seglog: stat %s: %w", t.path, err)
	}
	if t.first == 0 {
		hb := make([]byte, segHeaderLen)
		n, err := f.ReadAt(hb, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("seglog: read %s: %w", t.path, err)
		}
		h, status, reason := decodeHeader(hb[:n])
		switch status {
		case headerOK:
		case headerUnsupported:
			return 0, &CorruptError{Segment: t.path, Reason: reason}
		default:
			return 0, nil // being created
		}
		if h.seq != t.seq || h.firstGroup == 0 {
			return 0, &CorruptError{Segment: t.path, Reason: fmt.Sprintf("header names segment %d, first group %d", h.seq, h.firstGroup)}
		}
		t.first, t.off, t.last = h.firstGroup, segHeaderLen, h.firstGroup-1
	}
	// Read in windows (tailWindow, doubled while the groups go on), not
	// to the end of the file: the active segment ends in a runway of up
	// to runwayLen zeros, which would otherwise be read on every call.
	size := st.Size()
	groups := 0
	for window := tailWindow; t.off < size; {
		want := min(window, size-t.off)
		toEOF := want == size-t.off
		n, atEnd, err := t.scan(f, want, fn)
		groups += n
		if err != nil || atEnd || toEOF {
			return groups, err
		}
		if n == 0 || window < tailWindowMax {
			window *= 2 // a group larger than the window, or catching up
		}
	}
	return groups, nil
}

// tailWindow is the first read of Tail.Next, a few groups of a busy
// workspace; it doubles up to tailWindowMax while the groups go on (a
// reader catching up), and beyond while one group does not fit.
// (Variables so that FuzzTailAgrees can make windows small.)
var (
	tailWindow    int64 = 16 << 10
	tailWindowMax int64 = 16 << 20
)

// scan reads want bytes of f at t.off and hands out the complete groups
// among them, advancing t.off past those fn accepted. atEnd is true when
// the window reached the end of the file, or what follows the groups in it
// is at least a frame header's worth of zeros (nothing written yet, or the
// runway) or damage: reading more of the file now will not show another
// group.
func (t *Tail) scan(f vfs.File, want int64, fn func(group uint64, records [][]byte) error) (groups int, atEnd bool, err error) {
	// Scan a synthetic segment: the header (saying the next group is
	// t.last+1) followed by the bytes after what was consumed.
	h := segHeader{seq: t.seq, firstGroup: t.last + 1}
	buf := make([]byte, segHeaderLen+want)
	copy(buf, h.encode())
	n, err := f.ReadAt(buf[segHeaderLen:], t.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, true, fmt.Errorf("seglog: read %s: %w", t.path, err)
	}
	buf = buf[:segHeaderLen+n]
	var fnErr error
	res, err := scanFrames(t.path, buf, h, func(g uint64, recs [][]byte) error {
		if err := fn(g, recs); err != nil {
			fnErr = err
			return err
		}
		groups++
		t.last = g
		return nil
	})
	if fnErr != nil {
		err = fnErr
	}
	// Advance past the groups handed out (those fn accepted).
	consumed := groupBytes(buf, h, groups)
	t.off += consumed
	// Zeros say nothing more is written only where a whole frame header
	// would be: a frame header's first bytes can be zeros (the low bytes
	// of its length), and the window can end right after the groups.
	rest := buf[segHeaderLen+consumed:]
	atEnd = int64(n) < want || (len(rest) >= frameHeaderLen && isZero(rest)) ||
		(res.damageAt >= 0 && !frameRunsPast(buf[res.damageAt:]))
	return groups, atEnd, err
}

// frameRunsPast reports whether the frame at the start of b is cut short
// by the end of b (it may be complete in the file).
func frameRunsPast(b []byte) bool {
	return len(b) < frameHeaderLen || int64(binary.LittleEndian.Uint32(b[0:])) > int64(len(b)-frameHeaderLen)
}

// groupBytes returns the length of the first n complete groups of buf
// (a synthetic segment with header h), header excluded.
func groupBytes(buf []byte, h segHeader, n int) int64 {
	if n == 0 {
		return 0
	}
	off := segHeaderLen
	seen := 0
	for off < len(buf) && seen < n {
		f, ok, _ := parseFrame(buf[off:])
		if !ok {
			break
		}
		off += f.size
		if f.typ == typeCommit {
			seen++
		}
	}
	return int64(off - segHeaderLen)
}

// EncodeSegment returns a whole segment file: segment seq whose first
// group is first, holding groups (each a list of records) numbered first,
// first+1, ... The result is what Append would have written, so Open
// reads it like any other segment.
func EncodeSegment(seq, first uint64, groups [][][]byte) []byte {
	b := segHeader{seq: seq, firstGroup: first}.encode()
	for i, recs := range groups {
		crcs := make([]uint32, 0, len(recs))
		for _, r := range recs {
			var c uint32
			b, c = appendFrame(b, typeData, r)
			crcs = append(crcs, c)
		}
		b, _ = appendFrame(b, typeCommit, encodeCommit(first+uint64(i), uint32(len(recs)), groupCRC(crcs)))
	}
	return b
}

// DecodeSegment verifies a whole segment file (name is used in errors)
// and calls fn for each of its groups. Unlike Open it repairs nothing:
// any damage, an incomplete group included, is a *CorruptError. It
// returns the first and last group.
func DecodeSegment(name string, b []byte, fn func(group uint64, records [][]byte) error) (first, last uint64, err error) {
	h, status, reason := decodeHeader(b)
	if status != headerOK {
		return 0, 0, &CorruptError{Segment: name, Reason: reason}
	}
	if h.firstGroup == 0 {
		return 0, 0, &CorruptError{Segment: name, Reason: "first group 0"}
	}
	res, err := scanFrames(name, b, h, fn)
	if err != nil {
		return 0, 0, err
	}
	if res.damageAt >= 0 {
		return 0, 0, &CorruptError{Segment: name, Offset: res.damageAt, Reason: res.damageReason}
	}
	if res.validEnd != int64(len(b)) {
		return 0, 0, &CorruptError{Segment: name, Offset: res.validEnd, Reason: "records without a commit marker at the end"}
	}
	return h.firstGroup, res.lastGroup, nil
}
