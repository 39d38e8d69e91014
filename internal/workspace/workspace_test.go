package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"wsfs/internal/namespace"
	"wsfs/internal/vfs"
)

// buildSample makes one of everything and returns the inode of /d.
func buildSample(t *testing.T, w *Workspace) {
	t.Helper()
	d := A(t)(w.Mkdir(RootIno, "d", 0o750, me))
	sub := A(t)(w.Mkdir(d.Ino, "sub", 0o700, Caller{Uid: 5, Gid: 6}))
	f := writeFile(t, w, d.Ino, "small", []byte("hello, world"))
	writeFile(t, w, sub.Ino, "big", bytes.Repeat([]byte("0123456789abcdef"), 10000))
	writeFile(t, w, RootIno, "empty", nil)
	A(t)(w.Symlink(RootIno, "sl", "d/small", me))
	A(t)(w.Mknod(RootIno, "fifo", syscall.S_IFIFO|0o600, 0, me))
	A(t)(w.Mknod(RootIno, "chr", syscall.S_IFCHR|0o600, 0x0501, me))
	A(t)(w.Link(f.Ino, RootIno, "hardlink"))
	noErr(t, w.SetXattr(f.Ino, "user.color", []byte("blue"), 0))
	noErr(t, w.SetXattr(f.Ino, "user.gone", []byte("x"), 0))
	noErr(t, w.RemoveXattr(f.Ino, "user.gone"))
	mode, mt := uint32(0o640), namespace.FromNs(1234567890)
	A(t)(w.SetAttr(f.Ino, SetAttrIn{Mode: &mode, Mtime: &mt}))
	gone := A(t)(w.Mkdir(RootIno, "gone", 0o755, me))
	writeFile(t, w, gone.Ino, "x", []byte("x"))
	noErr(t, w.Unlink(gone.Ino, "x"))
	noErr(t, w.Rmdir(RootIno, "gone"))
	writeFile(t, w, RootIno, "tmp", []byte("temp"))
	noErr(t, w.Rename(RootIno, "tmp", d.Ino, "renamed", 0))
}

func TestReopenIdentical(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		w := e.open()
		buildSample(t, w)
		want := dumpOf(w)
		attrs := map[string]Attr{}
		for _, p := range []string{"d", "d/small", "d/sub/big", "sl", "chr"} {
			attrs[p] = lookupPath(t, w, p)
		}
		noErr(t, w.Close())
		for _, s := range []string{"/d/small f 0640 1000:1000 n2", "/chr c 0600 1000:1000 n1 rdev=1281", "/sl l 0777", "/fifo p 0600", "xattrs=user.color=626c7565;", "/d/sub d 0700 5:6 n2", "/d/renamed"} {
			if !strings.Contains(want, s) {
				t.Errorf("dump lacks %q:\n%s", s, want)
			}
		}
		w2 := e.open()
		defer w2.Close()
		if got := dumpOf(w2); got != want {
			t.Fatalf("reopened dump differs:\n%s\nwant:\n%s", got, want)
		}
		for p, a := range attrs {
			if got := lookupPath(t, w2, p); got != a {
				t.Errorf("%s: attrs after reopen %+v, want %+v", p, got, a)
			}
		}
		eq(t, readAll(t, w2, lookupPath(t, w2, "d/sub/big").Ino), bytes.Repeat([]byte("0123456789abcdef"), 10000), "big")
		if a := lookupPath(t, w2, "d/small"); a.Mtime != namespace.FromNs(1234567890) {
			t.Errorf("mtime %v after reopen", a.Mtime)
		}
	})
}

// lookupPath resolves a slash-separated path from the root.
func lookupPath(t *testing.T, w *Workspace, p string) Attr {
	t.Helper()
	a := A(t)(w.GetAttr(RootIno))
	for _, name := range strings.Split(p, "/") {
		if name == "" {
			continue
		}
		a = A(t)(w.Lookup(a.Ino, name))
	}
	return a
}

