package pool

import (
	"golang.org/x/sys/unix"

	"wsfs/internal/vfs"
)

// startWriteback asks the kernel to start writing f's dirty pages back
// (sync_file_range SYNC_FILE_RANGE_WRITE). It is only a hint: it proves
// nothing and waits for nothing; an error is ignored (it does not consume
// a writeback error, so the drain's fdatasync still reports one).
func startWriteback(f vfs.File) {
	if fd := f.Fd(); fd != ^uintptr(0) {
		_ = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
}
