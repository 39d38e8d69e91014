// Package errorfs injects faults into any vfs.FS, so tests can check what the
// engine does when a disk says EIO, fills up, or writes half a buffer.
//
// An Injector is asked before every operation whether it should fail. The
// usual Injector is a Rule, which matches
//
//   - an operation kind (vfs.Op; 0 matches every kind),
//   - a path pattern: "" matches every path; a pattern holding a glob
//     metacharacter (* ? [) is matched with filepath.Match against the base
//     name of the path ("*.seg"); any other pattern matches when it is a
//     substring of the path ("/pool/objects/"),
//   - and which of the matching calls fail: only the Nth (OnNth), the Nth
//     and every later one (FromNth), or all (Always). Calls are counted from
//     1, per rule, whether or not they fail.
//
// Rules combine with Rules(...): every rule sees (and counts) every call,
// and the first one that fires supplies the error. Every Rule and every Set
// counts the faults it injected (Injected), so a test can check that its
// fault actually happened instead of passing vacuously.
//
// Errors come back as the OS would shape them: a *os.PathError (or
// *os.LinkError for Rename and Link) whose Err is an *InjectedError wrapping
// the given error, so errors.Is(err, syscall.EIO) holds and
// errors.As(err, new(*errorfs.InjectedError)) tells an injected fault from a
// real one. A fault on a write can be a short write (ShortWriteOnNth, or any
// error wrapped with Short): half the buffer is written to the underlying
// file and the call returns that count with the error, as os.File.Write does
// when the kernel reports ENOSPC after a partial write.
//
// For Rename and Link the path given to the Injector is the new name. A
// fault is injected before the operation, so the underlying FS is not
// changed, except for short writes (half written) and Close (the underlying
// file is closed anyway, so that a test leaks no descriptors).
//
// Everything here is safe for concurrent use.
package errorfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sync/atomic"
	"syscall"
	"time"

	"wsfs/internal/vfs"
)

// Operation kinds, re-exported from vfs for shorter rules.
const (
	OpCreate   = vfs.OpCreate
	OpOpen     = vfs.OpOpen
	OpRead     = vfs.OpRead
	OpWrite    = vfs.OpWrite
	OpSync     = vfs.OpSync
	OpSyncData = vfs.OpSyncData
	OpTruncate = vfs.OpTruncate
	OpRename   = vfs.OpRename
	OpLink     = vfs.OpLink
	OpRemove   = vfs.OpRemove
	OpMkdir    = vfs.OpMkdir
	OpList     = vfs.OpList
	OpStat     = vfs.OpStat
	OpChtimes  = vfs.OpChtimes
	OpLock     = vfs.OpLock
	OpSyncFS   = vfs.OpSyncFS
	OpStatfs   = vfs.OpStatfs
	OpClose    = vfs.OpClose

	OpStartWriteback = vfs.OpStartWriteback
	// OpAny matches every kind of operation.
	OpAny vfs.Op = 0
)

