package fusefs

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"wsfs/internal/metrics"
	"wsfs/internal/workspace"
)

// generation is the generation number of every node. Inode numbers are never
// reused within a workspace, so (ino, generation) is unique with a constant.
const generation = 1

// rawFS implements fuse.RawFileSystem over a workspace. The kernel's node id
// of a file is its inode number (the root is 1 in both).
//
// Concurrency: go-fuse serves every request in its own goroutine. rawFS has
// no lock on the request path except ioMu, held briefly by OPEN and RELEASE
// to choose an inode's I/O mode; everything else is the engine's, which is
// safe for concurrent use.
//
// Not implemented (the embedded default answers ENOSYS, which is the intended
// behaviour):
//   - GETLK/SETLK/SETLKW: the mount does not ask for CAP_POSIX_LOCKS or
//     CAP_FLOCK_LOCKS, so the kernel keeps flock and fcntl locks locally.
//     That is correct here because one kernel serves every process that
//     can reach the tree (TestLocks checks both kinds across processes).
//   - ACCESS: the mount uses default_permissions, so the kernel checks
//     permissions from the attributes and never sends ACCESS.
//   - LSEEK: the kernel then treats the whole file as data for
//     SEEK_DATA/SEEK_HOLE, which is correct (holes are an optimisation).
//   - COPY_FILE_RANGE: the kernel falls back to read and write.
//   - STATX: the kernel falls back to GETATTR.
type rawFS struct {
	fuse.RawFileSystem

	ws   *workspace.Workspace
	log  *slog.Logger
	opts Options

	server atomic.Pointer[fuse.Server] // set by Init, before any other request

	ops [numOps]*metrics.Op

	nextFh atomic.Uint64
	files  sync.Map // fh -> *openFile

	// listings serves READDIR by offset (listing.go); noOpenDir is set by
	// Init when the kernel opens directories without OPENDIR.
	listings  *listings
	noOpenDir atomic.Bool

	// passthroughOff is set when the kernel refused a backing file once:
	// not root, or the mount did not negotiate CAP_PASSTHROUGH.
	passthroughOff atomic.Bool

	ioMu struct {
		sync.Mutex
		inodes   map[workspace.Ino]*inodeIO
		released chan struct{} // closed and replaced at a RELEASE while waiting > 0
		waiting  int           // opens waiting in chooseIO for a RELEASE
	}
}

func newRawFS(ws *workspace.Workspace, opts Options) *rawFS {
	r := &rawFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), ws: ws, log: opts.Logger, opts: opts}
	for i := range r.ops {
		r.ops[i] = opts.Metrics.Op(opNames[i])
	}
	r.ioMu.inodes = make(map[workspace.Ino]*inodeIO)
	r.listings = newListings()
	r.ioMu.released = make(chan struct{})
	if !opts.Passthrough || opts.Writeback {
		r.passthroughOff.Store(true)
	}
	return r
}

func (r *rawFS) String() string { return "wsfs" }

// Init is called once the kernel's INIT is answered.
func (r *rawFS) Init(s *fuse.Server) {
	r.server.Store(s)
	k := s.KernelSettings()
	if k.Flags64()&fuse.CAP_PASSTHROUGH == 0 && !r.passthroughOff.Load() {
		r.log.Info("kernel does not offer FUSE passthrough; reads go through the daemon")
		r.passthroughOff.Store(true)
	}
	r.noOpenDir.Store(k.Flags64()&fuse.CAP_NO_OPENDIR_SUPPORT != 0)
}

// Operation indexes for metrics.
const (
	opLookup = iota
	opForget
	opGetAttr
	opSetAttr
	opMknod
	opMkdir
	opUnlink
	opRmdir
	opRename
	opLink
	opSymlink
	opReadlink
	opCreate
	opOpen
	opRead
	opWrite
	opFlush
	opRelease
	opFsync
	opFallocate
	opOpenDir
	opReadDir
	opReadDirPlus
	opReleaseDir
	opFsyncDir
	opStatFs
	opGetXAttr
	opListXAttr
	opSetXAttr
	opRemoveXAttr
	numOps
)

