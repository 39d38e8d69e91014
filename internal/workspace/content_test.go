package workspace

import (
	"bytes"
	"math/rand/v2"
	"syscall"
	"testing"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
)

// smallLimits makes inline, pooled and chunked contents cheap to reach.
func smallLimits(e *env) {
	e.opts.InlineMax = 100
	e.opts.ChunkSize = 1024
}

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestContentKinds(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		smallLimits(e)
		for _, tc := range []struct {
			name   string
			writes []struct {
				off  int64
				data []byte
			}
			want []byte
			kind string // "" inline, "object" or "chunked"
		}{
			{name: "empty", want: nil},
			{name: "inline", writes: wr(0, []byte("tiny")), want: []byte("tiny")},
			{name: "inline at limit", writes: wr(0, pattern(100, 1)), want: pattern(100, 1)},
			{name: "one object", writes: wr(0, pattern(101, 2)), want: pattern(101, 2), kind: "object"},
			{name: "chunked", writes: wr(0, pattern(5000, 3)), want: pattern(5000, 3), kind: "chunked"},
			{name: "grows past a chunk", writes: append(wr(0, pattern(900, 4)), wr(900, pattern(900, 5))...),
				want: append(pattern(900, 4), pattern(900, 5)...), kind: "chunked"},
			{name: "sparse in one chunk", writes: wr(500, []byte("x")), want: append(make([]byte, 500), 'x'), kind: "object"},
			{name: "sparse chunked", writes: wr(100000, []byte("end")), want: append(make([]byte, 100000), "end"...), kind: "chunked"},
			{name: "chunked in appends", writes: append(append(wr(0, pattern(700, 6)), wr(700, pattern(700, 7))...), wr(1400, pattern(700, 8))...),
				want: append(append(pattern(700, 6), pattern(700, 7)...), pattern(700, 8)...), kind: "chunked"},
			{name: "chunked then rewritten", writes: append(wr(0, pattern(2000, 9)), wr(10, []byte("XY"))...),
				want: append(append(append([]byte(nil), pattern(2000, 9)[:10]...), "XY"...), pattern(2000, 9)[12:]...), kind: "chunked"},
			{name: "many chunks, more than stay in memory", writes: wr(0, pattern(20*1024+7, 10)), want: pattern(20*1024+7, 10), kind: "chunked"},
			{name: "write across chunks", writes: append(wr(0, pattern(3000, 11)), wr(1000, pattern(100, 12))...),
				want: append(append(append([]byte(nil), pattern(3000, 11)[:1000]...), pattern(100, 12)...), pattern(3000, 11)[1100:]...), kind: "chunked"},
			{name: "overlapping", writes: append(wr(0, []byte("aaaaaa")), wr(2, []byte("BB"))...), want: []byte("aaBBaa")},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w := e.open()
				f := A(t)(w.Create(RootIno, tc.name, 0o644, me))
				h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
				for _, x := range tc.writes {
					if n, err := h.WriteAt(x.data, x.off); err != nil || n != len(x.data) {
						t.Fatalf("write: %d %v", n, err)
					}
				}
				// Dirty reads see the writes before any flush.
				if a := A(t)(w.GetAttr(f.Ino)); a.Size != uint64(len(tc.want)) {
					t.Fatalf("dirty size %d, want %d", a.Size, len(tc.want))
				}
				got := make([]byte, len(tc.want)+7)
				n, err := h.ReadAt(got, 0)
				noErr(t, err)
				eq(t, got[:n], tc.want, "dirty read")
				noErr(t, h.Flush())
				n, err = h.ReadAt(got, 0)
				noErr(t, err)
				eq(t, got[:n], tc.want, "read after flush")
				noErr(t, h.Release())
				if k := contentKind(&w.tree.Get(uint64ToIno(f.Ino)).Content); k != tc.kind {
					t.Fatalf("content kind %q, want %q", k, tc.kind)
				}
				noErr(t, w.Close())
				w = e.open()
				defer w.Close()
				eq(t, readAll(t, w, f.Ino), tc.want, "after reopen")
				if tc.kind == "object" {
					data, err := e.pool.ReadAll(w.tree.Get(uint64ToIno(f.Ino)).Content.Object)
					noErr(t, err)
					eq(t, data, tc.want, "pool object")
				}
			})
		}
	})
}

