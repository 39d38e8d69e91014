package main

import (
	"context"
	"fmt"
	"time"

	"wsfs/internal/snapshot"
)

func init() {
	register(command{
		name:    "restore",
		summary: "return a workspace to a snapshot (offline; undoable)",
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
Durable when the command returns. For now the workspace must not be
served: with a daemon running the command exits 3.`)
	g.homeFlag(flags)
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usageError{fmt.Sprintf("want one NAME@ID, got %d arguments", flags.NArg())}
	}
	name, id, err := parseSnapshotRef(flags.Arg(0))
	if err != nil {
		return err
	}
	h, p, err := snapshotHost(g, name)
	if err != nil {
		return err
	}
	before, target, err := snapshot.Restore(offlineOptions(h, p, name, g.stderr), id, time.Now())
	if err != nil {
		return offlineError("wsfs restore", name, err)
	}
	agent := "files and agent state"
	if target.Agent == nil {
		agent = "files (the snapshot records no agent state: the agent database is left as it is)"
	}
	fmt.Fprintf(g.stdout, "wsfs: restored %s to %s@%d: %s; the state it replaced is %s@%d (undo: wsfs restore %s@%d)\n",
		name, name, id, agent, name, before.ID, name, before.ID)
	return nil
}
