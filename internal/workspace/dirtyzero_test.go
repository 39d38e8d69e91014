package workspace

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
)

// Dirty buffers are recycled with their old bytes (getBuf), and a write
// zeroes only the bytes of a new buffer it does not overwrite (growMem,
// overwriteBuf). These tests fill the buffer pools with poison (0xAA)
// before every operation and compare every byte read back with a plain
// byte slice: a byte neither zeroed nor written would read as poison, or
// as another file's bytes. Written data never holds poisonByte.

const poisonByte = 0xAA

// poisonBufPools puts buffers full of poisonByte into every buffer pool
// class up to maxShift (sync.Pool may drop some; each operation refills).
func poisonBufPools(maxShift int) {
	for s := minPooledShift; s <= min(maxShift, maxPooledShift); s++ {
		for range 4 {
			b := make([]byte, 1<<s)
			for i := range b {
				b[i] = poisonByte
			}
			putBuf(b)
		}
	}
}

// dirtyData returns n bytes of a pattern without poisonByte (or zeros,
// which may become holes).
func dirtyData(n int, seed uint64, zero bool) []byte {
	b := make([]byte, n)
	if zero {
		return b
	}
	r := rand.New(rand.NewPCG(seed, 3))
	for i := range b {
		b[i] = byte(1 + r.IntN(0x7f)) // 1..0x7f
	}
	return b
}

