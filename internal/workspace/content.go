package workspace

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"syscall"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
)

// objFile is an open pool object cached per inode for reads of clean
// content. Reads use it outside the inode lock (so reads of one file run in
// parallel); refs counts them, and a retired objFile is closed by whoever
// drops refs to zero. Fields are guarded by the inode's Mu.
type objFile struct {
	f       vfs.File
	id      objid.ID
	refs    int
	retired bool
}

// retireObjLocked detaches the inode's cached object file and closes it
// once no read uses it.
func retireObjLocked(lv *live) {
	if o := lv.obj; o != nil {
		lv.obj = nil
		o.retired = true
		if o.refs == 0 {
			o.f.Close()
		}
	}
}

// unrefObjLocked ends one read's use of o.
func unrefObjLocked(o *objFile) {
	o.refs--
	if o.retired && o.refs == 0 {
		o.f.Close()
	}
}

// Handle is an open file.
type Handle struct {
	w        *Workspace
	n        *namespace.Inode
	writable bool
	append   bool
	released bool // guarded by n.Mu
}

// OpenFile opens a regular file. O_TRUNC (with write access) truncates it
// to zero at once (a content change); O_APPEND makes WriteAt write at EOF.
func (w *Workspace) OpenFile(ino Ino, flags int) (*Handle, error) {
	n, err := w.lock1(ino)
	if err != nil {
		return nil, wsErr("open", ino, "", err)
	}
	defer n.Mu.Unlock()
	acc := flags & syscall.O_ACCMODE
	writable := acc == syscall.O_WRONLY || acc == syscall.O_RDWR
	switch {
	case n.IsDir():
		if writable {
			return nil, wsErr("open", ino, "", syscall.EISDIR)
		}
	case !n.IsReg():
		return nil, wsErr("open", ino, "", syscall.EINVAL)
	}
	if writable && flags&syscall.O_TRUNC != 0 && n.IsReg() {
		if err := w.truncateLocked(n, 0); err != nil {
			return nil, wsErr("open", ino, "", err)
		}
	}
	liveFor(n).opens++
	n.Pinned = true
	return &Handle{w: w, n: n, writable: writable, append: flags&syscall.O_APPEND != 0}, nil
}

// ReadAt reads at off. At EOF it returns a short count (0 at or past EOF)
// and no error. Holes read as zeros.
func (h *Handle) ReadAt(p []byte, off int64) (int, error) {
	n := h.n
	ino := Ino(n.Ino)
	if off < 0 {
		return 0, wsErr("read", ino, "", syscall.EINVAL)
	}
	n.Mu.Lock()
	if h.released {
		n.Mu.Unlock()
		return 0, wsErr("read", ino, "", syscall.EBADF)
	}
	if n.IsDir() {
		n.Mu.Unlock()
		return 0, wsErr("read", ino, "", syscall.EISDIR)
	}
	lv := liveFor(n)
	if d := lv.dirty; d != nil {
		c, err := h.w.readDirty(lv, d, p, off)
		n.Mu.Unlock()
		return c, wsErr("read", ino, "", err)
	}
	size := int64(n.Size)
	c := n.Content // immutable slices: a consistent snapshot of one version
	n.Mu.Unlock()
	k, err := h.w.readPublished(n, &c, size, p, off)
	return k, wsErr("read", ino, "", err)
}

// readPublished reads p at off from c, published content of n with the
// given size (short at EOF, no error). The caller does not hold n.Mu (c
// is a copy of n's content: its slices are immutable). Content with
// ranges reads its base (zeros past BaseSize) and then the ranges over it.
func (w *Workspace) readPublished(n *namespace.Inode, c *namespace.Content, size int64, p []byte, off int64) (int, error) {
	if off >= size {
		return 0, nil
	}
	if int64(len(p)) > size-off {
		p = p[:size-off]
	}
	if c.Ranges != nil {
		base := c.Base()
		bp := p[:max(0, min(int64(len(p)), int64(c.BaseSize)-off))]
		if len(bp) > 0 {
			if k, err := w.readPublished(n, &base, int64(c.BaseSize), bp, off); err != nil {
				return k, err
			}
		}
		clear(p[len(bp):])
		c.Overlay(p, uint64(off))
		return len(p), nil
	}
	if !c.IsObject && !c.IsChunked() {
		return copy(p, c.Inline[off:]), nil
	}
	if c.IsObject {
		return w.readObject(n, c.Object, p, off, size)
	}
	return eachChunkPiece(p, off, size, c.ChunkShift, func(i int, piece []byte, within int64) (int, error) {
		if id := c.Chunks[i]; id != namespace.HoleChunk {
			start := int64(i) << c.ChunkShift
			return w.readObject(n, id, piece, within, min(size-start, 1<<c.ChunkShift))
		}
		clear(piece)
		return len(piece), nil
	})
}

