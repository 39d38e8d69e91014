package namespace

import (
	"encoding/binary"
	"fmt"

	"wsfs/internal/objid"
	"wsfs/internal/wire"
)

// Content kinds, in SetContent records and in checkpoints (frozen).
// Checkpoints also use contentNone (2) for inodes that are not regular
// files.
const (
	contentInline  = 0
	contentObject  = 1
	contentChunked = 3
	contentRanged  = 4 // checkpoints and manifests: base content + ranges (Content.Ranges)

	ContentKindChunked = contentChunked
	ContentKindRanged  = contentRanged
)

// Chunk sizes are powers of two between these shifts. The small end exists
// for tests that want many chunks from small files.
const (
	MinChunkShift = 8
	MaxChunkShift = 30
)

// MaxFileSize is the largest file size a SetContent record or checkpoint
// may carry (1 TiB): at the smallest chunk size used in production (1 MiB)
// its chunk list is 32 MiB.
const MaxFileSize = 1 << 40

// HoleChunk, the all-zero ID, names a chunk whose bytes are all zero; no
// pool object backs it.
var HoleChunk objid.ID

// Content is the content of a regular file, one of three kinds:
//
//   - inline (the zero value): Inline holds the bytes; len(Inline) == size.
//   - object (IsObject): the pool object Object holds all size bytes.
//   - chunked (Chunks != nil): chunk i holds bytes [i<<ChunkShift,
//     min((i+1)<<ChunkShift, size)) and is the pool object Chunks[i] of
//     exactly that length, or HoleChunk (zeros). len(Chunks) ==
//     ChunkCount(size, ChunkShift), which is at least 1.
//
// Ranges, when not nil, overlay that base content: the fields above then
// describe BaseSize bytes (not the file's size), and the file's bytes are
// the base's, zeros from BaseSize on, with each range's Data written at its
// Off in order (later ranges win). BaseSize is at most the file size and
// every range ends at or before it. Ranges come from WriteRange records
// (small writes to a large file logged as bytes instead of chunk objects);
// the workspace folds them into a new base before they exceed MaxRanges or
// MaxRangeBytes.
//
// The slices are immutable once the content is published (applied to a
// tree or encoded in a record): trees, records and readers share them.
type Content struct {
	Inline     []byte
	Object     objid.ID
	IsObject   bool
	Chunks     []objid.ID
	ChunkShift uint8

	BaseSize uint64
	Ranges   []Range
}

// Range is bytes written at Off over a file's base content.
type Range struct {
	Off  uint64
	Data []byte
}

// Bounds on a content's ranges (Apply and the decoders enforce them): at
// most MaxRanges ranges holding at most MaxRangeBytes bytes in total, and
// at most MaxRangeRecord bytes in one WriteRange record.
const (
	MaxRanges      = 4096
	MaxRangeBytes  = 4 << 20
	MaxRangeRecord = 1 << 20
)

// Base returns c without its ranges: the content of its first BaseSize
// bytes (c itself when it has no ranges).
func (c *Content) Base() Content {
	b := *c
	b.BaseSize, b.Ranges = 0, nil
	return b
}

// RangeBytes is the number of bytes c's ranges hold.
func (c *Content) RangeBytes() int {
	t := 0
	for _, r := range c.Ranges {
		t += len(r.Data)
	}
	return t
}

// Overlay writes the bytes of c's ranges that fall in [off, off+len(p))
// over p, which holds the base content's bytes there (zeros past
// BaseSize).
func (c *Content) Overlay(p []byte, off uint64) {
	end := off + uint64(len(p))
	for _, r := range c.Ranges {
		rend := r.Off + uint64(len(r.Data))
		if rend <= off || r.Off >= end {
			continue
		}
		lo, hi := max(off, r.Off), min(end, rend)
		copy(p[lo-off:hi-off], r.Data[lo-r.Off:hi-r.Off])
	}
}