func TestErrors(t *testing.T) {
	e := memEnv(t)
	w := e.open()
	defer w.Close()
	d := A(t)(w.Mkdir(RootIno, "d", 0o755, me))
	sub := A(t)(w.Mkdir(d.Ino, "sub", 0o755, me))
	f := writeFile(t, w, d.Ino, "f", []byte("data"))
	writeFile(t, w, sub.Ino, "inner", nil)
	e2 := A(t)(w.Mkdir(RootIno, "e", 0o755, me))
	long := strings.Repeat("x", 256)
	for _, tc := range []struct {
		name  string
		err   error
		errno syscall.Errno
	}{
		{"lookup missing", errOf(w.Lookup(RootIno, "nope")), syscall.ENOENT},
		{"lookup in file", errOf(w.Lookup(f.Ino, "x")), syscall.ENOTDIR},
		{"lookup long", errOf(w.Lookup(RootIno, long)), syscall.ENAMETOOLONG},
		{"getattr missing", errOf(w.GetAttr(999)), syscall.ENOENT},
		{"create exists", errOf(w.Create(d.Ino, "f", 0o644, me)), syscall.EEXIST},
		{"mkdir exists", errOf(w.Mkdir(d.Ino, "sub", 0o755, me)), syscall.EEXIST},
		{"create in file", errOf(w.Create(f.Ino, "x", 0o644, me)), syscall.ENOTDIR},
		{"create slash", errOf(w.Create(d.Ino, "a/b", 0o644, me)), syscall.EINVAL},
		{"create long", errOf(w.Create(d.Ino, long, 0o644, me)), syscall.ENAMETOOLONG},
		{"mknod dir", errOf(w.Mknod(d.Ino, "x", syscall.S_IFDIR|0o755, 0, me)), syscall.EINVAL},
		{"symlink empty", errOf(w.Symlink(d.Ino, "x", "", me)), syscall.ENOENT},
		{"readlink file", errOf2(w.Readlink(f.Ino)), syscall.EINVAL},
		{"link dir", errOf(w.Link(sub.Ino, RootIno, "x")), syscall.EPERM},
		{"link exists", errOf(w.Link(f.Ino, d.Ino, "sub")), syscall.EEXIST},
		{"unlink dir", w.Unlink(d.Ino, "sub"), syscall.EISDIR},
		{"unlink missing", w.Unlink(d.Ino, "nope"), syscall.ENOENT},
		{"rmdir file", w.Rmdir(d.Ino, "f"), syscall.ENOTDIR},
		{"rmdir nonempty", w.Rmdir(d.Ino, "sub"), syscall.ENOTEMPTY},
		{"rmdir dot", w.Rmdir(d.Ino, "."), syscall.EINVAL},
		{"rename missing", w.Rename(d.Ino, "nope", d.Ino, "x", 0), syscall.ENOENT},
		{"rename into own subtree", w.Rename(RootIno, "d", sub.Ino, "x", 0), syscall.EINVAL},
		{"rename into itself", w.Rename(RootIno, "d", d.Ino, "x", 0), syscall.EINVAL},
		{"rename dir over file", w.Rename(d.Ino, "sub", d.Ino, "f", 0), syscall.ENOTDIR},
		{"rename file over dir", w.Rename(d.Ino, "f", RootIno, "e", 0), syscall.EISDIR},
		{"rename over nonempty", w.Rename(RootIno, "e", d.Ino, "sub", 0), syscall.ENOTEMPTY},
		{"rename noreplace", w.Rename(RootIno, "e", RootIno, "d", unix.RENAME_NOREPLACE), syscall.EEXIST},
		{"rename exchange missing", w.Rename(RootIno, "e", RootIno, "zz", unix.RENAME_EXCHANGE), syscall.ENOENT},
		{"rename both flags", w.Rename(RootIno, "e", RootIno, "d", unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE), syscall.EINVAL},
		{"exchange into own subtree", w.Rename(RootIno, "d", sub.Ino, "inner", unix.RENAME_EXCHANGE), syscall.EINVAL},
		{"getxattr missing", errOf2(w.GetXattr(f.Ino, "user.no")), syscall.ENODATA},
		{"removexattr missing", w.RemoveXattr(f.Ino, "user.no"), syscall.ENODATA},
		{"setxattr replace missing", w.SetXattr(f.Ino, "user.no", nil, 2), syscall.ENODATA},
		{"open dir for write", errOf2(w.OpenFile(d.Ino, syscall.O_WRONLY)), syscall.EISDIR},
		{"truncate dir", errOf(w.SetAttr(d.Ino, SetAttrIn{Size: new(uint64)})), syscall.EISDIR},
		{"readdir file", errOf2(w.ReadDir(f.Ino)), syscall.ENOTDIR},
	} {
		t.Run(tc.name, func(t *testing.T) { mustErrno(t, tc.err, tc.errno) })
	}
	noErr(t, w.SetXattr(f.Ino, "user.a", []byte("1"), 0))
	mustErrno(t, w.SetXattr(f.Ino, "user.a", []byte("2"), 1), syscall.EEXIST)
	noErr(t, w.SetXattr(f.Ino, "user.a", []byte("3"), 2))
	if v, _ := w.GetXattr(f.Ino, "user.a"); string(v) != "3" {
		t.Fatalf("xattr %q", v)
	}
	h := H(t)(w.OpenFile(f.Ino, syscall.O_RDONLY))
	_, err := h.WriteAt([]byte("x"), 0)
	mustErrno(t, err, syscall.EBADF)
	noErr(t, h.Release())
	_ = e2
	if err := w.tree.Check(); err != nil {
		t.Fatal(err)
	}
}

