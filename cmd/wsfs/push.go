package main

import (
	"context"
	"fmt"
	"time"
)

func init() {
	register(command{
		name:    "push",
		summary: "ship a workspace to the remote tier and release it (sync, then release)",
		run:     runPush,
	})
}

const pushAbout = `
Moves workspace NAME off this host: waits until everything committed is on
the remote tier (as 'wsfs sync'), then releases it. Stop the workspace's
daemon first, so that nothing commits after the barrier; push refuses while
a daemon serves it. Another host then runs 'wsfs pull NAME'.

Not done yet: the lease in the bucket that makes "release" binding (today
release only means this host stopped writing); see README, "Remote tier".`

func runPush(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "push", "NAME", pushAbout)
	g.homeFlag(fs)
	timeout := fs.Duration("timeout", 5*time.Minute, "give up (exit 1) after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"expected one workspace NAME"}
	}
	name := fs.Arg(0)
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return err
	}
	if locked, err := h.Locked(name); err != nil {
		return err
	} else if locked {
		return preconditionError{fmt.Errorf("workspace %s is served by a daemon: stop it first (push releases the workspace; nothing may commit after it)", name)}
	}
	grp, err := syncWorkspace(ctx, g, name, *timeout)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s: pushed through group %d; released\n", name, grp)
	return nil
}