// IsChunked reports whether c is chunked content.
func (c *Content) IsChunked() bool { return c.Chunks != nil }

// ChunkCount is the number of chunks of 1<<shift bytes that hold size
// bytes.
func ChunkCount(size uint64, shift uint8) int {
	return int((size + 1<<shift - 1) >> shift)
}

// Validate checks c against the file size it is the content of.
func (c *Content) Validate(size uint64) error {
	switch {
	case size > MaxFileSize:
		return fmt.Errorf("size %d exceeds the maximum %d", size, uint64(MaxFileSize))
	case c.Ranges != nil:
		if c.BaseSize > size {
			return fmt.Errorf("base size %d beyond the file size %d", c.BaseSize, size)
		}
		if len(c.Ranges) == 0 || len(c.Ranges) > MaxRanges {
			return fmt.Errorf("%d ranges (want 1 to %d)", len(c.Ranges), MaxRanges)
		}
		total := 0
		for _, r := range c.Ranges {
			if len(r.Data) == 0 || r.Off > size || uint64(len(r.Data)) > size-r.Off {
				return fmt.Errorf("range of %d bytes at %d for size %d", len(r.Data), r.Off, size)
			}
			total += len(r.Data)
		}
		if total > MaxRangeBytes {
			return fmt.Errorf("ranges hold %d bytes, more than %d", total, MaxRangeBytes)
		}
		b := c.Base()
		return b.Validate(c.BaseSize)
	case c.IsChunked():
		if c.IsObject || c.Inline != nil {
			return fmt.Errorf("chunked content also names an object or inline bytes")
		}
		if c.ChunkShift < MinChunkShift || c.ChunkShift > MaxChunkShift {
			return fmt.Errorf("chunk shift %d outside [%d, %d]", c.ChunkShift, MinChunkShift, MaxChunkShift)
		}
		if want := ChunkCount(size, c.ChunkShift); len(c.Chunks) != want || want == 0 {
			return fmt.Errorf("%d chunks of 1<<%d bytes for size %d (want %d, at least 1)", len(c.Chunks), c.ChunkShift, size, want)
		}
	case c.IsObject:
		if c.Inline != nil {
			return fmt.Errorf("object content also has inline bytes")
		}
	default:
		if uint64(len(c.Inline)) != size {
			return fmt.Errorf("inline content of %d bytes for size %d", len(c.Inline), size)
		}
	}
	return nil
}

// Objects calls fn for every pool object c references (holes excluded).
func (c *Content) Objects(fn func(objid.ID)) {
	switch {
	case c.IsChunked():
		for _, id := range c.Chunks {
			if id != HoleChunk {
				fn(id)
			}
		}
	case c.IsObject:
		fn(c.Object)
	}
}

// AppendContent appends the content encoding shared by records,
// checkpoints and manifests:
//
//	kind:u8 (0: inline:bytes | 1: object:[32]u8 |
//	         3: chunked: shift:u8 count:uvarint [32]u8*count |
//	         4: ranged: basesize:uvarint base:content(kind 0, 1 or 3)
//	            count:uvarint (off:uvarint data:bytes)*count)
//
// Kind 4 appears in checkpoints and manifests, never in records (records
// carry ranges as WriteRange records); a build from before it refuses it
// ("unknown content kind"). ContentKindChunked and ContentKindRanged
// export the kind bytes for manifest.ContentID.
func AppendContent(b []byte, c *Content) []byte {
	if c.Ranges != nil {
		b = append(b, contentRanged)
		b = binary.AppendUvarint(b, c.BaseSize)
		base := c.Base()
		b = AppendContent(b, &base)
		return appendRanges(b, c.Ranges)
	}
	switch {
	case c.IsChunked():
		b = append(b, contentChunked, c.ChunkShift)
		b = binary.AppendUvarint(b, uint64(len(c.Chunks)))
		for i := range c.Chunks {
			b = append(b, c.Chunks[i][:]...)
		}
	case c.IsObject:
		b = append(b, contentObject)
		b = append(b, c.Object[:]...)
	default:
		b = append(b, contentInline)
		b = binary.AppendUvarint(b, uint64(len(c.Inline)))
		b = append(b, c.Inline...)
	}
	return b
}

