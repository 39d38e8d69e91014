package vfs_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	. "wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
)

// The conformance suite runs every FS implementation through the same
// checks, so that MemFS cannot drift from the OS semantics the engine is
// written against (restic's internal/backend/test does this for backends).

type fsUnderTest struct {
	name string
	os   bool // backed by the OS: files have real descriptors
	// new returns a fresh FS and an existing, empty directory in it.
	new func(t *testing.T) (FS, string)
}

var implementations = []fsUnderTest{
	{"os", true, func(t *testing.T) (FS, string) { return Default, t.TempDir() }},
	{"mem", false, func(t *testing.T) (FS, string) {
		m := NewCrashableMem()
		if err := m.MkdirAll("/test", 0o755); err != nil {
			t.Fatal(err)
		}
		return m, "/test"
	}},
	// errorfs with an injector that never fires must be invisible.
	{"errorfs-mem", false, func(t *testing.T) (FS, string) {
		m := NewCrashableMem()
		if err := m.MkdirAll("/test", 0o755); err != nil {
			t.Fatal(err)
		}
		return errorfs.Wrap(m, errorfs.Rules()), "/test"
	}},
	{"errorfs-os", true, func(t *testing.T) (FS, string) {
		return errorfs.Wrap(Default, errorfs.Rules()), t.TempDir()
	}},
}

var conformance = []struct {
	name string
	fn   func(t *testing.T, fsys FS, dir string)
}{
	{"CreateWriteRead", testCreateWriteRead},
	{"CreateTruncates", testCreateTruncates},
	{"CreateExcl", testCreateExcl},
	{"OpenMissing", testOpenMissing},
	{"ReadOnlyRejectsWrite", testReadOnlyRejectsWrite},
	{"ReadAtWriteAt", testReadAtWriteAt},
	{"Seek", testSeek},
	{"Truncate", testTruncate},
	{"RenameOverExisting", testRenameOverExisting},
	{"RenameDirRules", testRenameDirRules},
	{"Link", testLink},
	{"Remove", testRemove},
	{"RemoveAll", testRemoveAll},
	{"ListSorted", testListSorted},
	{"MkdirAllStat", testMkdirAllStat},
	{"Chtimes", testChtimes},
	{"LockExclusive", testLockExclusive},
	{"LockDirectory", testLockDirectory},
	{"OpenDirSync", testOpenDirSync},
	{"Publish", testPublish},
	{"PublishWriteErrorRemovesTemp", testPublishWriteError},
	{"ClosedFile", testClosedFile},
	{"ConcurrentPublish", testConcurrentPublish},
	{"StatfsSyncFS", testStatfsSyncFS},
	{"StartWriteback", testStartWriteback},
}

func TestConformance(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			for _, c := range conformance {
				t.Run(c.name, func(t *testing.T) {
					fsys, dir := impl.new(t)
					c.fn(t, fsys, dir)
				})
			}
			t.Run("Fd", func(t *testing.T) {
				fsys, dir := impl.new(t)
				f, err := fsys.Create(filepath.Join(dir, "a"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if got := f.Fd() != ^uintptr(0); got != impl.os {
					t.Fatalf("Fd() = %#x; want a real descriptor: %v", f.Fd(), impl.os)
				}
			})
		})
	}
}

func writeFile(t *testing.T, fsys FS, name, data string) {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, fsys FS, name string) string {
	t.Helper()
	f, err := fsys.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantList(t *testing.T, fsys FS, dir string, want ...string) {
	t.Helper()
	got, err := fsys.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List(%s) = %q, want %q", dir, got, want)
	}
}

func testCreateWriteRead(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "a")
	writeFile(t, fsys, p, "hello world")
	if got := readFile(t, fsys, p); got != "hello world" {
		t.Fatalf("read %q", got)
	}
	fi, err := fsys.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 11 || fi.IsDir() || fi.Name() != "a" {
		t.Fatalf("Stat = size %d dir %v name %q", fi.Size(), fi.IsDir(), fi.Name())
	}
	f, err := fsys.OpenReadWrite(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("HELLO")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(f, buf); err != nil || string(buf) != " world" {
		t.Fatalf("read after write: %q %v", buf, err)
	}
	if n, err := f.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read at EOF: %d %v, want 0 EOF", n, err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 11 {
		t.Fatalf("File.Stat: %v %v", fi, err)
	}
}

func testCreateTruncates(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "a")
	writeFile(t, fsys, p, "long contents")
	writeFile(t, fsys, p, "short")
	if got := readFile(t, fsys, p); got != "short" {
		t.Fatalf("read %q, want short", got)
	}
	if _, err := fsys.Create(filepath.Join(dir, "missing", "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Create in missing dir: %v, want ErrNotExist", err)
	}
}

