package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

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
	// with the workspace, and a sidecar left running would go on
	// replicating into the replica the next host restores from.
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
