package pool

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"wsfs/internal/vfs"
)

// BenchmarkDrainPaired runs the variants in turn within each iteration
// (paired, so that the machine's load drift hits all alike) and reports
// the median drain and publication time of each.
func BenchmarkDrainPaired(b *testing.B) {
	variants := []struct {
		name string
		opts Options
	}{
		{"base", Options{}},
		{"overlap", Options{expOverlap: true}},
		{"fan16", Options{expFanWidth: 1}},
		{"fan16+ov", Options{expFanWidth: 1, expOverlap: true}},
		{"fan16+wb", Options{expFanWidth: 1, expWriteback: true}},
		{"fan16+ov+wb", Options{expFanWidth: 1, expOverlap: true, expWriteback: true}},
	}
	for _, objects := range []int{10, 200, 512} {
		for _, size := range []int{16 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("objects=%d/size=%dKiB", objects, size>>10), func(b *testing.B) {
				payload := make([][]byte, objects)
				for i := range payload {
					payload[i] = content(uint64(i)+9000, size)
				}
				root := b.TempDir()
				pools := make([]*Pool, len(variants))
				for i, v := range variants {
					var err error
					if pools[i], err = Open(vfs.Default, filepath.Join(root, fmt.Sprint(i)), v.opts); err != nil {
						b.Fatal(err)
					}
				}
				n := 0
				drain := make([][]float64, len(variants))
				put := make([][]float64, len(variants))
				round := func(vi int, record bool) {
					p := pools[vi]
					n++
					ids := make([]ID, objects)
					t0 := time.Now()
					for i, data := range payload {
						data[0], data[1], data[2] = byte(n), byte(n>>8), byte(vi)
						var err error
						if ids[i], _, err = p.Put(data); err != nil {
							b.Fatal(err)
						}
					}
					t1 := time.Now()
					if err := p.SyncObjects(ids, 0); err != nil {
						b.Fatal(err)
					}
					t2 := time.Now()
					if record {
						put[vi] = append(put[vi], float64(t1.Sub(t0).Microseconds())/1000)
						drain[vi] = append(drain[vi], float64(t2.Sub(t1).Microseconds())/1000)
					}
				}
				for vi := range variants {
					round(vi, false) // warm up: fan-out directories exist
				}
				it := 0
				for b.Loop() {
					for k := range variants {
						round((k+it)%len(variants), true)
					}
					it++
				}
				for vi, v := range variants {
					tot := make([]float64, len(drain[vi]))
					for i := range tot {
						tot[i] = drain[vi][i] + put[vi][i]
					}
					b.ReportMetric(median(drain[vi]), v.name+"-drain-ms")
					b.ReportMetric(median(put[vi]), v.name+"-put-ms")
					b.ReportMetric(median(tot), v.name+"-total-ms")
				}
			})
		}
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
