package fusefs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// ioMode is how the kernel does I/O on one open handle.
type ioMode int

const (
	// ioCached: reads and writes go through the kernel page cache and
	// the daemon (the normal FUSE mode).
	ioCached ioMode = iota
	// ioPassthrough: the kernel reads the pool object directly
	// (FOPEN_PASSTHROUGH with a registered backing file).
	ioPassthrough
)

// inodeIO is the I/O state of one inode, guarded by rawFS.ioMu.
//
// The kernel (fs/fuse/iomode.c) puts an inode either in caching mode (any
// open without FOPEN_DIRECT_IO or FOPEN_PASSTHROUGH) or in passthrough mode,
// never both; while an inode has a backing file every open of it must be a
// passthrough open of that same backing file (otherwise the kernel fails
// the open with EIO). The rules below keep to that:
//
//   - A read-only open of a file whose content is one pool object gets
//     passthrough when the inode has no cached open; opens that find the
//     same object share one backing id (registered on the first, released
//     on the last).
//   - Any other open of an inode in passthrough mode (a writer, or a reader
//     after a truncate changed the content) waits up to 1 s for the
//     passthrough handles' RELEASE (the kernel sends it asynchronously
//     after close(2), so `cat f; echo x > f` would otherwise race), then
//     fails with ETXTBSY, the errno for "file busy in a way that forbids
//     this open". This is why passthrough is off by default
//     (Options.Passthrough).
//   - Otherwise the open is cached, and keeps the kernel's page cache
//     (FOPEN_KEEP_CACHE) when the size and mtime are those recorded at the
//     previous cached open or release: the cache can only hold what this
//     kernel read or wrote, and unchanged stamps mean nothing was written
//     around it.
//
// The kernel drops an open's I/O mode before it sends RELEASE, so counting
// at OPEN and RELEASE is conservative: a stale count can only make an open
// choose a slower mode or fail with ETXTBSY, never reach the kernel's EIO.
type inodeIO struct {
	cached      int   // open handles in ioCached mode
	passthrough int   // open handles in ioPassthrough mode
	backingID   int32 // valid while passthrough > 0
	backingDev  uint64
	backingIno  uint64

	stamp     cacheStamp // attributes at the last cached open
	haveStamp bool
}

type cacheStamp struct {
	size  uint64
	mtime workspace.Timestamp
}

// passthroughReleaseWait bounds how long an open that conflicts with
// passthrough readers waits for their RELEASE before failing with ETXTBSY.
const passthroughReleaseWait = time.Second

// chooseIO sets of.mode and the open flags, or refuses the open with
// ETXTBSY (see inodeIO).
func (r *rawFS) chooseIO(of *openFile, flags int, a *workspace.Attr, out *fuse.OpenOut) error {
	// Open the backing object before taking ioMu: the first open of an
	// object in this process verifies its hash, which must not hold up
	// every other OPEN and RELEASE.
	var obj *backing
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY && !r.passthroughOff.Load() {
		obj = openBacking(of.h)
		if obj != nil {
			defer obj.f.Close() // the kernel keeps its own reference once registered
		}
	}
	r.ioMu.Lock()
	defer r.ioMu.Unlock()
	deadline := time.Now().Add(passthroughReleaseWait)
	var st *inodeIO
	for {
		st = r.ioMu.inodes[of.ino]
		if st == nil {
			st = &inodeIO{}
			r.ioMu.inodes[of.ino] = st
		}
		if obj != nil && st.cached == 0 && r.tryPassthrough(of, st, obj, out) {
			return nil
		}
		if st.passthrough == 0 {
			break
		}
		// The kernel sends RELEASE asynchronously after close(2): a
		// reader that has just closed may still be counted. Wait for
		// releases for a moment before refusing.
		left := time.Until(deadline)
		if left <= 0 {
			return syscall.ETXTBSY
		}
		ch := r.ioMu.released
		r.ioMu.waiting++
		r.ioMu.Unlock()
		select {
		case <-ch:
		case <-time.After(left):
		}
		r.ioMu.Lock()
		r.ioMu.waiting--
	}
	of.mode = ioCached
	st.cached++
	now := cacheStamp{size: a.Size, mtime: a.Mtime}
	if st.haveStamp && st.stamp == now {
		out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
	}
	st.stamp, st.haveStamp = now, true
	return nil
}

// backing is a pool object file that may become an inode's backing file.
type backing struct {
	f        vfs.File
	dev, ino uint64 // identity, to check that opens share one object
}

