package errorfs

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"

	"wsfs/internal/vfs"
)

func newMem(t *testing.T) *vfs.MemFS {
	t.Helper()
	m := vfs.NewCrashableMem()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	return m
}

func syncFile(t *testing.T, fsys vfs.FS, name string) error {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.SyncData()
}

func TestOnNthFailsOnlyTheNthMatchingCall(t *testing.T) {
	r := OnNth(OpSyncData, "*.seg", 3, syscall.EIO)
	fsys := Wrap(newMem(t), r)
	var got []bool
	for _, name := range []string{"/d/1.seg", "/d/x.ckpt", "/d/2.seg", "/d/3.seg", "/d/4.seg"} {
		got = append(got, syncFile(t, fsys, name) != nil)
	}
	want := []bool{false, false, false, true, false} // the .ckpt is not counted
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("failures %v, want %v", got, want)
		}
	}
	if r.Matched() != 4 || r.Injected() != 1 {
		t.Fatalf("Matched %d Injected %d, want 4 and 1", r.Matched(), r.Injected())
	}
}

func TestErrorShape(t *testing.T) {
	fsys := Wrap(newMem(t), Rules(Always(OpSync, "", syscall.EIO), Always(OpRename, "/d/", syscall.ENOSPC)))
	f, err := fsys.Create("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = f.Sync()
	var pe *os.PathError
	var ie *InjectedError
	if !errors.Is(err, syscall.EIO) || !errors.As(err, &pe) || !errors.As(err, &ie) || pe.Path != "/d/a" {
		t.Fatalf("Sync error %#v: want *os.PathError for /d/a wrapping an injected EIO", err)
	}
	err = fsys.Rename("/d/a", "/d/b")
	var le *os.LinkError
	if !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &le) {
		t.Fatalf("Rename error %v: want *os.LinkError wrapping ENOSPC", err)
	}
	if _, serr := fsys.Stat("/d/a"); serr != nil {
		t.Fatalf("a failed Rename changed the FS: %v", serr)
	}
}

func TestFromNthKeepsFailing(t *testing.T) {
	r := FromNth(OpWrite, "", 2, syscall.ENOSPC)
	fsys := Wrap(newMem(t), r)
	f, err := fsys.Create("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 4 {
		_, err := f.Write([]byte("x"))
		if (err != nil) != (i >= 1) {
			t.Fatalf("write %d: %v", i+1, err)
		}
	}
	if r.Injected() != 3 {
		t.Fatalf("Injected %d, want 3", r.Injected())
	}
}

func TestShortWrite(t *testing.T) {
	m := newMem(t)
	fsys := Wrap(m, ShortWriteOnNth("a", 2))
	f, err := fsys.Create("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("1234")); err != nil {
		t.Fatal(err)
	}
	n, err := f.Write([]byte("abcdef"))
	if n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("short write = %d, %v; want 3, ENOSPC", n, err)
	}
	r, err := m.Open("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	if string(b) != "1234abc" {
		t.Fatalf("file holds %q, want 1234abc", b)
	}
	// WriteAt short writes too.
	fsys = Wrap(m, ShortWriteOnNth("", 1))
	g, err := fsys.OpenReadWrite("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if n, err := g.WriteAt([]byte("WXYZ"), 0); n != 2 || err == nil {
		t.Fatalf("short WriteAt = %d, %v", n, err)
	}
}