func contentKind(c *namespace.Content) string {
	switch {
	case c.IsChunked():
		return "chunked"
	case c.IsObject:
		return "object"
	}
	return ""
}

type wrt = struct {
	off  int64
	data []byte
}

func wr(off int64, data []byte) []wrt { return []wrt{{off, data}} }

func TestCopyOnWriteAndTruncate(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		smallLimits(e)
		w := e.open()
		defer w.Close()
		for _, size := range []int{50, 500, 5000} {
			orig := pattern(size, uint64(size))
			f := writeFile(t, w, RootIno, "f", orig)
			oldContent := w.tree.Get(uint64ToIno(f.Ino)).Content
			// Overwrite the middle: the published content must not change.
			h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
			A(t)(w.GetAttr(f.Ino))
			_, err := h.WriteAt([]byte("XY"), int64(size/2))
			noErr(t, err)
			snapshot := &namespace.Inode{Size: uint64(size), Content: oldContent}
			if got, want := w.contentID(snapshot), objid.Sum(orig); got != want {
				t.Fatalf("published %s content changed after an overwrite", contentKind(&oldContent))
			}
			noErr(t, h.Release()) // flushes: last handle
			want := append([]byte(nil), orig...)
			copy(want[size/2:], "XY")
			eq(t, readAll(t, w, f.Ino), want, "after overwrite")

			// Truncate down, up (zeros), and O_TRUNC.
			for _, ts := range []uint64{uint64(size / 3), uint64(size) * 3, 0} {
				A(t)(w.SetAttr(f.Ino, SetAttrIn{Size: &ts}))
				exp := make([]byte, ts)
				copy(exp, want)
				eq(t, readAll(t, w, f.Ino), exp, "after truncate")
				want = exp
			}
			writeFile(t, w, RootIno, "f", orig)
			h = H(t)(w.OpenFile(f.Ino, syscall.O_WRONLY|syscall.O_TRUNC))
			if a := A(t)(w.GetAttr(f.Ino)); a.Size != 0 {
				t.Fatalf("size after O_TRUNC %d", a.Size)
			}
			noErr(t, h.Release())
			// O_APPEND writes at EOF.
			writeFile(t, w, RootIno, "f", []byte("abc"))
			h = H(t)(w.OpenFile(f.Ino, syscall.O_WRONLY|syscall.O_APPEND))
			_, err = h.WriteAt([]byte("def"), 0)
			noErr(t, err)
			noErr(t, h.Release())
			eq(t, readAll(t, w, f.Ino), []byte("abcdef"), "append")
		}
	})
}

func uint64ToIno(i Ino) namespace.Ino { return namespace.Ino(i) }

func TestUnlinkWhileOpen(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		smallLimits(e)
		w := e.open()
		for _, size := range []int{10, 500, 5000} {
			f := writeFile(t, w, RootIno, "f", pattern(size, 9))
			h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
			noErr(t, w.Unlink(RootIno, "f"))
			mustErrno(t, errOf(w.Lookup(RootIno, "f")), syscall.ENOENT)
			// Still readable and writable through the handle, never logged.
			_, err := h.WriteAt([]byte("more"), int64(size))
			noErr(t, err)
			noErr(t, h.Flush())
			buf := make([]byte, size+4)
			n, err := h.ReadAt(buf, 0)
			noErr(t, err)
			eq(t, buf[:n], append(pattern(size, 9), "more"...), "orphan read")
			if a := A(t)(w.GetAttr(f.Ino)); a.Nlink != 0 {
				t.Fatalf("orphan nlink %d", a.Nlink)
			}
			noErr(t, h.Release())
			w.Forget(f.Ino, 2) // Create's and writeFile's Lookup
			if w.tree.Get(uint64ToIno(f.Ino)) != nil {
				t.Fatal("orphan stays after its last handle and lookup")
			}
			mustErrno(t, errOf(w.GetAttr(f.Ino)), syscall.ENOENT)
		}
		want := dumpOf(w)
		noErr(t, w.Close())
		w = e.open()
		defer w.Close()
		if got := dumpOf(w); got != want {
			t.Fatalf("dump after reopen:\n%s\nwant\n%s", got, want)
		}
	})
}

