package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"wsfs/internal/daemon"
	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

func init() {
	register(command{
		name:      "snapshot",
		summary:   "create, list, remove and prune a workspace's snapshots",
		argsUsage: "NAME | NAME@ID",
		about: `
A snapshot is a named, durable state of a workspace's tree and of its
agent state database, stored as content-addressed directory manifests
and a consistent copy of the database in the pool. It is durable when 'create' returns. Fork one with 'wsfs fork',
compare with 'wsfs diff', go back to one with 'wsfs restore'.`,
		subcommands: []command{
			{name: "create", summary: "snapshot NAME's durable state (through its daemon if one serves it)", run: runSnapshotCreate},
			{name: "ls", aliases: []string{"list"}, summary: "list NAME's snapshots", run: runSnapshotLs},
			{name: "rm", aliases: []string{"remove"}, summary: "remove snapshot NAME@ID (its objects go at the next gc)", run: runSnapshotRm},
			{name: "prune", summary: "remove the snapshots neither --keep-last nor --keep-within keeps", run: runSnapshotPrune},
		},
	})
}

// lockedNoControl is the error of snapshot create, restore and diff when
// workspace name (its directory wsDir) is locked (lockErr, wrapping
// vfs.ErrLocked and naming the holder) and no daemon answers on its
// control socket (rerr). With no socket file the holder serves none: it
// is another command working on the workspace offline (restore, snapshot,
// diff, fsck --repair, rm) or a daemon still recovering its log before it
// listens, and both end by themselves: wait and run the command again.
// With a socket file that nobody answers on, a daemon is stuck or too old
// to answer: stop or restart it.
func lockedNoControl(wsDir, name string, rerr, lockErr error) error {
	if _, err := os.Lstat(daemon.ControlSocketPath(wsDir)); errors.Is(err, fs.ErrNotExist) {
		return preconditionError{fmt.Errorf("workspace %s is busy: another wsfs process holds its lock and listens on no control socket "+
			"(another restore, snapshot, diff, fsck --repair or rm of it, or its daemon still starting): wait for it to finish, then run this again; "+
			"a daemon of an older wsfs never listens: stop it, or restart it with this wsfs (%w)", name, lockErr)}
	}
	return preconditionError{fmt.Errorf("workspace %s is served by a daemon that does not answer on its control socket (%v); stop it, or restart it with this wsfs: %w", name, rerr, lockErr)}
}

// noReply is the error of a request (snapshot create, restore, diff)
// whose daemon stopped before it answered (err wraps daemon.ErrNoReply):
// what may have been done, and how to find out.
func noReply(op, name string, id uint64, err error) error {
	var what string
	switch op {
	case "snapshot":
		what = fmt.Sprintf("the snapshot may or may not have been taken: 'wsfs snapshot ls %s' lists it if it was (a listed snapshot is complete)", name)
	case "restore":
		what = fmt.Sprintf("the restore may or may not have been done: if it started, 'wsfs snapshot ls %s' lists its undo snapshot, labelled \"before restore to %d\"; "+
			"serve %s again, compare with 'wsfs diff %s@%d' and run the restore again if it was not done", name, id, name, name, id)
	default:
		what = "nothing was changed: serve it again and run it again"
	}
	return fmt.Errorf("the daemon serving %s stopped before it answered (%w): %s", name, err, what)
}

// snapshotHost opens the host and its pool and checks workspace name.
func snapshotHost(g *globals, name string) (*host.Host, *pool.Pool, error) {
	if err := host.ValidateName(name); err != nil {
		return nil, nil, usageError{err.Error()}
	}
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return nil, nil, err
	}
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("open pool %s: %w", h.PoolDir(), err)
	}
	return h, p, nil
}