var opNames = [numOps]string{
	"LOOKUP", "FORGET", "GETATTR", "SETATTR", "MKNOD", "MKDIR", "UNLINK", "RMDIR", "RENAME", "LINK", "SYMLINK",
	"READLINK", "CREATE", "OPEN", "READ", "WRITE", "FLUSH", "RELEASE", "FSYNC", "FALLOCATE", "OPENDIR",
	"READDIR", "READDIRPLUS", "RELEASEDIR", "FSYNCDIR", "STATFS", "GETXATTR", "LISTXATTR", "SETXATTR", "REMOVEXATTR",
}

// done records one request in the metrics. Use as
// `defer r.done(opX, time.Now(), &st)` with a named status result.
func (r *rawFS) done(op int, start time.Time, st *fuse.Status) {
	r.ops[op].Done(start, *st != fuse.OK && *st != fuse.ENOENT)
}

// caller is the identity of the process that sent h. The engine applies
// BSD group semantics in set-group-ID directories (workspace.create), under
// the parent's lock.
func caller(h *fuse.InHeader) workspace.Caller {
	return workspace.Caller{Uid: h.Uid, Gid: h.Gid}
}

// wireTime converts a timestamp to the (seconds, nanoseconds) pair of the
// wire format; times before 1970 have negative seconds, which the kernel
// reads back as a signed value (time64_t). Every timestamp fits.
func wireTime(t workspace.Timestamp) (uint64, uint32) {
	return uint64(t.Sec), t.Nsec
}

func fillAttr(a *workspace.Attr, out *fuse.Attr) {
	out.Ino = uint64(a.Ino)
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Atime, out.Atimensec = wireTime(a.Atime)
	out.Mtime, out.Mtimensec = wireTime(a.Mtime)
	out.Ctime, out.Ctimensec = wireTime(a.Ctime)
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid = a.Uid
	out.Gid = a.Gid
	out.Rdev = a.Rdev
	out.Blksize = 4096
}

func (r *rawFS) fillEntry(a *workspace.Attr, out *fuse.EntryOut) {
	out.NodeId = uint64(a.Ino)
	out.Generation = generation
	fillAttr(a, &out.Attr)
	out.SetEntryTimeout(r.opts.EntryTimeout)
	out.SetAttrTimeout(r.opts.AttrTimeout)
}

// --- names and attributes ---

func (r *rawFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer r.done(opLookup, time.Now(), &st)
	a, err := r.ws.Lookup(workspace.Ino(h.NodeId), name)
	if err != nil {
		st = r.status("lookup", err)
		if st == fuse.ENOENT && r.opts.NegativeTimeout > 0 {
			// A negative entry: node id 0 with a timeout. Safe to cache
			// because every change to the tree goes through this kernel,
			// which drops the negative dentry when it creates the name.
			out.NodeId = 0
			out.SetEntryTimeout(r.opts.NegativeTimeout)
			return fuse.OK
		}
		return st
	}
	r.fillEntry(&a, out)
	return fuse.OK
}

func (r *rawFS) Forget(nodeid, nlookup uint64) {
	st := fuse.OK
	defer r.done(opForget, time.Now(), &st)
	ino := workspace.Ino(nodeid)
	r.forgetStamp(ino)
	r.ws.Forget(ino, nlookup)
}

func (r *rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) (st fuse.Status) {
	defer r.done(opGetAttr, time.Now(), &st)
	a, err := r.ws.GetAttr(workspace.Ino(in.NodeId))
	if err != nil {
		return r.status("getattr", err)
	}
	fillAttr(&a, &out.Attr)
	out.SetTimeout(r.opts.AttrTimeout)
	return fuse.OK
}