// TestLargeSparse writes past 4 GiB on the OS file system, publishes it,
// and reads the hole and the data back. The hole is a run of hole chunks:
// nothing is written or hashed for it.
func TestLargeSparse(t *testing.T) {
	e := diskEnv(t)
	w := e.open()
	defer w.Close()
	f := A(t)(w.Create(RootIno, "big", 0o644, me))
	h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
	const off = 1<<32 + 12345
	_, err := h.WriteAt([]byte("beyond 4 GiB"), off)
	noErr(t, err)
	noErr(t, h.Fsync(false))
	noErr(t, h.Release())
	h = H(t)(w.OpenFile(f.Ino, syscall.O_RDONLY))
	defer h.Release()
	buf := make([]byte, 32)
	n, err := h.ReadAt(buf, off-8)
	noErr(t, err)
	eq(t, buf[:n], append(make([]byte, 8), "beyond 4 GiB"...), "tail")
	n, err = h.ReadAt(buf, 1<<31)
	noErr(t, err)
	eq(t, buf[:n], make([]byte, 32), "hole")
	c := w.tree.Get(uint64ToIno(f.Ino)).Content
	objs := 0
	c.Objects(func(objid.ID) { objs++ })
	if !c.IsChunked() || objs != 1 {
		t.Fatalf("content chunked=%v with %d objects, want chunked with 1 object", c.IsChunked(), objs)
	}
	if _, ok := h.ObjectFile(); ok {
		t.Fatal("passthrough object file for chunked content")
	}
	if a := A(t)(w.GetAttr(f.Ino)); a.Size != off+12 {
		t.Fatalf("size %d", a.Size)
	}
	_ = bytes.MinRead
}

// TestRecycledBuffersReadAsZeros: dirty buffers above 64 KiB are recycled
// between files; a hole in a later file must read as zeros, never as the
// bytes of an earlier one.
func TestRecycledBuffersReadAsZeros(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		w := e.open()
		defer w.Close()
		old := bytes.Repeat([]byte{0xff}, 200<<10)
		for i := range 3 { // leave buffers of several sizes in the pools
			f := A(t)(w.Create(RootIno, "old"+string(rune('a'+i)), 0o644, me))
			h := H(t)(w.OpenFile(f.Ino, syscall.O_WRONLY))
			for off := 0; off < len(old)>>i; off += 64 << 10 {
				if _, err := h.WriteAt(old[off:min(off+64<<10, len(old)>>i)], int64(off)); err != nil {
					t.Fatal(err)
				}
			}
			noErr(t, h.Flush())
			noErr(t, h.Release())
		}
		f := A(t)(w.Create(RootIno, "new", 0o644, me))
		h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
		if _, err := h.WriteAt([]byte("head"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := h.WriteAt([]byte("tail"), 150<<10); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 150<<10+4)
		copy(want, "head")
		copy(want[150<<10:], "tail")
		got := make([]byte, len(want))
		n, err := h.ReadAt(got, 0)
		noErr(t, err)
		eq(t, got[:n], want, "dirty read")
		noErr(t, h.Flush())
		noErr(t, h.Release())
		eq(t, readAll(t, w, f.Ino), want, "after flush")
	})
}

// TestStatsByteCounters: published content is counted by where it went:
// inline in the log, a new pool object, or an existing one (dedup).
func TestStatsByteCounters(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		w := e.open()
		defer w.Close()
		small := bytes.Repeat([]byte("s"), 1000)
		large := bytes.Repeat([]byte("L"), DefaultInlineMax+1)
		writeFile(t, w, RootIno, "small", small)
		writeFile(t, w, RootIno, "large", large)
		writeFile(t, w, RootIno, "copy", large)
		s := w.Stats()
		if s.BytesInline != 1000 || s.BytesPooled != uint64(len(large)) || s.BytesDeduped != uint64(len(large)) {
			t.Errorf("inline/pooled/deduped = %d/%d/%d, want 1000/%d/%d",
				s.BytesInline, s.BytesPooled, s.BytesDeduped, len(large), len(large))
		}
	})
}