func testCreateExcl(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "a")
	f, err := fsys.CreateExcl(p, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := fsys.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("Stat after CreateExcl(0600): %v %v", fi, err)
	}
	if _, err := fsys.CreateExcl(p, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second CreateExcl: %v, want ErrExist", err)
	}
}

func testOpenMissing(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "nope")
	if _, err := fsys.Open(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open: %v", err)
	}
	if _, err := fsys.OpenReadWrite(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenReadWrite: %v", err)
	}
	if _, err := fsys.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat: %v", err)
	}
	if _, err := fsys.List(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("List: %v", err)
	}
	writeFile(t, fsys, filepath.Join(dir, "file"), "x")
	if _, err := fsys.OpenDir(filepath.Join(dir, "file")); err == nil {
		t.Fatal("OpenDir of a regular file succeeded")
	}
	if _, err := fsys.Stat(filepath.Join(dir, "file", "sub")); err == nil {
		t.Fatal("Stat below a regular file succeeded")
	}
}

func testReadOnlyRejectsWrite(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "a")
	writeFile(t, fsys, p, "x")
	f, err := fsys.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("y")); err == nil {
		t.Fatal("Write on a read-only file succeeded")
	}
	if err := f.Truncate(0); err == nil {
		t.Fatal("Truncate on a read-only file succeeded")
	}
	if got := readFile(t, fsys, p); got != "x" {
		t.Fatalf("content changed to %q", got)
	}
}

func testReadAtWriteAt(t *testing.T, fsys FS, dir string) {
	f, err := fsys.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("world"), 6); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 11)
	if n, err := f.ReadAt(buf, 0); n != 11 || err != nil {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	if want := "hello\x00world"; string(buf) != want {
		t.Fatalf("ReadAt = %q, want %q (hole reads as zero)", buf, want)
	}
	n, err := f.ReadAt(buf, 8)
	if n != 3 || err != io.EOF || string(buf[:3]) != "rld" {
		t.Fatalf("ReadAt past end = %d %v %q, want 3 EOF rld", n, err, buf[:n])
	}
	// WriteAt and ReadAt do not move the offset.
	if pos, _ := f.Seek(0, io.SeekCurrent); pos != 0 {
		t.Fatalf("offset = %d after WriteAt, want 0", pos)
	}
}

func testSeek(t *testing.T, fsys FS, dir string) {
	f, err := fsys.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off    int64
		whence int
		want   int64
	}{{2, io.SeekStart, 2}, {3, io.SeekCurrent, 5}, {-1, io.SeekEnd, 9}, {5, io.SeekEnd, 15}} {
		got, err := f.Seek(c.off, c.whence)
		if err != nil || got != c.want {
			t.Fatalf("Seek(%d, %d) = %d, %v, want %d", c.off, c.whence, got, err, c.want)
		}
	}
	if _, err := f.Seek(-1, io.SeekStart); err == nil {
		t.Fatal("Seek to a negative offset succeeded")
	}
	// Writing past the end after a seek leaves a zero hole.
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != 16 {
		t.Fatalf("size %d, want 16", fi.Size())
	}
	f.Seek(0, io.SeekStart)
	b, _ := io.ReadAll(f)
	if want := "0123456789\x00\x00\x00\x00\x00x"; string(b) != want {
		t.Fatalf("content %q, want %q", b, want)
	}
}

func testTruncate(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "a")
	writeFile(t, fsys, p, "0123456789")
	f, err := fsys.OpenReadWrite(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(4); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, fsys, p), "0123\x00\x00\x00\x00"; got != want {
		t.Fatalf("after truncate down and up: %q, want %q", got, want)
	}
}

func testRenameOverExisting(t *testing.T, fsys FS, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeFile(t, fsys, a, "new")
	writeFile(t, fsys, b, "old")
	if err := fsys.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	wantList(t, fsys, dir, "b")
	if got := readFile(t, fsys, b); got != "new" {
		t.Fatalf("b = %q", got)
	}
	if err := fsys.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Rename(b, filepath.Join(dir, "sub", "c")); err != nil {
		t.Fatal(err)
	}
	wantList(t, fsys, dir, "sub")
	wantList(t, fsys, filepath.Join(dir, "sub"), "c")
	if err := fsys.Rename(filepath.Join(dir, "missing"), b); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Rename of missing: %v", err)
	}
}

