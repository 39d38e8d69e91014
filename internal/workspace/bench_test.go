package workspace

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"
)

// BenchmarkSmallFile measures the engine cost of one small file as the
// FUSE adapter drives it (create, write 2 KiB, flush, release) on the OS
// file system; the group commit runs concurrently. The final Sync is
// inside the timing, so ns/op includes durability amortized over groups.
func BenchmarkSmallFile(b *testing.B) {
	b.StopTimer()
	w := diskEnv(b).open()
	defer w.Close()
	data := pattern(2048, 1)
	d, err := w.Mkdir(RootIno, "bench", 0o755, me)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	for i := 0; i < b.N; i++ {
		a, err := w.Create(d.Ino, fmt.Sprintf("f%d", i), 0o644, me)
		if err != nil {
			b.Fatal(err)
		}
		h, err := w.OpenFile(a.Ino, syscall.O_WRONLY)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.WriteAt(data, 0); err != nil {
			b.Fatal(err)
		}
		if err := h.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := h.Release(); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkInlineVsPooled measures small and medium files committed
// inline in the log against the same files as pool objects (each group
// then also syncs one object and its directory per file), on the OS file
// system, with an fsync-like barrier every 64 files. It is the measurement
// behind DefaultInlineMax.
func BenchmarkInlineVsPooled(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 10, 64 << 10} {
		for _, mode := range []string{"inline", "pooled"} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, mode), func(b *testing.B) {
				e := diskEnv(b)
				e.opts.InlineMax = size
				if mode == "pooled" {
					e.opts.InlineMax = 1
				}
				w := e.open()
				defer w.Close()
				d, err := w.Mkdir(RootIno, "bench", 0o755, me)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					data := pattern(size, uint64(i)) // distinct: no dedup
					a, err := w.Create(d.Ino, fmt.Sprintf("f%d", i), 0o644, me)
					if err != nil {
						b.Fatal(err)
					}
					h, err := w.OpenFile(a.Ino, syscall.O_WRONLY)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := h.WriteAt(data, 0); err != nil {
						b.Fatal(err)
					}
					if err := h.Release(); err != nil {
						b.Fatal(err)
					}
					if i%64 == 63 {
						if err := w.Sync(); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := w.Sync(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkLargeFileWrite measures the engine cost of writing one large
// file as the FUSE adapter delivers it (1 MiB WRITE requests, as MaxWrite
// allows), then Flush and Release: dirty-buffer growth, spilling past
// SpillSize, hashing and publication. The commit (drain and log sync) runs
// outside the timing, every 8 files.
func BenchmarkLargeFileWrite(b *testing.B) {
	for _, size := range []int{3 << 20, 7 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			w := diskEnv(b).open()
			defer w.Close()
			d, err := w.Mkdir(RootIno, "bench", 0o755, me)
			if err != nil {
				b.Fatal(err)
			}
			data := pattern(size, 1)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				binary.LittleEndian.PutUint64(data, uint64(i)) // distinct: no dedup
				a, err := w.Create(d.Ino, fmt.Sprintf("f%d", i), 0o644, me)
				if err != nil {
					b.Fatal(err)
				}
				h, err := w.OpenFile(a.Ino, syscall.O_WRONLY)
				if err != nil {
					b.Fatal(err)
				}
				for off := 0; off < size; off += 1 << 20 {
					if _, err := h.WriteAt(data[off:min(off+1<<20, size)], int64(off)); err != nil {
						b.Fatal(err)
					}
				}
				if err := h.Flush(); err != nil {
					b.Fatal(err)
				}
				if err := h.Release(); err != nil {
					b.Fatal(err)
				}
				if i%8 == 7 {
					b.StopTimer()
					if err := w.Sync(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkSmallChangeToLargeFile measures what a small change to a large
// published file costs: open, write 4 KiB (appended, or in the middle),
// close, as `echo >> build.log` or a database page write does, then fsync
// every 16 changes. With whole-file objects each change copied, rehashed
// and republished the whole file; with chunks it rewrites one chunk.
func BenchmarkSmallChangeToLargeFile(b *testing.B) {
	for _, size := range []int{16 << 20, 64 << 20} {
		for _, where := range []string{"append", "middle"} {
			b.Run(fmt.Sprintf("%dMiB/%s", size>>20, where), func(b *testing.B) {
				w := diskEnv(b).open()
				defer w.Close()
				a := writeFile(b, w, RootIno, "big", pattern(size, 1))
				noErr(b, w.Sync())
				page := pattern(4096, 2)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					h, err := w.OpenFile(a.Ino, syscall.O_WRONLY)
					if err != nil {
						b.Fatal(err)
					}
					off := int64(size / 2)
					if where == "append" {
						off = int64(size + i*len(page))
					}
					binary.LittleEndian.PutUint64(page, uint64(i))
					if _, err := h.WriteAt(page, off); err != nil {
						b.Fatal(err)
					}
					noErr(b, h.Flush())
					noErr(b, h.Release())
					if i%16 == 15 {
						noErr(b, w.Sync())
					}
				}
				noErr(b, w.Sync())
			})
		}
	}
}

// BenchmarkWALAppend measures the engine side of a SQLite WAL commit
// (synchronous=FULL) on the OS file system: a file kept open, grown by
// one 4 KiB page plus a 24-byte frame header per transaction, then fsync;
// the WAL's header is rewritten every 64 transactions. It reports
// cpu-us/op, the whole process's user+system CPU per transaction (the
// engine, the committer and the filesystem), besides wall time.
func BenchmarkWALAppend(b *testing.B) {
	for _, start := range []int{64 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("from-%dKiB", start>>10), func(b *testing.B) {
			w := diskEnv(b).open()
			defer w.Close()
			a := writeFile(b, w, RootIno, "db-wal", pattern(start, 1))
			noErr(b, w.Sync())
			h, err := w.OpenFile(a.Ino, syscall.O_RDWR)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Release()
			frame, page := pattern(24, 2), pattern(4096, 3)
			off := int64(start)
			var ru0, ru1 syscall.Rusage
			b.ReportAllocs()
			b.ResetTimer()
			noErr(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru0))
			for i := 0; i < b.N; i++ {
				binary.LittleEndian.PutUint64(frame, uint64(i))
				for _, p := range [][]byte{frame, page} {
					if _, err := h.WriteAt(p, off); err != nil {
						b.Fatal(err)
					}
					off += int64(len(p))
				}
				if i%64 == 63 {
					if _, err := h.WriteAt(frame[:8], 0); err != nil {
						b.Fatal(err)
					}
				}
				noErr(b, h.Fsync(false))
			}
			noErr(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru1))
			b.StopTimer()
			cpu := func(r *syscall.Rusage) int64 { return r.Utime.Nano() + r.Stime.Nano() }
			b.ReportMetric(float64(cpu(&ru1)-cpu(&ru0))/1e3/float64(b.N), "cpu-us/op")
		})
	}
}
