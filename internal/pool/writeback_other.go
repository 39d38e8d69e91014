//go:build !linux

package pool

import "wsfs/internal/vfs"

// startWriteback does nothing outside Linux (no sync_file_range); the
// drain's fdatasync writes the data. See writeback_linux.go.
func startWriteback(f vfs.File) error { return nil }
