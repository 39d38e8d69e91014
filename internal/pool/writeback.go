package pool

import (
	"fmt"

	"wsfs/internal/vfs"
)

// writebackMin is the smallest object whose writeback publication starts
// (see startWriteback). BenchmarkDrainWriteback, 200 objects per group
// (docs/benchmarks.md, "Pool drain: directory syncs"): at 16 KiB it did not
// shorten the drain (16.8 vs 15.6 ms) and made publication 68 % slower; at
// 64 KiB and 256 KiB it halved the drain (28.4 to 14.5 ms, 50.1 to 27.0 ms).
const writebackMin = 64 << 10

// startWritebackPath starts writeback of the file at path (see
// startWriteback) through a read-only descriptor of its own.
func (p *Pool) startWritebackPath(path string) error {
	f, err := p.fs.Open(path)
	if err != nil {
		return fmt.Errorf("start writeback: %w", err)
	}
	err = startWriteback(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("start writeback: %w", cerr)
	}
	return err
}

// fdOf returns f's OS descriptor, or false if f is not backed by the OS
// (an in-memory file system: nothing to start).
func fdOf(f vfs.File) (int, bool) {
	fd := f.Fd()
	if fd == ^uintptr(0) {
		return 0, false
	}
	return int(fd), true
}
