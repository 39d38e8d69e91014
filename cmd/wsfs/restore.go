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
Returns workspace NAME to snapshot ID. It first takes a snapshot of the
state it replaces and prints it, so 'wsfs restore' of that one undoes it.
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
	before, _, err := snapshot.Restore(offlineOptions(h, p, name, g.stderr), id, time.Now())
	if err != nil {
		return offlineError("wsfs restore", name, err)
	}
	fmt.Fprintf(g.stdout, "wsfs: restored %s to %s@%d; the state it replaced is %s@%d (undo: wsfs restore %s@%d)\n",
		name, name, id, name, before.ID, name, before.ID)
	return nil
}
