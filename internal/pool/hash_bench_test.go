package pool

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/zeebo/blake3"
)

// BenchmarkHash compares the two candidate content hashes at the sizes the
// pool sees: small pooled objects (4 KiB, 64 KiB) and large files (8 MiB).
// The result decided Sum's algorithm; see the comment on Sum.
func BenchmarkHash(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 8 << 20} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		b.Run(fmt.Sprintf("blake3/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				blake3.Sum256(data)
			}
		})
		b.Run(fmt.Sprintf("sha256/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				sha256.Sum256(data)
			}
		})
	}
}
