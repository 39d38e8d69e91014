package main

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"wsfs/internal/metrics"
)

// countingFS wraps the loopback's fuse.RawFileSystem and counts every
// request by opcode in the same collectors a wsfs daemon uses
// (wsfs_fuse_ops_total, wsfs_fuse_op_seconds), so the tools benchmark can
// compare request counts of the two mounts step by step. It counts at the
// same layer as wsfs's own rawFS (the request as go-fuse hands it over),
// and costs the loopback what the metrics cost wsfs: one counter increment
// and one histogram observation per request.
type countingFS struct {
	fuse.RawFileSystem
	ops map[string]*metrics.Op
}

// loopbackOpNames are the opcodes countingFS counts: wsfs's, plus those
// wsfs leaves to the default (ENOSYS) implementation and the loopback
// serves.
var loopbackOpNames = []string{
	"LOOKUP", "FORGET", "GETATTR", "SETATTR", "MKNOD", "MKDIR", "UNLINK", "RMDIR", "RENAME", "LINK", "SYMLINK",
	"READLINK", "ACCESS", "CREATE", "OPEN", "READ", "WRITE", "FLUSH", "RELEASE", "FSYNC", "FALLOCATE", "OPENDIR",
	"READDIR", "READDIRPLUS", "RELEASEDIR", "FSYNCDIR", "STATFS", "STATX", "GETXATTR", "LISTXATTR", "SETXATTR",
	"REMOVEXATTR", "LSEEK", "COPY_FILE_RANGE", "GETLK", "SETLK", "SETLKW", "IOCTL", "TMPFILE",
}

func newCountingFS(raw fuse.RawFileSystem, m *metrics.Metrics) *countingFS {
	c := &countingFS{RawFileSystem: raw, ops: make(map[string]*metrics.Op, len(loopbackOpNames))}
	for _, n := range loopbackOpNames {
		c.ops[n] = m.Op(n)
	}
	return c
}

// done records one request of opcode op; as in wsfs, ENOENT is not an error.
func (c *countingFS) done(op string, start time.Time, st fuse.Status) {
	c.ops[op].Done(start, st != fuse.OK && st != fuse.ENOENT)
}

func (c *countingFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Lookup(cancel, h, name, out)
	c.done("LOOKUP", t, st)
	return st
}

func (c *countingFS) Forget(nodeid, nlookup uint64) {
	t := time.Now()
	c.RawFileSystem.Forget(nodeid, nlookup)
	c.done("FORGET", t, fuse.OK)
}

func (c *countingFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.GetAttr(cancel, in, out)
	c.done("GETATTR", t, st)
	return st
}

func (c *countingFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.SetAttr(cancel, in, out)
	c.done("SETATTR", t, st)
	return st
}

func (c *countingFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Mknod(cancel, in, name, out)
	c.done("MKNOD", t, st)
	return st
}

func (c *countingFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Mkdir(cancel, in, name, out)
	c.done("MKDIR", t, st)
	return st
}

func (c *countingFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Unlink(cancel, h, name)
	c.done("UNLINK", t, st)
	return st
}

func (c *countingFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Rmdir(cancel, h, name)
	c.done("RMDIR", t, st)
	return st
}

func (c *countingFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Rename(cancel, in, oldName, newName)
	c.done("RENAME", t, st)
	return st
}

func (c *countingFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Link(cancel, in, name, out)
	c.done("LINK", t, st)
	return st
}

func (c *countingFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Symlink(cancel, h, target, name, out)
	c.done("SYMLINK", t, st)
	return st
}

func (c *countingFS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	t := time.Now()
	b, st := c.RawFileSystem.Readlink(cancel, h)
	c.done("READLINK", t, st)
	return b, st
}

func (c *countingFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Access(cancel, in)
	c.done("ACCESS", t, st)
	return st
}

func (c *countingFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := c.RawFileSystem.GetXAttr(cancel, h, attr, dest)
	c.done("GETXATTR", t, st)
	return n, st
}

func (c *countingFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := c.RawFileSystem.ListXAttr(cancel, h, dest)
	c.done("LISTXATTR", t, st)
	return n, st
}

func (c *countingFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.SetXAttr(cancel, in, attr, data)
	c.done("SETXATTR", t, st)
	return st
}

func (c *countingFS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.RemoveXAttr(cancel, h, attr)
	c.done("REMOVEXATTR", t, st)
	return st
}

func (c *countingFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Create(cancel, in, name, out)
	c.done("CREATE", t, st)
	return st
}

func (c *countingFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Tmpfile(cancel, in, out)
	c.done("TMPFILE", t, st)
	return st
}

func (c *countingFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Open(cancel, in, out)
	c.done("OPEN", t, st)
	return st
}

func (c *countingFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	t := time.Now()
	r, st := c.RawFileSystem.Read(cancel, in, buf)
	c.done("READ", t, st)
	return r, st
}

func (c *countingFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Lseek(cancel, in, out)
	c.done("LSEEK", t, st)
	return st
}

func (c *countingFS) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.GetLk(cancel, in, out)
	c.done("GETLK", t, st)
	return st
}

func (c *countingFS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.SetLk(cancel, in)
	c.done("SETLK", t, st)
	return st
}

func (c *countingFS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.SetLkw(cancel, in)
	c.done("SETLKW", t, st)
	return st
}

func (c *countingFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	t := time.Now()
	c.RawFileSystem.Release(cancel, in)
	c.done("RELEASE", t, fuse.OK)
}

// Writev is what go-fuse calls for WRITE; only when it answers ENOSYS does
// go-fuse call Write, so each request is counted once.
func (c *countingFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := c.RawFileSystem.Writev(cancel, in, data)
	if st != fuse.ENOSYS {
		c.done("WRITE", t, st)
	}
	return n, st
}

func (c *countingFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := c.RawFileSystem.Write(cancel, in, data)
	c.done("WRITE", t, st)
	return n, st
}

func (c *countingFS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	t := time.Now()
	n, st := c.RawFileSystem.CopyFileRange(cancel, in)
	c.done("COPY_FILE_RANGE", t, st)
	return n, st
}

func (c *countingFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
	c.done("IOCTL", t, st)
	return st
}

func (c *countingFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Flush(cancel, in)
	c.done("FLUSH", t, st)
	return st
}

func (c *countingFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Fsync(cancel, in)
	c.done("FSYNC", t, st)
	return st
}

func (c *countingFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Fallocate(cancel, in)
	c.done("FALLOCATE", t, st)
	return st
}

func (c *countingFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.OpenDir(cancel, in, out)
	c.done("OPENDIR", t, st)
	return st
}

func (c *countingFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.ReadDir(cancel, in, out)
	c.done("READDIR", t, st)
	return st
}

func (c *countingFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.ReadDirPlus(cancel, in, out)
	c.done("READDIRPLUS", t, st)
	return st
}

func (c *countingFS) ReleaseDir(in *fuse.ReleaseIn) {
	t := time.Now()
	c.RawFileSystem.ReleaseDir(in)
	c.done("RELEASEDIR", t, fuse.OK)
}

func (c *countingFS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.FsyncDir(cancel, in)
	c.done("FSYNCDIR", t, st)
	return st
}

func (c *countingFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.StatFs(cancel, h, out)
	c.done("STATFS", t, st)
	return st
}

func (c *countingFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	t := time.Now()
	st := c.RawFileSystem.Statx(cancel, in, out)
	c.done("STATX", t, st)
	return st
}
