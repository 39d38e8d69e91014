package main

import (
	"context"
	"fmt"
	"log/slog"

	"wsfs/internal/host"
)

func init() {
	register(command{
		name:    "init",
		summary: "create a host directory (state, pool, mount points, config)",
		run:     runInit,
	})
}

func runInit(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "init", "", `
Creates the host directory: HOME/wsfs.json (config), HOME/state/workspaces,
HOME/pool and HOME/mnt. Running it again on an existing host keeps its
config and workspaces and only creates what is missing; on a host made by
an older wsfs it also writes the identity markers that 'wsfs gc' needs
(STATE/wsfs-id, POOL/wsfs-id and the pool's registry of workspaces).`)
	g.homeFlag(flags)
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usageError{fmt.Sprintf("init takes no arguments, got %q", flags.Args())}
	}
	mounts, err := wsfsMountsForCheck()
	if err != nil {
		return err
	}
	if h0, err := host.Open(g.home); err == nil {
		if err := checkLayoutMounted(h0); err != nil {
			return err
		}
		if err := h0.CheckNotOnWsfs(mounts); err != nil {
			return preconditionError{err}
		}
	} else if err := host.CheckHomeNotOnWsfs(g.home, mounts); err != nil {
		return preconditionError{err}
	}
	h, err := host.Init(g.home)
	if err != nil {
		return err
	}
	if err := h.CheckNotOnWsfs(mounts); err != nil { // wsfs.json may point elsewhere
		return preconditionError{err}
	}
	if err := ensurePrivate(h, slog.New(slog.NewTextHandler(g.stderr, nil))); err != nil {
		return err
	}
	if err := h.EnsureIdentityIfUsed(); err != nil {
		return identityError(err)
	}
	fmt.Fprintf(g.stdout, "wsfs: host ready at %s (state %s, pool %s, mount points %s)\n", h.Home(), h.StateDir(), h.PoolDir(), h.MountDir())
	return nil
}
