package commit

import (
	"errors"
	"fmt"
	"syscall"
)

// ErrClosed is returned by Enqueue once Close has been called.
var ErrClosed = errors.New("commit: the committer is closed; no more records can be enqueued")

// DrainError reports that a group's drain failed, so the group was not
// committed: none of its records reached the log. The committer keeps the
// records at the front of its queue (same order, same Tickets), republishes
// every object of the group from the pool's verified copy, and tries again;
// a later Wait or Barrier may therefore succeed.
//
// errors.Is(err, syscall.EIO) holds, so an fsync waiting on the group fails
// with EIO; errors.Is also matches the cause.
type DrainError struct {
	Drain       Drain  // drain mode of the failed attempt
	First, Last Ticket // the group's records
	Objects     int    // distinct pool objects the group references
	Err         error  // what failed
}

func (e *DrainError) Error() string {
	return fmt.Sprintf("commit: drain (%s) of records %d..%d (%d pool objects) failed, so none of them was committed; "+
		"the objects are republished and the records retried: %v", e.Drain, e.First, e.Last, e.Objects, e.Err)
}

// Unwrap returns syscall.EIO and the cause.
func (e *DrainError) Unwrap() []error { return []error{syscall.EIO, e.Err} }

// LogFullError reports that a group was not committed because the log's
// filesystem is full: nothing of it was appended, its records are queued
// again, and the committer retries until there is space. Waiting again
// after space is freed may succeed. errors.Is(err, syscall.ENOSPC) (or
// EDQUOT) holds: free space on the filesystem holding the workspace state.
type LogFullError struct {
	First, Last Ticket // the group's records
	Err         error  // the log's error, wrapping ENOSPC or EDQUOT
}

func (e *LogFullError) Error() string {
	return fmt.Sprintf("commit: records %d..%d were not committed: the filesystem holding the log is full; "+
		"free space there (they are retried every %v): %v", e.First, e.Last, logFullRetry, e.Err)
}

func (e *LogFullError) Unwrap() error { return e.Err }

// FailedError reports that the committer has failed for good. It happens
// when the log's Append fails other than for a full filesystem, or its
// Sync fails (after a failed sync the kernel may
// have dropped the dirty pages, so a retried sync would prove nothing), when
// republishing an object after a failed drain fails, or when drains keep
// failing. Every waiter of an uncommitted record, every later Enqueue, Wait
// and Barrier, and Close return it. The log holds exactly the groups up to
// LastGroup (or fewer, if the failure was a sync); the workspace must be
// remounted so that recovery reads what is durable.
//
// errors.Is(err, syscall.EIO) holds; errors.Is also matches the cause.
type FailedError struct {
	Op        string // what failed: "log append", "log sync", "republish", "drain"
	LastGroup uint64 // the last group known durable
	Err       error
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("commit: %s failed, the workspace has failed and commits nothing more "+
		"(the last group known durable is %d); remount the workspace, recovery reads what is durable: %v",
		e.Op, e.LastGroup, e.Err)
}

// Unwrap returns syscall.EIO and the cause.
func (e *FailedError) Unwrap() []error { return []error{syscall.EIO, e.Err} }
