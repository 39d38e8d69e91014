package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"wsfs/internal/ship"
)

func init() {
	register(command{
		name:    "sync",
		summary: "wait until everything committed in a workspace is on the remote tier",
		run:     runSync,
	})
}

const syncAbout = `
A remote barrier: waits until every group of workspace NAME committed before
the call (every fsync that returned, every close and namespace operation
older than one commit window) is shipped to the remote tier, then prints
the shipped group. If a shipper runs ('wsfs ship NAME', 'wsfs up'), sync
waits for it; otherwise it ships by itself. Fails (exit 1) after --timeout
with what the shipper last reported.`

func runSync(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "sync", "NAME", syncAbout)
	g.homeFlag(fs)
	timeout := fs.Duration("timeout", 5*time.Minute, "give up (exit 1) after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs)
	if err != nil {
		return err
	}
	g2, err := syncWorkspace(ctx, g, name, *timeout)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s: remote has group %d\n", name, g2)
	return nil
}

func syncWorkspace(ctx context.Context, g *globals, name string, timeout time.Duration) (uint64, error) {
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return 0, err
	}
	if _, err := remoteConfig(h); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The remote and the pool are opened only if no shipper runs (sync
	// then ships by itself); waiting on a running one needs neither.
	return ship.BarrierOpen(ctx, h.WorkspaceDir(name), name, func() (ship.Options, error) {
		cfg, st, err := openRemote(ctx, h, "")
		if err != nil {
			return ship.Options{}, err
		}
		return shipOptions(h, name, cfg, st, slog.New(slog.NewTextHandler(g.stderr, nil)))
	})
}
