package namespace

import (
	"encoding/binary"
	"fmt"
	"wsfs/internal/objid"
)

// Content kinds, in SetContent records and in checkpoints (frozen).
// Checkpoints also use contentNone (2) for inodes that are not regular
// files.
const (
	contentInline  = 0
	contentObject  = 1
	contentChunked = 3
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
// The slices are immutable once the content is published (applied to a
// tree or encoded in a record): trees, records and readers share them.
type Content struct {
	Inline     []byte
	Object     objid.ID
	IsObject   bool
	Chunks     []objid.ID
	ChunkShift uint8
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

// appendContent appends the encoding shared by records and checkpoints:
//
//	kind:u8 (0: inline:bytes | 1: object:[32]u8 |
//	         3: chunked: shift:u8 count:uvarint [32]u8*count)
func appendContent(b []byte, c *Content) []byte {
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

// contentOfKind decodes the body of content kind k (the kind byte already
// read) for a file of the given size. Inline bytes alias the input; chunk
// lists are copied. ok is false for a kind this function does not know
// (the caller may know more, like checkpoints' contentNone).
func (d *decoder) contentOfKind(k byte, size uint64) (c Content, ok bool) {
	switch k {
	case contentInline:
		c.Inline = d.bytes("inline content", -1)
	case contentObject:
		c.IsObject = true
		c.Object = d.fixed32("object id")
	case contentChunked:
		c.ChunkShift = d.byte1("chunk shift")
		n := d.uvarint("chunk count")
		if d.err != nil {
			return c, true
		}
		// Bound the allocation by the input before trusting n.
		if n == 0 || n > uint64(len(d.b)/len(objid.ID{})) {
			d.fail(fmt.Sprintf("chunk count %d with %d bytes left", n, len(d.b)))
			return c, true
		}
		c.Chunks = make([]objid.ID, n)
		for i := range c.Chunks {
			c.Chunks[i] = d.fixed32("chunk id")
		}
	default:
		return c, false
	}
	if d.err == nil {
		if err := c.Validate(size); err != nil {
			d.fail(err.Error())
		}
	}
	return c, true
}
