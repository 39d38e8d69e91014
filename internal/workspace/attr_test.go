package workspace

import (
	"syscall"
	"testing"
	"time"

	"wsfs/internal/pool"
)

// TestTimesSurviveFlush: cp -p and tar write, set times, then close; the
// times set must win over the write time, live and after reopen.
func TestTimesSurviveFlush(t *testing.T) {
	e := memEnv(t)
	w := e.open()
	f := A(t)(w.Create(RootIno, "f", 0o644, me))
	h := H(t)(w.OpenFile(f.Ino, syscall.O_WRONLY))
	_, err := h.WriteAt([]byte("data"), 0)
	noErr(t, err)
	mt, at := int64(1_000_000_000), int64(2_000_000_000)
	A(t)(w.SetAttr(f.Ino, SetAttrIn{Mtime: &mt, Atime: &at}))
	if a := A(t)(w.GetAttr(f.Ino)); a.Mtime != mt || a.Size != 4 {
		t.Fatalf("before close: mtime %d size %d", a.Mtime, a.Size)
	}
	noErr(t, h.Release())
	if a := A(t)(w.GetAttr(f.Ino)); a.Mtime != mt || a.Atime != at {
		t.Fatalf("after close: mtime %d atime %d", a.Mtime, a.Atime)
	}
	noErr(t, w.Close())
	w = e.open()
	defer w.Close()
	if a := A(t)(w.GetAttr(f.Ino)); a.Mtime != mt || a.Atime != at || a.Size != 4 {
		t.Fatalf("after reopen: %+v", a)
	}
}

// TestTimestampsOfOps checks which times each operation moves.
func TestTimestampsOfOps(t *testing.T) {
	e := memEnv(t)
	w := e.open()
	defer w.Close()
	d := A(t)(w.Mkdir(RootIno, "d", 0o755, me))
	old := int64(1)
	A(t)(w.SetAttr(d.Ino, SetAttrIn{Mtime: &old}))
	before := time.Now().UnixNano()
	f := A(t)(w.Create(d.Ino, "f", 0o644, me))
	if f.Mtime < before || f.Ctime < before || f.Atime < before {
		t.Fatalf("new file times %+v older than the call", f)
	}
	if a := A(t)(w.GetAttr(d.Ino)); a.Mtime < before || a.Ctime < before {
		t.Fatalf("parent times not updated by create: %+v", a)
	}
	A(t)(w.SetAttr(f.Ino, SetAttrIn{Mtime: &old}))
	A(t)(w.Link(f.Ino, RootIno, "l"))
	if a := A(t)(w.GetAttr(f.Ino)); a.Mtime != old || a.Ctime < before || a.Nlink != 2 {
		t.Fatalf("link: mtime must stay, ctime move: %+v", a)
	}
	noErr(t, w.SetXattr(f.Ino, "user.k", []byte("v"), 0))
	if names := func() []string { n, _ := w.ListXattr(f.Ino); return n }(); len(names) != 1 || names[0] != "user.k" {
		t.Fatalf("xattrs %v", names)
	}
}

// TestLookupCounting: an unlinked inode lives while it has kernel lookups
// and disappears at the Forget that gives back the last one.
func TestLookupCounting(t *testing.T) {
	e := memEnv(t)
	w := e.open()
	defer w.Close()
	f := A(t)(w.Create(RootIno, "f", 0o644, me)) // 1 lookup
	A(t)(w.Lookup(RootIno, "f"))                 // 2
	noErr(t, w.Unlink(RootIno, "f"))
	w.Forget(f.Ino, 1)
	if a := A(t)(w.GetAttr(f.Ino)); a.Nlink != 0 {
		t.Fatalf("orphan %+v", a)
	}
	w.Forget(f.Ino, 1)
	mustErrno(t, errOf(w.GetAttr(f.Ino)), syscall.ENOENT)
	w.Forget(f.Ino, 1) // a stale forget is harmless
	w.Forget(RootIno, 100)
	A(t)(w.GetAttr(RootIno))
	// A linked inode is never dropped by Forget.
	g := A(t)(w.Create(RootIno, "g", 0o644, me))
	w.Forget(g.Ino, 1)
	A(t)(w.GetAttr(g.Ino))
	if st := w.Stats(); st.Failed != nil || st.Inodes != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestObjectFile: passthrough gets the pool object only for a read-only
// handle on clean pooled content.
func TestObjectFile(t *testing.T) {
	e := memEnv(t)
	smallLimits(e)
	w := e.open()
	defer w.Close()
	small := writeFile(t, w, RootIno, "small", []byte("inline"))
	big := writeFile(t, w, RootIno, "big", pattern(500, 1))
	var objs []string
	w.ForEachObject(func(id pool.ID) { objs = append(objs, id.String()) })
	if len(objs) != 1 || objs[0] != pool.Sum(pattern(500, 1)).String() {
		t.Fatalf("ForEachObject: %v", objs)
	}
	for _, tc := range []struct {
		name  string
		ino   Ino
		flags int
		dirty bool
		want  bool
	}{
		{"inline", small.Ino, syscall.O_RDONLY, false, false},
		{"pooled read-only", big.Ino, syscall.O_RDONLY, false, true},
		{"pooled writable", big.Ino, syscall.O_RDWR, false, false},
		{"pooled but dirty", big.Ino, syscall.O_RDONLY, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wh *Handle
			if tc.dirty {
				wh = H(t)(w.OpenFile(tc.ino, syscall.O_WRONLY))
				_, err := wh.WriteAt([]byte("x"), 0)
				noErr(t, err)
			}
			h := H(t)(w.OpenFile(tc.ino, tc.flags))
			f, ok := h.ObjectFile()
			if ok != tc.want {
				t.Fatalf("ObjectFile ok = %v, want %v", ok, tc.want)
			}
			if ok {
				buf := make([]byte, 500)
				if n, _ := f.ReadAt(buf, 0); n != 500 {
					t.Fatalf("object read %d bytes", n)
				}
				eq(t, buf, pattern(500, 1), "object content")
				noErr(t, f.Close())
			}
			noErr(t, h.Release())
			if wh != nil {
				noErr(t, wh.Release())
			}
		})
	}
}

func TestStatFSReadlinkAndErrorText(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		w := e.open()
		defer w.Close()
		st, err := w.StatFS()
		noErr(t, err)
		if st.Blocks == 0 || st.BlockSize == 0 {
			t.Fatalf("statfs %+v", st)
		}
		l := A(t)(w.Symlink(RootIno, "l", "some/where", me))
		if got, err := w.Readlink(l.Ino); err != nil || got != "some/where" {
			t.Fatalf("readlink %q %v", got, err)
		}
		if l.Size != uint64(len("some/where")) || l.Mode != syscall.S_IFLNK|0o777 {
			t.Fatalf("symlink attr %+v", l)
		}
		_, err = w.Lookup(RootIno, "nope")
		if got, want := err.Error(), `workspace: lookup inode 1 "nope": no such file or directory`; got != want {
			t.Fatalf("error text %q, want %q", got, want)
		}
	})
}
