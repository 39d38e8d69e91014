package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"wsfs/internal/host"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "rm",
		summary: "delete a workspace that no daemon serves",
		run:     runRm,
	})
}

func runRm(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "rm", "NAME", `
Deletes workspace NAME: its log, checkpoints, lock and agent state. It
refuses while a daemon serves the workspace or while it is mounted. Pool
objects it referenced are removed later by 'wsfs gc'.`)
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
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return err
	}
	mps, err := hostMounts(h, name) // hostmounts.go
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return preconditionError{fmt.Errorf("workspace %s is mounted at %s: unmount it first (stop its daemon, or umount %s)", name, strings.Join(mps, ", "), mps[0])}
	}
	if err := h.RemoveWorkspace(name); err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return preconditionError{fmt.Errorf("workspace %s is served by a running daemon: stop it first (%w)", name, err)}
		}
		return err
	}
	// The default mount point goes too, if it is an empty directory.
	os.Remove(h.MountPoint(name))
	fmt.Fprintf(g.stdout, "wsfs: removed workspace %s\n", name)
	return nil
}
