package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"wsfs/internal/agentstate"
)

func init() {
	register(command{
		name:      "state",
		summary:   "agent state database: restore from its replica, sync and wait",
		argsUsage: "NAME",
		about:     stateAbout,
		subcommands: []command{
			{name: "sync", summary: "wait until the replica has everything committed so far", run: runStateSync},
			{name: "restore", summary: "rebuild the database from the replica (latest, or --at TIME)", run: runStateRestore},
			{name: "replace", summary: "let the sidecar replicate the database over the state its replica holds", run: runStateReplace},
		},
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
restore --at a moment just after such a restart may not be.)`

const stateSyncAbout = `
Asks the running sidecar of workspace NAME to upload everything committed
so far and waits until the replica acknowledges it; prints the confirmed
position. After it returns, every transaction committed before the call
survives the loss of the host. Fails (exit 1) if no sidecar runs or the
sync fails.`

const stateRestoreAbout = `
Rebuilds the agent state database of workspace NAME from its replica into
--to PATH (default: the workspace's state.db, only if it does not exist).
--at restores the state as of TIME (RFC 3339, e.g. 2026-01-02T15:04:05Z);
a TIME outside the replica's range is refused with the range it has.
Never overwrites a file.`

const stateReplaceAbout = `
Declares that the agent state database of workspace NAME (created, empty,
if missing) replaces the state its replica holds. A sidecar refuses (exit 3)
to replicate a database that never replicated from this host to a replica
holding transactions, since every restore of the latest state would then
return that database; after 'wsfs state replace' the next sidecar start
does exactly that. For a workspace name reused after 'wsfs rm' (the old
workspace's replica stays in place; 'wsfs rm --remote' would have removed
it), or a state deliberately started
afresh; to keep the replica's state, use 'wsfs state restore' instead. The
replaced transactions stay reachable by 'wsfs state restore --at' until
Litestream's retention removes them. Prints what the replica held.`

func runStateReplace(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "state replace", "NAME", stateReplaceAbout)
	g.homeFlag(fs)
	replica := fs.String("replica", "", "replica path or URL (default: config, else POOL/replicas/NAME)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs)
	if err != nil {
		return err
	}
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return err
	}
	url, err := agentstate.ReplicaURL(h, name, *replica)
	if err != nil {
		return err
	}
	ext, err := agentstate.Replace(ctx, agentstate.PathsFor(h, name).DB, url, name)
	if err != nil {
		return err
	}
	if ext.MaxTXID == 0 {
		fmt.Fprintf(g.stdout, "%s: replica %s is empty; the sidecar replicates the database there\n", name, url)
		return nil
	}
	fmt.Fprintf(g.stdout, "%s: the next sidecar start replicates the database over replica %s (transactions %s to %s, written %s to %s)\n",
		name, url, ext.MinTXID, ext.MaxTXID, ext.First.Format(time.RFC3339), ext.Last.Format(time.RFC3339))
	return nil
}

func runStateSync(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "state sync", "NAME", stateSyncAbout)
	g.homeFlag(fs)
	timeout := fs.Duration("timeout", time.Minute, "give up (exit 1, nothing confirmed) after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs)
	if err != nil {
		return err
	}
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
	fs := newFlagSet(g, "state restore", "NAME", stateRestoreAbout)
	g.homeFlag(fs)
	to := fs.String("to", "", "database file to create (default: the workspace's state.db, if absent)")
	at := fs.String("at", "", "restore the state as of this time (RFC 3339); default: latest")
	replica := fs.String("replica", "", "replica path or URL (default: config, else POOL/replicas/NAME)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs)
	if err != nil {
		return err
	}
	var when time.Time
	if *at != "" {
		t, err := time.Parse(time.RFC3339Nano, *at)
		if err != nil {
			return usageError{fmt.Sprintf("--at %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", *at)}
		}
		when = t
	}
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
	// Restored as the workspace's own database, it continues the replica:
	// its sidecar may replicate it there (agentstate.RestoreOptions.Adopt).
	abs, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	adopt := abs == filepath.Clean(agentstate.PathsFor(h, name).DB)
	if err := agentstate.Restore(ctx, agentstate.RestoreOptions{ReplicaURL: url, To: dst, At: when, Adopt: adopt}); err != nil {
		if na := (*agentstate.NotAvailableError)(nil); errors.As(err, &na) {
			return preconditionError{err} // the replica lacks the state asked for
		}
		return err
	}
	fmt.Fprintf(g.stdout, "%s: restored %s from %s\n", name, dst, url)
	return nil
}
