// Package vfs is the only way wsfs engine code touches a disk.
//
// Every byte the engine persists (segments, checkpoints, pool objects, locks)
// goes through an FS. Three implementations exist:
//
//   - Default: the operating system (package os and golang.org/x/sys/unix).
//   - NewCrashableMem: a strict in-memory file system that remembers what was
//     made durable. CrashClone() returns the state a power loss would leave: file
//     data as of its last Sync/SyncData, and only those directory entries
//     (creates, renames, removes) whose parent directory was synced after the
//     change.
//   - errorfs.Wrap: injects faults (EIO on the Nth sync or write of a path
//     pattern, ENOSPC, short writes) into any FS.
//
// Helpers shared by every implementation: Publish (the one atomic publish
// routine: temp, write, fdatasync, close, rename, directory sync), SyncDir,
// ErrLocked (wrapped by a busy Lock), and Op (operation kinds, used by the
// MemFS hook and by errorfs rules).
//
// The interface follows Pebble's vfs.FS: small, explicit about the two kinds of
// sync, and with directories opened as Files so that they can be synced.
//
// Invariant: engine packages never call os.OpenFile, os.Rename, os.Remove and
// friends directly (internal/lint enforces it); cmd/ and test helpers may.
package vfs

import (
	"io"
	"os"
	"time"
)

// The modes of what wsfs creates: private to the user running it (file
// contents are in segments, checkpoints and pool objects; the mount's own
// permissions are the only way in for anyone else).
const (
	PrivateDir  = 0o700
	PrivateFile = 0o600
)

// File is an open file or directory.
//
// Sync makes data and metadata durable (fsync). SyncData makes data durable
// (fdatasync). On a directory, Sync makes its entries durable. A failed Sync
// or SyncData must never be retried as proof of durability: after a failed
// sync the kernel may have dropped the dirty pages (fsyncgate), so callers
// treat the error as final for the data written so far.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Seeker
	io.Closer
	Stat() (os.FileInfo, error)
	Sync() error
	SyncData() error
	Truncate(size int64) error
	// StartWriteback asks the OS to start writing the file's dirty pages
	// to disk now, without waiting for the I/O. It is a hint, not a
	// durability point: it writes no metadata and proves nothing; only
	// Sync or SyncData makes data durable. It must not consume a writeback
	// error either, so that a later Sync or SyncData still reports it. An
	// error means the submission itself failed (e.g. EIO, ENOSPC): the
	// data may never be written. An implementation that cannot start
	// writeback (in-memory ones) returns nil; on a closed file it fails.
	StartWriteback() error
	// Fd returns the OS file descriptor, or ^uintptr(0) when the file is not
	// backed by the OS (in-memory implementations).
	Fd() uintptr
}

// FS is a file system. Paths are OS paths (joined with path/filepath).
type FS interface {
	// Create creates or truncates name for reading and writing.
	Create(name string) (File, error)
	// CreateExcl creates name, failing with an error satisfying
	// errors.Is(err, fs.ErrExist) if it exists.
	CreateExcl(name string, perm os.FileMode) (File, error)
	// Open opens name read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing.
	OpenReadWrite(name string) (File, error)
	// OpenDir opens a directory so that it can be synced.
	OpenDir(name string) (File, error)
	// Link creates newname as a hard link to oldname. Fails if newname exists.
	Link(oldname, newname string) error
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a tree; it is not crash-atomic.
	RemoveAll(name string) error
	// MkdirAll creates a directory and its parents. It does not sync them.
	MkdirAll(name string, perm os.FileMode) error
	// List returns the names in a directory, sorted.
	List(dir string) ([]string, error)
	// Stat describes a file.
	Stat(name string) (os.FileInfo, error)
	// Chtimes sets access and modification times (used to protect pool
	// objects from garbage collection).
	Chtimes(name string, atime, mtime time.Time) error
	// Lock takes an exclusive advisory lock on name (a file created if
	// missing, or an existing directory itself), failing at once with an
	// error wrapping ErrLocked if another process or another Lock call
	// holds it.
	Lock(name string) (io.Closer, error)
	// SyncFS flushes the whole file system that holds name (syncfs(2)). Only
	// the legacy drain uses it; nothing in the default path may.
	SyncFS(name string) error
	// Statfs reports capacity of the file system holding name.
	Statfs(name string) (StatFS, error)
}

// StatFS is the capacity of a file system.
type StatFS struct {
	BlockSize   uint64
	Blocks      uint64
	BlocksFree  uint64
	BlocksAvail uint64
	Files       uint64
	FilesFree   uint64
}
