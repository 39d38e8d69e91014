package main

import "errors"

// Exit codes. Scripts may rely on these; do not renumber.
//
//	0  success
//	1  runtime failure (I/O error, failed sync, verification failure)
//	2  usage error (unknown command, wrong flag, missing argument)
//	3  precondition not met (no /dev/fuse, not root, mount point busy,
//	   workspace locked by another daemon, unknown workspace)
//	4  data problem (corrupt log or object); the message says what to do
const (
	exitOK           = 0
	exitFailure      = 1
	exitUsage        = 2
	exitPrecondition = 3
	exitCorrupt      = 4
)

// usageError marks an error as the caller's wrong invocation.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// preconditionError marks an error as an unmet precondition.
type preconditionError struct{ err error }

func (e preconditionError) Error() string { return e.err.Error() }
func (e preconditionError) Unwrap() error { return e.err }

// corruptError marks an error as corrupt stored data.
type corruptError struct{ err error }

func (e corruptError) Error() string { return e.err.Error() }
func (e corruptError) Unwrap() error { return e.err }

func exitCodeOf(err error) int {
	var u usageError
	var p preconditionError
	var c corruptError
	switch {
	case errors.As(err, &u):
		return exitUsage
	case errors.As(err, &p):
		return exitPrecondition
	case errors.As(err, &c):
		return exitCorrupt
	}
	return exitFailure
}