func testRenameDirRules(t *testing.T, fsys FS, dir string) {
	d1, d2 := filepath.Join(dir, "d1"), filepath.Join(dir, "d2")
	for _, d := range []string{d1, d2} {
		if err := fsys.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, fsys, filepath.Join(d1, "f"), "x")
	writeFile(t, fsys, filepath.Join(dir, "file"), "y")
	if err := fsys.Rename(filepath.Join(dir, "file"), d2); err == nil {
		t.Fatal("renaming a file over a directory succeeded")
	}
	if err := fsys.Rename(d2, d1); err == nil {
		t.Fatal("renaming a directory over a non-empty directory succeeded")
	}
	if err := fsys.Rename(d1, filepath.Join(d1, "inner")); err == nil {
		t.Fatal("renaming a directory into itself succeeded")
	}
	if err := fsys.Rename(d1, d2); err != nil { // over an empty directory
		t.Fatal(err)
	}
	wantList(t, fsys, dir, "d2", "file")
	wantList(t, fsys, d2, "f")
}

func testLink(t *testing.T, fsys FS, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeFile(t, fsys, a, "shared")
	if err := fsys.Link(a, b); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Link(a, b); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Link over existing: %v, want ErrExist", err)
	}
	f, err := fsys.OpenReadWrite(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("S"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := readFile(t, fsys, a); got != "Shared" {
		t.Fatalf("a = %q after writing through link b", got)
	}
	if err := fsys.Remove(a); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, fsys, b); got != "Shared" {
		t.Fatalf("b = %q after removing a", got)
	}
}

func testRemove(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "a")
	writeFile(t, fsys, p, "x")
	f, err := fsys.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := fsys.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Remove: %v", err)
	}
	if b, err := io.ReadAll(f); err != nil || string(b) != "x" {
		t.Fatalf("read of an open, removed file: %q %v", b, err)
	}
	if err := fsys.Remove(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("second Remove: %v", err)
	}
	sub := filepath.Join(dir, "sub")
	fsys.MkdirAll(sub, 0o755)
	writeFile(t, fsys, filepath.Join(sub, "f"), "x")
	if err := fsys.Remove(sub); err == nil {
		t.Fatal("Remove of a non-empty directory succeeded")
	}
	fsys.Remove(filepath.Join(sub, "f"))
	if err := fsys.Remove(sub); err != nil {
		t.Fatal(err)
	}
	wantList(t, fsys, dir)
}

func testRemoveAll(t *testing.T, fsys FS, dir string) {
	tree := filepath.Join(dir, "t")
	fsys.MkdirAll(filepath.Join(tree, "x", "y"), 0o755)
	writeFile(t, fsys, filepath.Join(tree, "x", "y", "f"), "1")
	writeFile(t, fsys, filepath.Join(tree, "g"), "2")
	if err := fsys.RemoveAll(tree); err != nil {
		t.Fatal(err)
	}
	wantList(t, fsys, dir)
	if err := fsys.RemoveAll(tree); err != nil {
		t.Fatalf("RemoveAll of a missing path: %v", err)
	}
}

func testListSorted(t *testing.T, fsys FS, dir string) {
	for _, n := range []string{"c", "a", "B", "b", "10", "9"} {
		writeFile(t, fsys, filepath.Join(dir, n), n)
	}
	fsys.MkdirAll(filepath.Join(dir, "d"), 0o755)
	wantList(t, fsys, dir, "10", "9", "B", "a", "b", "c", "d")
	if _, err := fsys.List(filepath.Join(dir, "a")); err == nil {
		t.Fatal("List of a regular file succeeded")
	}
}

func testMkdirAllStat(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "a", "b", "c")
	if err := fsys.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.MkdirAll(p, 0o755); err != nil {
		t.Fatalf("MkdirAll of an existing dir: %v", err)
	}
	fi, err := fsys.Stat(p)
	if err != nil || !fi.IsDir() || fi.Name() != "c" {
		t.Fatalf("Stat = %v, %v", fi, err)
	}
	writeFile(t, fsys, filepath.Join(dir, "f"), "x")
	if err := fsys.MkdirAll(filepath.Join(dir, "f", "g"), 0o755); err == nil {
		t.Fatal("MkdirAll below a regular file succeeded")
	}
}

func testChtimes(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "a")
	writeFile(t, fsys, p, "x")
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := fsys.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
	fi, err := fsys.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(when) {
		t.Fatalf("mtime %v, want %v", fi.ModTime(), when)
	}
	if err := fsys.Chtimes(filepath.Join(dir, "nope"), when, when); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Chtimes of missing: %v", err)
	}
}

func testLockExclusive(t *testing.T, fsys FS, dir string) {
	p := filepath.Join(dir, "lock")
	l, err := fsys.Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fsys.Lock(p)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte(p)) {
		t.Fatalf("lock error %q does not name the file", err)
	}
	if _, err := fsys.Stat(p); err != nil {
		t.Fatalf("lock file not created: %v", err)
	}
	other, err := fsys.Lock(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatalf("Lock of another name: %v", err)
	}
	other.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := fsys.Lock(p)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	l2.Close()
}

