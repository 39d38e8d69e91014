package seglog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// Frozen wire-format constants (see the package documentation).
const (
	segMagic       = "WSFSSEG1"
	segVersion     = 1
	segHeaderLen   = 32
	frameHeaderLen = 9 // length u32, CRC u32, type u8

	typeData   byte = 1
	typeCommit byte = 2

	commitPayloadLen = 16 // group u64, count u32, group CRC u32

	// maxRecordLen is the largest record a frame can hold.
	maxRecordLen = 1<<32 - 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segHeader is the decoded header of a segment file.
type segHeader struct {
	seq        uint64
	firstGroup uint64
}

func (h segHeader) encode() []byte {
	b := make([]byte, segHeaderLen)
	copy(b, segMagic)
	binary.LittleEndian.PutUint32(b[8:], segVersion)
	binary.LittleEndian.PutUint64(b[12:], h.seq)
	binary.LittleEndian.PutUint64(b[20:], h.firstGroup)
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	return b
}

// headerStatus tells torn (possibly an interrupted write) from definitely
// wrong headers.
type headerStatus int

const (
	headerOK          headerStatus = iota
	headerIncomplete               // shorter than segHeaderLen
	headerInvalid                  // bad magic or CRC: garbage or torn
	headerUnsupported              // valid CRC, but a version this code does not know
)

func decodeHeader(b []byte) (segHeader, headerStatus, string) {
	if len(b) < segHeaderLen {
		return segHeader{}, headerIncomplete, fmt.Sprintf("segment header incomplete: %d of %d bytes", len(b), segHeaderLen)
	}
	if crc32.Checksum(b[:28], castagnoli) != binary.LittleEndian.Uint32(b[28:]) {
		return segHeader{}, headerInvalid, "segment header checksum mismatch"
	}
	if string(b[:8]) != segMagic {
		return segHeader{}, headerInvalid, fmt.Sprintf("segment header magic %q, want %q", b[:8], segMagic)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != segVersion {
		return segHeader{}, headerUnsupported, fmt.Sprintf("segment format version %d, this wsfs reads only version %d (written by a newer wsfs?)", v, segVersion)
	}
	return segHeader{
		seq:        binary.LittleEndian.Uint64(b[12:]),
		firstGroup: binary.LittleEndian.Uint64(b[20:]),
	}, headerOK, ""
}

// appendFrame appends one frame to dst and returns the extended slice and
// the frame's CRC.
func appendFrame(dst []byte, typ byte, payload []byte) ([]byte, uint32) {
	var h [frameHeaderLen]byte
	crc := crc32.Update(0, castagnoli, []byte{typ})
	crc = crc32.Update(crc, castagnoli, payload)
	binary.LittleEndian.PutUint32(h[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[4:], crc)
	h[8] = typ
	dst = append(dst, h[:]...)
	return append(dst, payload...), crc
}

// groupCRC is the CRC-32C over the frame CRCs of a group's data frames.
func groupCRC(crcs []uint32) uint32 {
	var b [4]byte
	var c uint32
	for _, x := range crcs {
		binary.LittleEndian.PutUint32(b[:], x)
		c = crc32.Update(c, castagnoli, b[:])
	}
	return c
}

func encodeCommit(group uint64, count uint32, gcrc uint32) []byte {
	p := make([]byte, commitPayloadLen)
	binary.LittleEndian.PutUint64(p[0:], group)
	binary.LittleEndian.PutUint32(p[8:], count)
	binary.LittleEndian.PutUint32(p[12:], gcrc)
	return p
}

type commitInfo struct {
	group uint64
	count uint32
	gcrc  uint32
}

func decodeCommit(p []byte) commitInfo {
	return commitInfo{
		group: binary.LittleEndian.Uint64(p[0:]),
		count: binary.LittleEndian.Uint32(p[8:]),
		gcrc:  binary.LittleEndian.Uint32(p[12:]),
	}
}

// frame is one decoded, checksum-verified frame.
type frame struct {
	typ     byte
	crc     uint32
	payload []byte // aliases the segment buffer
	size    int    // bytes the frame occupies
}

// parseFrame decodes the frame at the start of b. ok is false when the
// frame is incomplete (runs past the end of b), fails its checksum, or has
// an unknown type; reason then says which.
func parseFrame(b []byte) (f frame, ok bool, reason string) {
	if len(b) < frameHeaderLen {
		return f, false, fmt.Sprintf("incomplete frame header (%d of %d bytes before end of file)", len(b), frameHeaderLen)
	}
	n := uint64(binary.LittleEndian.Uint32(b[0:]))
	if n > uint64(len(b)-frameHeaderLen) {
		return f, false, fmt.Sprintf("frame length %d runs past end of file (%d bytes left)", n, len(b)-frameHeaderLen)
	}
	want := binary.LittleEndian.Uint32(b[4:])
	body := b[8 : frameHeaderLen+int(n)] // type + payload
	if got := crc32.Checksum(body, castagnoli); got != want {
		return f, false, fmt.Sprintf("frame checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	typ := b[8]
	switch typ {
	case typeData:
	case typeCommit:
		if n != commitPayloadLen {
			return f, false, fmt.Sprintf("commit marker payload is %d bytes, want %d", n, commitPayloadLen)
		}
	default:
		return f, false, fmt.Sprintf("unknown frame type %d", typ)
	}
	return frame{typ: typ, crc: want, payload: b[frameHeaderLen : frameHeaderLen+int(n)], size: frameHeaderLen + int(n)}, true, ""
}

// scanResult describes one segment's frames after its header.
type scanResult struct {
	firstGroup uint64 // from the header
	lastGroup  uint64 // last committed group; firstGroup-1 if none
	groups     int
	// validEnd is the offset just past the last commit marker (or the
	// header if there is none): everything before it is complete groups.
	validEnd int64
	// damageAt is the offset of the first invalid or incomplete frame, or
	// -1 if every frame validated to the end of the buffer.
	damageAt     int64
	damageReason string
	// pendingRecords counts valid data frames after validEnd (a group
	// without its commit marker, possibly cut short by damageAt);
	// pendingCRCs are their frame CRCs, in order.
	pendingRecords int
	pendingCRCs    []uint32
}

// scanFrames walks the frames of a segment whose header decoded as h.
// For every complete group it calls fn (if not nil) with records aliasing
// buf. A checksum-valid commit marker that contradicts its group (wrong
// number, count or group CRC) is corruption no crash can produce; it is
// returned as a *CorruptError. Invalid frames are not errors here: the
// caller decides between torn tail and corruption from damageAt.
func scanFrames(name string, buf []byte, h segHeader, fn func(group uint64, records [][]byte) error) (scanResult, error) {
	res := scanResult{
		firstGroup: h.firstGroup,
		lastGroup:  h.firstGroup - 1,
		validEnd:   segHeaderLen,
		damageAt:   -1,
	}
	var crcs []uint32
	var recs [][]byte
	off := segHeaderLen
	for off < len(buf) {
		f, ok, reason := parseFrame(buf[off:])
		if !ok {
			res.damageAt, res.damageReason = int64(off), reason
			break
		}
		switch f.typ {
		case typeData:
			crcs = append(crcs, f.crc)
			if fn != nil {
				recs = append(recs, f.payload)
			}
		case typeCommit:
			c := decodeCommit(f.payload)
			want := res.lastGroup + 1
			switch {
			case c.group != want:
				return res, &CorruptError{Segment: name, Offset: int64(off),
					Reason: fmt.Sprintf("commit marker for group %d where group %d was expected (groups must be contiguous)", c.group, want)}
			case int(c.count) != len(crcs):
				return res, &CorruptError{Segment: name, Offset: int64(off),
					Reason: fmt.Sprintf("commit marker of group %d counts %d records, %d precede it", c.group, c.count, len(crcs))}
			case c.gcrc != groupCRC(crcs):
				return res, &CorruptError{Segment: name, Offset: int64(off),
					Reason: fmt.Sprintf("commit marker of group %d: group checksum does not match its records", c.group)}
			}
			if fn != nil {
				if err := fn(c.group, recs); err != nil {
					return res, err
				}
			}
			res.lastGroup = c.group
			res.groups++
			res.validEnd = int64(off + f.size)
			crcs, recs = crcs[:0], nil
		}
		off += f.size
	}
	res.pendingRecords = len(crcs)
	res.pendingCRCs = crcs
	return res, nil
}

// sectorSize is the granularity at which a crash can leave part of an
// unsynced write unwritten (reading back as zeros): the smallest block a
// disk writes atomically. Filesystems allocate in larger blocks (4 KiB),
// so a torn write always zeroes whole 512-byte sectors, and checking at
// this size accepts every such tear.
const sectorSize = 512

// classifyTail decides whether the end of the last segment, from res's
// first invalid frame (or, if every frame verified, from the records left
// without a commit marker), is what a crash during an unsynced append
// leaves, or damage to bytes that were written completely.
//
// A group is appended with one write at the end of the file. A crash
// before that write is synced can leave the file cut short anywhere in
// the new bytes, and any whole sector of them unwritten (zeros); it
// cannot change a byte into another nonzero value. So the tail is torn
// when:
//
//   - every frame verified and only the commit marker is absent (the file
//     ends at a frame boundary); or
//   - the first invalid frame runs past the end of the file (cut short),
//     unless the bytes there are the expected commit marker with only its
//     length field wrong; or past the last nonzero byte of the file: cut
//     short in the runway (runway.go), unless its type byte says commit
//     marker and its bytes up to the first sector boundary after the last
//     nonzero byte are not the start of the marker the group needs, or
//     that boundary lies past the marker (cutShortInRunway); or
//   - the first invalid frame is complete but overlaps a sector that is
//     zero from the frame (or the sector's start) to the sector's end or
//     the end of the file (unwritten).
//
// Otherwise (a complete frame with a bad checksum and no zeroed sector,
// including a commit marker with a flipped byte behind records that all
// verify) the bytes were written and changed afterwards: corruption, and
// reason says what was found. A storage stack that returns stale or
// random bytes after a crash (no journal, writeback mode) can make a tear
// look like corruption; that errs on the safe side: wsfs refuses and
// `wsfs fsck --repair` truncates after saving a copy, never a silent drop.
func classifyTail(buf []byte, res scanResult) (torn bool, reason string) {
	if res.damageAt < 0 {
		return true, ""
	}
	d := res.damageAt
	rest := buf[d:]
	want, _ := appendFrame(nil, typeCommit, encodeCommit(res.lastGroup+1, uint32(res.pendingRecords), groupCRC(res.pendingCRCs)))
	markerTail := len(rest) >= len(want) && string(rest[4:len(want)]) == string(want[4:])
	markerPayload := len(rest) >= len(want) && string(rest[frameHeaderLen:len(want)]) == string(want[frameHeaderLen:])
	whose := func() string {
		if markerPayload || markerTail || (len(rest) > 8 && rest[8] == typeCommit) {
			return fmt.Sprintf(": this is the commit marker of group %d, whose %d records all verify, so the group was written completely and may have been acknowledged", res.lastGroup+1, res.pendingRecords)
		}
		return ""
	}
	end := int64(len(buf))
	if len(rest) < frameHeaderLen || int64(binary.LittleEndian.Uint32(rest[0:])) > int64(len(rest)-frameHeaderLen) {
		if markerTail {
			return false, "the commit marker's length field is damaged (the rest of the marker is intact)" + whose()
		}
		return true, ""
	}
	extent := d + frameHeaderLen + int64(binary.LittleEndian.Uint32(rest[0:]))
	if p := int64(nonZeroEnd(buf)); p < extent {
		// The frame's last bytes and everything after them are zeros
		// (they can start before the frame: a record that ends in
		// zeros): an append into the runway that stopped part-way, or
		// bytes changed to zeros.
		if torn, judged := cutShortInRunway(buf, d, p, want); judged {
			if torn {
				return true, ""
			}
			return false, "a commit marker followed only by zeros differs from the one its group needs (zeros inside a written sector, or bytes that are not its group's)" + whose()
		}
		// Otherwise judged as a complete frame below.
	}
	for s := d / sectorSize * sectorSize; s < extent; s += sectorSize {
		lo, hi := max(s, d), min(s+sectorSize, end)
		if isZero(buf[lo:hi]) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("a complete frame of %d bytes fails verification (%s), and none of it is zeroed as a crash leaves unwritten bytes; it was written and changed since%s",
		extent-d, res.damageReason, whose())
}

// cutShortInRunway judges the frame at d of buf, after whose last nonzero
// byte (p, which can lie before d: a record that ends in zeros) the file
// holds only zeros, as an append into the runway that stopped part-way:
//
//   - a frame header cut before its type byte, or a data frame (its
//     group's commit marker, never all zeros, is then missing too), is
//     torn wherever the zeros start: a short write can stop at any byte;
//   - a commit marker (its type byte written) is torn only if its bytes up
//     to the first sector boundary at or after p are the start of the
//     marker its group needs (want), and that boundary lies inside it: a
//     crash leaves whole sectors unwritten (zeros), so zeros inside the
//     sector of a written byte were written, and a marker that ends in
//     them is its group's marker changed (a flipped last byte, say), not
//     cut short: the group may have been acknowledged.
//
// judged is false for any other frame (a type byte that is neither,
// zero when its own sector was not written): classifyTail's sector rule
// decides.
func cutShortInRunway(buf []byte, d, p int64, want []byte) (torn, judged bool) {
	written := buf[d:max(p, d)]
	switch {
	case len(written) <= frameHeaderLen-1:
		return true, true
	case written[frameHeaderLen-1] == typeData:
		return true, true
	case written[frameHeaderLen-1] == typeCommit:
		s := (p + sectorSize - 1) / sectorSize * sectorSize
		return s < d+int64(len(want)) && bytes.HasPrefix(want, buf[d:s]), true
	}
	return false, false
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// laterCommit searches buf[from:] byte by byte for a checksum-valid commit
// marker whose group number is greater than after. It returns the marker's
// offset and group, or -1.
//
// A valid data frame of at most skipFrameMax bytes found on the way is
// skipped whole, so small records that happen to contain log bytes (a
// segment file stored inline) are not mistaken for markers. Larger frames
// are not checksummed at every offset: that would make the search
// quadratic on garbage. Bytes inside the damaged frame itself cannot be
// told apart from a real later marker; such a false alarm errs on the safe
// side (a CorruptError, never a silent drop).
//
// Offsets in the trailing zeros (a runway) are not visited: a frame all
// of whose bytes are zero never verifies (type 0 is never written).
func laterCommit(buf []byte, from int64, after uint64) (int64, uint64) {
	end := int64(len(buf))
	stop := int64(nonZeroEnd(buf))
	for off := from; off+frameHeaderLen <= end && off < stop; {
		b := buf[off:]
		n := int64(binary.LittleEndian.Uint32(b[0:]))
		typ := b[8]
		if (typ == typeCommit && n == commitPayloadLen) || (typ == typeData && n <= skipFrameMax) {
			if f, ok, _ := parseFrame(b); ok {
				if f.typ == typeCommit {
					if c := decodeCommit(f.payload); c.group > after {
						return off, c.group
					}
				}
				off += int64(f.size)
				continue
			}
		}
		off++
	}
	return -1, 0
}

// unwrittenLastGroup reports whether the damage found by scanFrames is the
// out-of-order persistence of the last, unacknowledged group rather than
// corruption, given laterCommit's marker for group g at offset off: the
// marker is the damaged group's own (g is the group after the last
// complete one), no commit marker follows it, and the damaged range holds
// a 512-byte sector of zeros (from the damage on, for the sector the
// damage starts in) — a sector that never reached the disk — while the
// damaged frame's header is what a crash can leave of one (see below).
// The flusher appends a group only after the previous one's sync returned,
// so only the last group can be unsynced, and its pages may reach the disk
// in any order before a power loss (found by the crashfs power-cut tests:
// a zeroed sector of the last group's frames before its intact marker). A
// bit flip in the same group leaves no zero sector and stays corruption,
// as does any damage that a later group's marker shows was synced.
func unwrittenLastGroup(buf []byte, res scanResult, off int64, g uint64) bool {
	if g != res.lastGroup+1 {
		return false
	}
	if next, _ := laterCommit(buf, off+1, g); next >= 0 {
		return false
	}
	// A crash zeroes whole sectors and changes no other byte, so what is
	// left of the damaged frame's header is what was written, or zeros
	// (a data frame's: the group's marker follows), and its length is
	// the real one or smaller (bytes of it zeroed): its frame ends at or
	// before the marker, and no valid frames leading to the marker start
	// inside it. A header in one sector whose type byte was written is
	// whole: the next frame starts where it says, with a type byte
	// written or zero, and if valid frames lead from there to the marker,
	// the marker's count and group CRC cover its CRC. A header that
	// disagrees was changed. (Found by TestZeroRecordIsNotUnwritten and a
	// bit-flip probe: a changed length or frame CRC in a group holding a
	// record of zeros looked like an unwritten sector.)
	d := res.damageAt
	typ := buf[d+frameHeaderLen-1]
	extent := d + frameHeaderLen + int64(binary.LittleEndian.Uint32(buf[d:]))
	if (typ != 0 && typ != typeData) || extent > off {
		return false
	}
	if ts := (d + frameHeaderLen - 1) / sectorSize * sectorSize; typ == 0 && !isZero(buf[max(ts, d):d+frameHeaderLen-1]) {
		return false // the type byte's sector was written: it was zeroed since
	}
	seen := make([]bool, off-d+1) // frame starts already followed, in vain
	for e := d + frameHeaderLen; e < extent; e++ {
		if buf[e+frameHeaderLen-1] == typeData {
			if _, ok := chainsTo(buf, e, off, seen, d); ok {
				return false
			}
		}
	}
	if typ == typeData && d/sectorSize == (d+frameHeaderLen-1)/sectorSize {
		if next := buf[extent+frameHeaderLen-1]; extent < off && next != 0 && next != typeData {
			return false
		}
		if crcs, ok := chainsTo(buf, extent, off, seen, d); ok {
			all := append(append(slices.Clone(res.pendingCRCs), binary.LittleEndian.Uint32(buf[d+4:])), crcs...)
			c := decodeCommit(buf[off+frameHeaderLen : off+frameHeaderLen+commitPayloadLen])
			if int(c.count) != len(all) || c.gcrc != groupCRC(all) {
				return false
			}
		}
	}
	// The sector holding the start of the damage counts from there: its
	// bytes before it are the previous group's, as written before (found
	// by TestPowerCutSectors: the group's first, partial sector unwritten).
	for s := res.damageAt / sectorSize * sectorSize; s+sectorSize <= off; s += sectorSize {
		if isZero(buf[max(s, res.damageAt) : s+sectorSize]) {
			return true
		}
	}
	return false
}

// chainsTo reports whether valid data frames, back to back from e, end
// exactly at off, and returns their CRCs. seen[x-base] marks the starts x
// it followed before without reaching off (and is set for those it
// follows now), so that a search over many starts parses each frame once.
func chainsTo(buf []byte, e, off int64, seen []bool, base int64) ([]uint32, bool) {
	var crcs []uint32
	for e < off {
		if seen[e-base] {
			return nil, false
		}
		seen[e-base] = true
		if off-e < frameHeaderLen || int64(binary.LittleEndian.Uint32(buf[e:])) > off-e-frameHeaderLen {
			return nil, false
		}
		f, ok, _ := parseFrame(buf[e:off])
		if !ok || f.typ != typeData {
			return nil, false
		}
		crcs = append(crcs, f.crc)
		e += int64(f.size)
	}
	return crcs, e == off
}

// skipFrameMax bounds the data frames laterCommit verifies and skips.
const skipFrameMax = 1 << 20
