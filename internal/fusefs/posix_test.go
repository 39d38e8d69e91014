package fusefs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// configs is the mount option matrix every POSIX test runs under.
//
// With the writeback cache the kernel keeps a file's mtime itself and does
// not send the time of a buffered write; the daemon stamps the data when it
// arrives (at close or writeback), so after a remount the mtime of a file
// written through the cache is later than the kernel showed, by the
// writeback delay. The remount comparison ignores file mtimes there.
var configs = []struct {
	name        string
	opts        Options
	looseMtimes bool
}{
	{"default", Options{}, false},
	{"passthrough", Options{Passthrough: true}, false},
	{"writeback", Options{Writeback: true}, true},
	{"notimeouts", Options{EntryTimeout: -1, AttrTimeout: -1, NegativeTimeout: -1}, false},
}

var posixTests = []struct {
	name string
	fn   func(t *testing.T, e *env)
}{
	{"ReadWrite", testReadWrite},
	{"AppendTruncateSparse", testAppendTruncateSparse},
	{"Rename", testRename},
	{"UnlinkWhileOpen", testUnlinkWhileOpen},
	{"Links", testLinks},
	{"Attrs", testAttrs},
	{"Xattrs", testXattrs},
	{"StatfsFsync", testStatfsFsync},
	{"Dirs", testDirs},
	{"Mmap", testMmap},
	{"Fallocate", testFallocate},
	{"ConcurrentWriters", testConcurrentWriters},
}

func TestPOSIX(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.opts)
			for _, tc := range posixTests {
				t.Run(tc.name, func(t *testing.T) {
					tc.fn(t, e)
				})
			}
			// Whatever the tests left must survive a remount unchanged.
			before := hashTree(t, e.mnt, c.looseMtimes)
			e.remount()
			if after := hashTree(t, e.mnt, c.looseMtimes); !equalTrees(t, before, after) {
				t.Error("tree changed across remount")
			}
		})
	}
}