// openBacking returns the handle's object file, or nil if the content is
// not one OS-backed pool object.
func openBacking(h *workspace.Handle) *backing {
	f, ok := h.ObjectFile()
	if !ok {
		return nil
	}
	var s unix.Stat_t
	if f.Fd() == ^uintptr(0) || unix.Fstat(int(f.Fd()), &s) != nil {
		f.Close()
		return nil
	}
	return &backing{f: f, dev: s.Dev, ino: s.Ino}
}

// tryPassthrough makes the open a passthrough open of obj if the kernel
// accepts it. ioMu must be held.
func (r *rawFS) tryPassthrough(of *openFile, st *inodeIO, obj *backing, out *fuse.OpenOut) bool {
	if r.passthroughOff.Load() {
		return false
	}
	if st.passthrough > 0 {
		if st.backingDev != obj.dev || st.backingIno != obj.ino {
			return false // a different object than the one in use: not allowed by the kernel
		}
	} else {
		id, errno := r.server.Load().RegisterBackingFd(&fuse.BackingMap{Fd: int32(obj.f.Fd())})
		if errno != 0 {
			r.log.Warn("kernel refused a FUSE passthrough backing file; serving reads through the daemon from now on", "err", errno)
			r.passthroughOff.Store(true)
			return false
		}
		st.backingID, st.backingDev, st.backingIno = id, obj.dev, obj.ino
	}
	st.passthrough++
	of.mode = ioPassthrough
	out.BackingID = st.backingID
	out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
	return true
}

// releaseIO undoes chooseIO for a released handle. A cached handle leaves
// its inode's stamp at the attributes after its last write: every write
// passed through the kernel's page cache, so the cache matches them, and
// the next open may keep it (a file written, closed and read back is read
// from the cache).
func (r *rawFS) releaseIO(of *openFile) {
	var a workspace.Attr
	var aerr error
	if of.mode == ioCached {
		a, aerr = r.ws.GetAttr(of.ino)
	}
	r.ioMu.Lock()
	defer r.ioMu.Unlock()
	st := r.ioMu.inodes[of.ino]
	if st == nil {
		return
	}
	if r.ioMu.waiting > 0 {
		// Wake the opens waiting in chooseIO; without waiters the
		// channel is left alone (no allocation per RELEASE).
		close(r.ioMu.released)
		r.ioMu.released = make(chan struct{})
	}
	switch of.mode {
	case ioCached:
		st.cached--
		if aerr == nil {
			st.stamp, st.haveStamp = cacheStamp{size: a.Size, mtime: a.Mtime}, true
		} else {
			st.haveStamp = false
		}
	case ioPassthrough:
		st.passthrough--
		if st.passthrough == 0 {
			if errno := r.server.Load().UnregisterBackingFd(st.backingID); errno != 0 {
				r.log.Warn("unregister FUSE backing file", "ino", of.ino, "err", errno)
			}
			st.backingID = 0
		}
	}
	r.maybeDrop(of.ino, st)
}

// stampCache records ino's current attributes as those its page cache
// matches, for a cached handle that has just been flushed: every write it
// made went through the kernel's page cache (and FLUSH comes after the
// kernel wrote back any dirty mmap pages), so the cache matches them,
// exactly as at RELEASE.
func (r *rawFS) stampCache(ino workspace.Ino) {
	a, err := r.ws.GetAttr(ino)
	r.ioMu.Lock()
	defer r.ioMu.Unlock()
	st := r.ioMu.inodes[ino]
	if st == nil {
		return
	}
	if err != nil {
		st.haveStamp = false
		return
	}
	st.stamp, st.haveStamp = cacheStamp{size: a.Size, mtime: a.Mtime}, true
}

// forgetStamp drops the keep-cache stamp of an inode the kernel forgets:
// once evicted its page cache is gone anyway, and an inode kept (partial
// forget) only pays one extra cache invalidation at its next open.
func (r *rawFS) forgetStamp(ino workspace.Ino) {
	r.ioMu.Lock()
	defer r.ioMu.Unlock()
	if st := r.ioMu.inodes[ino]; st != nil {
		st.haveStamp = false
		r.maybeDrop(ino, st)
	}
}

func (r *rawFS) maybeDrop(ino workspace.Ino, st *inodeIO) {
	if st.cached == 0 && st.passthrough == 0 && !st.haveStamp {
		delete(r.ioMu.inodes, ino)
	}
}