// Injector decides, before each operation, whether it fails. A nil error
// lets the operation through. An error made with Short on an OpWrite makes a
// short write.
type Injector interface {
	MaybeError(op vfs.Op, path string) error
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(op vfs.Op, path string) error

// MaybeError calls f.
func (f InjectorFunc) MaybeError(op vfs.Op, path string) error { return f(op, path) }

// InjectedError marks an error as injected by errorfs.
type InjectedError struct {
	Err error
}

func (e *InjectedError) Error() string { return e.Err.Error() + " (injected by errorfs)" }
func (e *InjectedError) Unwrap() error { return e.Err }

// shortError asks for a short write.
type shortError struct{ err error }

func (e *shortError) Error() string { return e.err.Error() }
func (e *shortError) Unwrap() error { return e.err }

// Short wraps err so that, injected into a write, half of the buffer is
// written before err is returned. On other operations it is just err.
func Short(err error) error { return &shortError{err} }

// Rule is an Injector that fails matching calls; build one with OnNth,
// FromNth, Always or ShortWriteOnNth.
type Rule struct {
	op      vfs.Op
	pattern string
	from    int64 // first failing matching call (1-based)
	to      int64 // last failing matching call; 0 = no limit
	err     error

	matched  atomic.Int64
	injected atomic.Int64
}

// OnNth fails only the nth call (counted from 1) of kind op on a path
// matching pattern, with err.
func OnNth(op vfs.Op, pattern string, n int, err error) *Rule {
	return &Rule{op: op, pattern: pattern, from: int64(n), to: int64(n), err: err}
}

// FromNth fails the nth matching call and every later one (a disk that
// stays broken, or full).
func FromNth(op vfs.Op, pattern string, n int, err error) *Rule {
	return &Rule{op: op, pattern: pattern, from: int64(n), err: err}
}

// Always fails every matching call.
func Always(op vfs.Op, pattern string, err error) *Rule {
	return FromNth(op, pattern, 1, err)
}

// ShortWriteOnNth makes the nth write to a path matching pattern write half
// its buffer and fail with ENOSPC.
func ShortWriteOnNth(pattern string, n int) *Rule {
	return OnNth(OpWrite, pattern, n, Short(syscall.ENOSPC))
}

// MaybeError implements Injector.
func (r *Rule) MaybeError(op vfs.Op, path string) error {
	if r.op != OpAny && r.op != op {
		return nil
	}
	if !Match(r.pattern, path) {
		return nil
	}
	n := r.matched.Add(1)
	if n < r.from || (r.to != 0 && n > r.to) {
		return nil
	}
	r.injected.Add(1)
	return r.err
}

// Matched returns how many calls matched the rule's op and pattern so far.
func (r *Rule) Matched() int { return int(r.matched.Load()) }

// Injected returns how many faults the rule injected so far.
func (r *Rule) Injected() int { return int(r.injected.Load()) }

// Err returns the error the rule injects (as given, before it is wrapped in
// *os.PathError and *InjectedError), for errors.Is checks in tests.
func (r *Rule) Err() error { return r.err }

// Match reports whether path matches pattern as documented in the package
// doc: "" matches all, a glob is matched against the base name, anything
// else is a substring test. A malformed glob matches nothing.
func Match(pattern, path string) bool {
	if pattern == "" {
		return true
	}
	if strings.ContainsAny(pattern, "*?[") {
		ok, err := filepath.Match(pattern, filepath.Base(path))
		return err == nil && ok
	}
	return strings.Contains(path, pattern)
}

// Set combines injectors; see Rules.
type Set struct {
	injectors []Injector
	injected  atomic.Int64
}

// Rules combines injectors: each call is shown to all of them in order (so
// every Rule counts it), and the first non-nil error is injected.
func Rules(inj ...Injector) *Set { return &Set{injectors: inj} }

// MaybeError implements Injector.
func (s *Set) MaybeError(op vfs.Op, path string) error {
	var first error
	for _, inj := range s.injectors {
		if err := inj.MaybeError(op, path); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		s.injected.Add(1)
	}
	return first
}

// Injected returns how many faults the set injected so far.
func (s *Set) Injected() int { return int(s.injected.Load()) }

// FS is a vfs.FS that asks an Injector before every operation.
type FS struct {
	fs  vfs.FS
	inj Injector
}

var _ vfs.FS = (*FS)(nil)

// Wrap returns fs with faults from inj injected.
func Wrap(fs vfs.FS, inj Injector) vfs.FS { return &FS{fs: fs, inj: inj} }

// check asks the injector; a non-nil result is the error to return.
func (e *FS) check(op vfs.Op, path string) error {
	err := e.inj.MaybeError(op, path)
	if err == nil {
		return nil
	}
	return &os.PathError{Op: op.String(), Path: path, Err: &InjectedError{Err: err}}
}

func (e *FS) checkLink(op vfs.Op, oldname, newname string) error {
	err := e.inj.MaybeError(op, newname)
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op.String(), Old: oldname, New: newname, Err: &InjectedError{Err: err}}
}

func (e *FS) wrapFile(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &file{fs: e, f: f, name: name}, nil
}

