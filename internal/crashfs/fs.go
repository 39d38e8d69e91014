package crashfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Options configure a mount.
type Options struct {
	// ShadowDir holds the durable image's file data; it must be on the
	// backing directory's filesystem. Default: backing + ".crashfs-shadow".
	ShadowDir string
	// Debug logs every FUSE request.
	Debug bool
	// DropSync, if set, is a planted bug for tests of crashfs's users:
	// an fsync or fdatasync of path (relative to the mount; dir: a
	// directory) for which it returns true succeeds without making
	// anything durable.
	DropSync func(path string, dir bool) bool
}

// Stats count the durability requests crashfs served.
type Stats struct {
	Fsyncs, Fdatasyncs, DirSyncs int64
	Writes                       int64
}

// FS is one crashfs mount.
type FS struct {
	backing, mountpoint string
	server              *fuse.Server

	gate struct {
		sync.RWMutex
		cut bool
	}
	mu    sync.Mutex // guards m and stats
	m     *model
	stats Stats
	drop  func(path string, dir bool) bool

	// open holds the file handles not yet released: after a power cut the
	// processes using the mount are killed and the mount detached, and
	// the kernel may never deliver their RELEASE; Unmount closes what is
	// left, so a long run does not run out of descriptors.
	open struct {
		sync.Mutex
		m map[*handle]struct{}
	}
}

// Mount serves backing at mountpoint. Everything in backing counts as
// durable.
func Mount(backing, mountpoint string, o Options) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	if o.ShadowDir == "" {
		o.ShadowDir = backing + ".crashfs-shadow"
	}
	if err := os.RemoveAll(o.ShadowDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.ShadowDir, 0o700); err != nil {
		return nil, err
	}
	c := &FS{backing: backing, mountpoint: mountpoint, drop: o.DropSync, m: &model{
		shadowDir: o.ShadowDir,
		ids:       map[uint64]uint64{},
		durable:   map[uint64]*dnode{},
		live:      map[uint64]*lnode{},
	}}
	if err := c.m.load(backing); err != nil {
		c.m.close()
		return nil, fmt.Errorf("crashfs: load %s: %w", backing, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, err
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, parent *fs.Inode, name string, st *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, c: c}
	}
	rootNode := root.NewNode(root, nil, "", &st)
	root.RootNode = rootNode
	sec := time.Second
	server, err := fs.Mount(mountpoint, rootNode, &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			AllowOther:  true,
			FsName:      "crashfs",
			Name:        "crashfs",
			DirectMount: true,
			Debug:       o.Debug,
		},
	})
	if err != nil {
		c.m.close()
		return nil, fmt.Errorf("crashfs: mount %s: %w", mountpoint, err)
	}
	c.server = server
	return c, nil
}

// Mountpoint returns where the mount is.
func (c *FS) Mountpoint() string { return c.mountpoint }

// Stats returns the counts so far.
func (c *FS) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// enter admits a mutating request, or refuses it after the cut.
func (c *FS) enter() bool {
	c.gate.RLock()
	if c.gate.cut {
		c.gate.RUnlock()
		return false
	}
	return true
}

func (c *FS) leave() { c.gate.RUnlock() }

// Cut is the power cut: it waits for the requests in progress, then lets
// no mutation through any more (EIO), and applies o's random subset of the
// unsynced writes to the durable image. Kill the processes using the mount,
// then Unmount and Restore.
func (c *FS) Cut(o CutOptions) (CutStats, error) {
	c.gate.Lock()
	c.gate.cut = true
	c.gate.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.keepUnsynced(o)
}

// Unmount detaches the mount (lazily if it is still busy) and waits,
// bounded by timeout, for the server to end.
func (c *FS) Unmount(timeout time.Duration) error {
	if c.server == nil {
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- c.server.Unmount() }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(timeout):
		err = errors.New("unmount timed out")
	}
	if err != nil {
		if derr := unix.Unmount(c.mountpoint, unix.MNT_DETACH); derr != nil && !errors.Is(derr, unix.EINVAL) {
			return fmt.Errorf("crashfs: unmount %s: %v; lazy: %w", c.mountpoint, err, derr)
		}
	}
	done := make(chan struct{})
	go func() { c.server.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		return fmt.Errorf("crashfs: server of %s did not end within %v of the unmount", c.mountpoint, timeout)
	}
	c.server = nil
	c.closeUnreleased()
	return nil
}

