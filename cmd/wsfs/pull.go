package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
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
then mounts at once: file contents stay in the bucket and the daemon
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
from its Litestream replica in the same bucket when one exists.

--from s3://BUCKET[/PREFIX]?endpoint=URL&path-style=true names the remote;
default: the host config's remote. The workspace must not exist here.

Not done yet: --at.`

func runPull(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "pull", "NAME", pullAbout)
	g.homeFlag(fs)
	from := fs.String("from", "", "remote URL s3://BUCKET[/PREFIX]?endpoint=URL&region=R&path-style=true (default: the host config's remote)")
	noAgent := fs.Bool("no-agent-state", false, "do not restore the agent state database")
	fetchAll := fs.Bool("fetch-all", false, "fetch every pool object the workspace references before returning (default: the daemon fetches them on first read and in the background)")
	steal := fs.Bool("steal", false, "take the workspace's lease over even though another host holds it (only once that lease has expired: its host is gone)")
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
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{Logger: lg})
	if err != nil {
		return err
	}
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
	// As `wsfs create` does: the host's identity markers first, and the
	// workspace registered in the pool right after its directory exists,
	// so that GC knows it references its objects.
	if err := h.EnsureIdentity(); err != nil {
		return err
	}
	start := time.Now()
	res, err := ship.Pull(ctx, ship.PullOptions{Store: st, Name: name, Dir: h.WorkspaceDir(name), Pool: p,
		Lazy: !*fetchAll, RemoteURL: cfg.URL()})
	if err != nil {
		var ce *ship.CorruptRemoteError
		if errors.As(err, &ce) {
			return corruptError{err}
		}
		if errors.Is(err, ship.ErrNotShipped) {
			return preconditionError{err}
		}
		return err
	}
	if err := h.RegisterWorkspace(name); err != nil {
		return fmt.Errorf("pull %s: register the workspace in the pool: %w", name, err)
	}
	if *fetchAll {
		fmt.Fprintf(g.stdout, "%s: pulled group %d from %s: %d inodes, %d objects (%d fetched), %d bytes in %.2fs\n",
			name, res.Group, st, res.Inodes, res.Objects, res.Fetched, res.BytesGot, time.Since(start).Seconds())
	} else {
		fmt.Fprintf(g.stdout, "%s: pulled group %d from %s: %d inodes, %d bytes in %.2fs (tree %.2fs, local write %.2fs); %d objects are fetched on first read and in the background\n",
			name, res.Group, st, res.Inodes, res.BytesGot, time.Since(start).Seconds(), res.TreeTime.Seconds(), res.WriteTime.Seconds(), res.Objects)
	}
	if *noAgent {
		return nil
	}
	url := cfg.AgentStateURL(name)
	if err := agentstate.Restore(ctx, agentstate.RestoreOptions{ReplicaURL: url, To: agentstate.PathsFor(h, name).DB}); err != nil {
		fmt.Fprintf(g.stderr, "%s: agent state not restored from %s: %v\n", name, cfg, err)
		return nil
	}
	fmt.Fprintf(g.stdout, "%s: restored the agent state from %s\n", name, cfg)
	return nil
}
