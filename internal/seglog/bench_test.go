package seglog

import (
	"fmt"
	"path/filepath"
	"testing"

	"wsfs/internal/vfs"
)

// BenchmarkAppendSync measures the committer's pattern on the real file
// system: one group appended, then one fdatasync; a group of 512 records
// (a busy workspace) or of one (an fsync of one small write, as SQLite's
// commits). MB/s counts record payload bytes.
func BenchmarkAppendSync(b *testing.B) {
	for _, c := range []struct{ size, groupLen int }{{100, 512}, {4 << 10, 512}, {100, 1}, {4 << 10, 1}} {
		size, groupLen := c.size, c.groupLen
		b.Run(fmt.Sprintf("rec=%dB/group=%d", size, groupLen), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "log")
			l, err := Open(vfs.Default, dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			recs := make([][]byte, groupLen)
			for i := range recs {
				recs[i] = make([]byte, size)
				for j := range recs[i] {
					recs[i][j] = byte(i + j)
				}
			}
			b.SetBytes(int64(groupLen * size))
			b.ResetTimer()
			for b.Loop() {
				if _, err := l.Append(recs); err != nil {
					b.Fatal(err)
				}
				if err := l.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "groups/s")
		})
	}
}