func mustWrite(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func testReadWrite(t *testing.T, e *env) {
	dir := e.path("rw")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 1, 4095, 4096, 100 << 10, 3<<20 + 17} {
		p := filepath.Join(dir, fmt.Sprintf("f%d", size))
		want := pattern(size, byte(size))
		mustWrite(t, p, want)
		if got := mustRead(t, p); !bytes.Equal(got, want) {
			t.Fatalf("size %d: read back %d bytes, differ", size, len(got))
		}
		st, err := os.Stat(p)
		if err != nil || st.Size() != int64(size) {
			t.Fatalf("stat %s: %v size %d", p, err, st.Size())
		}
	}
	// Overwrite in the middle through one descriptor, read through another.
	p := filepath.Join(dir, "f4096")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 100); err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := g.ReadAt(buf, 100); err != nil || string(buf) != "hello" {
		t.Fatalf("read via second fd: %q %v", buf, err)
	}
	g.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// O_EXCL on an existing name.
	if _, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL on existing file: %v", err)
	}
	// O_TRUNC.
	f, err = os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, _ := os.Stat(p); st.Size() != 0 {
		t.Fatalf("O_TRUNC left size %d", st.Size())
	}
	if _, err := os.ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func testAppendTruncateSparse(t *testing.T, e *env) {
	p := e.path("append")
	for i := range 3 {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(f, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := string(mustRead(t, p)); got != "line 0\nline 1\nline 2\n" {
		t.Fatalf("append: %q", got)
	}
	if err := os.Truncate(p, 5); err != nil {
		t.Fatal(err)
	}
	if got := string(mustRead(t, p)); got != "line " {
		t.Fatalf("truncate down: %q", got)
	}
	if err := os.Truncate(p, 10); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, p); !bytes.Equal(got, []byte("line \x00\x00\x00\x00\x00")) {
		t.Fatalf("truncate up: %q", got)
	}
	// Truncate through an open handle (ftruncate).
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := string(mustRead(t, p)); got != "li" {
		t.Fatalf("ftruncate: %q", got)
	}

	// Sparse: write far beyond the end; the gap reads as zeros.
	sp := e.path("sparse")
	f, err = os.Create(sp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("end"), 4<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := mustRead(t, sp)
	if len(got) != 4<<20+3 || string(got[4<<20:]) != "end" || bytes.ContainsFunc(got[:4<<20], func(r rune) bool { return r != 0 }) {
		t.Fatalf("sparse file wrong (len %d)", len(got))
	}
}

func testRename(t *testing.T, e *env) {
	d := e.path("ren")
	if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b, c := filepath.Join(d, "a"), filepath.Join(d, "b"), filepath.Join(d, "sub", "c")
	mustWrite(t, a, []byte("A"))
	mustWrite(t, b, []byte("B"))
	// Replace.
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old name still there: %v", err)
	}
	if got := string(mustRead(t, b)); got != "A" {
		t.Fatalf("replace: %q", got)
	}
	// Across directories.
	if err := os.Rename(b, c); err != nil {
		t.Fatal(err)
	}
	if got := string(mustRead(t, c)); got != "A" {
		t.Fatalf("cross-dir: %q", got)
	}
	// RENAME_NOREPLACE.
	mustWrite(t, a, []byte("A2"))
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, c, unix.RENAME_NOREPLACE)
	if err != unix.EEXIST {
		t.Fatalf("RENAME_NOREPLACE onto existing: %v", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("RENAME_NOREPLACE to free name: %v", err)
	}
	// RENAME_EXCHANGE of a file and a directory.
	if err := unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, filepath.Join(d, "sub"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	if got := string(mustRead(t, filepath.Join(d, "sub"))); got != "A2" {
		t.Fatalf("exchange: sub holds %q", got)
	}
	if got := string(mustRead(t, filepath.Join(d, "b", "c"))); got != "A" {
		t.Fatalf("exchange: b/c holds %q", got)
	}
	// A directory onto a non-empty directory fails.
	if err := os.MkdirAll(filepath.Join(d, "x", "y"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d, "b"), filepath.Join(d, "x")); !errors.Is(errnoOf(err), syscall.ENOTEMPTY) && !errors.Is(errnoOf(err), syscall.EEXIST) {
		t.Fatalf("rename onto non-empty dir: %v", err)
	}
	// Into its own subtree fails.
	if err := os.Rename(filepath.Join(d, "x"), filepath.Join(d, "x", "y", "z")); !errors.Is(errnoOf(err), syscall.EINVAL) {
		t.Fatalf("rename into own subtree: %v", err)
	}
}

func testUnlinkWhileOpen(t *testing.T, e *env) {
	p := e.path("orphan")
	mustWrite(t, p, []byte("still here"))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat after unlink: %v", err)
	}
	if _, err := f.WriteAt([]byte("STILL"), 0); err != nil {
		t.Fatalf("write to unlinked file: %v", err)
	}
	buf := make([]byte, 10)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "STILL here" {
		t.Fatalf("read unlinked: %q %v", buf, err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Sys().(*syscall.Stat_t).Nlink; n != 0 {
		t.Fatalf("nlink of unlinked open file = %d", n)
	}
	// The name can be reused at once.
	mustWrite(t, p, []byte("new"))
	if got := string(mustRead(t, p)); got != "new" {
		t.Fatalf("reused name: %q", got)
	}
}

func testLinks(t *testing.T, e *env) {
	d := e.path("links")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
	mustWrite(t, a, []byte("shared"))
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	sa, _ := os.Stat(a)
	sb, _ := os.Stat(b)
	if !os.SameFile(sa, sb) || sa.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Fatalf("hard link: same=%v nlink=%d", os.SameFile(sa, sb), sa.Sys().(*syscall.Stat_t).Nlink)
	}
	// A write through one name is seen through the other.
	mustWrite(t, b, []byte("changed"))
	if got := string(mustRead(t, a)); got != "changed" {
		t.Fatalf("through link: %q", got)
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	if sb, _ := os.Stat(b); sb.Sys().(*syscall.Stat_t).Nlink != 1 {
		t.Fatalf("nlink after unlink = %d", sb.Sys().(*syscall.Stat_t).Nlink)
	}
	if err := os.Link(d, filepath.Join(d, "dirlink")); !errors.Is(errnoOf(err), syscall.EPERM) {
		t.Fatalf("hard link to directory: %v", err)
	}

	// Symlinks: relative, absolute, dangling.
	s := filepath.Join(d, "s")
	if err := os.Symlink("b", s); err != nil {
		t.Fatal(err)
	}
	if tgt, err := os.Readlink(s); err != nil || tgt != "b" {
		t.Fatalf("readlink: %q %v", tgt, err)
	}
	if got := string(mustRead(t, s)); got != "changed" {
		t.Fatalf("through symlink: %q", got)
	}
	if st, err := os.Lstat(s); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("lstat symlink: %v %v", st, err)
	}
	long := strings.Repeat("x/", 1000) + "end"
	if err := os.Symlink(long, filepath.Join(d, "long")); err != nil {
		t.Fatal(err)
	}
	if tgt, _ := os.Readlink(filepath.Join(d, "long")); tgt != long {
		t.Fatal("long symlink target changed")
	}
	if err := os.Symlink("nowhere", filepath.Join(d, "dangling")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "dangling")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("dangling: %v", err)
	}
}

func testAttrs(t *testing.T, e *env) {
	p := e.path("attrs")
	mustWrite(t, p, []byte("x"))
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 || !st.Mode().IsRegular() {
		t.Fatalf("chmod: %v", st.Mode())
	}
	if err := os.Chown(p, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if s := st.Sys().(*syscall.Stat_t); s.Uid != 1234 || s.Gid != 5678 {
		t.Fatalf("chown: %d:%d", s.Uid, s.Gid)
	}
	// Explicit times with nanoseconds, then UTIME_NOW for mtime and
	// UTIME_OMIT for atime.
	at := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	mt := time.Date(2002, 3, 4, 5, 6, 7, 891, time.UTC)
	if err := os.Chtimes(p, at, mt); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(p)
	s := st.Sys().(*syscall.Stat_t)
	if !st.ModTime().Equal(mt) || !time.Unix(s.Atim.Unix()).Equal(at) {
		t.Fatalf("utimes: atime %v mtime %v", time.Unix(s.Atim.Unix()), st.ModTime())
	}
	before := time.Now().Add(-time.Second)
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_NOW}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(p)
	s = st.Sys().(*syscall.Stat_t)
	if st.ModTime().Before(before) || !time.Unix(s.Atim.Unix()).Equal(at) {
		t.Fatalf("UTIME_NOW/OMIT: atime %v mtime %v", time.Unix(s.Atim.Unix()), st.ModTime())
	}
	// A write moves mtime forward.
	if err := os.Chtimes(p, at, mt); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p, []byte("yy"))
	if st, _ := os.Stat(p); !st.ModTime().After(mt) || st.Size() != 2 {
		t.Fatalf("write did not update mtime/size: %v %d", st.ModTime(), st.Size())
	}
	// Permissions are enforced by the kernel (default_permissions) for
	// other users.
	if os.Geteuid() == 0 {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 0, 0); err != nil {
			t.Fatal(err)
		}
		// Set-group-ID directories: new nodes take the directory's
		// group, new directories inherit the bit.
		sg := e.path("sgid")
		if err := os.Mkdir(sg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(sg, 0, 4321); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(sg, 0o2775); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(sg, "f"), nil)
		if err := os.Mkdir(filepath.Join(sg, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"f", "d"} {
			st, err := os.Stat(filepath.Join(sg, name))
			if err != nil {
				t.Fatal(err)
			}
			if gid := st.Sys().(*syscall.Stat_t).Gid; gid != 4321 {
				t.Errorf("%s in a set-group-ID directory: gid %d, want 4321", name, gid)
			}
			if name == "d" && st.Mode()&os.ModeSetgid == 0 {
				t.Errorf("directory in a set-group-ID directory lacks the bit: %v", st.Mode())
			}
		}
		// A mknod'ed FIFO keeps its type.
		fifo := e.path("fifo")
		if err := unix.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("fifo: %v %v", st, err)
		}
	}
}