// closeUnreleased closes the descriptors of handles whose RELEASE never
// came (see FS.open); a late Release of one is then a no-op.
func (c *FS) closeUnreleased() {
	c.open.Lock()
	for h := range c.open.m {
		unix.Close(h.fd)
	}
	c.open.m = nil
	c.open.Unlock()
}

// Restore replaces the backing directory by the durable image. Call it
// after Cut and Unmount; Mount the backing directory again to serve it.
func (c *FS) Restore() (RestoreStats, error) {
	if !c.gate.cut {
		return RestoreStats{}, errors.New("crashfs: restore without a cut")
	}
	if c.server != nil {
		return RestoreStats{}, errors.New("crashfs: restore while mounted")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rs, err := c.m.restore(c.backing)
	c.m.close() // the descriptors of the files present at mount time
	if err == nil {
		err = os.RemoveAll(c.m.shadowDir)
	}
	return rs, err
}

// Close unmounts without a power cut: the backing directory keeps the live
// view.
func (c *FS) Close(timeout time.Duration) error {
	err := c.Unmount(timeout)
	c.mu.Lock()
	c.m.close()
	c.mu.Unlock()
	os.RemoveAll(c.m.shadowDir)
	return err
}

// node is a loopback node whose mutations feed the model.
type node struct {
	fs.LoopbackNode
	c *FS
}

func (n *node) path() string { return filepath.Join(n.c.backing, n.Path(nil)) }

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return fs.ToErrno(err)
}

// lookupID returns the id of the live inode at p.
func (c *FS) lookupID(p string) (uint64, *unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return 0, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.idOf(&st), &st, nil
}

func (c *FS) createdAt(p, target string) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return
	}
	c.mu.Lock()
	c.m.created(st.Ino, kindOf(st.Mode), st.Mode&0o7777, target)
	c.mu.Unlock()
}

// handleFromLoopback takes over the descriptor of a loopback file handle.
func (c *FS) handleFromLoopback(ctx context.Context, fh fs.FileHandle) (*handle, syscall.Errno) {
	lf := fh.(*fs.LoopbackFile)
	fd, _ := lf.PassthroughFd()
	nfd, err := unix.Dup(fd)
	lf.Release(ctx)
	if err != nil {
		return nil, errnoOf(err)
	}
	unix.CloseOnExec(nfd)
	var st unix.Stat_t
	if err := unix.Fstat(nfd, &st); err != nil {
		unix.Close(nfd)
		return nil, errnoOf(err)
	}
	c.mu.Lock()
	id := c.m.idOf(&st)
	c.mu.Unlock()
	h := &handle{c: c, fd: nfd, id: id}
	c.track(h)
	return h, 0
}

// track records h as open until its Release (or the unmount).
func (c *FS) track(h *handle) {
	c.open.Lock()
	if c.open.m == nil {
		c.open.m = map[*handle]struct{}{}
	}
	c.open.m[h] = struct{}{}
	c.open.Unlock()
}

var _ = (fs.NodeCreater)((*node)(nil))

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if !n.c.enter() {
		return nil, nil, 0, syscall.EIO
	}
	defer n.c.leave()
	p := filepath.Join(n.path(), name)
	var before unix.Stat_t
	existed := unix.Lstat(p, &before) == nil
	if existed && flags&syscall.O_TRUNC != 0 { // O_CREAT without O_EXCL on an existing file
		n.c.mu.Lock()
		id := n.c.m.idOf(&before)
		err := n.c.m.cow(id)
		n.c.m.changedAll(id)
		n.c.mu.Unlock()
		if err != nil {
			return nil, nil, 0, syscall.EIO
		}
	}
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !existed {
		n.c.createdAt(p, "")
	}
	h, errno := n.c.handleFromLoopback(ctx, fh)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, h, fl, 0
}

var _ = (fs.NodeOpener)((*node)(nil))

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		if !n.c.enter() {
			return nil, 0, syscall.EIO
		}
		defer n.c.leave()
		id, _, err := n.c.lookupID(n.path())
		if err != nil {
			return nil, 0, errnoOf(err)
		}
		n.c.mu.Lock()
		err = n.c.m.cow(id)
		n.c.m.changedAll(id)
		n.c.mu.Unlock()
		if err != nil {
			return nil, 0, syscall.EIO
		}
	}
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.c.handleFromLoopback(ctx, fh)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, fl, 0
}

