package pool

import (
	"fmt"
	"path/filepath"
	"testing"

	"wsfs/internal/vfs"
)

// BenchmarkSyncObjects measures the drain of one group on the OS file
// system: 512 freshly published objects of 16 KiB, synced with 1, 4, 16 and
// 64 SyncData calls in flight. Every iteration publishes into a fresh pool
// directory (untimed) and removes it afterwards, so that no iteration pays
// for another's deletes. Run briefly: -benchtime=3x.
func BenchmarkSyncObjects(b *testing.B) {
	const objects, size = 512, 16 << 10
	payload := make([][]byte, objects)
	for i := range payload {
		payload[i] = content(uint64(i)+5000, size)
	}
	for _, parallel := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("parallel=%d", parallel), func(b *testing.B) {
			root := b.TempDir()
			b.SetBytes(objects * size)
			n := 0
			for b.Loop() {
				b.StopTimer()
				n++
				dir := filepath.Join(root, fmt.Sprintf("pool%d", n))
				p, err := Open(vfs.Default, dir, Options{})
				if err != nil {
					b.Fatal(err)
				}
				ids := make([]ID, objects)
				for i, data := range payload {
					// Vary the content per iteration so that objects are new.
					data[0] = byte(n)
					if ids[i], _, err = p.Put(data); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if err := p.SyncObjects(ids, parallel); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				vfs.Default.RemoveAll(dir)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*objects), "µs/object")
		})
	}
}
