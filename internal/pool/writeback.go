package pool

import (
	"fmt"

	"wsfs/internal/vfs"
)

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
