package pool

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"wsfs/internal/vfs"
)

// BenchmarkDrainPhases splits the drain of one group of freshly published
// objects (a fresh pool per iteration, so fan-out directories are new)
// into SyncObjects' two phases: the object syncs (fdatasync each,
// DefaultSyncParallel at once), then the directory syncs (each fan-out
// directory holding an object, and objects/). It runs the phases with
// SyncObjects' own helpers so that each can be timed, and reports obj-ms,
// dir-ms and dirsyncs per drain. Run briefly: -benchtime=5x.
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
					dir, p, ids := freshPoolWith(b, root, n, payload)
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

// BenchmarkDrainWriteback compares publication with and without
// File.StartWriteback on the OS file system, paired: each iteration publishes
// and drains one group in a pool that starts writeback at publication and
// one group in a pool that does not, alternating which goes first, so that
// load drift on a shared machine hits both alike. Both pools live through
// the whole run (steady state: fan-out directories exist and are durable).
// It reports the median publication time (put-ms: Put of every object),
// drain time (drain-ms: SyncObjects) and their sum per group for each.
// Run briefly: -benchtime=10x.
func BenchmarkDrainWriteback(b *testing.B) {
	for _, objects := range []int{10, 200, 512} {
		for _, size := range []int{16 << 10, 64 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("objects=%d/size=%dKiB", objects, size>>10), func(b *testing.B) {
				payload := make([][]byte, objects)
				for i := range payload {
					payload[i] = content(uint64(i)+9000, size)
				}
				root := b.TempDir()
				names := []string{"wb=on", "wb=off"}
				var pools [2]*Pool
				for i := range pools {
					var err error
					if pools[i], err = Open(vfs.Default, filepath.Join(root, names[i]), Options{}); err != nil {
						b.Fatal(err)
					}
				}
				pools[1].writeback = false
				var put, drain, total [2][]float64
				n := 0
				round := func(v int, record bool) {
					n++
					ids := make([]ID, objects)
					t0 := time.Now()
					for i, data := range payload {
						data[0], data[1], data[2] = byte(n), byte(n>>8), byte(n>>16) // every object new
						var err error
						if ids[i], _, err = pools[v].Put(data); err != nil {
							b.Fatal(err)
						}
					}
					t1 := time.Now()
					if err := pools[v].SyncObjects(ids, 0); err != nil {
						b.Fatal(err)
					}
					t2 := time.Now()
					if record {
						put[v] = append(put[v], ms(t1.Sub(t0)))
						drain[v] = append(drain[v], ms(t2.Sub(t1)))
						total[v] = append(total[v], ms(t2.Sub(t0)))
					}
				}
				round(0, false) // warm up: fan-out directories exist
				round(1, false)
				it := 0
				for b.Loop() {
					round(it%2, true)
					round(1-it%2, true)
					it++
				}
				for v, name := range names {
					b.ReportMetric(median(put[v]), name+"-put-ms")
					b.ReportMetric(median(drain[v]), name+"-drain-ms")
					b.ReportMetric(median(total[v]), name+"-total-ms")
				}
			})
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// median returns the median of xs (0 if empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