func errOf[T any](_ T, err error) error  { return err }
func errOf2[T any](_ T, err error) error { return err }

func TestRenameCases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
		flags    uint32
		want     []string // paths that must exist afterwards with their content ("" for dirs)
		gone     []string
	}{
		{"simple", "a/f1", "a/new", 0, []string{"a/new=one"}, []string{"a/f1"}},
		{"replace file", "a/f1", "b/f2", 0, []string{"b/f2=one"}, []string{"a/f1"}},
		{"cross dir", "a/f1", "b/moved", 0, []string{"b/moved=one", "b/f2=two"}, []string{"a/f1"}},
		{"dir across", "a", "b/a", 0, []string{"b/a/f1=one"}, []string{"a"}},
		{"dir over empty dir", "a", "empty", 0, []string{"empty/f1=one"}, []string{"a"}},
		{"exchange files", "a/f1", "b/f2", unix.RENAME_EXCHANGE, []string{"a/f1=two", "b/f2=one"}, nil},
		{"exchange file and dir", "a/f1", "empty", unix.RENAME_EXCHANGE, []string{"empty=one", "a/f1/"}, nil},
		{"exchange dirs", "a", "b", unix.RENAME_EXCHANGE, []string{"b/f1=one", "a/f2=two"}, nil},
		{"noreplace ok", "a/f1", "a/x", unix.RENAME_NOREPLACE, []string{"a/x=one"}, []string{"a/f1"}},
		{"hard link onto itself", "a/f1", "a/link", 0, []string{"a/f1=one", "a/link=one"}, nil},
		{"same name", "a/f1", "a/f1", 0, []string{"a/f1=one"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := memEnv(t)
			w := e.open()
			a := A(t)(w.Mkdir(RootIno, "a", 0o755, me))
			b := A(t)(w.Mkdir(RootIno, "b", 0o755, me))
			A(t)(w.Mkdir(RootIno, "empty", 0o755, me))
			f1 := writeFile(t, w, a.Ino, "f1", []byte("one"))
			writeFile(t, w, b.Ino, "f2", []byte("two"))
			A(t)(w.Link(f1.Ino, a.Ino, "link"))
			fromDir, fromName := splitPath(t, w, tc.from)
			toDir, toName := splitPath(t, w, tc.to)
			noErr(t, w.Rename(fromDir, fromName, toDir, toName, tc.flags))
			check := func(w *Workspace) {
				for _, p := range tc.want {
					path, content, isFile := strings.Cut(p, "=")
					if !isFile {
						if lookupPath(t, w, strings.TrimSuffix(path, "/")).Mode&syscall.S_IFMT != syscall.S_IFDIR {
							t.Fatalf("%s is not a directory", path)
						}
						continue
					}
					eq(t, readAll(t, w, lookupPath(t, w, path).Ino), []byte(content), path)
				}
				for _, p := range tc.gone {
					dir, name := splitPath(t, w, p)
					mustErrno(t, errOf(w.Lookup(dir, name)), syscall.ENOENT)
				}
				if err := w.tree.Check(); err != nil {
					t.Fatal(err)
				}
			}
			check(w)
			want := dumpOf(w)
			noErr(t, w.Close())
			w = e.open()
			defer w.Close()
			if got := dumpOf(w); got != want {
				t.Fatalf("after reopen:\n%s\nwant:\n%s", got, want)
			}
			check(w)
		})
	}
}