// appendRanges appends count:uvarint (off:uvarint data:bytes)*count.
func appendRanges(b []byte, rs []Range) []byte {
	b = binary.AppendUvarint(b, uint64(len(rs)))
	for _, r := range rs {
		b = binary.AppendUvarint(b, r.Off)
		b = binary.AppendUvarint(b, uint64(len(r.Data)))
		b = append(b, r.Data...)
	}
	return b
}

// ranges decodes appendRanges output (data aliases the input), at most
// max ranges.
func (d *decoder) ranges(max int) []Range {
	n := d.Uvarint("range count")
	if d.Err != nil {
		return nil
	}
	// Each range takes at least 3 bytes: bound the allocation by the input.
	if n == 0 || n > uint64(max) || n > uint64(len(d.B)/3) {
		d.Fail(fmt.Sprintf("range count %d (at most %d) with %d bytes left", n, max, len(d.B)))
		return nil
	}
	rs := make([]Range, n)
	for i := range rs {
		rs[i].Off = d.Uvarint("range offset")
		rs[i].Data = d.Bytes("range data", MaxRangeRecord)
		if d.Err == nil && len(rs[i].Data) == 0 {
			d.Fail("empty range")
		}
	}
	return rs
}

// DecodeContent reads one content in the AppendContent encoding (its kind
// byte, then its body) of a file of the given size, for formats that embed
// that encoding (manifests). It reports failures through wd's sticky
// error; inline bytes and range data alias the input.
func DecodeContent(wd *wire.Decoder, size uint64) Content {
	d := decoder{*wd}
	k := d.Byte("content kind")
	c, ok := d.contentOfKind(k, size)
	if !ok && d.Err == nil {
		d.Fail(fmt.Sprintf("unknown content kind %d", k))
	}
	*wd = d.Decoder
	return c
}

// contentOfKind decodes the body of content kind k (the kind byte already
// read) for a file of the given size. Inline bytes alias the input; chunk
// lists are copied. ok is false for a kind this function does not know
// (the caller may know more, like checkpoints' contentNone).
func (d *decoder) contentOfKind(k byte, size uint64) (c Content, ok bool) {
	switch k {
	case contentInline:
		c.Inline = d.Bytes("inline content", -1)
	case contentObject:
		c.IsObject = true
		c.Object = d.ID("object id")
	case contentRanged:
		base := d.Uvarint("base size")
		k := d.Byte("base content kind")
		if d.Err == nil && (k == contentRanged || k == contentNone) {
			d.Fail(fmt.Sprintf("base content kind %d", k))
			return c, true
		}
		var ok bool
		if c, ok = d.contentOfKind(k, base); !ok {
			d.Fail(fmt.Sprintf("unknown base content kind %d", k))
			return c, true
		}
		c.BaseSize = base
		c.Ranges = d.ranges(MaxRanges)
		if d.Err == nil && c.Ranges == nil {
			d.Fail("ranged content without ranges")
		}
	case contentChunked:
		c.ChunkShift = d.Byte("chunk shift")
		n := d.Uvarint("chunk count")
		if d.Err != nil {
			return c, true
		}
		// Bound the allocation by the input before trusting n.
		if n == 0 || n > uint64(len(d.B)/len(objid.ID{})) {
			d.Fail(fmt.Sprintf("chunk count %d with %d bytes left", n, len(d.B)))
			return c, true
		}
		c.Chunks = make([]objid.ID, n)
		for i := range c.Chunks {
			c.Chunks[i] = d.ID("chunk id")
		}
	default:
		return c, false
	}
	if d.Err == nil {
		if err := c.Validate(size); err != nil {
			d.Fail(err.Error())
		}
	}
	return c, true
}