// dirtyOps interprets prog as operations on three files of a workspace in
// e (chunk size chosen by prog's first byte) and checks each file against
// a model after every operation, after a workspace reopen, and at the end.
func dirtyOps(t *testing.T, e *env, prog []byte) {
	next := func() int {
		if len(prog) == 0 {
			return 0
		}
		b := prog[0]
		prog = prog[1:]
		return int(b)
	}
	next16 := func() int { return next()<<8 | next() }
	chunk := []int{256, 4096, 8192}[next()%3]
	maxSize := 40 * chunk // keeps a program's files, and its run, small
	e.opts.InlineMax = 100
	e.opts.ChunkSize = chunk
	poisonShift := 16 // every class growMem and chunk buffers use here
	poisonBufPools(poisonShift)
	w := e.open()
	defer func() { w.Close() }()

	type file struct {
		name   string
		ino    Ino
		h      *Handle // nil: closed
		model  []byte
		orphan bool // unlinked while open: gone at its last close
	}
	created := 0
	create := func(f *file) {
		*f = file{name: fmt.Sprintf("f%d", created)}
		created++
		f.ino = A(t)(w.Create(RootIno, f.name, 0o644, me)).Ino
		f.h = H(t)(w.OpenFile(f.ino, syscall.O_RDWR))
	}
	var files [3]*file
	for i := range files {
		files[i] = &file{}
		create(files[i])
	}
	// closeFile closes f; an orphan is replaced by a new file, closed.
	closeFile := func(f *file) {
		if f.h != nil {
			noErr(t, f.h.Release())
			f.h = nil
		}
		if f.orphan {
			create(f)
			noErr(t, f.h.Release())
			f.h = nil
		}
	}
	check := func(f *file, what string) {
		t.Helper()
		if a := A(t)(w.GetAttr(f.ino)); a.Size != uint64(len(f.model)) {
			t.Fatalf("%s: size %d, want %d", what, a.Size, len(f.model))
		}
		var got []byte
		if f.h != nil {
			got = make([]byte, len(f.model)+100)
			n, err := f.h.ReadAt(got, 0)
			noErr(t, err)
			got = got[:n]
		} else {
			got = readAll(t, w, f.ino)
		}
		if !bytes.Equal(got, f.model) {
			for i := range min(len(got), len(f.model)) {
				if got[i] != f.model[i] {
					t.Fatalf("%s: %d bytes, first difference at %d (chunk %d + %d): got %#x, want %#x (%d bytes)",
						what, len(got), i, i/chunk, i%chunk, got[i], f.model[i], len(f.model))
				}
			}
			t.Fatalf("%s: got %d bytes, want %d", what, len(got), len(f.model))
		}
	}
	reopen := func(f *file) {
		if f.h == nil {
			f.h = H(t)(w.OpenFile(f.ino, syscall.O_RDWR))
		}
	}
	for step := 0; len(prog) > 0; step++ {
		f := files[next()%len(files)]
		op := next() % 17
		what := fmt.Sprintf("step %d (op %d, chunk %d)", step, op, chunk)
		poisonBufPools(poisonShift)
		switch {
		case op < 8: // write
			reopen(f)
			size := len(f.model)
			var off int
			switch next() % 6 {
			case 0: // within or just past the content
				off = next16() % (size + 64)
			case 1: // on a chunk boundary
				off = next() % 12 * chunk
			case 2: // sparse, far past EOF
				off = size + chunk*(1+next()%10) + next16()%chunk
			case 3: // straddling a chunk boundary
				off = max(0, (next()%12)*chunk-1-next()%16)
			case 4: // at EOF (append)
				off = size
			default: // overwrite of existing content
				off = next16() % (size + 1)
			}
			var n int
			switch next() % 5 {
			case 0: // short
				n = 1 + next()%16
			case 1: // one whole chunk
				n = chunk
			case 2: // past the chunk size, straddling
				n = chunk + 1 + next16()%chunk
			case 3: // many chunks (more than maxDirtyChunks)
				n = chunk * (1 + next()%(maxDirtyChunks+3))
			default:
				n = 1 + next16()%(2*chunk)
			}
			n = min(n, maxSize)
			off %= maxSize - n + 1
			p := dirtyData(n, uint64(step), next()%6 == 0)
			k, err := f.h.WriteAt(p, int64(off))
			noErr(t, err)
			if k != n {
				t.Fatalf("%s: wrote %d of %d bytes", what, k, n)
			}
			if end := off + n; end > len(f.model) {
				f.model = append(f.model, make([]byte, end-len(f.model))...)
			}
			copy(f.model[off:], p)
		case op < 10: // truncate, down or up
			var size int
			switch next() % 3 {
			case 0:
				size = next16() % (len(f.model) + 1)
			case 1:
				size = next() % 12 * chunk
			default:
				size = len(f.model) + next16()%(3*chunk)
			}
			size %= maxSize + 1
			_, err := w.SetAttr(f.ino, SetAttrIn{Size: ptr(uint64(size))})
			noErr(t, err)
			if size < len(f.model) {
				f.model = f.model[:size]
			} else {
				f.model = append(f.model, make([]byte, size-len(f.model))...)
			}
		case op == 10:
			if f.h != nil {
				noErr(t, f.h.Flush())
			}
		case op == 11:
			if f.h != nil {
				noErr(t, f.h.Fsync(false))
			}
		case op == 12: // last close: dirty buffers go back to the pools
			closeFile(f)
		case op == 13: // O_TRUNC open
			closeFile(f)
			f.h = H(t)(w.OpenFile(f.ino, syscall.O_RDWR|syscall.O_TRUNC))
			f.model = f.model[:0]
		case op == 14: // reopen the workspace, maybe with another chunk size
			for _, g := range files {
				closeFile(g)
			}
			noErr(t, w.Close())
			e.opts.ChunkSize = []int{256, 4096, 8192}[next()%3] // existing content keeps its chunks
			poisonBufPools(poisonShift)
			w = e.open()
		case op == 15: // check every file
			for i, g := range files {
				check(g, fmt.Sprintf("%s file %d", what, i))
			}
		default: // unlink while open: an orphan keeps its dirty content (never published)
			if !f.orphan {
				reopen(f)
				noErr(t, w.Unlink(RootIno, f.name))
				f.orphan = true
			}
		}
		check(f, what)
	}
	for _, f := range files {
		closeFile(f)
	}
	noErr(t, w.Close())
	poisonBufPools(poisonShift)
	w = e.open()
	for i, f := range files {
		check(f, fmt.Sprintf("file %d after the last reopen", i))
	}
}

// TestDirtyNoStaleBytes runs fixed and random programs of dirtyOps with
// poisoned buffer pools, each in a fresh workspace on MemFS and on the OS
// file system.
func TestDirtyNoStaleBytes(t *testing.T) {
	for i, prog := range dirtyProgs() {
		t.Run(fmt.Sprintf("mem/%d", i), func(t *testing.T) { dirtyOps(t, memEnv(t), prog) })
		t.Run(fmt.Sprintf("os/%d", i), func(t *testing.T) { dirtyOps(t, diskEnv(t), prog) })
	}
}