func splitPath(t *testing.T, w *Workspace, p string) (Ino, string) {
	dir, name := filepath.Split(p)
	return lookupPath(t, w, dir).Ino, name
}

func TestReadDir(t *testing.T) {
	e := memEnv(t)
	w := e.open()
	defer w.Close()
	d := A(t)(w.Mkdir(RootIno, "d", 0o755, me))
	const n = 2000
	for i := n - 1; i >= 0; i-- {
		if i%2 == 0 {
			A(t)(w.Create(d.Ino, fmt.Sprintf("f%05d", i), 0o644, me))
		} else {
			A(t)(w.Mkdir(d.Ino, fmt.Sprintf("f%05d", i), 0o755, me))
		}
	}
	ents, err := w.ReadDir(d.Ino)
	noErr(t, err)
	if len(ents) != n {
		t.Fatalf("%d entries", len(ents))
	}
	for i, e := range ents {
		if e.Name != fmt.Sprintf("f%05d", i) {
			t.Fatalf("entry %d is %q", i, e.Name)
		}
		wantType := uint32(syscall.S_IFREG)
		if i%2 == 1 {
			wantType = syscall.S_IFDIR
		}
		if e.Mode&syscall.S_IFMT != wantType {
			t.Fatalf("entry %s mode %o", e.Name, e.Mode)
		}
	}
	if a := A(t)(w.GetAttr(d.Ino)); a.Nlink != 2+n/2 {
		t.Fatalf("dir nlink %d, want %d", a.Nlink, 2+n/2)
	}
}

func TestLockBusy(t *testing.T) {
	e := diskEnv(t)
	w := e.open()
	_, err := Open(e.opts)
	if !errors.Is(err, vfs.ErrLocked) || !strings.Contains(err.Error(), "another wsfs daemon") {
		t.Fatalf("second Open: %v", err)
	}
	noErr(t, w.Close())
	w = e.open()
	noErr(t, w.Close())
}

// TestBigDirectory: 100,000 entries in one directory (the adapter serves
// readdir offsets from one ReadDir snapshot).
func TestBigDirectory(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	e := memEnv(t)
	e.opts.GroupRecords = 4096
	w := e.open()
	defer w.Close()
	d := A(t)(w.Mkdir(RootIno, "big", 0o755, me))
	for i := range n {
		A(t)(w.Create(d.Ino, fmt.Sprintf("file-%06d", i), 0o644, me))
	}
	ents, err := w.ReadDir(d.Ino)
	noErr(t, err)
	if len(ents) != n || ents[0].Name != "file-000000" || ents[n-1].Name != fmt.Sprintf("file-%06d", n-1) {
		t.Fatalf("%d entries, first %q", len(ents), ents[0].Name)
	}
	noErr(t, w.Sync())
}

// TestParallelReads reads one pooled file from many goroutines while
// another rewrites it (run with -race): every read returns one whole
// version, never a mix.
func TestParallelReads(t *testing.T) {
	e := memEnv(t)
	smallLimits(e)
	w := e.open()
	defer w.Close()
	v1, v2 := bytes.Repeat([]byte("1"), 3000), bytes.Repeat([]byte("2"), 3000)
	f := writeFile(t, w, RootIno, "f", v1)
	done := make(chan struct{})
	errc := make(chan error, 8)
	for range 4 {
		go func() {
			h, err := w.OpenFile(f.Ino, syscall.O_RDONLY)
			if err != nil {
				errc <- err
				return
			}
			defer h.Release()
			buf := make([]byte, 3000)
			for {
				select {
				case <-done:
					errc <- nil
					return
				default:
				}
				n, err := h.ReadAt(buf, 0)
				if err != nil || n != 3000 || !(bytes.Equal(buf, v1) || bytes.Equal(buf, v2)) {
					errc <- fmt.Errorf("read %d bytes, err %v, mixed content %v", n, err, !(bytes.Equal(buf, v1) || bytes.Equal(buf, v2)))
					return
				}
			}
		}()
	}
	for i := range 50 {
		// Overwrite in place (no O_TRUNC, which would publish an empty
		// file): each flush publishes one whole version.
		h := H(t)(w.OpenFile(f.Ino, syscall.O_WRONLY))
		_, err := h.WriteAt([][]byte{v2, v1}[i%2], 0)
		noErr(t, err)
		noErr(t, h.Release())
	}
	close(done)
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
