package fusefs

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"wsfs/internal/workspace"
)

// status is the one place where an error becomes a FUSE status.
//
// The engine wraps a syscall.Errno in every error it means the caller to see
// (*workspace.Error: ENOENT, EEXIST, ENOTEMPTY, ...); that errno is returned
// as is. Anything else is a bug or an I/O failure the engine did not
// classify: it is logged with its full text and answered with EIO, so a
// caller never gets success for an operation that failed. EIO is always
// logged too, because the errno alone hides the cause (a failed sync, a
// corrupt object).
//
// A full disk or quota wins over the EIO that a failed commit also carries
// (commit.FailedError and DrainError unwrap to EIO and their cause): the
// writer learns that space ran out, which is what to fix.
func (r *rawFS) status(op string, err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	// The common failures (ENOENT of a lookup, EEXIST) are a bare errno
	// in a *workspace.Error: read it without errors.Is and errors.As,
	// whose reflection was 3 % of the daemon's CPU on small-file creates.
	var bare syscall.Errno
	switch e := err.(type) {
	case syscall.Errno:
		bare = e
	case *workspace.Error:
		bare, _ = e.Err.(syscall.Errno)
	}
	switch bare {
	case 0, syscall.ENOSPC, syscall.EDQUOT, syscall.EIO:
		// Not bare, or one that is logged: classified below.
	default:
		return fuse.Status(bare)
	}
	for _, space := range [...]syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		if errors.Is(err, space) {
			r.log.Error("out of space", "op", op, "err", err)
			return fuse.Status(space)
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if errno == syscall.EIO {
			r.log.Error("I/O error returned to the caller", "op", op, "err", err)
		}
		return fuse.Status(errno)
	}
	r.log.Error("unclassified engine error, returning EIO", "op", op, "err", err)
	return fuse.EIO
}

// PreconditionError is returned by Mount and the Check functions when the
// environment does not allow a mount (no /dev/fuse, no permission, a bad
// mount point). The message says what is wrong and what to do.
type PreconditionError struct{ msg string }

func (e *PreconditionError) Error() string { return e.msg }

func precondition(format string, args ...any) error {
	return &PreconditionError{msg: fmt.Sprintf(format, args...)}
}