// dirtyProgs returns the fixed programs (the paths named in dirtyOps'
// cases, one by one) and a few random ones.
func dirtyProgs() [][]byte {
	progs := [][]byte{
		// Small file grown past its end (growMem, from > old), then a
		// truncate down and a write past the new end within the old
		// capacity.
		{1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 4, 0, 0, 1, 1, 0, 8, 0, 0, 0, 50, 0, 2, 0, 0, 0, 0, 0, 0, 0},
		// A sparse write far past EOF into fresh chunks, then one across a boundary.
		{0, 0, 0, 2, 3, 0, 0, 0, 0, 0, 0, 3, 5, 3, 1, 0, 0},
		// Many whole chunks, a release (buffers recycled), another file written.
		{2, 0, 0, 1, 0, 3, 9, 0, 0, 12, 1, 0, 2, 4, 0, 0, 2, 2, 0, 15},
		// An orphan (unlinked while open, never published) truncated
		// mid-chunk and extended again: chunked, then small.
		{0, 0, 0, 4, 3, 2, 1, 0, 16, 0, 8, 0, 1, 44, 0, 8, 2, 1, 0, 0, 15,
			1, 0, 4, 4, 0, 199, 1, 1, 16, 1, 8, 0, 0, 50, 1, 8, 2, 0, 100, 1, 15},
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 4 {
		p := make([]byte, 400)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		progs = append(progs, p)
	}
	return progs
}

// FuzzDirtyWrites: any program of dirtyOps reads back exactly what its
// model holds, with poisoned buffer pools.
// Run: go test ./internal/workspace -run '^$' -fuzz FuzzDirtyWrites
func FuzzDirtyWrites(f *testing.F) {
	for _, p := range dirtyProgs() {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 400 {
			prog = prog[:400]
		}
		dirtyOps(t, memEnv(t), prog)
	})
}

// TestDirtyNoStaleBytesConcurrent: files written, truncated, flushed and
// closed by several goroutines at once share the buffer pools; each reads
// back exactly its own bytes.
func TestDirtyNoStaleBytesConcurrent(t *testing.T) {
	e := memEnv(t)
	e.opts.InlineMax = 100
	e.opts.ChunkSize = 256
	w := e.open()
	defer w.Close()
	poisonBufPools(16)
	done := make(chan error)
	const workers = 4
	for g := range workers {
		go func() { done <- dirtyWorker(w, g) }()
	}
	for range workers {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// dirtyWorker runs random operations on file g of w, checking its content
// after each.
func dirtyWorker(w *Workspace, g int) error {
	r := rand.New(rand.NewPCG(uint64(g), 5))
	a, err := w.Create(RootIno, fmt.Sprintf("c%d", g), 0o644, me)
	if err != nil {
		return err
	}
	var h *Handle
	var model []byte
	for step := range 150 {
		poisonBufPools(16)
		if h == nil {
			if h, err = w.OpenFile(a.Ino, syscall.O_RDWR); err != nil {
				return err
			}
		}
		switch k := r.IntN(10); {
		case k < 6:
			n := 1 + r.IntN(1000)
			off := r.IntN(len(model) + 2000)
			p := dirtyData(n, r.Uint64(), r.IntN(6) == 0)
			if _, err := h.WriteAt(p, int64(off)); err != nil {
				return err
			}
			if end := off + n; end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], p)
		case k < 8:
			size := r.IntN(len(model) + 1000)
			if _, err := w.SetAttr(a.Ino, SetAttrIn{Size: ptr(uint64(size))}); err != nil {
				return err
			}
			if size < len(model) {
				model = model[:size]
			} else {
				model = append(model, make([]byte, size-len(model))...)
			}
		case k < 9:
			if err := h.Flush(); err != nil {
				return err
			}
		default: // last close: buffers back to the pools
			if err := h.Release(); err != nil {
				return err
			}
			h = nil
			continue
		}
		got := make([]byte, len(model)+10)
		n, err := h.ReadAt(got, 0)
		if err != nil {
			return err
		}
		if !bytes.Equal(got[:n], model) {
			i := 0
			for i < min(n, len(model)) && got[i] == model[i] {
				i++
			}
			return fmt.Errorf("file %d step %d: read %d bytes, want %d; first difference at %d", g, step, n, len(model), i)
		}
	}
	if h != nil {
		return h.Release()
	}
	return nil
}