// readObject reads p at off from pool object id, whose length is size,
// through n's cached object file; the inode lock is not held while the
// bytes are read (objects are immutable), so reads of one file run in
// parallel. The caller does not hold n.Mu.
func (w *Workspace) readObject(n *namespace.Inode, id objid.ID, p []byte, off, size int64) (int, error) {
	n.Mu.Lock()
	o, err := w.objectLocked(n.Ino, liveFor(n), id)
	if err != nil {
		n.Mu.Unlock()
		return 0, err
	}
	o.refs++
	n.Mu.Unlock()
	c, err := o.f.ReadAt(p, off)
	n.Mu.Lock()
	unrefObjLocked(o)
	n.Mu.Unlock()
	if err == io.EOF || err == nil && c < len(p) {
		// The object is shorter than the content says: damaged or replaced.
		return c, w.objectErr(n.Ino, id, fmt.Errorf("object %s ends at %d, want %d bytes", id, off+int64(c), size))
	}
	return c, w.objectErr(n.Ino, id, err)
}

// objectErr turns a failure to open or read pool object id, the content
// (or a chunk of the content) of inode ino, into the error the caller gets.
// Any such failure is EIO, never the pool's ENOENT for a missing object:
// the file exists, its bytes are what is gone. Every failure but a plain
// errno from the OS read is logged at ERROR naming the object and the
// inode (wsfs fsck names the paths), because the reader's EIO alone says
// nothing about the cause. nil stays nil.
func (w *Workspace) objectErr(ino namespace.Ino, id objid.ID, err error) error {
	if err == nil {
		return nil
	}
	var miss *pool.MissingObjectError
	var bad *pool.CorruptObjectError
	what := "read failed"
	switch {
	case errors.As(err, &miss):
		what = "pool object is missing"
	case errors.As(err, &bad):
		what = "pool object is corrupt"
	}
	w.lg.Error("file content cannot be read: "+what+" (run wsfs fsck for the affected paths)",
		"object", id.String(), "ino", uint64(ino), "err", err)
	return &ioError{fmt.Errorf("content of inode %d: object %s: %w", ino, id, err)}
}

// objectLocked returns the inode's cached open object id, opening (and
// verifying, once per process) it if needed; it replaces the cached one.
func (w *Workspace) objectLocked(ino namespace.Ino, lv *live, id objid.ID) (*objFile, error) {
	if lv.obj != nil && lv.obj.id == id {
		return lv.obj, nil
	}
	retireObjLocked(lv)
	f, err := w.pool.Open(id)
	if err != nil {
		return nil, w.objectErr(ino, id, err)
	}
	lv.obj = &objFile{f: f, id: id}
	return lv.obj, nil
}

// WriteAt writes p at off (at EOF with O_APPEND) into the inode's dirty
// content, copying published content first (copy-on-write).
func (h *Handle) WriteAt(p []byte, off int64) (int, error) {
	n := h.n
	ino := Ino(n.Ino)
	if !h.writable {
		return 0, wsErr("write", ino, "", syscall.EBADF)
	}
	if off < 0 {
		return 0, wsErr("write", ino, "", syscall.EINVAL)
	}
	n.Mu.Lock()
	defer n.Mu.Unlock()
	if h.released {
		return 0, wsErr("write", ino, "", syscall.EBADF)
	}
	if err := h.w.usable(); err != nil {
		return 0, wsErr("write", ino, "", err)
	}
	if len(p) == 0 {
		return 0, nil // changes nothing, not even mtime (as write(2) of 0 bytes)
	}
	d, err := h.w.dirtyLocked(n, true)
	if err != nil {
		return 0, wsErr("write", ino, "", err)
	}
	if h.append {
		off = d.size
	}
	if off+int64(len(p)) > namespace.MaxFileSize {
		return 0, wsErr("write", ino, "", syscall.EFBIG)
	}
	if err := h.w.writeDirty(d, p, off); err != nil {
		return 0, wsErr("write", ino, "", err)
	}
	now := h.w.now()
	d.mtime, d.ctime = namespace.FromNs(now), now
	return len(p), nil
}

// truncateLocked sets n's size (zeros when growing) and publishes the new
// content at once.
func (w *Workspace) truncateLocked(n *namespace.Inode, size int64) error {
	d, err := w.dirtyLocked(n, size > 0)
	if err != nil {
		return err
	}
	if err := w.setSize(d, size); err != nil {
		return err
	}
	now := w.now()
	d.mtime, d.ctime = namespace.FromNs(now), now
	return w.flushLocked(n)
}