var _ = (fs.NodeMkdirer)((*node)(nil))

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.c.enter() {
		return nil, syscall.EIO
	}
	defer n.c.leave()
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno == 0 {
		n.c.createdAt(filepath.Join(n.path(), name), "")
	}
	return ch, errno
}

var _ = (fs.NodeMknoder)((*node)(nil))

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.c.enter() {
		return nil, syscall.EIO
	}
	defer n.c.leave()
	ch, errno := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if errno == 0 {
		n.c.createdAt(filepath.Join(n.path(), name), "")
	}
	return ch, errno
}

var _ = (fs.NodeSymlinker)((*node)(nil))

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.c.enter() {
		return nil, syscall.EIO
	}
	defer n.c.leave()
	ch, errno := n.LoopbackNode.Symlink(ctx, target, name, out)
	if errno == 0 {
		n.c.createdAt(filepath.Join(n.path(), name), target)
	}
	return ch, errno
}

var _ = (fs.NodeLinker)((*node)(nil))

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.c.enter() {
		return nil, syscall.EIO
	}
	defer n.c.leave()
	return n.LoopbackNode.Link(ctx, target, name, out)
}

var _ = (fs.NodeRenamer)((*node)(nil))

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if !n.c.enter() {
		return syscall.EIO
	}
	defer n.c.leave()
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

var _ = (fs.NodeUnlinker)((*node)(nil))

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if !n.c.enter() {
		return syscall.EIO
	}
	defer n.c.leave()
	return n.LoopbackNode.Unlink(ctx, name)
}

var _ = (fs.NodeRmdirer)((*node)(nil))

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if !n.c.enter() {
		return syscall.EIO
	}
	defer n.c.leave()
	return n.LoopbackNode.Rmdir(ctx, name)
}

var _ = (fs.NodeSetxattrer)((*node)(nil))

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if !n.c.enter() {
		return syscall.EIO
	}
	defer n.c.leave()
	return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
}

var _ = (fs.NodeRemovexattrer)((*node)(nil))

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if !n.c.enter() {
		return syscall.EIO
	}
	defer n.c.leave()
	return n.LoopbackNode.Removexattr(ctx, attr)
}

var _ = (fs.NodeSetattrer)((*node)(nil))

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !n.c.enter() {
		return syscall.EIO
	}
	defer n.c.leave()
	h, _ := f.(*handle)
	if _, ok := in.GetSize(); ok {
		var id uint64
		if h != nil {
			id = h.id
		} else {
			var err error
			if id, _, err = n.c.lookupID(n.path()); err != nil {
				return errnoOf(err)
			}
		}
		n.c.mu.Lock()
		err := n.c.m.cow(id)
		n.c.m.changedAll(id)
		n.c.mu.Unlock()
		if err != nil {
			return syscall.EIO
		}
	}
	if h == nil {
		return n.LoopbackNode.Setattr(ctx, nil, in, out)
	}
	if errno := h.setattr(in); errno != 0 {
		return errno
	}
	return h.Getattr(ctx, out)
}

var _ = (fs.NodeCopyFileRanger)((*node)(nil))

// CopyFileRange is refused, so the kernel copies with reads and writes
// (which crashfs tracks).
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

var _ = (fs.NodeOpendirHandler)((*node)(nil))

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{ds: ds, n: n}, fl, 0
}

var _ = (fs.NodeFsyncer)((*node)(nil))

// Fsync is fsync and fdatasync of files (FUSE_FSYNC) and of directories
// without a crashfs directory handle. Nothing is synced on the backing
// filesystem: the durable image is crashfs's own.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if !n.c.enter() {
		return syscall.EIO
	}
	defer n.c.leave()
	h, ok := f.(*handle)
	if n.c.drop != nil && n.c.drop(n.Path(nil), !ok && n.Mode()&unix.S_IFMT == unix.S_IFDIR) {
		return 0
	}
	if ok {
		return h.sync(flags&1 != 0)
	}
	return n.syncPath(flags&1 != 0)
}

func (n *node) syncPath(datasync bool) syscall.Errno {
	p := n.path()
	id, st, err := n.c.lookupID(p)
	if err != nil {
		return errnoOf(err)
	}
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		c.stats.DirSyncs++
		if err := c.m.syncDir(id, p); err != nil {
			return syscall.EIO
		}
		return 0
	}
	f, err := os.Open(p)
	if err != nil {
		return errnoOf(err)
	}
	defer f.Close()
	c.countSync(datasync)
	if err := c.m.syncFile(id, f, datasync); err != nil {
		return syscall.EIO
	}
	return 0
}