func TestPublishCleansUpOnInjectedFaults(t *testing.T) {
	for _, op := range []vfs.Op{OpCreate, OpWrite, OpSyncData, OpClose, OpRename} {
		t.Run(op.String(), func(t *testing.T) {
			m := newMem(t)
			r := Always(op, "", syscall.EIO)
			err := vfs.Publish(Wrap(m, r), "/d/obj", true, func(f vfs.File) error {
				_, err := f.Write([]byte("data"))
				return err
			})
			if !errors.Is(err, syscall.EIO) || r.Injected() == 0 {
				t.Fatalf("Publish = %v (injected %d), want EIO", err, r.Injected())
			}
			names, lerr := m.List("/d")
			if lerr != nil || len(names) != 0 {
				t.Fatalf("after failed publish /d holds %v (%v)", names, lerr)
			}
		})
	}
	// A failed directory sync leaves the file visible but reports failure.
	m := newMem(t)
	err := vfs.Publish(Wrap(m, Always(OpSync, "", syscall.EIO)), "/d/obj", true, func(vfs.File) error { return nil })
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("Publish with failing dir sync = %v, want EIO", err)
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"", "/x/y", true},
		{"*.seg", "/log/00001.seg", true},
		{"*.seg", "/log.seg/00001.ckpt", false},
		{"0000?.seg", "/log/00001.seg", true},
		{"/pool/", "/home/pool/objects/ab", true},
		{"/pool/", "/home/state/x", false},
		{"[", "/x", false},
	} {
		if got := Match(c.pattern, c.path); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

func TestConcurrentCounting(t *testing.T) {
	r := OnNth(OpStat, "", 50, syscall.EIO)
	set := Rules(r)
	fsys := Wrap(newMem(t), set)
	var wg sync.WaitGroup
	var failed sync.Map
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if _, err := fsys.Stat("/d"); err != nil {
					failed.Store([2]int{g, i}, err)
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	failed.Range(func(any, any) bool { n++; return true })
	if n != 1 || r.Matched() != 100 || set.Injected() != 1 {
		t.Fatalf("failures %d matched %d injected %d, want 1 100 1", n, r.Matched(), set.Injected())
	}
}

func TestWrapsOS(t *testing.T) {
	dir := t.TempDir()
	fsys := Wrap(vfs.Default, OnNth(OpCreate, "", 1, syscall.ENOSPC))
	if _, err := fsys.Create(dir + "/a"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("first Create = %v", err)
	}
	f, err := fsys.Create(dir + "/a")
	if err != nil {
		t.Fatal(err)
	}
	if f.Fd() == ^uintptr(0) {
		t.Fatal("Fd of a wrapped OS file is not the real descriptor")
	}
	f.Close()
}

func TestRuleErr(t *testing.T) {
	r := ShortWriteOnNth("", 1)
	fsys := Wrap(newMem(t), r)
	f, err := fsys.Create("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("ab")); !errors.Is(err, r.Err()) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write error %v is not the rule's error %v", err, r.Err())
	}
}

// TestStartWriteback: StartWriteback is an operation kind of its own (a
// fault can be injected into it alone), and otherwise reaches the
// underlying file.
func TestStartWriteback(t *testing.T) {
	r := OnNth(OpStartWriteback, "*.obj", 1, syscall.EIO)
	fsys := Wrap(newMem(t), Rules(r, Always(OpSyncData, "", syscall.EIO)))
	f, err := fsys.Create("/d/a.obj")
	if err != nil {
		t.Fatal(err)
	}
	err = f.StartWriteback()
	var pe *os.PathError
	if !errors.Is(err, syscall.EIO) || !errors.As(err, new(*InjectedError)) || !errors.As(err, &pe) || pe.Path != "/d/a.obj" {
		t.Fatalf("first StartWriteback = %v; want the injected EIO as *os.PathError for /d/a.obj", err)
	}
	if err := f.StartWriteback(); err != nil {
		t.Fatalf("second StartWriteback = %v; want it let through", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	err = f.StartWriteback()
	if !errors.Is(err, os.ErrClosed) || errors.As(err, new(*InjectedError)) {
		t.Fatalf("StartWriteback after Close = %v; want the underlying file's ErrClosed, not an injected fault", err)
	}
	if r.Matched() != 3 || r.Injected() != 1 {
		t.Fatalf("Matched %d Injected %d, want 3 and 1", r.Matched(), r.Injected())
	}
}