// offlineOptions are the options to open workspace name without serving
// it (recovery logs go nowhere unless they are warnings).
func offlineOptions(h *host.Host, p *pool.Pool, name string, stderr io.Writer) workspace.Options {
	return workspace.Options{Dir: h.WorkspaceDir(name), Pool: p,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
}

// offlineError explains a workspace that a daemon serves (exit 3) and
// classifies the rest.
func offlineError(cmd, name string, err error) error {
	if errors.Is(err, vfs.ErrLocked) {
		return preconditionError{fmt.Errorf("workspace %s is served by a daemon, and '%s' works only offline for now: stop the daemon (wsfs up / systemctl stop wsfs-mount@%s), run it, and mount again: %w", name, cmd, name, err)}
	}
	if errors.Is(err, snapshot.ErrNotFound) {
		return preconditionError{err}
	}
	return classifyOpenError(name, err)
}

// snapshotRefArg parses a command's one argument, NAME@ID.
func snapshotRefArg(flags *flag.FlagSet) (string, uint64, error) {
	if flags.NArg() != 1 {
		return "", 0, usageError{fmt.Sprintf("want one NAME@ID, got %d arguments", flags.NArg())}
	}
	return parseSnapshotRef(flags.Arg(0))
}

// parseSnapshotRef parses NAME@ID as a usage error if malformed.
func parseSnapshotRef(ref string) (string, uint64, error) {
	name, id, err := snapshot.ParseRef(ref)
	if err != nil {
		return "", 0, usageError{err.Error()}
	}
	return name, id, nil
}

func runSnapshotCreate(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "snapshot create", "NAME", `
Takes a snapshot of workspace NAME: its durable state, every operation
that completed before the command was called. It is durable (manifests
synced, catalog entry published and its directory synced) when the
command returns, and prints NAME@ID. When a daemon serves NAME, the
daemon takes it (through its control socket): writers wait at most for
the copy of the durable tree, readers not at all. If NAME has an agent
state database, the snapshot records a consistent copy of it (SQLite's
backup API, from a read transaction opened before the file cut: the
database as of one instant between the call and the file cut); the agent
and its sidecar are never blocked.`)
	g.homeFlag(flags)
	label := flags.String("label", "", fmt.Sprintf("a label to remember it by (at most %d bytes)", snapshot.MaxLabel))
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usageError{fmt.Sprintf("want one workspace NAME, got %d arguments", flags.NArg())}
	}
	if err := snapshot.ValidateNewLabel(*label); err != nil {
		return usageError{"--label: " + err.Error()}
	}
	name := flags.Arg(0)
	h, p, err := snapshotHost(g, name)
	if err != nil {
		return err
	}
	start := time.Now()
	in, st, err := snapshot.CreateOffline(offlineOptions(h, p, name, g.stderr), *label, start)
	how := "offline"
	if errors.Is(err, vfs.ErrLocked) {
		// Served: the daemon takes it.
		rep, rerr := daemon.RequestSnapshot(ctx, h.WorkspaceDir(name), *label)
		if errors.Is(rerr, daemon.ErrNoControl) {
			return lockedNoControl(h.WorkspaceDir(name), name, rerr, err)
		}
		if errors.Is(rerr, daemon.ErrNoReply) {
			return noReply("snapshot", name, 0, rerr)
		}
		if rerr != nil {
			return rerr
		}
		in = snapshot.Info{ID: rep.ID, Group: rep.Group}
		if rep.AgentBytes > 0 {
			in.Agent = &snapshot.AgentCopy{Size: rep.AgentBytes}
		}
		st.Dirs, st.Entries, st.Bytes = rep.Dirs, rep.Entries, rep.Bytes
		err, how = nil, "through the daemon"
	}
	if err != nil {
		return offlineError("wsfs snapshot create", name, err)
	}
	fmt.Fprintf(g.stdout, "%s@%d\n", name, in.ID)
	fmt.Fprintf(g.stderr, "wsfs: snapshot %s@%d of group %d (%s): %d directories, %d entries, %s of manifests, %s, in %v\n",
		name, in.ID, in.Group, how, st.Dirs, st.Entries, humanBytes(int64(st.Bytes)), agentSummary(in), time.Since(start).Round(time.Millisecond))
	return nil
}

// agentSummary says what agent state snapshot in records.
func agentSummary(in snapshot.Info) string {
	if in.Agent == nil {
		return "no agent state"
	}
	return "agent state " + humanBytes(int64(in.Agent.Size))
}

// snapshotJSON is one snapshot in `ls --json`.
type snapshotJSON struct {
	ID    uint64    `json:"id"`
	Label string    `json:"label"`
	Time  time.Time `json:"time"`
	Group uint64    `json:"group"`
	Root  string    `json:"root"`
	// Agent is the agent state copy it records; null: none.
	Agent *agentJSON `json:"agent"`
}

