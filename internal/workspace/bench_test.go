package workspace

import (
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
