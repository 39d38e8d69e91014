package workspace

import (
	"bytes"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"sync"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
)

// This file holds dirty content: its type, creating it from published
// content, writing, resizing, reading it back, and putting chunks to the
// pool. Every function here runs with the inode's Mu held.

// dirty is the unflushed content of an inode, shared by all its handles.
// It has two forms:
//
//   - small (chunks == nil): the whole content is mem, len(mem) == size,
//     and size is at most one chunk;
//   - chunked: chunk i (bytes [i<<shift, (i+1)<<shift) clipped to size) is
//     bufs[i] when present, else the pool object chunks[i] (HoleChunk:
//     zeros). A published chunk object always has exactly its chunk's
//     length at the current size: before a size change, the chunks holding
//     the old and the new end (when they end mid-chunk) are loaded into
//     bufs. A buffer is one whole chunk long, and its bytes past size are
//     zero.
//
// A change to a large file thus touches only the chunks it writes; at most
// maxDirtyChunks of them stay in memory (the rest are put to the pool
// early, and named by the record when the content is flushed).
type dirty struct {
	ino   namespace.Ino // the inode it is the content of (for error reports)
	size  int64
	mtime namespace.Timestamp
	ctime int64 // unix ns: ctimes come from the clock

	mem []byte

	shift  uint8
	chunks []objid.ID // private copy; len == ChunkCount(size)
	bufs   map[int][]byte
	hot    int        // the chunk the last write ended in: stays in memory
	put    []objid.ID // objects put for this content since its last record

	// Range records (flushLocked). ranged: n's published content equals
	// this content with the bytes of wrote (sorted, disjoint, not
	// adjacent spans) replaced and the size extended, and no chunk was
	// put since: a flush may log just those bytes. clean: nothing
	// changed since the last flush (a range flush keeps the dirty content
	// as the in-memory copy of the published one).
	ranged     bool
	clean      bool
	wrote      []span
	wroteBytes int
}

// span is the byte range [off, end).
type span struct{ off, end int64 }

// Limits on what one range flush logs: beyond them the changes since the
// last flush are published as a SetContent.
const (
	maxWroteSpans = 64
	maxWroteBytes = 64 << 10
)

// noteWrite records that [off, end) changed, for a range flush; past the
// limits it gives up (d.ranged = false).
func (d *dirty) noteWrite(off, end int64) {
	d.clean = false
	if !d.ranged {
		return
	}
	// Merge with every span it overlaps or touches.
	i := sort.Search(len(d.wrote), func(i int) bool { return d.wrote[i].end >= off })
	j := i
	for j < len(d.wrote) && d.wrote[j].off <= end {
		off, end = min(off, d.wrote[j].off), max(end, d.wrote[j].end)
		j++
	}
	for _, sp := range d.wrote[i:j] {
		d.wroteBytes -= int(sp.end - sp.off)
	}
	d.wrote = slices.Replace(d.wrote, i, j, span{off, end})
	d.wroteBytes += int(end - off)
	if len(d.wrote) > maxWroteSpans || d.wroteBytes > maxWroteBytes {
		d.unrange()
	}
}

// unrange makes d's next flush a SetContent.
func (d *dirty) unrange() {
	d.ranged, d.clean, d.wrote, d.wroteBytes = false, false, nil, 0
}

// maxDirtyChunks bounds the chunk buffers one inode holds in memory.
const maxDirtyChunks = 8

// chunkLen is the length of chunk i at d's size.
func (d *dirty) chunkLen(i int) int64 {
	return min(d.size-int64(i)<<d.shift, 1<<d.shift)
}

// blocks is st_blocks of dirty content (see contentBlocks): in chunked
// form, a chunk counts if it is in memory or names an object; never-written
// chunks (holes) count nothing.
func (d *dirty) blocks() uint64 {
	if d.chunks == nil {
		return blocks512(d.size)
	}
	var b uint64
	for i, id := range d.chunks {
		if _, ok := d.bufs[i]; ok || id != namespace.HoleChunk {
			b += blocks512(d.chunkLen(i))
		}
	}
	return b
}