func testXattrs(t *testing.T, e *env) {
	p := e.path("xattr")
	mustWrite(t, p, nil)
	if err := unix.Setxattr(p, "user.a", []byte("alpha"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.b", []byte(""), 0); err != nil {
		t.Fatal(err)
	}
	// Size probe, exact read, too small a buffer.
	if n, err := unix.Getxattr(p, "user.a", nil); err != nil || n != 5 {
		t.Fatalf("size probe: %d %v", n, err)
	}
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(p, "user.a", buf); err != nil || string(buf[:n]) != "alpha" {
		t.Fatalf("getxattr: %q %v", buf[:n], err)
	}
	if _, err := unix.Getxattr(p, "user.a", make([]byte, 2)); err != unix.ERANGE {
		t.Fatalf("small buffer: %v", err)
	}
	if _, err := unix.Getxattr(p, "user.none", buf); err != unix.ENODATA {
		t.Fatalf("missing attr: %v", err)
	}
	n, err := unix.Listxattr(p, buf)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	sort.Strings(names)
	if !slices.Equal(names, []string{"user.a", "user.b"}) {
		t.Fatalf("listxattr: %q", names)
	}
	if err := unix.Setxattr(p, "user.a", []byte("x"), unix.XATTR_CREATE); err != unix.EEXIST {
		t.Fatalf("XATTR_CREATE on existing: %v", err)
	}
	if err := unix.Setxattr(p, "user.c", []byte("x"), unix.XATTR_REPLACE); err != unix.ENODATA {
		t.Fatalf("XATTR_REPLACE on missing: %v", err)
	}
	if err := unix.Removexattr(p, "user.a"); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(p, "user.a", buf); err != unix.ENODATA {
		t.Fatalf("removed attr: %v", err)
	}
	if err := unix.Removexattr(p, "user.a"); err != unix.ENODATA {
		t.Fatalf("remove twice: %v", err)
	}
}

func testStatfsFsync(t *testing.T, e *env) {
	var s unix.Statfs_t
	if err := unix.Statfs(e.mnt, &s); err != nil {
		t.Fatal(err)
	}
	if s.Bsize == 0 || s.Blocks == 0 || s.Namelen != 255 {
		t.Fatalf("statfs: %+v", s)
	}
	f, err := os.Create(e.path("synced"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(pattern(200<<10, 3)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if _, err := f.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatalf("fdatasync: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of directory: %v", err)
	}
	d.Close()
}

func testDirs(t *testing.T, e *env) {
	d := e.path("dirs")
	if err := os.MkdirAll(filepath.Join(d, "a", "b"), 0o750); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(d, "a")); !st.IsDir() || st.Mode().Perm() != 0o750 {
		t.Fatalf("mkdir: %v", st.Mode())
	}
	if err := os.Mkdir(filepath.Join(d, "a"), 0o755); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("mkdir existing: %v", err)
	}
	if err := syscall.Rmdir(filepath.Join(d, "a")); err != syscall.ENOTEMPTY {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	mustWrite(t, filepath.Join(d, "f"), nil)
	if err := syscall.Rmdir(filepath.Join(d, "f")); err != syscall.ENOTDIR {
		t.Fatalf("rmdir file: %v", err)
	}
	if err := syscall.Unlink(filepath.Join(d, "a")); err != syscall.EISDIR {
		t.Fatalf("unlink dir: %v", err)
	}
	if err := os.Remove(filepath.Join(d, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d, "a")); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "f" {
		t.Fatalf("readdir after removes: %v", ents)
	}
}

func testMmap(t *testing.T, e *env) {
	p := e.path("mmap")
	mustWrite(t, p, make([]byte, 8192))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap shared writable: %v", err)
	}
	copy(m[4000:], "mapped write")
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		t.Fatalf("msync: %v", err)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	buf := make([]byte, 12)
	if _, err := g.ReadAt(buf, 4000); err != nil || string(buf) != "mapped write" {
		t.Fatalf("read back mapped write: %q %v", buf, err)
	}
}

func testFallocate(t *testing.T, e *env) {
	f, err := os.Create(e.path("falloc"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
		t.Fatalf("fallocate mode 0: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 1<<20 {
		t.Fatalf("size after fallocate %d", st.Size())
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 4<<20); err != nil {
		t.Fatalf("fallocate KEEP_SIZE: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 1<<20 {
		t.Fatalf("KEEP_SIZE changed size to %d", st.Size())
	}
	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "abc\x00" {
		t.Fatalf("content after fallocate: %q %v", buf, err)
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 2); err != unix.EOPNOTSUPP {
		t.Fatalf("punch hole: %v, want EOPNOTSUPP", err)
	}
}

// testConcurrentWriters writes many files from several goroutines at once;
// the adapter serves requests concurrently.
func testConcurrentWriters(t *testing.T, e *env) {
	d := e.path("conc")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				p := filepath.Join(d, fmt.Sprintf("w%d-%d", w, i))
				want := pattern(1000+i*37, byte(w))
				if err := os.WriteFile(p, want, 0o644); err != nil {
					errs <- err
					return
				}
				got, err := os.ReadFile(p)
				if err != nil || !bytes.Equal(got, want) {
					errs <- fmt.Errorf("%s: %v (content equal: %v)", p, err, bytes.Equal(got, want))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// hashTree maps every path under root to a description of its type,
// mode, size, link target or content hash, and xattrs.
// With looseMtimes, regular files' mtimes are left out.
func hashTree(t *testing.T, root string, looseMtimes bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		s := st.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v uid=%d gid=%d nlink=%d", st.Mode(), s.Uid, s.Gid, s.Nlink)
		if !looseMtimes || !st.Mode().IsRegular() {
			desc += fmt.Sprintf(" mtime=%d", st.ModTime().UnixNano())
		}
		switch {
		case st.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" size=%d sha256=%s", st.Size(), hex.EncodeToString(h.Sum(nil)))
		case st.Mode()&os.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + tgt
		}
		if st.Mode()&os.ModeSymlink == 0 && st.Mode()&os.ModeNamedPipe == 0 {
			buf := make([]byte, 4096)
			n, err := unix.Listxattr(p, buf)
			if err != nil {
				return fmt.Errorf("listxattr %s: %w", p, err)
			}
			names := strings.Split(string(buf[:n]), "\x00")
			sort.Strings(names)
			for _, name := range names {
				if name == "" {
					continue
				}
				v := make([]byte, 4096)
				m, err := unix.Getxattr(p, name, v)
				if err != nil {
					return fmt.Errorf("getxattr %s %s: %w", p, name, err)
				}
				desc += fmt.Sprintf(" %s=%q", name, v[:m])
			}
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equalTrees(t *testing.T, a, b map[string]string) bool {
	t.Helper()
	ok := true
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s: before %q, after %q", k, v, b[k])
			ok = false
		}
	}
	for k, v := range b {
		if _, seen := a[k]; !seen {
			t.Errorf("%s: appeared after remount: %q", k, v)
			ok = false
		}
	}
	return ok
}
