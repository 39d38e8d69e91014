package pool

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"wsfs/internal/vfs"
)

// BenchmarkDrainPhases splits the drain of one group into its phases as
// SyncObjects ran them before directory syncs overlapped the object syncs:
// the object syncs (fdatasync each, DefaultSyncParallel at once), then the
// fan-out directory syncs. It reimplements the two phases with the same
// helpers so that each can be timed. Run briefly: -benchtime=3x.
func BenchmarkDrainPhases(b *testing.B) {
	for _, objects := range []int{10, 200, 512} {
		for _, size := range []int{16 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("objects=%d/size=%dKiB", objects, size>>10), func(b *testing.B) {
				payload := make([][]byte, objects)
				for i := range payload {
					payload[i] = content(uint64(i)+7000, size)
				}
				root := b.TempDir()
				var objT, dirT time.Duration
				var dirs int
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
						data[0], data[1] = byte(n), byte(n>>8)
						if ids[i], _, err = p.Put(data); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
					t0 := time.Now()
					runBounded(len(ids), DefaultSyncParallel, func(i int) {
						if _, err := p.syncObject(ids[i]); err != nil {
							b.Error(err)
						}
					})
					t1 := time.Now()
					seen := map[string]bool{}
					var paths []string
					for _, id := range ids {
						if d := p.fanoutDir(id); !seen[d] {
							seen[d] = true
							paths = append(paths, d)
						}
					}
					paths = append(paths, p.objects)
					runBounded(len(paths), DefaultSyncParallel, func(i int) {
						if err := vfs.SyncDir(p.fs, paths[i]); err != nil {
							b.Error(err)
						}
					})
					t2 := time.Now()
					objT += t1.Sub(t0)
					dirT += t2.Sub(t1)
					dirs += len(paths)
					b.StopTimer()
					vfs.Default.RemoveAll(dir)
					b.StartTimer()
				}
				b.ReportMetric(float64(objT.Microseconds())/float64(b.N)/1000, "obj-ms/op")
				b.ReportMetric(float64(dirT.Microseconds())/float64(b.N)/1000, "dir-ms/op")
				b.ReportMetric(float64(dirs)/float64(b.N), "dirsyncs/op")
			})
		}
	}
}