// dirtyLocked returns n's dirty content, creating it from the published
// content if needed (withOld=false starts empty: O_TRUNC skips the copy).
// Creating it from chunked content copies only the chunk list.
func (w *Workspace) dirtyLocked(n *namespace.Inode, withOld bool) (*dirty, error) {
	lv := liveFor(n)
	if lv.dirty != nil {
		return lv.dirty, nil
	}
	d := &dirty{ino: n.Ino, mtime: n.Mtime, ctime: n.Ctime.Ns()}
	if withOld && n.Size > 0 {
		c := &n.Content
		base, baseSize := c, n.Size
		if c.Ranges != nil {
			b := c.Base()
			base, baseSize = &b, c.BaseSize
		}
		if err := w.loadBase(n.Ino, lv, d, base, baseSize); err != nil {
			w.discard(d)
			return nil, err
		}
		if c.Ranges != nil {
			if err := w.setSize(d, int64(n.Size)); err != nil {
				w.discard(d)
				return nil, err
			}
			for _, r := range c.Ranges {
				if err := w.writeDirty(d, r.Data, int64(r.Off)); err != nil {
					w.discard(d)
					return nil, err
				}
			}
		}
		// Pooled content may take range flushes from here (inline content
		// is all in the log anyway); putting a chunk above ends that.
		d.ranged = (base.IsObject || base.IsChunked()) && len(d.put) == 0
		d.wrote, d.wroteBytes = nil, 0
	}
	lv.dirty = d
	return d, nil
}

// loadBase makes d the content c of size bytes (no ranges).
func (w *Workspace) loadBase(ino namespace.Ino, lv *live, d *dirty, c *namespace.Content, size uint64) error {
	switch {
	case size == 0:
	case c.IsChunked():
		d.shift, d.chunks, d.bufs = c.ChunkShift, slices.Clone(c.Chunks), map[int][]byte{}
		d.size = int64(size)
	case !c.IsObject:
		d.mem = append([]byte(nil), c.Inline...)
		d.size = int64(len(d.mem))
	case size <= uint64(w.opts.ChunkSize):
		b, err := w.pool.ReadAll(c.Object)
		if err != nil {
			return w.objectErr(ino, c.Object, err)
		}
		if uint64(len(b)) != size {
			return &ioError{fmt.Errorf("object %s has %d bytes, inode size %d", c.Object, len(b), size)}
		}
		d.mem, d.size = b, int64(len(b))
	default:
		return w.splitObject(ino, lv, d, c.Object, int64(size))
	}
	return nil
}

// splitObject makes d the chunked form of one pool object larger than a
// chunk (content written with a larger chunk size), putting each chunk to
// the pool. It costs one pass over the object, once.
func (w *Workspace) splitObject(ino namespace.Ino, lv *live, d *dirty, id objid.ID, size int64) error {
	o, err := w.objectLocked(ino, lv, id)
	if err != nil {
		return err
	}
	d.shift, d.bufs, d.size = w.shift, map[int][]byte{}, size
	d.chunks = make([]objid.ID, namespace.ChunkCount(uint64(size), d.shift))
	for i := range d.chunks {
		b := getBuf(1 << d.shift)
		k, err := o.f.ReadAt(b[:d.chunkLen(i)], int64(i)<<d.shift)
		if int64(k) != d.chunkLen(i) {
			putBuf(b)
			return w.objectErr(ino, id, fmt.Errorf("object %s: read %d bytes of chunk %d: %v", id, k, i, err))
		}
		clear(b[k:])
		d.bufs[i] = b
		if err := w.putChunk(d, i); err != nil {
			return err
		}
	}
	return nil
}

