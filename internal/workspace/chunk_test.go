package workspace

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"wsfs/internal/objid"
)

// TestChunkedDifferential drives one file through random writes (within,
// across and beyond chunks), truncates (mid-chunk, on boundaries, up and
// down), flushes, reads and workspace reopens, with 256-byte chunks, and
// compares every read with a plain byte slice.
func TestChunkedDifferential(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		e.opts.InlineMax = 100
		e.opts.ChunkSize = 256
		for seed := uint64(1); seed <= 8; seed++ {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 7))
				w := e.open()
				name := fmt.Sprintf("f%d", seed)
				f := A(t)(w.Create(RootIno, name, 0o644, me))
				h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
				var model []byte
				check := func(what string) {
					t.Helper()
					got := make([]byte, len(model)+300)
					n, err := h.ReadAt(got, 0)
					noErr(t, err)
					eq(t, got[:n], model, what)
					if a := A(t)(w.GetAttr(f.Ino)); a.Size != uint64(len(model)) {
						t.Fatalf("%s: size %d, want %d", what, a.Size, len(model))
					}
					// A read at a random offset, possibly across chunks.
					if len(model) > 0 {
						off := r.IntN(len(model))
						part := make([]byte, r.IntN(600)+1)
						n, err := h.ReadAt(part, int64(off))
						noErr(t, err)
						eq(t, part[:n], model[off:min(len(model), off+len(part))], what+" (partial read)")
					}
				}
				for step := 0; step < 300; step++ {
					switch k := r.IntN(20); {
					case k < 11: // write
						off := r.IntN(len(model) + 700)
						if r.IntN(4) == 0 {
							off = r.IntN(8) * 256 // on a boundary
						}
						data := pattern(r.IntN(700)+1, r.Uint64())
						if r.IntN(3) == 0 { // a small append (range records)
							off, data = len(model)-r.IntN(min(len(model), 8)+1), data[:min(len(data), 1+r.IntN(40))]
						}
						if r.IntN(5) == 0 {
							data = make([]byte, len(data)) // zeros: may become holes
						}
						_, err := h.WriteAt(data, int64(off))
						noErr(t, err)
						if end := off + len(data); end > len(model) {
							model = append(model, make([]byte, end-len(model))...)
						}
						copy(model[off:], data)
					case k < 14: // truncate
						size := r.IntN(len(model) + 900)
						if r.IntN(3) == 0 {
							size = r.IntN(10) * 256
						}
						_, err := w.SetAttr(f.Ino, SetAttrIn{Size: ptr(uint64(size))})
						noErr(t, err)
						if size < len(model) {
							model = model[:size]
						} else {
							model = append(model, make([]byte, size-len(model))...)
						}
					case k < 16:
						noErr(t, h.Flush())
					case k < 17: // reopen the workspace
						noErr(t, h.Release())
						noErr(t, w.Close())
						w = e.open()
						h = H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
					case k < 18: // reopen without closing the file: ranges stay unfolded
						noErr(t, h.Fsync(false))
						noErr(t, w.Close())
						w = e.open()
						h = H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
					}
					check(fmt.Sprintf("step %d", step))
				}
				noErr(t, h.Release())
				noErr(t, w.Close())
				w = e.open()
				defer w.Close()
				eq(t, readAll(t, w, f.Ino), model, "after the last reopen")
			})
		}
	})
}

// TestSmallChangePutsOneChunk: a small write to a large published file
// puts one chunk to the pool, not the file.
func TestSmallChangePutsOneChunk(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		e.opts.ChunkSize = 4096
		w := e.open()
		defer w.Close()
		orig := pattern(1<<20+100, 3)
		f := writeFile(t, w, RootIno, "big", orig)
		before := w.Stats().BytesPooled
		h := H(t)(w.OpenFile(f.Ino, syscall.O_WRONLY|syscall.O_APPEND))
		_, err := h.WriteAt([]byte("appended"), 0)
		noErr(t, err)
		noErr(t, h.Release())
		if put := w.Stats().BytesPooled - before; put > 4096 {
			t.Errorf("an 8-byte append put %d bytes to the pool, want at most one chunk (4096)", put)
		}
		eq(t, readAll(t, w, f.Ino), append(orig, "appended"...), "content")
	})
}

// TestSplitLargeObject: content published as one object larger than the
// chunk size (by a workspace with a larger chunk size) is split into
// chunks by its first change, and reads stay right throughout.
func TestSplitLargeObject(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		e.opts.InlineMax = 100
		e.opts.ChunkSize = 1 << 16
		w := e.open()
		orig := pattern(50000, 4)
		f := writeFile(t, w, RootIno, "f", orig)
		if c := w.tree.Get(uint64ToIno(f.Ino)).Content; !c.IsObject {
			t.Fatalf("content kind %q, want one object", contentKind(&c))
		}
		noErr(t, w.Close())
		e.opts.ChunkSize = 1024
		w = e.open()
		defer w.Close()
		eq(t, readAll(t, w, f.Ino), orig, "object read with a smaller chunk size")
		h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
		_, err := h.WriteAt([]byte("XYZ"), 30000)
		noErr(t, err)
		noErr(t, h.Release())
		want := bytes.Clone(orig)
		copy(want[30000:], "XYZ")
		c := w.tree.Get(uint64ToIno(f.Ino)).Content
		if !c.IsChunked() || c.ChunkShift != 10 {
			t.Fatalf("content kind %q shift %d, want chunked with shift 10", contentKind(&c), c.ChunkShift)
		}
		eq(t, readAll(t, w, f.Ino), want, "after the split")
	})
}

// TestChunkHoles: zero chunks and extensions are holes, with no object.
func TestChunkHoles(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		e.opts.ChunkSize = 1024
		w := e.open()
		defer w.Close()
		data := append(append(pattern(1024, 5), make([]byte, 2048)...), pattern(10, 6)...)
		f := writeFile(t, w, RootIno, "f", data)
		_, err := w.SetAttr(f.Ino, SetAttrIn{Size: ptr(uint64(1 << 30))})
		noErr(t, err)
		c := w.tree.Get(uint64ToIno(f.Ino)).Content
		objs := 0
		c.Objects(func(objid.ID) { objs++ })
		if len(c.Chunks) != 1<<20 || objs != 2 {
			t.Fatalf("%d chunks with %d objects, want %d with 2", len(c.Chunks), objs, 1<<20)
		}
		h := H(t)(w.OpenFile(f.Ino, syscall.O_RDONLY))
		defer h.Release()
		got := make([]byte, 4096)
		n, err := h.ReadAt(got, 0)
		noErr(t, err)
		eq(t, got[:n], append(data, make([]byte, 4096-len(data))...), "head")
	})
}

func ptr[T any](v T) *T { return &v }
