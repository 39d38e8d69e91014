package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "pull",
		summary: "bring a workspace back from the remote tier onto this host",
		run:     runPull,
	})
}

const pullAbout = `
Restores workspace NAME from the remote tier on this host (after the loss
of its host, or to move it here): reads the workspace's head, checkpoint and
log from the bucket (each verified) and registers the workspace, which
then mounts at once (the tree's checkpoint is written but not synced,
beside a marker checkpoint/GROUP.unsynced: the mount syncs it in the
background and no fsync returns before; after a crash before that, the
workspace refuses to open, exit 4, until it is removed and pulled again):
file contents stay in the bucket and the daemon
fetches each pool object into the local pool on its first read (verified
by hash: a corrupt or missing remote object makes that read fail with
EIO and an ERROR line naming the object, never wrong bytes), while a
background prefetch fetches the rest (wsfs mount --prefetch=false, or
"no_prefetch": true in the host config's remote section, turns it off;
wsfs status shows its progress). --fetch-all instead fetches every
object before returning (a corrupt remote object is then an error naming
it, exit 4). It first takes the workspace's
lease in the bucket: a workspace another host serves is refused (exit 3)
with the holder and the lease's age; --steal takes over a lease that has
expired (its host is gone). The agent state database is restored
from its Litestream replica in the same bucket when one exists, into the
workspace directory before that appears under its name: a pull killed at
any moment leaves no workspace (pull again) or one with its agent state.
A replica that cannot be restored fails the pull and leaves no workspace;
--no-agent-state pulls without it (its sidecar then refuses to replicate
over that replica until 'wsfs state restore NAME').

--from s3://BUCKET[/PREFIX]?endpoint=URL&path-style=true names the remote;
default: the host config's remote. The workspace must not exist here.

The shipped snapshots come along: their catalog entries and objects are
imported, so snapshot ls/fork/restore work here as on the old host.

--at SNAPSHOT|TIME restores an earlier state instead of the latest: a
shipped snapshot by ID or label (the newest with that label), or the latest
shipped committed state at or before TIME, an RFC 3339 time
(2026-12-01T19:30:00Z) or a duration ago (15m, 2h): the newest of the
shipped snapshots taken by then and the head's log cut at the last batch
shipped by then. Nothing matching is an error (exit 3) listing what exists.
The state is restored as a new group one past the remote head's (group
numbers never go back), and shipped right away as the workspace's new
remote head: later states that no snapshot holds are then left to remote
GC. The agent state is a snapshot's own copy (taken with its files), or
for a cut of the log the replica as of its time.
`

