package main

import (
	"errors"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/layout"
	"wsfs/internal/pool"
	"wsfs/internal/ship"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
)

// Exit codes. Scripts may rely on these; do not renumber. exitCodes is the
// one table of them: 'wsfs -h' prints it and the README's table is checked
// against it (TestREADMEExitCodes; -update rewrites the README's).
const (
	exitOK           = 0
	exitFailure      = 1
	exitUsage        = 2
	exitPrecondition = 3
	exitCorrupt      = 4
)

// exitCodes says what each exit code means, in order.
var exitCodes = []struct {
	code    int
	meaning string
}{
	{exitOK, "success; also `-h`/`--help`, and a daemon or sidecar stopped by SIGINT/SIGTERM after its final commit or sync"},
	{exitFailure, "runtime failure: I/O error, failed sync, verification failure, a mount removed from outside, no sidecar answering `state sync`"},
	{exitUsage, "usage error: unknown command or flag, bad flag value, missing or extra argument, invalid workspace name (the message says what is wrong with it)"},
	{exitPrecondition, "precondition not met: no host or unknown workspace; no `/dev/fuse`; not root (mount, layout), or not the user the host belongs to; mount point missing, not empty, already mounted by a live daemon, or inside (or around) the host's own directories; workspace served by another daemon or sidecar; state or pool directory not empty (`layout create`); no layout, or a layout filesystem not mounted; gc unable to account for every workspace using the pool, or another gc running; a workspace pushed from this host (`push`, `sync`); a replica without the state asked for (`state restore`); a sidecar whose database never replicated from this host while its replica holds state (restore it first)"},
	{exitCorrupt, "corrupt data (log, object, snapshot catalog entry, a pulled workspace's fetch state, a file of an agent state replica, or a directory or FIFO where wsfs keeps a file): the message names the segment, object or file and what to do"},
}

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

// sentinelCodes classify the errors that packages mark with a sentinel, for
// commands that return them unwrapped: the first match wins, after the
// explicit usageError, preconditionError and corruptError marks.
var sentinelCodes = []struct {
	err  error
	code int
}{
	{host.ErrInvalidName, exitUsage},
	{host.ErrNoHost, exitPrecondition},
	{host.ErrNotOwner, exitPrecondition},
	{host.ErrNoWorkspace, exitPrecondition},
	{host.ErrWorkspaceExists, exitPrecondition},
	{vfs.ErrLocked, exitPrecondition}, // served by another daemon, sidecar or gc
	{layout.ErrNotRoot, exitPrecondition},
	{layout.ErrBusy, exitPrecondition},
	{layout.ErrNotEmpty, exitPrecondition},
	{layout.ErrNoLayout, exitPrecondition},
	{ship.ErrPushed, exitPrecondition}, // push, sync of a workspace pushed from here
	// A damaged catalog entry is corrupt data to every command that reads
	// it (snapshot ls, fork, diff, restore, gc), not only to some.
	{snapshot.ErrBadEntry, exitCorrupt},
	{ship.ErrBadFetchState, exitCorrupt}, // fsck, mount of a lazily pulled workspace
	{pool.ErrFormatDamaged, exitCorrupt}, // every command that opens the pool
	// A directory, FIFO, socket or device where wsfs keeps a file.
	{vfs.ErrNotRegular, exitCorrupt},
}

func exitCodeOf(err error) int {
	var u usageError
	var p preconditionError
	var c corruptError
	var na *agentstate.NotAvailableError
	var dr *agentstate.DamagedReplicaError
	switch {
	case errors.As(err, &u):
		return exitUsage
	case errors.As(err, &p):
		return exitPrecondition
	case errors.As(err, &c):
		return exitCorrupt
	case errors.As(err, &na):
		return exitPrecondition
	case errors.As(err, &dr):
		return exitCorrupt
	}
	for _, s := range sentinelCodes {
		if errors.Is(err, s.err) {
			return s.code
		}
	}
	return exitFailure
}