// flushLocked publishes n's dirty content. When only a few bytes of a
// pooled file changed since its content was last published (d.ranged:
// every change since is in d.wrote), it logs those bytes in a WriteRange
// record and keeps the dirty content in memory (now clean), so that a
// small append to a large file costs its bytes in the log instead of a
// chunk object; the ranges are folded into a new base (a SetContent) when
// they would exceed foldRanges or foldBytes (closeContentLocked: smaller
// limits for closed files).
// Otherwise it publishes a SetContent record (publishLocked).
func (w *Workspace) flushLocked(n *namespace.Inode) error {
	lv := liveOf(n)
	if lv == nil || lv.dirty == nil || n.Nlink == 0 || lv.dirty.clean {
		return nil
	}
	if err := w.usable(); err != nil {
		return err
	}
	d := lv.dirty
	if !d.ranged || !d.mtime.FitsNs() {
		return w.publishLocked(n)
	}
	if len(d.wrote) == 0 {
		d.clean = true // created but never changed: equal to n's content
		return nil
	}
	if len(n.Content.Ranges)+len(d.wrote) > foldRanges || n.Content.RangeBytes()+d.wroteBytes > foldBytes {
		return w.publishLocked(n)
	}
	rs := make([]namespace.Range, len(d.wrote))
	buf := make([]byte, d.wroteBytes)
	for i, sp := range d.wrote {
		b := buf[: sp.end-sp.off : sp.end-sp.off]
		buf = buf[len(b):]
		if k, err := w.readDirty(lv, d, b, sp.off); err != nil || k != len(b) {
			return w.publishLocked(n) // cannot happen: the written chunks are in memory
		}
		rs[i] = namespace.Range{Off: uint64(sp.off), Data: b}
	}
	rec := &namespace.Record{Op: namespace.OpWriteRange, Ino: n.Ino, Size: uint64(d.size), Mtime: d.mtime, Time: d.ctime,
		Content: namespace.Content{Ranges: rs}}
	if err := w.record(rec, nil, true); err != nil {
		return err
	}
	w.bytes.inline.Add(uint64(d.wroteBytes))
	w.bytes.ranges.Add(1)
	d.wrote, d.wroteBytes, d.clean = d.wrote[:0], 0, true
	return nil
}

// Fold limits: the pending ranges of one file are folded into new chunks
// (a SetContent) before there would be more than foldRanges of them or
// more than foldBytes bytes (well within namespace.MaxRanges and
// MaxRangeBytes, which bound what a checkpoint carries per file). A file
// closed for the last time keeps its ranges only up to foldClosedRanges
// and foldClosedBytes: the tree holds them in memory, as it holds inline
// content (InlineMax), while an open file's are also in its dirty copy.
const (
	foldRanges       = 256
	foldBytes        = 256 << 10
	foldClosedRanges = 64
	foldClosedBytes  = 64 << 10
)

// closeContentLocked publishes n's content at the last close of its
// handles: its unflushed changes (as ranges where possible), folding the
// ranges when they exceed the closed-file limits, and drops the dirty
// copy.
func (w *Workspace) closeContentLocked(n *namespace.Inode) error {
	lv := liveFor(n)
	if err := w.flushLocked(n); err != nil {
		return err
	}
	if c := &n.Content; c.Ranges != nil && (len(c.Ranges) > foldClosedRanges || c.RangeBytes() > foldClosedBytes) {
		if _, err := w.dirtyLocked(n, true); err != nil {
			return err
		}
		return w.publishLocked(n)
	}
	if lv.dirty != nil && lv.dirty.clean {
		w.discard(lv.dirty)
		lv.dirty = nil
	}
	return nil
}

// publishLocked publishes n's dirty content in a SetContent record: inline
// up to InlineMax; else one pool object when it fits one chunk; else its
// chunk list, after putting the chunks still in memory. The record names
// the objects put for it, which the drain syncs (unchanged chunks were
// synced by the group that first named them, which commits first). An
// orphan (nlink 0) keeps its dirty content: it is never logged.
func (w *Workspace) publishLocked(n *namespace.Inode) error {
	lv := liveOf(n)
	if lv == nil || lv.dirty == nil || n.Nlink == 0 {
		return nil
	}
	if err := w.usable(); err != nil {
		return err
	}
	d := lv.dirty
	ranged := n.Content.Ranges != nil
	rec := &namespace.Record{Op: namespace.OpSetContent, Ino: n.Ino, Size: uint64(d.size), Mtime: d.mtime, Time: d.ctime}
	var objs []objid.ID
	switch {
	case d.chunks != nil && d.size > 1<<d.shift:
		if err := w.putChunks(d, -1); err != nil {
			return err
		}
		rec.Content = namespace.Content{Chunks: slices.Clone(d.chunks), ChunkShift: d.shift}
		objs = namedIn(d.put, d.chunks)
	default:
		b := d.mem
		if d.chunks != nil {
			b = make([]byte, d.size)
			if _, err := w.readDirty(lv, d, b, 0); err != nil {
				return err
			}
		}
		b = b[:d.size]
		if d.size <= int64(w.opts.InlineMax) {
			rec.Content.Inline = b
			w.bytes.inline.Add(uint64(d.size))
			break
		}
		id, dedup, err := w.pool.Put(b)
		if err != nil {
			return errno(err)
		}
		pooledCounter(&w.bytes, dedup).Add(uint64(d.size))
		rec.Content = namespace.Content{IsObject: true, Object: id}
		objs = []objid.ID{id}
	}
	if err := w.record(rec, objs, true); err != nil {
		return err
	}
	if n.Content.Ranges == nil && ranged {
		w.bytes.folds.Add(1)
	}
	w.discard(d)
	lv.dirty = nil
	return nil
}

