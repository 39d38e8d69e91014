package workspace

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"wsfs/internal/namespace"
	"wsfs/internal/pool"
)

// lockedBuf is a bytes.Buffer safe for a logger used by several goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestXattrNamespaces(t *testing.T) {
	w := memEnv(t).open()
	defer w.Close()
	f := writeFile(t, w, RootIno, "f", []byte("x"))
	for _, tc := range []struct {
		name      string
		set, get  syscall.Errno // 0: success
		removeErr syscall.Errno
	}{
		{"user.k", 0, 0, 0},
		{"trusted.k", 0, 0, 0},
		{"security.selinux", 0, 0, 0},
		{"bogus.x", syscall.EOPNOTSUPP, syscall.EOPNOTSUPP, syscall.EOPNOTSUPP},
		{"user", syscall.EOPNOTSUPP, syscall.EOPNOTSUPP, syscall.EOPNOTSUPP},
		{"system.foo", syscall.EOPNOTSUPP, syscall.EOPNOTSUPP, syscall.EOPNOTSUPP},
		// Not stored (file capabilities are not supported): set must not
		// pretend; get and remove find nothing.
		{"security.capability", syscall.EOPNOTSUPP, syscall.ENODATA, syscall.ENODATA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what string, err error, want syscall.Errno) {
				t.Helper()
				if want == 0 {
					noErr(t, err)
					return
				}
				mustErrno(t, err, want)
				_ = what
			}
			check("set", w.SetXattr(f.Ino, tc.name, []byte("v"), 0), tc.set)
			_, err := w.GetXattr(f.Ino, tc.name)
			check("get", err, tc.get)
			check("remove", w.RemoveXattr(f.Ino, tc.name), tc.removeErr)
		})
	}
	names, err := w.ListXattr(f.Ino)
	noErr(t, err)
	if len(names) != 0 {
		t.Fatalf("xattrs left: %q", names)
	}
}

// TestBlocksCountStoredBytes: st_blocks counts the bytes stored, not the
// size, so a sparse file's holes are not allocated (du, cp --sparse).
func TestBlocksCountStoredBytes(t *testing.T) {
	e := memEnv(t)
	w := e.open()
	f := A(t)(w.Create(RootIno, "sparse", 0o644, me))
	h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
	const size = 5 << 30
	if _, err := h.WriteAt([]byte("end"), size-3); err != nil {
		t.Fatal(err)
	}
	chunk := uint64(DefaultChunkSize / 512)
	if a := A(t)(w.GetAttr(f.Ino)); a.Size != size || a.Blocks != chunk {
		t.Fatalf("dirty sparse file: size %d blocks %d, want %d blocks (one chunk)", a.Size, a.Blocks, chunk)
	}
	noErr(t, h.Flush())
	if a := A(t)(w.GetAttr(f.Ino)); a.Blocks != chunk {
		t.Fatalf("flushed sparse file: blocks %d, want %d", a.Blocks, chunk)
	}
	// A write in the middle adds one chunk.
	if _, err := h.WriteAt([]byte("mid"), 2<<30); err != nil {
		t.Fatal(err)
	}
	if a := A(t)(w.GetAttr(f.Ino)); a.Blocks != 2*chunk {
		t.Fatalf("two chunks written: blocks %d, want %d", a.Blocks, 2*chunk)
	}
	noErr(t, h.Flush())
	noErr(t, h.Release())
	small := writeFile(t, w, RootIno, "small", make([]byte, 1000))
	if small.Blocks != 2 {
		t.Fatalf("1000-byte file: blocks %d, want 2", small.Blocks)
	}
	noErr(t, w.Close())
	w = e.open()
	defer w.Close()
	if a := A(t)(w.Lookup(RootIno, "sparse")); a.Blocks != 2*chunk || a.Size != size {
		t.Fatalf("after reopen: size %d blocks %d, want %d", a.Size, a.Blocks, 2*chunk)
	}
}

// objectPath is where the pool keeps object id (layout 2: 16 fan-outs).
func objectPath(e *env, id pool.ID) string {
	s := id.String()
	return filepath.Join(e.root, "pool", "objects", s[:1], s)
}

// TestMissingObjectIsEIO: a file whose pool object is gone reads as EIO
// (not ENOENT: the file exists) and an ERROR line names the object and
// the inode; the same for a corrupt object and for one missing chunk.
func TestMissingObjectIsEIO(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		damage  string // "remove" or "flip"
		chunked bool
	}{
		{"object-missing", 200 << 10, "remove", false},
		{"object-corrupt", 200 << 10, "flip", false},
		{"chunk-missing", 3 << 20, "remove", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := memEnv(t)
			e.damaged = true // the test removes or flips an object
			w := e.open()
			content := make([]byte, tc.size)
			for i := range content {
				content[i] = byte(i*7 + i>>12)
			}
			f := writeFile(t, w, RootIno, "f", content)
			noErr(t, w.Close())
			var id pool.ID
			var c namespace.Content
			w = e.open()
			n := w.tree.Get(namespace.Ino(f.Ino))
			c = n.Content
			noErr(t, w.Close())
			if tc.chunked {
				if !c.IsChunked() {
					t.Fatal("want chunked content")
				}
				id = pool.ID(c.Chunks[1])
			} else {
				if !c.IsObject {
					t.Fatal("want one object")
				}
				id = pool.ID(c.Object)
			}
			path := objectPath(e, id)
			switch tc.damage {
			case "remove":
				noErr(t, e.fs.Remove(path))
			case "flip":
				fl, err := e.fs.OpenReadWrite(path)
				noErr(t, err)
				_, err = fl.WriteAt([]byte{^content[100]}, 100)
				noErr(t, err)
				noErr(t, fl.Close())
			}
			var logs lockedBuf
			e.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			p, err := pool.Open(e.fs, filepath.Join(e.root, "pool"), pool.Options{})
			noErr(t, err)
			e.opts.Pool = p // a fresh pool: nothing verified yet
			w = e.open()
			defer w.Close()
			a := A(t)(w.Lookup(RootIno, "f"))
			h := H(t)(w.OpenFile(a.Ino, syscall.O_RDONLY))
			defer h.Release()
			buf := make([]byte, tc.size)
			_, err = h.ReadAt(buf, 0)
			mustErrno(t, err, syscall.EIO)
			out := logs.String()
			for _, want := range []string{"level=ERROR", id.String(), fmt.Sprintf("ino=%d", a.Ino)} {
				if !strings.Contains(out, want) {
					t.Fatalf("log lacks %q:\n%s", want, out)
				}
			}
			// A write that must load the damaged bytes fails the same way
			// (chunk 1 of the chunked file; the whole object otherwise).
			hw := H(t)(w.OpenFile(a.Ino, syscall.O_WRONLY))
			_, err = hw.WriteAt([]byte("z"), 1<<20+5)
			mustErrno(t, err, syscall.EIO)
			_ = hw.Release()
		})
	}
}
