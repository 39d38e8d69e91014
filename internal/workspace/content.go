package workspace

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"wsfs/internal/namespace"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
)

// dirty is the unflushed content of an inode, shared by all its handles:
// bytes in memory up to SpillSize, beyond that a sparse staging file in
// the pool's tmp directory (published by rename when flushed).
type dirty struct {
	mem  []byte   // the content while f == nil; len(mem) == size
	f    vfs.File // staging file once spilled
	path string
	// hash, when not nil, has been fed exactly the content [0, size) of
	// the staging file: a file written front to back (the usual case) is
	// hashed as its bytes arrive, so its flush does not read it back. Any
	// other change (a write elsewhere, a truncate, a failed write) drops
	// it, and the flush hashes the file instead.
	hash  pool.Hasher
	size  int64
	mtime int64
	ctime int64
}

// objFile is an open pool object cached per inode for reads of clean
// content. Reads use it outside the inode lock (so reads of one file run in
// parallel); refs counts them, and a retired objFile is closed by whoever
// drops refs to zero. Fields are guarded by the inode's Mu.
type objFile struct {
	f       vfs.File
	id      pool.ID
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

// errno returns the syscall.Errno inside err, or EIO.
func errno(err error) error {
	if err == nil {
		return nil
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return err
	}
	return &ioError{err}
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
		c, err := d.readAt(p, off)
		n.Mu.Unlock()
		return c, wsErr("read", ino, "", err)
	}
	size := int64(n.Size)
	if off >= size {
		n.Mu.Unlock()
		return 0, nil
	}
	if int64(len(p)) > size-off {
		p = p[:size-off]
	}
	if !n.Content.IsObject {
		c := copy(p, n.Content.Inline[off:])
		n.Mu.Unlock()
		return c, nil
	}
	o, err := h.w.objectLocked(n, lv)
	if err != nil {
		n.Mu.Unlock()
		return 0, wsErr("read", ino, "", err)
	}
	// The object is immutable: read it without holding the inode lock.
	o.refs++
	n.Mu.Unlock()
	c, err := o.f.ReadAt(p, off)
	n.Mu.Lock()
	unrefObjLocked(o)
	n.Mu.Unlock()
	if err == io.EOF {
		// The object is shorter than the inode says: damaged or replaced.
		return c, wsErr("read", ino, "", &ioError{fmt.Errorf("object %s ends at %d, inode size %d", o.id, off+int64(c), size)})
	}
	return c, wsErr("read", ino, "", errno(err))
}

