package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked is wrapped by the error Lock returns when the lock is held by
// another process or another Lock call. Test with errors.Is(err, ErrLocked).
var ErrLocked = errors.New("lock is held by another holder")

// Default is the operating system's file system.
var Default FS = osFS{}

// osFS implements FS with package os and golang.org/x/sys/unix.
type osFS struct{}

// osFile is an *os.File whose SyncData is fdatasync(2).
type osFile struct {
	*os.File
}

// SyncData calls fdatasync(2): the file's data and the metadata needed to read
// it back (its size) become durable.
func (f osFile) SyncData() error {
	for {
		err := unix.Fdatasync(int(f.File.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}

// StartWriteback calls sync_file_range(2) over the whole file with
// SYNC_FILE_RANGE_WRITE only: the kernel submits writeback of the dirty
// pages and returns without waiting. Without a WAIT flag it neither checks
// nor advances the file's writeback error sequence, so an I/O error is
// still reported to a later fsync or fdatasync (on any descriptor). It
// works on a read-only descriptor and on a directory.
func (f osFile) StartWriteback() error {
	rc, err := f.File.SyscallConn()
	if err != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: err}
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: err}
	}
	if serr != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: serr}
	}
	return nil
}

func wrap(f *os.File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Create(name string) (File, error) {
	return wrap(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, 0o666))
}

func (osFS) CreateExcl(name string, perm os.FileMode) (File, error) {
	return wrap(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, perm))
}

func (osFS) Open(name string) (File, error) {
	return wrap(os.OpenFile(name, os.O_RDONLY|unix.O_CLOEXEC, 0))
}

func (osFS) OpenReadWrite(name string) (File, error) {
	return wrap(os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0))
}

func (osFS) OpenDir(name string) (File, error) {
	return wrap(os.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0))
}

func (osFS) Link(oldname, newname string) error { return os.Link(oldname, newname) }

// Rename is rename(2). It deliberately bypasses os.Rename, which refuses to
// replace an empty directory (EEXIST) for portability and adds an lstat
// race; the engine wants exactly the POSIX semantics.
func (osFS) Rename(oldname, newname string) error {
	for {
		err := unix.Rename(oldname, newname)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
		}
		return nil
	}
}

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) RemoveAll(name string) error { return os.RemoveAll(name) }

func (osFS) MkdirAll(name string, perm os.FileMode) error { return os.MkdirAll(name, perm) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

func (osFS) Chtimes(name string, atime, mtime time.Time) error {
	return os.Chtimes(name, atime, mtime)
}

// Lock creates name if missing and takes flock(LOCK_EX|LOCK_NB) on it. The
// lock lives as long as the returned Closer (the open file description), so
// a second Lock of the same name, in this process or another, fails with an
// error wrapping ErrLocked until Close. The file is never removed: removing a
// lock file races with a concurrent Lock that already opened it.
func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("lock %s: %w (another wsfs process, or this one, is using it; stop it first)", name, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: flock: %w", name, err)
	}
	return f, nil
}

// SyncFS calls syncfs(2) on the file system that holds name.
func (osFS) SyncFS(name string) error {
	f, err := os.OpenFile(name, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("syncfs %s: %w", name, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return &os.PathError{Op: "syncfs", Path: name, Err: err}
	}
	return nil
}

func (osFS) Statfs(name string) (StatFS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(name, &st); err != nil {
		return StatFS{}, &os.PathError{Op: "statfs", Path: name, Err: err}
	}
	return StatFS{
		BlockSize:   uint64(st.Bsize),
		Blocks:      st.Blocks,
		BlocksFree:  st.Bfree,
		BlocksAvail: st.Bavail,
		Files:       st.Files,
		FilesFree:   st.Ffree,
	}, nil
}