func runPull(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "pull", "NAME", pullAbout)
	g.homeFlag(fs)
	from := fs.String("from", "", "remote URL s3://BUCKET[/PREFIX]?endpoint=URL&region=R&path-style=true (default: the host config's remote)")
	noAgent := fs.Bool("no-agent-state", false, "do not restore the agent state database")
	fetchAll := fs.Bool("fetch-all", false, "fetch every pool object the workspace references before returning (default: the daemon fetches them on first read and in the background)")
	steal := fs.Bool("steal", false, "take the workspace's lease over even though another host holds it (only once that lease has expired: its host is gone)")
	atArg := fs.String("at", "", "restore the state of a shipped snapshot (ID or label) or the latest shipped state at or before a time (RFC 3339, or a duration ago like 15m)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs)
	if err != nil {
		return err
	}
	if err := host.ValidateName(name); err != nil {
		return usageError{err.Error()}
	}
	var at ship.At
	if *atArg != "" {
		if at, err = ship.ParseAt(*atArg, time.Now()); err != nil {
			return usageError{err.Error()}
		}
	}
	began := time.Now()
	h, err := openHostChecked(g.home, "")
	if err != nil {
		return err
	}
	if err := h.CheckWorkspace(name); err == nil {
		return preconditionError{fmt.Errorf("workspace %s exists on this host; remove it first (wsfs rm %s)", name, name)}
	}
	lg := slog.New(slog.NewTextHandler(g.stderr, nil))
	cfg, st, err := openRemote(ctx, h, *from)
	if err != nil {
		return err
	}
	// The host's local setup — the pool opened, the identity markers
	// written as `wsfs create` does — is a chain of fsyncs, each slow on
	// a host where another writer has much dirty data (docs/benchmarks.md,
	// "Remote tier under heavy load"): it runs while the lease is taken
	// and the tree read from the bucket, and the workspace directory is
	// published only after it succeeded (waitLocal in BeforePublish; the
	// lazy pull needs no pool before, --fetch-all waits before it starts).
	var p *pool.Pool
	var localErr error
	localDone := make(chan struct{})
	go func() {
		defer close(localDone)
		if p, localErr = pool.Open(vfs.Default, h.PoolDir(), pool.Options{Logger: lg}); localErr != nil {
			return
		}
		localErr = h.EnsureIdentity()
	}()
	waitLocal := func() error {
		<-localDone
		return localErr
	}
	defer waitLocal() // nothing of it runs on after the command
	// Take the lease first: from now on this host serves the workspace
	// (its shipper renews the lease) and no other host's shipper can
	// write the workspace's head.
	id, err := remote.HostID(h)
	if err != nil {
		return err
	}
	if _, err := ship.AcquireLease(ctx, st, name, id, cfg.LeaseTTL(), *steal, time.Now()); err != nil {
		var le *ship.LeaseError
		if errors.As(err, &le) {
			return preconditionError{err}
		}
		return err
	}
	// A pull that fails before the workspace is published here takes
	// nothing over: its lease is released (on a context of its own, so a
	// pull interrupted by a signal releases it too). Kept, it would lock
	// the host that serves or creates a workspace of that name out until
	// someone stole it (a pull of a typo'd name, say).
	published := false
	defer func() {
		if published {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := ship.ReleaseLease(rctx, st, name, id, time.Now()); err != nil {
			lg.Warn("pull failed and could not release the lease it took; it expires by itself, after which another host needs --steal", "workspace", name, "err", err)
		}
	}()
	// As `wsfs create` does: the host's identity markers first (waitLocal,
	// before the workspace directory is published), and the workspace
	// registered in the pool right after its directory exists, so that GC
	// knows it references its objects.
	var pullPool *pool.Pool // only --fetch-all's Pull uses the pool
	if *fetchAll {
		if err := waitLocal(); err != nil {
			return err
		}
		pullPool = p
	}
	start := time.Now()
	setup := start.Sub(began) // the host, the remote, the pool, the lease
	// The agent state is restored into the workspace directory before it
	// is published (ship.PullOptions.BeforePublish): a pull killed at any
	// moment leaves either no workspace (pull again) or one with its
	// agent state, never one whose sidecar would start from an empty
	// database (the sidecar refuses that too: agentstate.ReplicaAheadError).
	var agentMsg string
	var agentErr error
	restoreAgent := func(tmp string, res ship.PullResult) error {
		if err := waitLocal(); err != nil {
			return err
		}
		if *noAgent {
			return nil
		}
		url := cfg.AgentStateURL(name)
		if in := res.Snapshot; in != nil && in.Agent != nil && !slices.Contains(res.AgentMissing, in.ID) {
			// A snapshot's state: its agent state copy, the one taken
			// with its files (the replica as of its time may lack what
			// the sidecar had not uploaded then).
			if err := pullSnapshotAgent(ctx, st, tmp, url, *in); err != nil {
				agentErr = fmt.Errorf("pull %s: restore the agent state of snapshot %d: %w (nothing was written here; pull again)", name, in.ID, err)
				return agentErr
			}
			agentMsg = fmt.Sprintf("%s: restored the agent state of snapshot %d from %s\n", name, in.ID, cfg)
			return nil
		}
		ro := agentstate.RestoreOptions{ReplicaURL: url, To: filepath.Join(host.AgentDirIn(tmp), agentstate.DBName), Adopt: true}
		if !at.IsZero() {
			ro.At = res.AsOfTime
		}
		err := agentstate.Restore(ctx, ro)
		var na *agentstate.NotAvailableError
		switch {
		case err == nil:
			agentMsg = fmt.Sprintf("%s: restored the agent state from %s\n", name, cfg)
		case errors.As(err, &na) && na.ListErr == nil && na.First.IsZero():
			// Nothing was ever replicated: the workspace has no agent state.
			agentMsg = fmt.Sprintf("%s: no agent state in %s (none was ever replicated)\n", name, cfg)
		default:
			agentErr = fmt.Errorf("pull %s: restore the agent state from %s: %w (nothing was written here; pull again, "+
				"or pull with --no-agent-state, after which the workspace's sidecar refuses to replicate over that replica)", name, url, err)
			return agentErr
		}
		return nil
	}
	res, err := ship.Pull(ctx, ship.PullOptions{Store: st, Name: name, Dir: h.WorkspaceDir(name), Pool: pullPool, At: at,
		Lazy: !*fetchAll, RemoteURL: cfg.URL(), BeforePublish: restoreAgent})
	if err != nil {
		if agentErr != nil {
			if na := (*agentstate.NotAvailableError)(nil); errors.As(err, &na) {
				return preconditionError{err}
			}
			return err
		}
		var ce *ship.CorruptRemoteError
		if errors.As(err, &ce) {
			return corruptError{err}
		}
		if errors.Is(err, ship.ErrNotShipped) || errors.Is(err, ship.ErrNoSuchState) {
			return preconditionError{err}
		}
		if !strings.HasPrefix(err.Error(), "pull "+name+":") {
			// A store or disk error (a full disk, say) names the
			// workspace and the remote, not only the file it hit.
			err = fmt.Errorf("pull %s from %s: %w", name, cfg.URL(), err)
		}
		return err
	}
	published = true
	if len(res.AgentMissing) > 0 {
		fmt.Fprintf(g.stderr, "wsfs pull: warning: the agent state copy of shipped snapshot(s) %v is not all in %s (shipped by an older wsfs): a fork or restore of them here fails on the missing chunk; their files are complete\n", res.AgentMissing, cfg)
	}
	if err := h.RegisterWorkspace(name); err != nil {
		return fmt.Errorf("pull %s: register the workspace in the pool: %w", name, err)
	}
	if *fetchAll {
		fmt.Fprintf(g.stdout, "%s: pulled group %d from %s: %d inodes, %d objects (%d fetched), %d snapshots, %d bytes in %.2fs\n",
			name, res.Group, st, res.Inodes, res.Objects, res.Fetched, res.Snapshots, res.BytesGot, time.Since(start).Seconds())
	} else {
		fmt.Fprintf(g.stdout, "%s: pulled group %d from %s: %d inodes, %d bytes in %.2fs (tree %.2fs, local write %.2fs; before: open and lease %.2fs); %d objects are fetched on first read and in the background\n",
			name, res.Group, st, res.Inodes, res.BytesGot, time.Since(start).Seconds(), res.TreeTime.Seconds(), res.WriteTime.Seconds(), setup.Seconds(), res.Objects)
	}
	if !at.IsZero() {
		fmt.Fprintf(g.stdout, "%s: --at %s selected %s\n", name, *atArg, res.Selected)
		if res.Group != res.AsOf {
			// Make the earlier state the remote head now, so that the
			// bucket and this host agree before anything else happens.
			opts, err := shipOptions(h, name, cfg, st, lg)
			if err != nil {
				return err
			}
			bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			g2, err := ship.Barrier(bctx, opts)
			cancel()
			if err != nil {
				return fmt.Errorf("pull %s --at %s: the workspace is here, but shipping its state as the new remote head failed (run wsfs sync %s): %w", name, *atArg, name, err)
			}
			fmt.Fprintf(g.stdout, "%s: shipped as the new remote head (group %d)\n", name, g2)
		}
	}
	fmt.Fprint(g.stdout, agentMsg)
	return nil
}

// pullSnapshotAgent writes the agent state database of the workspace
// being pulled into tmp (its directory under its temporary name) from
// shipped snapshot in's copy, each chunk read from the bucket and
// verified, and records that it continues the replica at url
// (agentstate.Adopt), whose sidecar then uploads it as the replica's
// next state.
func pullSnapshotAgent(ctx context.Context, st remote.Store, tmp, url string, in snapshot.Info) error {
	read := func(id objid.ID) ([]byte, error) { return ship.ReadObject(ctx, st, id) }
	if _, err := snapshot.RestoreAgentFrom(read, tmp, in); err != nil {
		return err
	}
	return agentstate.Adopt(ctx, agentstate.DBIn(tmp), url)
}
