package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
)

func init() {
	register(command{
		name:    "create",
		summary: "register a new, empty workspace",
		run:     runCreate,
	})
}

func runCreate(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "create", "NAME", `
Registers workspace NAME (1-63 characters of a-z, 0-9, '.', '_', '-',
starting with a letter or digit). It is empty until mounted with
'wsfs mount NAME'. On a host with a remote tier, a name that a workspace
in the remote already has is refused (exit 3): pull that workspace
instead, or remove it there first ('wsfs rm --remote NAME').`)
	g.homeFlag(flags)
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usageError{fmt.Sprintf("want one workspace NAME, got %d arguments", flags.NArg())}
	}
	name := flags.Arg(0)
	if err := host.ValidateName(name); err != nil {
		return usageError{err.Error()}
	}
	h, err := openHostChecked(g.home, "")
	if err != nil {
		return err
	}
	if err := checkLayoutMounted(h); err != nil {
		return err
	}
	mounts, err := wsfsMountsForCheck()
	if err != nil {
		return err
	}
	if err := h.CheckNotOnWsfs(mounts); err != nil {
		return preconditionError{err}
	}
	if err := remoteNameFree(ctx, h, name); err != nil {
		return err
	}
	if err := h.CreateWorkspace(name); err != nil {
		if errors.Is(err, host.ErrWorkspaceExists) {
			return preconditionError{err}
		}
		return identityError(err)
	}
	fmt.Fprintf(g.stdout, "wsfs: created workspace %s (mount it with: wsfs mount --home %s %s)\n", name, h.Home(), name)
	return nil
}

// remoteNameFree refuses a new workspace (create, fork) whose name a
// workspace in the host's remote tier already has (a head, or a lease
// another host holds): the new workspace's daemon would take that
// workspace's lease and its shipper find two histories under one name,
// locking out the host that serves it. Without a remote tier it is nil;
// a remote that cannot be reached refuses the name too (exit 1), as the
// daemon could not take the lease either.
func remoteNameFree(ctx context.Context, h *host.Host, name string) error {
	cfg, err := remote.ReadConfig(h)
	if err != nil || !cfg.Enabled() {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, st, err := openRemote(ctx, h, "")
	if err != nil {
		return fmt.Errorf("cannot check that no workspace %s exists in the remote tier: %w", name, err)
	}
	id, err := remote.HostID(h)
	if err != nil {
		return err
	}
	var le *ship.LeaseError
	if err := ship.CheckLease(ctx, st, name, id, time.Now()); errors.As(err, &le) {
		if le.Lease.Removing {
			return preconditionError{fmt.Errorf("the name %s is not free in %s yet: %w", name, st, err)}
		}
		return preconditionError{fmt.Errorf("a workspace named %s exists in %s: %w; choose another name", name, st, err)}
	} else if err != nil {
		return err
	}
	if _, found, err := ship.ReadHead(ctx, st, name); err != nil {
		return err
	} else if found {
		return preconditionError{fmt.Errorf("a workspace named %s exists in %s: pull it to serve it here ('wsfs pull %s'), remove it there first ('wsfs rm --remote %s'), or choose another name", name, st, name, name)}
	}
	return nil
}