// SetAttr serves chmod, chown, truncate (by path or by handle: the engine's
// size change covers both) and utimensat, including UTIME_NOW (the
// FATTR_*_NOW bits) and UTIME_OMIT (the time's bit is absent). The kernel
// sends ctime only with its own changes; the engine sets ctime itself.
func (r *rawFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) (st fuse.Status) {
	defer r.done(opSetAttr, time.Now(), &st)
	var s workspace.SetAttrIn
	v := in.Valid
	if v&fuse.FATTR_MODE != 0 {
		m := in.Mode & 0o7777
		s.Mode = &m
	}
	if v&fuse.FATTR_UID != 0 {
		u := in.Uid
		s.Uid = &u
	}
	if v&fuse.FATTR_GID != 0 {
		g := in.Gid
		s.Gid = &g
	}
	if v&fuse.FATTR_SIZE != 0 {
		sz := in.Size
		s.Size = &sz
	}
	// The kernel passes a time as time64_t seconds and nanoseconds; every
	// such time is stored as it is (workspace.Timestamp), so nothing is
	// wrapped; the engine refuses nanoseconds of a second or more (EINVAL).
	now := workspace.TimestampOf(time.Now())
	if v&fuse.FATTR_ATIME_NOW != 0 {
		s.Atime = &now
	} else if v&fuse.FATTR_ATIME != 0 {
		s.Atime = &workspace.Timestamp{Sec: int64(in.Atime), Nsec: in.Atimensec}
	}
	if v&fuse.FATTR_MTIME_NOW != 0 {
		s.Mtime = &now
	} else if v&fuse.FATTR_MTIME != 0 {
		s.Mtime = &workspace.Timestamp{Sec: int64(in.Mtime), Nsec: in.Mtimensec}
	}
	a, err := r.ws.SetAttr(workspace.Ino(in.NodeId), s)
	if err != nil {
		return r.status("setattr", err)
	}
	fillAttr(&a, &out.Attr)
	out.SetTimeout(r.opts.AttrTimeout)
	return fuse.OK
}

// --- namespace changes ---

func (r *rawFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer r.done(opMknod, time.Now(), &st)
	c := caller(&in.InHeader)
	a, err := r.ws.Mknod(workspace.Ino(in.NodeId), name, in.Mode, in.Rdev, c)
	if err != nil {
		return r.status("mknod", err)
	}
	r.fillEntry(&a, out)
	return fuse.OK
}

func (r *rawFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer r.done(opMkdir, time.Now(), &st)
	// The kernel sends permission bits only (umask applied).
	mode := in.Mode & 0o7777
	a, err := r.ws.Mkdir(workspace.Ino(in.NodeId), name, mode, caller(&in.InHeader))
	if err != nil {
		return r.status("mkdir", err)
	}
	r.fillEntry(&a, out)
	return fuse.OK
}

func (r *rawFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) (st fuse.Status) {
	defer r.done(opUnlink, time.Now(), &st)
	return r.status("unlink", r.ws.Unlink(workspace.Ino(h.NodeId), name))
}

func (r *rawFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) (st fuse.Status) {
	defer r.done(opRmdir, time.Now(), &st)
	return r.status("rmdir", r.ws.Rmdir(workspace.Ino(h.NodeId), name))
}

// Rename passes renameat2 flags (RENAME_NOREPLACE, RENAME_EXCHANGE) to the
// engine, which refuses the ones it does not implement with EINVAL.
func (r *rawFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) (st fuse.Status) {
	defer r.done(opRename, time.Now(), &st)
	return r.status("rename", r.ws.Rename(workspace.Ino(in.NodeId), oldName, workspace.Ino(in.Newdir), newName, in.Flags))
}

func (r *rawFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer r.done(opLink, time.Now(), &st)
	a, err := r.ws.Link(workspace.Ino(in.Oldnodeid), workspace.Ino(in.NodeId), name)
	if err != nil {
		return r.status("link", err)
	}
	r.fillEntry(&a, out)
	return fuse.OK
}

func (r *rawFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer r.done(opSymlink, time.Now(), &st)
	c := caller(h)
	a, err := r.ws.Symlink(workspace.Ino(h.NodeId), name, target, c)
	if err != nil {
		return r.status("symlink", err)
	}
	r.fillEntry(&a, out)
	return fuse.OK
}

func (r *rawFS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) (b []byte, st fuse.Status) {
	defer r.done(opReadlink, time.Now(), &st)
	t, err := r.ws.Readlink(workspace.Ino(h.NodeId))
	if err != nil {
		return nil, r.status("readlink", err)
	}
	return []byte(t), fuse.OK
}

// --- files ---

// openFile is an open file handle.
type openFile struct {
	ino  workspace.Ino
	h    *workspace.Handle
	mode ioMode
}

func (r *rawFS) file(fh uint64) *openFile {
	if v, ok := r.files.Load(fh); ok {
		return v.(*openFile)
	}
	return nil
}

