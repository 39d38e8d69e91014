package vfs

import (
	"errors"
	"fmt"
	"io/fs"
)

// ErrNotRegular is wrapped by every NotRegularError: test with
// errors.Is(err, ErrNotRegular).
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError reports that where wsfs keeps one of its files (a segment,
// a checkpoint, a config, an identity, the pool's format name) something
// else stands: a directory, a FIFO, a socket or a device. wsfs never makes
// one there, so it is damage or an operator's mistake; the message says
// what to do. Open returns it for a FIFO, socket or device (it never blocks
// on a FIFO), ReadFile also for a directory.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not the file wsfs keeps there (wsfs never makes one there): "+
		"move it aside (mv %s %s.bad), put the file back from a backup if there is one, then run `wsfs fsck`",
		e.Path, kindOf(e.Mode), e.Path, e.Path)
}

func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

// Kind names what stands at Path ("a directory", "a FIFO", ...).
func (e *NotRegularError) Kind() string { return kindOf(e.Mode) }

// kindOf names a non-regular file type with its article.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}
