package pool

import (
	"fmt"

	"golang.org/x/sys/unix"

	"wsfs/internal/vfs"
)

// startWriteback asks the kernel to start writing f's dirty pages to disk
// now (sync_file_range(2) with SYNC_FILE_RANGE_WRITE only), so that the
// drain's fdatasync, typically tens or hundreds of milliseconds later,
// finds the data written or in flight instead of writing it all itself.
// See "Pool drain: directory syncs" in docs/benchmarks.md.
//
// It is a hint and proves nothing: it does not wait for the I/O, does not
// write metadata, and is not a sync (the drain's fdatasync remains the
// only proof of durability). It does not consume a writeback error either:
// without a WAIT flag the kernel does not check or advance the file's
// error sequence, so a later I/O error is still reported to the drain's
// fdatasync on its own descriptor. An error returned here (the submission
// failed, e.g. ENOSPC or EIO) fails the publication: the data may never be
// written.
func startWriteback(f vfs.File) error {
	fd, ok := fdOf(f)
	if !ok {
		return nil
	}
	if err := unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return fmt.Errorf("start writeback (sync_file_range): %w", err)
	}
	return nil
}