// Create creates and opens a file. If the name exists and O_EXCL is not set
// (another opener won a race the kernel could not see), the existing file
// is opened instead, as open(2) would.
func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) (st fuse.Status) {
	defer r.done(opCreate, time.Now(), &st)
	parent := workspace.Ino(in.NodeId)
	c := caller(&in.InHeader)
	a, err := r.ws.Create(parent, name, in.Mode, c)
	if err != nil && in.Flags&syscall.O_EXCL == 0 && r.status("create", err) == fuse.Status(syscall.EEXIST) {
		a, err = r.ws.Lookup(parent, name)
		if err == nil && in.Flags&syscall.O_TRUNC != 0 && a.Mode&syscall.S_IFMT == syscall.S_IFREG {
			zero := uint64(0)
			ino := a.Ino
			if a, err = r.ws.SetAttr(ino, workspace.SetAttrIn{Size: &zero}); err != nil {
				r.ws.Forget(ino, 1) // give back the Lookup's count
			}
		}
	}
	if err != nil {
		return r.status("create", err)
	}
	flags := r.openFlags(in.Flags &^ syscall.O_TRUNC)
	h, err := r.ws.OpenFile(a.Ino, flags)
	if err != nil {
		// The kernel will not learn of the node: give back its lookup.
		r.ws.Forget(a.Ino, 1)
		return r.status("create", err)
	}
	if err := r.finishOpen(a.Ino, flags, h, &a, &out.OpenOut); err != nil {
		r.ws.Forget(a.Ino, 1)
		return r.status("create", err)
	}
	r.fillEntry(&a, &out.EntryOut)
	return fuse.OK
}

func (r *rawFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) (st fuse.Status) {
	defer r.done(opOpen, time.Now(), &st)
	ino := workspace.Ino(in.NodeId)
	flags := r.openFlags(in.Flags)
	h, err := r.ws.OpenFile(ino, flags)
	if err != nil {
		return r.status("open", err)
	}
	a, err := r.ws.GetAttr(ino)
	if err != nil {
		h.Release()
		return r.status("open", err)
	}
	return r.status("open", r.finishOpen(ino, flags, h, &a, out))
}

// openFlags turns the kernel's open flags into the engine's.
//
// O_APPEND is dropped: the kernel computes the offset of every append write
// itself (it owns i_size, since all writes pass through it), and with the
// writeback cache it sends pages of an O_APPEND file at their real offsets,
// which an appending handle would misplace. With the writeback cache the
// kernel also reads pages to fill partial writes, so write-only opens are
// made read-write (as libfuse's passthrough_ll does).
func (r *rawFS) openFlags(kflags uint32) int {
	flags := int(kflags) &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOCTTY | syscall.O_APPEND)
	if r.opts.Writeback && flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

// finishOpen chooses the handle's I/O mode (see inodeIO) and registers it,
// or releases it if the open is refused.
func (r *rawFS) finishOpen(ino workspace.Ino, flags int, h *workspace.Handle, a *workspace.Attr, out *fuse.OpenOut) error {
	of := &openFile{ino: ino, h: h}
	if err := r.chooseIO(of, flags, a, out); err != nil {
		if rerr := h.Release(); rerr != nil {
			r.log.Warn("release of a refused open", "ino", ino, "err", rerr)
		}
		return err
	}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// No FLUSH at close(2) of a read-only descriptor: it has nothing
		// to publish (a writer's own close publishes its writes), so the
		// close costs no synchronous round trip.
		out.OpenFlags |= fuse.FOPEN_NOFLUSH
	}
	fh := r.nextFh.Add(1)
	r.files.Store(fh, of)
	out.Fh = fh
	return nil
}

