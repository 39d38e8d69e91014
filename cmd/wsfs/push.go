package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "push",
		summary: "ship a workspace to the remote tier and release it (sync, then release the lease)",
		run:     runPush,
	})
}

const pushAbout = `
Moves workspace NAME off this host: ships everything committed to the remote
tier (as 'wsfs sync'), then releases the workspace's lease in the bucket, so
that another host can 'wsfs pull NAME' it without --steal. Stop the
workspace's daemon, shipper and sidecar first (stop 'wsfs up'), so that
nothing commits after the barrier; push refuses while one of them runs.
It replicates the agent state database once more before shipping, so that
the replica, which the pulling host restores, holds every transaction the
agent committed (also after its sidecar stopped); stop the agent first.
Afterwards this host's copy is marked pushed (STATE/workspaces/NAME/pushed)
and is never shipped nor replicated again; remove it with 'wsfs rm NAME'
(pull it back to serve it here again).`

func runPush(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "push", "NAME", pushAbout)
	g.homeFlag(fs)
	timeout := fs.Duration("timeout", 5*time.Minute, "give up (exit 1) after this long")
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
	if locked, err := h.Locked(name); err != nil {
		return err
	} else if locked {
		return preconditionError{fmt.Errorf("workspace %s is served by a daemon: stop it first (push releases the workspace; nothing may commit after it)", name)}
	}
	// Neither the shipper nor the sidecar may run: the agent state moves
	// with the workspace (pushAgentState, under this lock), and a sidecar
	// left running would go on replicating into the replica the next host
	// restores from.
	release, err := lockCompanions(h, name)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cfg, st, err := openRemote(ctx, h, "")
	if err != nil {
		return err
	}
	opts, err := shipOptions(h, name, cfg, st, slog.New(slog.NewTextHandler(g.stderr, nil)))
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := pushAgentState(ctx, g, h, name, st, opts.HostID, quiet); err != nil {
		return err
	}
	target, err := ship.LocalLast(vfs.Default, opts.Dir)
	if err != nil {
		return err
	}
	grp, err := ship.New(opts).ShipThrough(ctx, target)
	if err != nil {
		var le *ship.LeaseError
		if errors.As(err, &le) {
			return preconditionError{err}
		}
		return err
	}
	marker := filepath.Join(opts.Dir, ship.PushedName)
	if err := vfs.Publish(vfs.Default, marker, true, func(f vfs.File) error {
		_, err := f.Write([]byte(time.Now().UTC().Format(time.RFC3339) + "\n"))
		return err
	}); err != nil {
		return err
	}
	if err := ship.ReleaseLease(ctx, st, name, opts.HostID, time.Now()); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s: pushed through group %d; lease released\n", name, grp)
	return nil
}

// pushAgentState replicates what the workspace's agent state database
// holds beyond its replica (the next host's pull restores the replica's
// latest state): transactions the agent committed after its sidecar
// stopped, or that a killed sidecar never uploaded. It runs the sidecar's
// replication once (agentstate.Start under the sidecar lock that push
// holds, then a sync and a final sync), only while
// this host holds the workspace's lease (or no host does), and not for a
// workspace already pushed from here (another host's replica now). A
// workspace without an agent database has nothing to carry.
func pushAgentState(ctx context.Context, g *globals, h *host.Host, name string, st remote.Store, hostID string, lg *slog.Logger) error {
	if ship.Pushed(vfs.Default, h.WorkspaceDir(name)) {
		return nil // ShipThrough refuses it (ship.ErrPushed)
	}
	p := agentstate.PathsFor(h, name)
	if _, err := vfs.Default.Stat(p.DB); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("push %s: agent state: %w", name, err)
	}
	var le *ship.LeaseError
	if err := ship.CheckLease(ctx, st, name, hostID, time.Now()); errors.As(err, &le) {
		return preconditionError{fmt.Errorf("push %s: %w", name, err)}
	} else if err != nil {
		return fmt.Errorf("push %s: read the lease: %w", name, err)
	}
	url, err := agentstate.ReplicaURL(h, name, "")
	if err != nil {
		return err
	}
	sc, err := agentstate.Start(ctx, agentstate.Options{Workspace: name, DBPath: p.DB, ReplicaURL: url, Logger: lg, LockHeld: true})
	var ra *agentstate.ReplicaAheadError
	switch {
	case errors.As(err, &ra):
		return preconditionError{fmt.Errorf("push %s: the agent state database was never replicated from this host, and its replica holds other state: %w", name, err)}
	case err != nil:
		return fmt.Errorf("push %s: replicate the agent state: %w", name, err)
	}
	_, serr := sc.Sync(ctx)
	pos, cerr := sc.Close(ctx)
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("push %s: replicate the agent state to %s: %w (nothing was pushed; push again)", name, url, err)
	}
	fmt.Fprintf(g.stdout, "%s: agent state replicated, %s\n", name, pos)
	return nil
}
