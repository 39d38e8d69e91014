package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// neighbourChunk is the size of each file a noisy neighbour writes.
const neighbourChunk = 64 << 20

// RunNeighbour is the body of `wsfs agent neighbour`: it writes buffered data
// into dir in files of 64 MiB, never syncing, until total bytes are on disk,
// then rewrites the same files from the start, over and over, until ctx is
// done. It keeps up to total bytes of dirty pages on the filesystem, as an
// unrelated tenant writing a large build or dataset would. Its files are left
// in dir for the harness to remove.
func RunNeighbour(ctx context.Context, dir string, total int64) error {
	if total < neighbourChunk {
		total = neighbourChunk
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("neighbour: %w", err)
	}
	buf := make([]byte, neighbourChunk)
	_, _ = rand.NewChaCha8([32]byte{'n'}).Read(buf)
	files := int((total + neighbourChunk - 1) / neighbourChunk)
	for round := 0; ; round++ {
		for i := range files {
			if ctx.Err() != nil {
				return nil
			}
			buf[0] = byte(round) // new content each round, so pages are dirtied again
			p := filepath.Join(dir, fmt.Sprintf("n%04d", i))
			if err := writeChunks(ctx, p, buf); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("neighbour: %w", err)
			}
		}
	}
}

// writeChunks writes buf to p in 1 MiB writes, stopping early when ctx ends.
func writeChunks(ctx context.Context, p string, buf []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for off := 0; off < len(buf) && ctx.Err() == nil; off += 1 << 20 {
		if _, err := f.Write(buf[off : off+(1<<20)]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