// objectLocked returns the cached open object of n's clean content,
// opening (and verifying, once per process) it if needed.
func (w *Workspace) objectLocked(n *namespace.Inode, lv *live) (*objFile, error) {
	id := pool.ID(n.Content.Object)
	if lv.obj != nil && lv.obj.id == id {
		return lv.obj, nil
	}
	retireObjLocked(lv)
	f, err := w.pool.Open(id)
	if err != nil {
		return nil, errno(err)
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
	if off+int64(len(p)) > maxFileSize {
		return 0, wsErr("write", ino, "", syscall.EFBIG)
	}
	if err := h.w.writeDirty(d, p, off); err != nil {
		return 0, wsErr("write", ino, "", err)
	}
	now := h.w.now()
	d.mtime, d.ctime = now, now
	return len(p), nil
}

// dirtyLocked returns n's dirty content, creating it from the published
// content if needed (withOld=false starts empty: O_TRUNC skips the copy).
func (w *Workspace) dirtyLocked(n *namespace.Inode, withOld bool) (*dirty, error) {
	lv := liveFor(n)
	if lv.dirty != nil {
		return lv.dirty, nil
	}
	d := &dirty{mtime: n.Mtime, ctime: n.Ctime}
	if withOld && n.Size > 0 {
		switch {
		case !n.Content.IsObject:
			d.mem = append([]byte(nil), n.Content.Inline...)
			d.size = int64(len(d.mem))
		case n.Size <= uint64(w.opts.SpillSize):
			b, err := w.pool.ReadAll(pool.ID(n.Content.Object))
			if err != nil {
				return nil, errno(err)
			}
			if uint64(len(b)) != n.Size {
				return nil, &ioError{fmt.Errorf("object %s has %d bytes, inode size %d", pool.ID(n.Content.Object), len(b), n.Size)}
			}
			d.mem, d.size = b, int64(len(b))
		default:
			o, err := w.objectLocked(n, lv)
			if err != nil {
				return nil, err
			}
			src := o.f
			if err := w.spill(d); err != nil {
				return nil, err
			}
			d.hash = nil // the copied content is not hashed here
			if _, err := io.Copy(io.NewOffsetWriter(d.f, 0), io.NewSectionReader(src, 0, int64(n.Size))); err != nil {
				w.discard(d)
				return nil, errno(err)
			}
			d.size = int64(n.Size)
		}
	}
	lv.dirty = d
	return d, nil
}

// spill moves d's bytes into a new staging file.
func (w *Workspace) spill(d *dirty) error {
	f, path, err := w.pool.CreateStaging()
	if err != nil {
		return errno(err)
	}
	if len(d.mem) > 0 {
		if _, err := f.WriteAt(d.mem, 0); err != nil {
			f.Close()
			w.fs.Remove(path)
			return errno(err)
		}
	}
	h := pool.NewHasher()
	h.Write(d.mem[:d.size]) // never fails
	putBuf(d.mem)
	d.f, d.path, d.mem, d.hash = f, path, nil, h
	return nil
}

// discard drops d's staging file, if any.
func (w *Workspace) discard(d *dirty) {
	if d.f != nil {
		d.f.Close()
		if err := w.fs.Remove(d.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.lg.Warn("removing an unused staging file failed; pool GC will remove it", "path", d.path, "err", err)
		}
		d.f = nil
	}
	putBuf(d.mem)
	d.mem = nil
}

func (w *Workspace) writeDirty(d *dirty, p []byte, off int64) error {
	end := off + int64(len(p))
	if d.f == nil && end > int64(w.opts.SpillSize) {
		if err := w.spill(d); err != nil {
			return err
		}
	}
	if d.f != nil {
		if _, err := d.f.WriteAt(p, off); err != nil {
			d.hash = nil
			return errno(err)
		}
		if d.hash != nil && off == d.size {
			d.hash.Write(p) // never fails
		} else {
			d.hash = nil
		}
	} else {
		if end > int64(len(d.mem)) {
			d.mem = growMem(d.mem, int(end), w.opts.SpillSize)
		}
		copy(d.mem[off:], p)
	}
	d.size = max(d.size, end)
	return nil
}

// growMem returns mem extended to length n (n > len(mem)), the new bytes
// zero. Capacity at least doubles when it runs out (never beyond limit,
// the spill size, unless n itself is larger): a file written in 1 MiB
// WRITE requests is then copied O(size) times in total instead of
// O(size^2/1 MiB), which an exact-size append costs (measured with
// BenchmarkLargeFileWrite).
func growMem(mem []byte, n, limit int) []byte {
	if n <= cap(mem) {
		old := len(mem)
		mem = mem[:n]
		clear(mem[old:]) // a shrink (truncate) may have left old bytes here
		return mem
	}
	nb := getBuf(min(max(n, 2*cap(mem)), max(n, limit)))[:n]
	copy(nb, mem)
	clear(nb[len(mem):]) // a recycled buffer holds old bytes
	putBuf(mem)
	return nb
}

// Dirty buffers between 64 KiB and 8 MiB are recycled through one pool
// per power-of-two capacity: a fresh multi-megabyte buffer per written
// file costs page faults and zeroing on every first touch, which
// dominated the daemon's write path in CPU profiles of the stress
// workload. A buffer is recycled only by the code that owns it (discard,
// spill, growMem), after its last use: flushLocked's record encodes
// inline content by copying it, and pool.Put does not keep its argument.
const (
	minPooledShift = 16
	maxPooledShift = 23
)

var bufPools [maxPooledShift - minPooledShift + 1]sync.Pool // of *[]byte

// bufClass returns the pool index for capacity c, or -1.
func bufClass(c int) int {
	shift := bits.Len(uint(c - 1)) // ceil(log2(c))
	if c <= 0 || shift < minPooledShift || shift > maxPooledShift {
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

func (d *dirty) readAt(p []byte, off int64) (int, error) {
	if off >= d.size {
		return 0, nil
	}
	if int64(len(p)) > d.size-off {
		p = p[:d.size-off]
	}
	if d.f == nil {
		return copy(p, d.mem[off:]), nil
	}
	c, err := d.f.ReadAt(p, off)
	if err == io.EOF {
		// A staging file shorter than size: the tail is a hole.
		clear(p[c:])
		return len(p), nil
	}
	if err != nil {
		return c, errno(err)
	}
	return c, nil
}

// truncateLocked sets n's size (zeros when growing) and publishes the new
// content at once.
func (w *Workspace) truncateLocked(n *namespace.Inode, size int64) error {
	d, err := w.dirtyLocked(n, size > 0)
	if err != nil {
		return err
	}
	switch {
	case d.f == nil && size > int64(w.opts.SpillSize):
		if err := w.spill(d); err != nil {
			return err
		}
		fallthrough
	case d.f != nil:
		if size != d.size {
			d.hash = nil
		}
		if err := d.f.Truncate(size); err != nil {
			return errno(err)
		}
	case size <= int64(len(d.mem)):
		d.mem = d.mem[:size]
	default:
		d.mem = append(d.mem, make([]byte, size-int64(len(d.mem)))...)
	}
	d.size = size
	now := w.now()
	d.mtime, d.ctime = now, now
	return w.flushLocked(n)
}

// flushLocked publishes n's dirty content: inline in a SetContent record up
// to InlineMax, else as a pool object (Put from memory, or hash and publish
// the staging file) referenced by the record, which the drain syncs. An
// orphan (nlink 0) keeps its dirty content: it is never logged.
func (w *Workspace) flushLocked(n *namespace.Inode) error {
	lv := liveOf(n)
	if lv == nil || lv.dirty == nil || n.Nlink == 0 {
		return nil
	}
	if err := w.usable(); err != nil {
		return err
	}
	d := lv.dirty
	rec := &namespace.Record{Op: namespace.OpSetContent, Ino: n.Ino, Size: uint64(d.size), Mtime: d.mtime, Time: d.ctime}
	var objs []pool.ID
	counter := &w.bytes.inline // which of Stats' byte counters the content adds to
	switch {
	case d.size <= int64(w.opts.InlineMax):
		b := d.mem
		if d.f != nil {
			b = make([]byte, d.size)
			if _, err := (&dirty{f: d.f, size: d.size}).readAt(b, 0); err != nil {
				return err
			}
		}
		rec.Content.Inline = b[:d.size]
	case d.f == nil:
		id, dedup, err := w.pool.Put(d.mem)
		if err != nil {
			return errno(err)
		}
		counter = pooledCounter(&w.bytes, dedup)
		rec.Content = namespace.Content{IsObject: true, Object: namespace.ObjectID(id)}
		objs = []pool.ID{id}
	default:
		if err := d.f.Truncate(d.size); err != nil { // the length is the content's
			return errno(err)
		}
		h := d.hash
		if h == nil {
			h = pool.NewHasher()
			if _, err := io.Copy(h, io.NewSectionReader(d.f, 0, d.size)); err != nil {
				return errno(err)
			}
			d.hash = h // the content is unchanged until the next write
		}
		id := h.Sum()
		if err := d.f.Close(); err != nil {
			return errno(err)
		}
		d.f = nil
		dedup, err := w.pool.PublishStaging(d.path, id)
		counter = pooledCounter(&w.bytes, dedup)
		if err != nil {
			// Keep the dirty content if the staging file is still there (a
			// later flush retries); if it is gone, so is the new content:
			// the inode keeps its published content and the caller hears.
			if f, oerr := w.fs.OpenReadWrite(d.path); oerr == nil {
				d.f = f
			} else {
				lv.dirty = nil
				w.lg.Error("publishing a staging file failed and it is gone; the file keeps its previous content", "ino", n.Ino, "err", err)
			}
			return errno(err)
		}
		rec.Content = namespace.Content{IsObject: true, Object: namespace.ObjectID(id)}
		objs = []pool.ID{id}
	}
	if err := w.record(rec, objs, true); err != nil {
		return err
	}
	counter.Add(uint64(d.size))
	w.discard(d)
	lv.dirty = nil
	return nil
}

// byteCounters count the file content published since Open, by where it
// went (Stats, and the daemon's metrics).
type byteCounters struct {
	inline, pooled, deduped atomic.Uint64
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
			err = h.w.flushLocked(n)
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
	if lv := liveOf(n); h.released || !n.Content.IsObject || (lv != nil && lv.dirty != nil) {
		n.Mu.Unlock()
		return nil, false
	}
	id := pool.ID(n.Content.Object)
	n.Mu.Unlock()
	f, err := h.w.pool.Open(id)
	if err != nil {
		h.w.lg.Warn("passthrough: opening the object failed; reads go through the daemon", "ino", n.Ino, "err", err)
		return nil, false
	}
	return f, true
}