type agentJSON struct {
	Bytes  uint64 `json:"bytes"`
	Chunks int    `json:"chunks"`
}

func runSnapshotLs(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "snapshot ls", "NAME", `
Lists workspace NAME's snapshots, oldest first. AGENT is the size of the
agent state copy a snapshot records, or "none" (the workspace had no
agent database, or an older wsfs took the snapshot).`)
	g.homeFlag(flags)
	asJSON := flags.Bool("json", false, "print JSON")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usageError{fmt.Sprintf("want one workspace NAME, got %d arguments", flags.NArg())}
	}
	name := flags.Arg(0)
	h, _, err := snapshotHost(g, name)
	if err != nil {
		return err
	}
	all, err := snapshot.List(vfs.Default, h.WorkspaceDir(name))
	if err != nil {
		return corruptError{err}
	}
	if *asJSON {
		out := make([]snapshotJSON, 0, len(all))
		for _, in := range all {
			j := snapshotJSON{ID: in.ID, Label: in.Label, Time: in.Time.UTC(), Group: in.Group, Root: in.Root.String()}
			if in.Agent != nil {
				j.Agent = &agentJSON{Bytes: in.Agent.Size, Chunks: len(in.Agent.Content.Chunks)}
			}
			out = append(out, j)
		}
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tTIME\tGROUP\tROOT\tAGENT\tLABEL")
	for _, in := range all {
		label := in.Label
		if snapshot.ValidateLabel(label) != nil { // written by an older wsfs
			label = strconv.Quote(label)
		}
		agent := "none"
		if in.Agent != nil {
			agent = humanBytes(int64(in.Agent.Size))
		}
		fmt.Fprintf(tw, "%s@%d\t%s\t%d\t%.12s\t%s\t%s\n", name, in.ID, in.Time.Local().Format(time.RFC3339), in.Group, in.Root.String(), agent, label)
	}
	return tw.Flush()
}

func runSnapshotRm(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "snapshot rm", "NAME@ID", `
Removes a snapshot from the catalog, durably. Its objects stay in the
pool until 'wsfs gc' finds nothing else referencing them. IDs are never
reused.`)
	g.homeFlag(flags)
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	name, id, err := snapshotRefArg(flags)
	if err != nil {
		return err
	}
	h, _, err := snapshotHost(g, name)
	if err != nil {
		return err
	}
	if err := snapshot.Remove(vfs.Default, h.WorkspaceDir(name), id); err != nil {
		return offlineError("wsfs snapshot rm", name, err)
	}
	fmt.Fprintf(g.stdout, "wsfs: removed %s@%d\n", name, id)
	return nil
}

func runSnapshotPrune(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "snapshot prune", "NAME", `
Removes NAME's snapshots that no retention rule keeps: a snapshot is kept
if it is one of the --keep-last newest, or younger than --keep-within.
At least one rule is required.`)
	g.homeFlag(flags)
	keepLast := flags.Int("keep-last", 0, "keep the N newest snapshots")
	keepWithin := flags.Duration("keep-within", 0, "keep snapshots younger than this (e.g. 24h)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usageError{fmt.Sprintf("want one workspace NAME, got %d arguments", flags.NArg())}
	}
	if *keepLast < 0 || *keepWithin < 0 {
		return usageError{"--keep-last and --keep-within must not be negative"}
	}
	if *keepLast == 0 && *keepWithin == 0 {
		return usageError{"prune needs --keep-last N or --keep-within DURATION (refusing to remove every snapshot)"}
	}
	name := flags.Arg(0)
	h, _, err := snapshotHost(g, name)
	if err != nil {
		return err
	}
	removed, err := snapshot.Prune(vfs.Default, h.WorkspaceDir(name), snapshot.Retention{KeepLast: *keepLast, KeepWithin: *keepWithin}, time.Now())
	for _, in := range removed {
		fmt.Fprintf(g.stdout, "wsfs: removed %s@%d (%s)\n", name, in.ID, in.Time.Local().Format(time.RFC3339))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "wsfs: pruned %d snapshots of %s\n", len(removed), name)
	return nil
}
