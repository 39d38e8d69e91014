package main

import (
	"context"
	"fmt"
	"time"

	"wsfs/internal/agentstate"
)

func init() {
	register(command{
		name:    "state",
		summary: "agent state database: restore from its replica, sync and wait",
		run:     runState,
	})
}

const stateAbout = `
The agent state database of workspace NAME (STATE/workspaces/NAME/agent/
state.db, path given to agents in $WSFS_AGENT_STATE) is replicated by the
workspace's sidecar with Litestream.

What Litestream promises: replication is ASYNCHRONOUS. A committed
transaction reaches the replica within about one sync interval (1s by
default); if the host is lost, the last interval can be missing from the
replica. A restore always gives a consistent database: a prefix of the
committed transactions, not necessarily the last one. Agents should open
the database with PRAGMA wal_autocheckpoint=0 and leave checkpoints to the
sidecar. (Litestream v0.5.18 lost a page now and then when the application
checkpointed while the sidecar was down; each sidecar start therefore
uploads a full snapshot, so a restore of the latest state is complete. A
restore --at a moment just after such a restart may not be.)

  wsfs state sync NAME
      Ask the running sidecar to upload everything committed so far and wait
      until the replica acknowledges it; print the confirmed position. After
      it returns, every transaction committed before the call survives the
      loss of the host. Fails (exit 1) if no sidecar runs or the sync fails.

  wsfs state restore NAME [--to PATH] [--at TIME]
      Rebuild the database from the replica into PATH (default: the
      workspace's state.db, only if it does not exist). --at restores the
      state as of TIME (RFC 3339, e.g. 2026-01-02T15:04:05Z). Never
      overwrites a file.`

func runState(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		newFlagSet(g, "state", "sync|restore NAME", stateAbout).Usage()
		return usageError{"expected a subcommand: sync or restore"}
	}
	switch args[0] {
	case "sync":
		return runStateSync(ctx, g, args[1:])
	case "restore":
		return runStateRestore(ctx, g, args[1:])
	case "-h", "--help", "help":
		newFlagSet(g, "state", "sync|restore NAME", stateAbout).Usage()
		return nil
	}
	return usageError{fmt.Sprintf("unknown subcommand %q: expected sync or restore", args[0])}
}

func runStateSync(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "state sync", "NAME", stateAbout)
	g.homeFlag(fs)
	timeout := fs.Duration("timeout", time.Minute, "give up (exit 1, nothing confirmed) after this long")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() != 1 {
		return usageError{"expected one workspace NAME"}
	}
	name := fs.Arg(0)
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	pos, err := agentstate.RequestSync(ctx, agentstate.PathsFor(h, name).Socket)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(g.stdout, "%s: replica confirmed %s\n", name, pos)
	return nil
}

func runStateRestore(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "state restore", "NAME", stateAbout)
	g.homeFlag(fs)
	to := fs.String("to", "", "database file to create (default: the workspace's state.db, if absent)")
	at := fs.String("at", "", "restore the state as of this time (RFC 3339); default: latest")
	replica := fs.String("replica", "", "replica path or URL (default: config, else POOL/replicas/NAME)")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() != 1 {
		return usageError{"expected one workspace NAME"}
	}
	var when time.Time
	if *at != "" {
		t, err := time.Parse(time.RFC3339Nano, *at)
		if err != nil {
			return usageError{fmt.Sprintf("--at %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", *at)}
		}
		when = t
	}
	name := fs.Arg(0)
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return err
	}
	url, err := agentstate.ReplicaURL(h, name, *replica)
	if err != nil {
		return err
	}
	dst := *to
	if dst == "" {
		dst = agentstate.PathsFor(h, name).DB
	}
	if err := agentstate.Restore(ctx, agentstate.RestoreOptions{ReplicaURL: url, To: dst, At: when}); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s: restored %s from %s\n", name, dst, url)
	return nil
}
