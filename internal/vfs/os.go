package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	return wrap(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, PrivateFile))
}

func (osFS) CreateExcl(name string, perm os.FileMode) (File, error) {
	return wrap(os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, perm))
}

// Open opens name with O_NONBLOCK, so that a FIFO in its place cannot block
// the caller forever, then refuses anything but a regular file or a
// directory (NotRegularError) and clears O_NONBLOCK again.
func (osFS) Open(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		err = &NotRegularError{Path: name, Mode: fi.Mode()}
	}
	if err == nil {
		err = unix.SetNonblock(int(f.Fd()), false)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return osFile{f}, nil
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

// RenameNoReplace is renameat2(RENAME_NOREPLACE): rename(2) that fails
// with EEXIST (an error wrapping fs.ErrExist) instead of replacing an
// existing newname, an empty directory included. Where the file system
// does not support the flag (EINVAL) it checks and renames, as
// RenameNoReplace does for other file systems.
func (osFS) RenameNoReplace(oldname, newname string) error {
	for {
		err := unix.Renameat2(unix.AT_FDCWD, oldname, unix.AT_FDCWD, newname, unix.RENAME_NOREPLACE)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EINVAL, unix.ENOSYS:
			return renameIfAbsent(osFS{}, oldname, newname)
		}
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
}

// RenameNoReplace renames oldname to newname unless newname exists, in
// which case it fails with an error wrapping fs.ErrExist and changes
// nothing. On a file system with a RenameNoReplace method (the OS: one
// renameat2 call) that is atomic against a concurrent creator of
// newname; on others it checks first, so a newname created between the
// check and the rename may still be replaced (an empty directory) or make
// the rename fail (ENOTEMPTY, which also wraps fs.ErrExist).
func RenameNoReplace(fsys FS, oldname, newname string) error {
	if r, ok := fsys.(interface {
		RenameNoReplace(oldname, newname string) error
	}); ok {
		return r.RenameNoReplace(oldname, newname)
	}
	return renameIfAbsent(fsys, oldname, newname)
}

func renameIfAbsent(fsys FS, oldname, newname string) error {
	if _, err := fsys.Stat(newname); err == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: unix.EEXIST}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsys.Rename(oldname, newname)
}

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) RemoveAll(name string) error { return os.RemoveAll(name) }

func (osFS) MkdirAll(name string, perm os.FileMode) error { return os.MkdirAll(name, perm) }

// List opens dir with O_DIRECTORY: anything else at dir (a FIFO above all,
// which a plain open would block on) is ENOTDIR at once.
func (osFS) List(dir string) ([]string, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
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

// Lock takes flock(LOCK_EX|LOCK_NB) on name: on the directory itself if
// name is an existing directory, else on the file name, created (mode
// 0600) if missing. The lock lives as long as the returned Closer (the open
// file description), so a second Lock of the same name, in this process or
// another, fails with an error wrapping ErrLocked until Close; the error
// names the holding process (from /proc/locks) when it can. A lock file is
// never removed by wsfs: removing it races with a concurrent Lock that
// already opened it. But an operator can remove it, after which a second
// Lock of the name locks a new file and succeeds: what must stay
// exclusive while in use locks a directory that cannot be removed while it
// holds files (see LockAll).
func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, PrivateFile)
	if errors.Is(err, unix.EISDIR) {
		f, err = os.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
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
		holder := lockHolder(f)
		f.Close()
		if err == unix.EWOULDBLOCK {
			if holder == "" {
				holder = "another wsfs process, or this one"
			}
			return nil, fmt.Errorf("lock %s: %w (held by %s; stop it first)", name, ErrLocked, holder)
		}
		return nil, fmt.Errorf("lock %s: flock: %w", name, err)
	}
	return f, nil
}

// lockHolder describes the process holding a flock on f's inode, from
// /proc/locks ("pid 1234 (wsfs mount ws-1)"), or "" if it cannot tell (no
// /proc, a holder in another PID namespace).
func lockHolder(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return ""
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return ""
	}
	pid := flockHolderPID(string(data), uint32(unix.Major(st.Dev)), uint32(unix.Minor(st.Dev)), st.Ino)
	if pid <= 0 {
		return ""
	}
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Fields(strings.ReplaceAll(string(cmd), "\x00", " "))
	if len(args) == 0 {
		return fmt.Sprintf("pid %d", pid)
	}
	args[0] = filepath.Base(args[0])
	if len(args) > 4 {
		args = append(args[:4], "...")
	}
	return fmt.Sprintf("pid %d (%s)", pid, strings.Join(args, " "))
}

// flockHolderPID finds the FLOCK line of /proc/locks for the inode
// major:minor:ino ("1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF",
// device numbers in hex) and returns its pid, or 0. Lines of waiters
// ("1: -> FLOCK ...") are skipped.
func flockHolderPID(locks string, major, minor uint32, ino uint64) int {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	for _, line := range strings.Split(locks, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		return pid
	}
	return 0
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
