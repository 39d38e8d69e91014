package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "fork",
		summary: "make a new workspace from a snapshot (no copy of file contents)",
		run:     runFork,
	})
}

func runFork(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "fork", "NAME@ID NEW", `
Creates workspace NEW from snapshot NAME@ID. NEW shares every file content
with the snapshot through the pool (nothing is copied: the cost depends on
the number of files, not their bytes) and keeps the snapshot's inode
numbers. It appears atomically and is durable when the command returns;
mount it at once with 'wsfs mount NEW'. NAME may be served by a daemon
meanwhile. NEW's agent state database is the snapshot's copy of NAME's
(none if the snapshot records none); its sidecar replicates it to NEW's
own replica.`)
	g.homeFlag(flags)
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 2 {
		return usageError{fmt.Sprintf("want NAME@ID and NEW, got %d arguments", flags.NArg())}
	}
	name, id, err := parseSnapshotRef(flags.Arg(0))
	if err != nil {
		return err
	}
	newName := flags.Arg(1)
	if err := host.ValidateName(newName); err != nil {
		return usageError{err.Error()}
	}
	h, p, err := snapshotHost(g, name)
	if err != nil {
		return err
	}
	if err := h.CheckWorkspace(newName); err == nil {
		return preconditionError{fmt.Errorf("%w: %s", host.ErrWorkspaceExists, newName)}
	}
	if err := remoteNameFree(ctx, h, newName); err != nil {
		return err
	}
	start := time.Now()
	in, err := snapshot.Fork(vfs.Default, p, h.WorkspaceDir(name), id, h.WorkspaceDir(newName))
	if err != nil {
		if errors.Is(err, snapshot.ErrNotFound) {
			return preconditionError{err}
		}
		if errors.Is(err, fs.ErrExist) { // made meanwhile: another fork or create of NEW
			return preconditionError{fmt.Errorf("%w: %s (made while this fork ran; nothing was changed): %w", host.ErrWorkspaceExists, newName, err)}
		}
		return classifyOpenError(name, err)
	}
	// Registered after the directory exists, as `wsfs create` does, so
	// that gc never misses it.
	if err := h.RegisterWorkspace(newName); err != nil {
		return identityError(err)
	}
	fmt.Fprintf(g.stdout, "wsfs: forked %s@%d as %s (%s) in %v (mount it with: wsfs mount --home %s %s)\n",
		name, id, newName, agentSummary(in), time.Since(start).Round(time.Millisecond), h.Home(), newName)
	return nil
}