func (r *rawFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (res fuse.ReadResult, st fuse.Status) {
	defer r.done(opRead, time.Now(), &st)
	of := r.file(in.Fh)
	if of == nil {
		return nil, fuse.EBADF
	}
	if int(in.Size) < len(buf) {
		buf = buf[:in.Size]
	}
	n, err := of.h.ReadAt(buf, int64(in.Offset))
	if err != nil && err != io.EOF {
		return nil, r.status("read", err)
	}
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

func (r *rawFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (n uint32, st fuse.Status) {
	defer r.done(opWrite, time.Now(), &st)
	of := r.file(in.Fh)
	if of == nil {
		return 0, fuse.EBADF
	}
	w, err := of.h.WriteAt(data, int64(in.Offset))
	if err != nil {
		return uint32(w), r.status("write", err)
	}
	return uint32(w), fuse.OK
}

// Flush is called on every close(2) of a descriptor. The engine publishes
// the written content here (close-to-commit: a completed close is durable
// within one commit window).
func (r *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) (st fuse.Status) {
	defer r.done(opFlush, time.Now(), &st)
	of := r.file(in.Fh)
	if of == nil {
		return fuse.EBADF
	}
	if err := of.h.Flush(); err != nil {
		return r.status("flush", err)
	}
	if of.mode == ioCached {
		// close(2) returns after this reply but the kernel sends RELEASE
		// later: record the stamp now, so an open right after the close
		// keeps the page cache (see releaseIO).
		r.stampCache(of.ino)
	}
	return fuse.OK
}

func (r *rawFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	st := fuse.OK
	defer r.done(opRelease, time.Now(), &st)
	v, ok := r.files.LoadAndDelete(in.Fh)
	if !ok {
		return
	}
	of := v.(*openFile)
	if err := of.h.Release(); err != nil {
		// RELEASE has no reply: the error can only be logged. Flush
		// already reported the same failure to close(2).
		st = r.status("release", err)
	}
	r.releaseIO(of)
}

// Fsync returns once every operation completed before it is durable
// (durability contract, clause 2). Without a handle (the kernel may send
// one for a file it opened itself) the inode's barrier is used.
func (r *rawFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) (st fuse.Status) {
	defer r.done(opFsync, time.Now(), &st)
	if of := r.file(in.Fh); of != nil {
		return r.status("fsync", of.h.Fsync(in.FsyncFlags&1 != 0))
	}
	return r.status("fsync", r.ws.Fsync(workspace.Ino(in.NodeId)))
}

// Fallocate supports mode 0 (make the file at least offset+length long)
// and FALLOC_FL_KEEP_SIZE alone (nothing to do: wsfs does not reserve
// blocks). The size read and the size change are not atomic in the engine,
// but the kernel holds the inode lock across FALLOCATE, which excludes
// writes, truncates and other fallocates of the same file.
func (r *rawFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) (st fuse.Status) {
	defer r.done(opFallocate, time.Now(), &st)
	switch in.Mode {
	case unix.FALLOC_FL_KEEP_SIZE:
		return fuse.OK
	case 0:
	default:
		return fuse.Status(syscall.EOPNOTSUPP)
	}
	ino := workspace.Ino(in.NodeId)
	a, err := r.ws.GetAttr(ino)
	if err != nil {
		return r.status("fallocate", err)
	}
	end := in.Offset + in.Length
	if end <= a.Size {
		return fuse.OK
	}
	_, err = r.ws.SetAttr(ino, workspace.SetAttrIn{Size: &end})
	return r.status("fallocate", err)
}

// --- directories ---

// OpenDir is never answered with a handle when the kernel can do without
// (FUSE_NO_OPENDIR_SUPPORT): ENOSYS tells it to open every directory of the
// mount without a message, keeping the listings it reads in its cache
// (listing.go). Where the kernel lacks that, OPENDIR answers with no handle
// and the same cache flags, so READDIR works the same way either way.
//
// Caching listings (FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE) is safe for the
// same reason as the long entry timeouts: every change to the tree passes
// through this kernel, which drops the cached listing itself when the
// directory changes (its version is bumped by every create, link, unlink,
// rmdir and rename in it). Whatever changes a directory behind the
// kernel's back must invalidate the directory's inode (its page cache
// holds the listing).
func (r *rawFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := fuse.OK // ENOSYS below is the intended answer, not a failure
	defer r.done(opOpenDir, time.Now(), &st)
	if r.noOpenDir.Load() {
		return fuse.ENOSYS
	}
	out.OpenFlags |= fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	return fuse.OK
}

func (r *rawFS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) error {
	dir := workspace.Ino(in.NodeId)
	ls, idx, err := r.listings.at(dir, in.Offset, func() ([]workspace.DirEntry, error) { return r.ws.ReadDir(dir) })
	if err != nil {
		return err
	}
	i := idx
	defer func() {
		if i >= len(ls.entries) {
			r.listings.finished(ls)
		}
	}()
	for ; i < len(ls.entries); i++ {
		e := ls.entries[i]
		de := fuse.DirEntry{Name: e.Name, Ino: uint64(e.Ino), Mode: e.Mode, Off: dirOffset(ls.num, i)}
		if !plus {
			if !out.AddDirEntry(de) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(de)
		if eo == nil {
			break
		}
		if e.Name == "." || e.Name == ".." {
			continue // node id 0: the kernel ignores these in READDIRPLUS
		}
		// Each entry with a node id counts as a lookup, so look it up
		// (the engine counts it). If the name changed since the snapshot,
		// send no attributes (node id 0) rather than a mismatched entry.
		a, err := r.ws.Lookup(dir, e.Name)
		if err != nil {
			continue
		}
		if a.Ino != e.Ino {
			r.ws.Forget(a.Ino, 1)
			continue
		}
		r.fillEntry(&a, eo)
	}
	return nil
}

func (r *rawFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) (st fuse.Status) {
	defer r.done(opReadDir, time.Now(), &st)
	return r.status("readdir", r.readDir(in, out, false))
}

func (r *rawFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) (st fuse.Status) {
	defer r.done(opReadDirPlus, time.Now(), &st)
	return r.status("readdirplus", r.readDir(in, out, true))
}

// ReleaseDir has nothing to release: directories have no handles. It
// comes only from a kernel without FUSE_NO_OPENDIR_SUPPORT.
func (r *rawFS) ReleaseDir(in *fuse.ReleaseIn) {
	st := fuse.OK
	defer r.done(opReleaseDir, time.Now(), &st)
}

// FsyncDir is the same barrier as Fsync: every operation completed before
// it (including the creates, renames and unlinks in this directory) is
// durable when it returns.
func (r *rawFS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) (st fuse.Status) {
	defer r.done(opFsyncDir, time.Now(), &st)
	return r.status("fsyncdir", r.ws.Fsync(workspace.Ino(in.NodeId)))
}

func (r *rawFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) (st fuse.Status) {
	defer r.done(opStatFs, time.Now(), &st)
	s, err := r.ws.StatFS()
	if err != nil {
		return r.status("statfs", err)
	}
	out.Blocks = s.Blocks
	out.Bfree = s.BlocksFree
	out.Bavail = s.BlocksAvail
	out.Files = s.Files
	out.Ffree = s.FilesFree
	out.Bsize = uint32(s.BlockSize)
	out.Frsize = uint32(s.BlockSize)
	out.NameLen = 255
	return fuse.OK
}

// --- extended attributes ---

// isPOSIXACL reports whether name is one of the kernel's POSIX ACL
// attributes, which wsfs does not support (see SetXAttr).
func isPOSIXACL(name string) bool {
	return name == "system.posix_acl_access" || name == "system.posix_acl_default"
}

func (r *rawFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, name string, dest []byte) (sz uint32, st fuse.Status) {
	defer r.done(opGetXAttr, time.Now(), &st)
	v, err := r.ws.GetXattr(workspace.Ino(h.NodeId), name)
	if err != nil {
		return 0, r.status("getxattr", err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), fuse.ERANGE // size probe (len 0) or too small
	}
	return uint32(copy(dest, v)), fuse.OK
}

func (r *rawFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (sz uint32, st fuse.Status) {
	defer r.done(opListXAttr, time.Now(), &st)
	names, err := r.ws.ListXattr(workspace.Ino(h.NodeId))
	if err != nil {
		return 0, r.status("listxattr", err)
	}
	var b []byte
	for _, n := range names {
		b = append(append(b, n...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), fuse.ERANGE
	}
	return uint32(copy(dest, b)), fuse.OK
}

func (r *rawFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, name string, data []byte) (st fuse.Status) {
	defer r.done(opSetXAttr, time.Now(), &st)
	if isPOSIXACL(name) {
		// The mount does not negotiate FUSE_POSIX_ACL, so the kernel passes
		// ACLs through as plain attributes. Stored opaquely they would not
		// change the mode, and `cp -a`/`rsync -A` (which copy a minimal ACL
		// instead of calling chmod) would leave files 0600. EOPNOTSUPP makes
		// them fall back to chmod, as on a filesystem mounted with noacl.
		return fuse.Status(syscall.EOPNOTSUPP)
	}
	return r.status("setxattr", r.ws.SetXattr(workspace.Ino(in.NodeId), name, data, in.Flags))
}

func (r *rawFS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, name string) (st fuse.Status) {
	defer r.done(opRemoveXAttr, time.Now(), &st)
	return r.status("removexattr", r.ws.RemoveXattr(workspace.Ino(h.NodeId), name))
}
