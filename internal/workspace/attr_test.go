package workspace

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/namespace"
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
	mt, at := namespace.FromNs(1_000_000_000), namespace.FromNs(2_000_000_000)
	A(t)(w.SetAttr(f.Ino, SetAttrIn{Mtime: &mt, Atime: &at}))
	if a := A(t)(w.GetAttr(f.Ino)); a.Mtime != mt || a.Size != 4 {
		t.Fatalf("before close: mtime %v size %d", a.Mtime, a.Size)
	}
	noErr(t, h.Release())
	if a := A(t)(w.GetAttr(f.Ino)); a.Mtime != mt || a.Atime != at {
		t.Fatalf("after close: mtime %v atime %v", a.Mtime, a.Atime)
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
	old := namespace.FromNs(1)
	A(t)(w.SetAttr(d.Ino, SetAttrIn{Mtime: &old}))
	before := namespace.FromNs(time.Now().UnixNano())
	f := A(t)(w.Create(d.Ino, "f", 0o644, me))
	if f.Mtime.Before(before) || f.Ctime.Before(before) || f.Atime.Before(before) {
		t.Fatalf("new file times %+v older than the call", f)
	}
	if a := A(t)(w.GetAttr(d.Ino)); a.Mtime.Before(before) || a.Ctime.Before(before) {
		t.Fatalf("parent times not updated by create: %+v", a)
	}
	A(t)(w.SetAttr(f.Ino, SetAttrIn{Mtime: &old}))
	A(t)(w.Link(f.Ino, RootIno, "l"))
	if a := A(t)(w.GetAttr(f.Ino)); a.Mtime != old || a.Ctime.Before(before) || a.Nlink != 2 {
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

// TestWideTimesCheckpointAndLog: times outside int64 nanoseconds survive
// the log (replay) and a checkpoint (version 2), on a file with dirty
// content too (the SetContent record carries the set mtime); nanoseconds
// of a second or more are refused with EINVAL and change nothing.
func TestWideTimesCheckpointAndLog(t *testing.T) {
	for _, ckpt := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoint=%v", ckpt), func(t *testing.T) {
			e := memEnv(t)
			if ckpt {
				e.opts.CheckpointBytes = 1
			}
			w := e.open()
			y2300 := namespace.Timestamp{Sec: 10413792000, Nsec: 42}
			y1500 := namespace.Timestamp{Sec: -14831769600, Nsec: 999999999}
			f := writeFile(t, w, RootIno, "f", []byte("abc"))
			A(t)(w.SetAttr(f.Ino, SetAttrIn{Atime: &y1500, Mtime: &y2300}))
			g := A(t)(w.Create(RootIno, "g", 0o644, me))
			h := H(t)(w.OpenFile(g.Ino, syscall.O_WRONLY))
			_, err := h.WriteAt([]byte("dirty"), 0)
			noErr(t, err)
			A(t)(w.SetAttr(g.Ino, SetAttrIn{Mtime: &y1500})) // then the flush's SetContent carries it
			noErr(t, h.Release())
			bad := namespace.Timestamp{Sec: 1, Nsec: 1e9}
			_, err = w.SetAttr(f.Ino, SetAttrIn{Mtime: &bad})
			mustErrno(t, err, syscall.EINVAL)
			for i := 0; ckpt && i < 5; i++ {
				writeFile(t, w, RootIno, fmt.Sprintf("pad%d", i), []byte("pad"))
				noErr(t, w.Sync())
			}
			noErr(t, w.Close())
			w = e.open()
			defer w.Close()
			if ckpt && w.Stats().CheckpointGroup == 0 {
				t.Fatal("no checkpoint was written")
			}
			if a := A(t)(w.Lookup(RootIno, "f")); a.Mtime != y2300 || a.Atime != y1500 {
				t.Fatalf("f after reopen: mtime %v atime %v", a.Mtime, a.Atime)
			}
			if a := A(t)(w.Lookup(RootIno, "g")); a.Mtime != y1500 || a.Size != 5 {
				t.Fatalf("g after reopen: mtime %v size %d", a.Mtime, a.Size)
			}
		})
	}
}