// toChunks turns small-form d into chunked form.
func (w *Workspace) toChunks(d *dirty) {
	d.shift, d.bufs = w.shift, map[int][]byte{}
	d.chunks = make([]objid.ID, namespace.ChunkCount(uint64(d.size), d.shift))
	switch {
	case cap(d.mem) >= 1<<d.shift:
		// growMem's buffers reach the chunk size: reuse, do not copy.
		b := d.mem[:1<<d.shift]
		clear(b[len(d.mem):])
		d.bufs[0] = b
	case d.size > 0:
		b := getBuf(1 << d.shift)
		copy(b, d.mem)
		clear(b[len(d.mem):])
		d.bufs[0] = b
		putBuf(d.mem)
	default:
		putBuf(d.mem)
	}
	d.mem = nil
}

// chunkBuf returns chunk i's buffer, creating it if needed from the
// chunk's object (at its current length). A hole gives zeros.
func (w *Workspace) chunkBuf(d *dirty, i int) ([]byte, error) {
	if b, ok := d.bufs[i]; ok {
		return b, nil
	}
	b := getBuf(1 << d.shift)
	if i < len(d.chunks) && d.chunks[i] != namespace.HoleChunk {
		id := d.chunks[i]
		data, err := w.pool.ReadAll(id)
		if err != nil {
			putBuf(b)
			return nil, w.objectErr(d.ino, id, err)
		}
		if int64(len(data)) != d.chunkLen(i) {
			putBuf(b)
			return nil, w.objectErr(d.ino, id, fmt.Errorf("chunk %d: object %s has %d bytes, want %d", i, id, len(data), d.chunkLen(i)))
		}
		copy(b, data)
		clear(b[len(data):])
	} else {
		clear(b)
	}
	d.bufs[i] = b
	return b, nil
}

// overwriteBuf returns chunk i's buffer for a write of bytes [lo, hi)
// within the chunk that covers everything the chunk holds now (its
// object, if any, is not read). A new buffer is zeroed only outside
// [lo, hi): the caller overwrites the rest at once, and a chunk's bytes
// past size must be zero (a 1 MiB write into a fresh chunk then costs
// no clear of 1 MiB).
func (w *Workspace) overwriteBuf(d *dirty, i int, lo, hi int64) []byte {
	if b, ok := d.bufs[i]; ok {
		return b
	}
	b := getBuf(1 << d.shift)
	clear(b[:lo])
	clear(b[hi:])
	d.bufs[i] = b
	return b
}

// putChunk publishes buffered chunk i to the pool (an all-zero chunk
// becomes a hole) and frees its buffer. On error the buffer stays.
func (w *Workspace) putChunk(d *dirty, i int) error {
	b := d.bufs[i]
	data := b[:d.chunkLen(i)]
	if isZero(data) {
		d.chunks[i] = namespace.HoleChunk
	} else {
		id, dedup, err := w.pool.Put(data)
		if err != nil {
			return errno(err)
		}
		pooledCounter(&w.bytes, dedup).Add(uint64(len(data)))
		d.chunks[i] = id
		d.put = append(d.put, id)
	}
	// The chunk list now names an object no record names: only a
	// SetContent publishes it (and keeps it from GC).
	d.unrange()
	delete(d.bufs, i)
	putBuf(b)
	return nil
}

