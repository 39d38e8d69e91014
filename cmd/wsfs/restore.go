package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"wsfs/internal/daemon"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "restore",
		summary: "return a workspace to a snapshot (offline or while mounted; undoable)",
		run:     runRestore,
	})
}

func runRestore(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "restore", "NAME@ID", `
Returns workspace NAME to snapshot ID: its files and, if the snapshot
records one, its agent state database (set to the snapshot's copy in one
write transaction of the live database, so an agent or sidecar that has
it open sees the restored rows; a snapshot without agent state leaves
the database as it is). It first takes a snapshot of the state it
replaces (files and agent state) and prints it, so 'wsfs restore' of
that one undoes it.
Durable when the command returns. When a daemon serves NAME, the daemon
restores it (through its control socket) while it stays mounted: it holds
up file operations for the restore, takes the undo snapshot of everything
that completed before, swaps the tree, and invalidates the kernel's
caches. Files opened before the restore then fail with ESTALE; new opens,
ls and stat see the snapshot (see the README, "Snapshots").`)
	g.homeFlag(flags)
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	name, id, err := snapshotRefArg(flags)
	if err != nil {
		return err
	}
	h, p, err := snapshotHost(g, name)
	if err != nil {
		return err
	}
	target, err := snapshot.Get(vfs.Default, h.WorkspaceDir(name), id)
	if err != nil {
		return offlineError("wsfs restore", name, err)
	}
	start := time.Now()
	before, _, err := snapshot.Restore(offlineOptions(h, p, name, g.stderr), id, start)
	how := "offline"
	if errors.Is(err, vfs.ErrLocked) {
		rep, rerr := daemon.RequestRestore(ctx, h.WorkspaceDir(name), id)
		if errors.Is(rerr, daemon.ErrNoControl) {
			return lockedNoControl(h.WorkspaceDir(name), name, rerr, err)
		}
		if errors.Is(rerr, daemon.ErrNoReply) {
			return noReply("restore", name, id, rerr)
		}
		if rerr != nil {
			if rep.Before != 0 {
				return fmt.Errorf("%w (the undo snapshot %s@%d was taken; the workspace is unchanged unless the daemon says otherwise in its log)", rerr, name, rep.Before)
			}
			return rerr
		}
		if rep.Warning != "" {
			fmt.Fprintf(g.stderr, "wsfs: warning: %s\n", rep.Warning)
		}
		before = snapshot.Info{ID: rep.Before}
		err, how = nil, "through the daemon"
	}
	if err != nil {
		return offlineError("wsfs restore", name, err)
	}
	fmt.Fprintf(g.stderr, "wsfs: restore of %s to %s@%d (%s) in %v\n", name, name, id, how, time.Since(start).Round(time.Millisecond))
	agent := "files and agent state"
	if target.Agent == nil {
		agent = "files (the snapshot records no agent state: the agent database is left as it is)"
	}
	fmt.Fprintf(g.stdout, "wsfs: restored %s to %s@%d: %s; the state it replaced is %s@%d (undo: wsfs restore %s@%d)\n",
		name, name, id, agent, name, before.ID, name, before.ID)
	return nil
}
