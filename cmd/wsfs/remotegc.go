package main

import (
	"context"
	"fmt"
	"time"

	"wsfs/internal/ship"
)

func init() {
	register(command{
		name:    "remote-gc",
		summary: "remove from the remote tier what no workspace head needs (after a grace period)",
		run:     runRemoteGC,
	})
}

const remoteGCAbout = `
Removes from the host's remote bucket (under its prefix) the pool objects
that no workspace's head references, and the log batches and checkpoints
that no head names, each only once it is older than --grace. It reads and
replays every head first (any error: nothing is deleted). Safe while
shippers run: whatever a head will name was uploaded (or, if it was found
present from long ago, uploaded again) within one round, so it is younger
than the grace. The agent state replicas (PREFIX/agent/) are Litestream's
and left alone. --dry-run only reports.`

func runRemoteGC(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "remote-gc", "", remoteGCAbout)
	g.homeFlag(fs)
	grace := fs.Duration("grace", ship.DefaultGCGrace, "keep everything younger than this (at least 1h; at least twice the shippers' refresh age, 12h)")
	dry := fs.Bool("dry-run", false, "report what would be removed, remove nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *grace < ship.MinGCGrace {
		return usageError{fmt.Sprintf("--grace %v is shorter than the minimum %v", *grace, ship.MinGCGrace)}
	}
	h, err := openHostChecked(g.home, "")
	if err != nil {
		return err
	}
	_, st, err := openRemote(ctx, h, "")
	if err != nil {
		return err
	}
	s, err := ship.GC(ctx, st, *grace, time.Now(), *dry)
	if err != nil {
		return err
	}
	verb := "removed"
	if *dry {
		verb = "would remove"
	}
	fmt.Fprintf(g.stdout, "%s: %d workspaces, %d objects referenced; %s %d objects and %d log files (%d bytes); kept %d objects and %d log files younger than %v\n",
		st, s.Workspaces, s.Referenced, verb, s.ObjectsDeleted, s.LogFilesDeleted, s.BytesDeleted, s.ObjectsKept, s.LogFilesKept, *grace)
	return nil
}