// testLockDirectory: an existing directory is locked itself (nothing is
// created in it), and LockAll of a directory and a file inside it stays
// exclusive after the file is removed: a second LockAll fails on the
// directory.
func testLockDirectory(t *testing.T, fsys FS, dir string) {
	d := filepath.Join(dir, "ws")
	if err := fsys.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(d, "lock")
	l, err := LockAll(fsys, d, f)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := fsys.Stat(d); err != nil || !st.IsDir() {
		t.Fatalf("locked directory: %v %v", st, err)
	}
	if err := fsys.Remove(f); err != nil {
		t.Fatal(err)
	}
	if _, err := LockAll(fsys, d, f); !errors.Is(err, ErrLocked) {
		t.Fatalf("second LockAll after the lock file was removed: %v, want ErrLocked", err)
	}
	if _, err := fsys.Stat(f); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused LockAll must not keep what it took: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockAll(fsys, d, f)
	if err != nil {
		t.Fatalf("LockAll after Close: %v", err)
	}
	l2.Close()
}

func testOpenDirSync(t *testing.T, fsys FS, dir string) {
	writeFile(t, fsys, filepath.Join(dir, "a"), "x")
	d, err := fsys.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		t.Fatalf("Stat of dir handle: %v %v", fi, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(fsys, dir); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(fsys, filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SyncDir of missing: %v", err)
	}
}

func testPublish(t *testing.T, fsys FS, dir string) {
	final := filepath.Join(dir, "obj")
	for i, sync := range []bool{false, true} {
		want := []string{"first", "second"}[i]
		err := Publish(fsys, final, sync, func(f File) error {
			_, err := f.Write([]byte(want))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, fsys, final); got != want {
			t.Fatalf("published %q, want %q", got, want)
		}
		wantList(t, fsys, dir, "obj")
	}
	err := Publish(fsys, filepath.Join(dir, "missing", "obj"), true, func(File) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Publish into a missing dir: %v", err)
	}
}

func testPublishWriteError(t *testing.T, fsys FS, dir string) {
	boom := errors.New("boom")
	final := filepath.Join(dir, "obj")
	err := Publish(fsys, final, true, func(f File) error {
		f.Write([]byte("partial"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Publish error %v does not wrap the write error", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte(final)) {
		t.Fatalf("Publish error %q does not name %s", err, final)
	}
	wantList(t, fsys, dir) // no temp left, no final
}

func testClosedFile(t *testing.T, fsys FS, dir string) {
	f, err := fsys.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if err := f.Sync(); err == nil {
		t.Fatal("Sync after Close succeeded")
	}
	if err := f.Close(); err == nil {
		t.Fatal("second Close succeeded")
	}
}

func testConcurrentPublish(t *testing.T, fsys FS, dir string) {
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Publish(fsys, filepath.Join(dir, string(rune('a'+i))), true, func(f File) error {
				_, err := f.Write(bytes.Repeat([]byte{byte(i)}, 1000))
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	wantList(t, fsys, dir, "a", "b", "c", "d", "e", "f", "g", "h")
}

func testStatfsSyncFS(t *testing.T, fsys FS, dir string) {
	st, err := fsys.Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.BlockSize == 0 || st.Blocks == 0 || st.BlocksAvail > st.Blocks {
		t.Fatalf("implausible Statfs %+v", st)
	}
	if err := fsys.SyncFS(dir); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_ = f.Fd() // must not panic; the value is checked per implementation in TestConformance
}

// testStartWriteback: starting writeback succeeds on a written file (open
// for writing or read-only) and on a directory, changes nothing visible,
// and fails on a closed file.
func testStartWriteback(t *testing.T, fsys FS, dir string) {
	name := filepath.Join(dir, "a")
	data := bytes.Repeat([]byte("writeback"), 10000)
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.StartWriteback(); err != nil {
		t.Fatalf("StartWriteback of a written file: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.StartWriteback(); err == nil {
		t.Fatal("StartWriteback after Close succeeded")
	}
	ro, err := fsys.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.StartWriteback(); err != nil {
		t.Fatalf("StartWriteback on a read-only descriptor: %v", err)
	}
	ro.Close()
	d, err := fsys.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartWriteback(); err != nil {
		t.Fatalf("StartWriteback on a directory: %v", err)
	}
	d.Close()
	if got := readFile(t, fsys, name); got != string(data) {
		t.Fatalf("after StartWriteback the file reads %d bytes, want %d", len(got), len(data))
	}
}