func (e *FS) Create(name string) (vfs.File, error) {
	if err := e.check(OpCreate, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Create(name)
	return e.wrapFile(name, f, err)
}

func (e *FS) CreateExcl(name string, perm os.FileMode) (vfs.File, error) {
	if err := e.check(OpCreate, name); err != nil {
		return nil, err
	}
	f, err := e.fs.CreateExcl(name, perm)
	return e.wrapFile(name, f, err)
}

func (e *FS) Open(name string) (vfs.File, error) {
	if err := e.check(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Open(name)
	return e.wrapFile(name, f, err)
}

func (e *FS) OpenReadWrite(name string) (vfs.File, error) {
	if err := e.check(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenReadWrite(name)
	return e.wrapFile(name, f, err)
}

func (e *FS) OpenDir(name string) (vfs.File, error) {
	if err := e.check(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenDir(name)
	return e.wrapFile(name, f, err)
}

func (e *FS) Link(oldname, newname string) error {
	if err := e.checkLink(OpLink, oldname, newname); err != nil {
		return err
	}
	return e.fs.Link(oldname, newname)
}

func (e *FS) Rename(oldname, newname string) error {
	if err := e.checkLink(OpRename, oldname, newname); err != nil {
		return err
	}
	return e.fs.Rename(oldname, newname)
}

// RenameNoReplace is vfs.RenameNoReplace on the underlying FS, with
// faults injected as for Rename.
func (e *FS) RenameNoReplace(oldname, newname string) error {
	if err := e.checkLink(OpRename, oldname, newname); err != nil {
		return err
	}
	return vfs.RenameNoReplace(e.fs, oldname, newname)
}

func (e *FS) Remove(name string) error {
	if err := e.check(OpRemove, name); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

func (e *FS) RemoveAll(name string) error {
	if err := e.check(OpRemove, name); err != nil {
		return err
	}
	return e.fs.RemoveAll(name)
}

func (e *FS) MkdirAll(name string, perm os.FileMode) error {
	if err := e.check(OpMkdir, name); err != nil {
		return err
	}
	return e.fs.MkdirAll(name, perm)
}

func (e *FS) List(dir string) ([]string, error) {
	if err := e.check(OpList, dir); err != nil {
		return nil, err
	}
	return e.fs.List(dir)
}

func (e *FS) Stat(name string) (os.FileInfo, error) {
	if err := e.check(OpStat, name); err != nil {
		return nil, err
	}
	return e.fs.Stat(name)
}

func (e *FS) Chtimes(name string, atime, mtime time.Time) error {
	if err := e.check(OpChtimes, name); err != nil {
		return err
	}
	return e.fs.Chtimes(name, atime, mtime)
}

func (e *FS) Lock(name string) (io.Closer, error) {
	if err := e.check(OpLock, name); err != nil {
		return nil, err
	}
	return e.fs.Lock(name)
}

func (e *FS) SyncFS(name string) error {
	if err := e.check(OpSyncFS, name); err != nil {
		return err
	}
	return e.fs.SyncFS(name)
}

func (e *FS) Statfs(name string) (vfs.StatFS, error) {
	if err := e.check(OpStatfs, name); err != nil {
		return vfs.StatFS{}, err
	}
	return e.fs.Statfs(name)
}

// file wraps an open file of the underlying FS.
type file struct {
	fs   *FS
	f    vfs.File
	name string
}

var _ vfs.File = (*file)(nil)

func (f *file) Read(p []byte) (int, error) {
	if err := f.fs.check(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.f.Read(p)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

// writeFault returns the injected error for a write and how many bytes of
// p to write before returning it (len(p)/2 for a short write, else 0).
func (f *file) writeFault(p []byte) (int, error) {
	err := f.fs.check(OpWrite, f.name)
	if err == nil {
		return len(p), nil
	}
	var s *shortError
	if errors.As(err, &s) {
		return len(p) / 2, err
	}
	return 0, err
}

func (f *file) Write(p []byte) (int, error) {
	keep, ierr := f.writeFault(p)
	if ierr == nil {
		return f.f.Write(p)
	}
	if keep == 0 {
		return 0, ierr
	}
	n, err := f.f.Write(p[:keep])
	if err != nil {
		return n, err
	}
	return n, ierr
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	keep, ierr := f.writeFault(p)
	if ierr == nil {
		return f.f.WriteAt(p, off)
	}
	if keep == 0 {
		return 0, ierr
	}
	n, err := f.f.WriteAt(p[:keep], off)
	if err != nil {
		return n, err
	}
	return n, ierr
}

func (f *file) Seek(offset int64, whence int) (int64, error) { return f.f.Seek(offset, whence) }

func (f *file) Close() error {
	ierr := f.fs.check(OpClose, f.name)
	err := f.f.Close()
	if ierr != nil {
		return ierr
	}
	return err
}

func (f *file) Stat() (os.FileInfo, error) {
	if err := f.fs.check(OpStat, f.name); err != nil {
		return nil, err
	}
	return f.f.Stat()
}

func (f *file) Sync() error {
	if err := f.fs.check(OpSync, f.name); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *file) SyncData() error {
	if err := f.fs.check(OpSyncData, f.name); err != nil {
		return err
	}
	return f.f.SyncData()
}

func (f *file) Truncate(size int64) error {
	if err := f.fs.check(OpTruncate, f.name); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *file) StartWriteback() error {
	if err := f.fs.check(OpStartWriteback, f.name); err != nil {
		return err
	}
	return f.f.StartWriteback()
}

func (f *file) Fd() uintptr { return f.f.Fd() }