// putChunks puts every buffered chunk except keep (-1: none), in order.
func (w *Workspace) putChunks(d *dirty, keep int) error {
	idx := make([]int, 0, len(d.bufs))
	for i := range d.bufs {
		if i != keep {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	for _, i := range idx {
		if err := w.putChunk(d, i); err != nil {
			return err
		}
	}
	return nil
}

var zeros [64 << 10]byte

func isZero(b []byte) bool {
	for len(b) > 0 {
		k := min(len(b), len(zeros))
		if !bytes.Equal(b[:k], zeros[:k]) {
			return false
		}
		b = b[k:]
	}
	return true
}

// writeDirty writes p at off. It loads what it needs first, so that an
// error (a chunk that cannot be read or put) leaves the content unchanged.
func (w *Workspace) writeDirty(d *dirty, p []byte, off int64) error {
	end := off + int64(len(p))
	if d.chunks == nil {
		if end <= int64(w.opts.ChunkSize) {
			if end > int64(len(d.mem)) {
				d.mem = growMem(d.mem, int(end), int(off), w.opts.ChunkSize)
			}
			copy(d.mem[off:], p)
			d.size = max(d.size, end)
			d.noteWrite(off, end)
			return nil
		}
		w.toChunks(d)
	}
	if len(d.bufs) >= maxDirtyChunks {
		if err := w.putChunks(d, d.hot); err != nil {
			return err
		}
	}
	// The first and last chunks written keep bytes outside [off, end):
	// load them unless the write covers all they hold now.
	first, last := int(off>>d.shift), int((end-1)>>d.shift)
	for _, i := range []int{first, last} {
		if i < len(d.chunks) && (off > int64(i)<<d.shift || end < int64(i)<<d.shift+d.chunkLen(i)) {
			if _, err := w.chunkBuf(d, i); err != nil {
				return err
			}
		}
	}
	if err := w.resizeChunks(d, max(d.size, end)); err != nil {
		return err
	}
	for pos := off; pos < end; {
		i := int(pos >> d.shift)
		lo := pos - int64(i)<<d.shift
		hi := min(end-int64(i)<<d.shift, 1<<d.shift)
		b := w.overwriteBuf(d, i, lo, hi)
		k := copy(b[lo:hi], p[pos-off:])
		pos += int64(k)
	}
	d.hot = last
	d.noteWrite(off, end)
	return nil
}

// setSize truncates or extends d to size (zeros when growing). The next
// flush is a SetContent.
func (w *Workspace) setSize(d *dirty, size int64) error {
	d.unrange()
	if d.chunks == nil {
		switch {
		case size > int64(w.opts.ChunkSize):
			w.toChunks(d)
		case size <= int64(len(d.mem)):
			d.mem = d.mem[:size]
			d.size = size
			return nil
		default:
			d.mem = growMem(d.mem, int(size), int(size), w.opts.ChunkSize)
			d.size = size
			return nil
		}
	}
	return w.resizeChunks(d, size)
}

// resizeChunks sets chunked d's size. A chunk that ends mid-chunk at the
// old or the new size is loaded first (its object has the old length);
// extending adds holes, so a large extension costs only its chunk list.
func (w *Workspace) resizeChunks(d *dirty, size int64) error {
	old := d.size
	if size == old {
		return nil
	}
	mask := int64(1)<<d.shift - 1
	for _, e := range []int64{old, size} {
		if i := int(e >> d.shift); e&mask != 0 && i < len(d.chunks) {
			if _, err := w.chunkBuf(d, i); err != nil {
				return err
			}
		}
	}
	n := namespace.ChunkCount(uint64(size), d.shift)
	if size < old {
		for i, b := range d.bufs {
			if i >= n {
				putBuf(b)
				delete(d.bufs, i)
			}
		}
		if b, ok := d.bufs[n-1]; ok && size&mask != 0 {
			clear(b[size&mask:])
		}
		d.chunks = d.chunks[:n]
	} else {
		d.chunks = append(d.chunks, make([]objid.ID, n-len(d.chunks))...)
	}
	d.size = size
	return nil
}

// readDirty reads d at off (short at EOF, no error), through lv's object
// cache for chunks not in memory.
func (w *Workspace) readDirty(lv *live, d *dirty, p []byte, off int64) (int, error) {
	if off >= d.size {
		return 0, nil
	}
	if int64(len(p)) > d.size-off {
		p = p[:d.size-off]
	}
	if d.chunks == nil {
		return copy(p, d.mem[off:]), nil
	}
	return eachChunkPiece(p, off, d.size, d.shift, func(i int, piece []byte, within int64) (int, error) {
		if b, ok := d.bufs[i]; ok {
			return copy(piece, b[within:]), nil
		}
		id := d.chunks[i]
		if id == namespace.HoleChunk {
			clear(piece)
			return len(piece), nil
		}
		o, err := w.objectLocked(d.ino, lv, id)
		if err != nil {
			return 0, err
		}
		if k, err := o.f.ReadAt(piece, within); k < len(piece) {
			return k, w.objectErr(d.ino, id, fmt.Errorf("chunk %d: object %s: read %d of %d bytes at %d: %v", i, id, k, len(piece), within, err))
		}
		return len(piece), nil
	})
}

// eachChunkPiece splits p, to be read at off from content of size bytes
// in chunks of 1<<shift bytes (p ends at or before size), into one piece
// per chunk, and calls fn with the chunk, the piece and its offset within
// the chunk. fn returns how much of the piece it filled; it stops at the
// first error. It returns the bytes filled.
func eachChunkPiece(p []byte, off, size int64, shift uint8, fn func(i int, piece []byte, within int64) (int, error)) (int, error) {
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		i := int(pos >> shift)
		start := int64(i) << shift
		piece := p[done:min(len(p), done+int(min(size, start+1<<shift)-pos))]
		k, err := fn(i, piece, pos-start)
		done += k
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// discard frees d's buffers. Chunks it already put stay in the pool,
// unreferenced, until pool GC.
func (w *Workspace) discard(d *dirty) {
	for i, b := range d.bufs {
		putBuf(b)
		delete(d.bufs, i)
	}
	putBuf(d.mem)
	d.mem = nil
}

// growMem returns mem extended to length n (n > len(mem)), the new bytes
// before from zero; the new bytes from from on are left as they are, for
// the caller to overwrite at once (writeDirty's copy: a small file written
// in one WRITE costs no clear). Capacity at least doubles when it runs out
// (never beyond limit, the chunk size, unless n itself is larger): a file
// written in 1 MiB WRITE requests is then copied O(size) times in total
// instead of O(size^2/1 MiB), which an exact-size append costs (measured
// with BenchmarkLargeFileWrite).
func growMem(mem []byte, n, from, limit int) []byte {
	old := len(mem)
	zeroEnd := max(old, min(from, n))
	if n <= cap(mem) {
		mem = mem[:n]
		clear(mem[old:zeroEnd]) // a shrink (truncate) may have left old bytes here
		return mem
	}
	nb := getBuf(min(max(n, 2*cap(mem)), max(n, limit)))[:n]
	copy(nb, mem)
	clear(nb[old:zeroEnd]) // a recycled buffer holds old bytes
	putBuf(mem)
	return nb
}

// Dirty buffers up to 8 MiB are recycled through one pool per
// power-of-two capacity from 4 KiB (a smaller one gets a 4 KiB buffer): a
// fresh multi-megabyte buffer per written file costs page faults and
// zeroing on every first touch, which dominated the daemon's write path
// in CPU profiles of the stress workload, and a fresh small one per small
// file was a sixth of the daemon's page faults on small-file creates. A buffer is recycled only by the code that owns it (discard,
// putChunk, toChunks, growMem), after its last use: flushLocked's record
// encodes inline content by copying it, and pool.Put does not keep its
// argument.
const (
	minPooledShift = 12
	maxPooledShift = 23
)

var bufPools [maxPooledShift - minPooledShift + 1]sync.Pool // of *[]byte

// bufClass returns the pool index for capacity c, or -1.
func bufClass(c int) int {
	shift := max(bits.Len(uint(c-1)), minPooledShift) // ceil(log2(c)), at least the smallest class
	if c <= 0 || shift > maxPooledShift {
		return -1
	}
	return shift - minPooledShift
}

// getBuf returns a buffer of capacity at least c and length c, with
// arbitrary content.
func getBuf(c int) []byte {
	k := bufClass(c)
	if k < 0 {
		return make([]byte, c)
	}
	if b, ok := bufPools[k].Get().(*[]byte); ok {
		return (*b)[:c]
	}
	return make([]byte, c, 1<<(k+minPooledShift))
}

// putBuf recycles b, which the caller must not use afterwards.
func putBuf(b []byte) {
	k := bufClass(cap(b))
	if k < 0 || cap(b) != 1<<(k+minPooledShift) {
		return
	}
	b = b[:0]
	bufPools[k].Put(&b)
}