func (c *FS) countSync(datasync bool) {
	if datasync {
		c.stats.Fdatasyncs++
	} else {
		c.stats.Fsyncs++
	}
}

// dirHandle is a directory handle whose fsync feeds the model.
type dirHandle struct {
	ds fs.FileHandle
	n  *node
}

var (
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileReleasedirer)((*dirHandle)(nil))
	_ = (fs.FileFsyncdirer)((*dirHandle)(nil))
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if !d.n.c.enter() {
		return syscall.EIO
	}
	defer d.n.c.leave()
	if d.n.c.drop != nil && d.n.c.drop(d.n.Path(nil), true) {
		return 0
	}
	return d.n.syncPath(flags&1 != 0)
}

// handle is an open regular file. It deliberately has no PassthroughFd:
// with FUSE passthrough the kernel would write to the backing file without
// crashfs seeing it.
type handle struct {
	c  *FS
	fd int
	id uint64
}

var (
	_ = (fs.FileReader)((*handle)(nil))
	_ = (fs.FileWriter)((*handle)(nil))
	_ = (fs.FileReleaser)((*handle)(nil))
	_ = (fs.FileGetattrer)((*handle)(nil))
	_ = (fs.FileAllocater)((*handle)(nil))
	_ = (fs.FileLseeker)((*handle)(nil))
)

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := unix.Pread(h.fd, buf, off)
	if err != nil {
		return nil, errnoOf(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	c := h.c
	if !c.enter() {
		return 0, syscall.EIO
	}
	defer c.leave()
	c.mu.Lock()
	err := c.m.cow(h.id)
	c.mu.Unlock()
	if err != nil {
		return 0, syscall.EIO
	}
	n, err := unix.Pwrite(h.fd, data, off)
	if n > 0 {
		c.mu.Lock()
		c.m.wrote(h.id, off, data[:n])
		c.stats.Writes++
		c.mu.Unlock()
	}
	if err != nil {
		return uint32(max(n, 0)), errnoOf(err)
	}
	return uint32(n), 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.c.open.Lock()
	_, ok := h.c.open.m[h]
	delete(h.c.open.m, h)
	h.c.open.Unlock()
	if !ok {
		return 0 // closed by Unmount already
	}
	return errnoOf(unix.Close(h.fd))
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil {
		return errnoOf(err)
	}
	out.FromStat(&st)
	return 0
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.fd, int64(off), int(whence))
	return uint64(n), errnoOf(err)
}

func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	c := h.c
	if !c.enter() {
		return syscall.EIO
	}
	defer c.leave()
	c.mu.Lock()
	err := c.m.cow(h.id)
	c.m.changedAll(h.id)
	c.mu.Unlock()
	if err != nil {
		return syscall.EIO
	}
	return errnoOf(unix.Fallocate(h.fd, mode, int64(off), int64(size)))
}

func (h *handle) setattr(in *fuse.SetAttrIn) syscall.Errno {
	if m, ok := in.GetMode(); ok {
		if err := unix.Fchmod(h.fd, m&0o7777); err != nil {
			return errnoOf(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		su, sg := -1, -1
		if uok {
			su = int(uid)
		}
		if gok {
			sg = int(gid)
		}
		if err := unix.Fchown(h.fd, su, sg); err != nil {
			return errnoOf(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if err := unix.Ftruncate(h.fd, int64(sz)); err != nil {
			return errnoOf(err)
		}
	}
	mt, mok := in.GetMTime()
	at, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(at.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mt.UnixNano())
		}
		p := "/proc/self/fd/" + strconv.Itoa(h.fd)
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			return errnoOf(err)
		}
	}
	return 0
}

// sync is fsync/fdatasync of the handle's file.
func (h *handle) sync(datasync bool) syscall.Errno {
	f, err := os.Open("/proc/self/fd/" + strconv.Itoa(h.fd))
	if err != nil {
		return errnoOf(err)
	}
	defer f.Close()
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.countSync(datasync)
	if err := c.m.syncFile(h.id, f, datasync); err != nil {
		return syscall.EIO
	}
	return 0
}