// namedIn returns the objects of put that chunks names, once each.
func namedIn(put []objid.ID, chunks []objid.ID) []objid.ID {
	if len(put) == 0 {
		return nil
	}
	named := make(map[objid.ID]bool, len(chunks))
	for _, id := range chunks {
		named[id] = true
	}
	var out []objid.ID
	for _, id := range put {
		if named[id] {
			out = append(out, id)
			named[id] = false
		}
	}
	return out
}

// byteCounters count the file content published since Open, by where it
// went (Stats, and the daemon's metrics).
type byteCounters struct {
	inline, pooled, deduped atomic.Uint64
	ranges, folds           atomic.Uint64 // records (Stats.RangeRecords, RangeFolds)
}

// pooledCounter is the counter for content published to the pool: deduped
// when the object already existed.
func pooledCounter(b *byteCounters, dedup bool) *atomic.Uint64 {
	if dedup {
		return &b.deduped
	}
	return &b.pooled
}

// dropContentLocked forgets n's in-memory content state: dirty content is
// discarded and (if closeObj) the cached object file closed.
func (w *Workspace) dropContentLocked(n *namespace.Inode, closeObj bool) {
	lv := liveOf(n)
	if lv == nil {
		return
	}
	if lv.dirty != nil {
		w.discard(lv.dirty)
		lv.dirty = nil
	}
	if closeObj {
		retireObjLocked(lv)
	}
}

// Flush publishes the inode's dirty content and enqueues its record
// (close(2) semantics: durable within one commit window). It does not
// wait for the commit.
func (h *Handle) Flush() error {
	n := h.n
	n.Mu.Lock()
	defer n.Mu.Unlock()
	return wsErr("flush", Ino(n.Ino), "", h.w.flushLocked(n))
}

// Fsync flushes and then waits until every operation completed before it
// is durable. EIO on failure, never a false success. datasync makes no
// difference: attributes travel in the same log.
func (h *Handle) Fsync(datasync bool) error {
	if err := h.Flush(); err != nil {
		return err
	}
	return wsErr("fsync", Ino(h.n.Ino), "", h.w.barrier())
}

// Release closes the handle. If it was the inode's last handle, dirty
// content is flushed (the kernel normally flushed already) and the cached
// object file closed; an orphan with no handles and no lookups disappears.
func (h *Handle) Release() error {
	n := h.n
	n.Mu.Lock()
	defer n.Mu.Unlock()
	if h.released {
		return nil
	}
	h.released = true
	lv := liveFor(n)
	lv.opens--
	var err error
	if lv.opens == 0 {
		if lv.dirty != nil && n.Nlink > 0 && !n.Dropped {
			err = h.w.closeContentLocked(n)
		}
		retireObjLocked(lv)
		if n.Nlink == 0 {
			h.w.dropContentLocked(n, true)
		}
	}
	h.w.unpinLocked(n)
	return wsErr("release", Ino(n.Ino), "", err)
}

// ObjectFile returns the verified pool object holding the file's content,
// for FUSE passthrough, when this handle is read-only and the content is a
// clean pool object. The caller owns (and closes) the returned file.
func (h *Handle) ObjectFile() (vfs.File, bool) {
	if h.writable {
		return nil, false
	}
	n := h.n
	n.Mu.Lock()
	if lv := liveOf(n); h.released || !n.Content.IsObject || n.Content.Ranges != nil || (lv != nil && lv.dirty != nil) {
		n.Mu.Unlock()
		return nil, false
	}
	id := n.Content.Object
	n.Mu.Unlock()
	f, err := h.w.pool.Open(id)
	if err != nil {
		h.w.lg.Warn("passthrough: opening the object failed; reads go through the daemon", "ino", n.Ino, "err", err)
		return nil, false
	}
	return f, true
}
