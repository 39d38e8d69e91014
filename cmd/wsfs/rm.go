package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/ship"
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
refuses while a daemon serves the workspace or while it is mounted, and,
on a host with a remote tier, while its shipper's status says groups
committed here are not in the remote yet (run 'wsfs sync NAME' or 'wsfs
push NAME' first; --force discards them). Pool objects it referenced are
removed later by 'wsfs gc'.`)
	g.homeFlag(flags)
	force := flags.Bool("force", false, "remove it even if groups committed here are not in the remote")
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
	mps, err := fusefs.Mounts(h.MountName(name))
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return preconditionError{fmt.Errorf("workspace %s is mounted at %s: unmount it first (stop its daemon, or umount %s)", name, strings.Join(mps, ", "), mps[0])}
	}
	if !*force {
		if err := unshipped(h, name); err != nil {
			return err
		}
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

// unshipped refuses the removal of a workspace whose shipper reported
// fewer groups in the remote than its local log holds: those groups exist
// only here. A workspace without a shipper status (never shipped from
// this host) or pushed (everything is in the remote) passes. The status
// can only lag behind the remote, so the check errs on the side of
// refusing.
func unshipped(h *host.Host, name string) error {
	dir := h.WorkspaceDir(name)
	if _, err := vfs.Default.Stat(filepath.Join(dir, ship.PushedName)); err == nil {
		return nil
	}
	st, err := ship.ReadStatus(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return preconditionError{fmt.Errorf("workspace %s: cannot read its shipper's status (%w), so cannot tell whether everything committed here is in the remote: run 'wsfs sync %s' first, or remove it anyway with 'wsfs rm --force %s'", name, err, name, name)}
	}
	last, err := ship.LocalLast(vfs.Default, dir)
	if err != nil {
		return err
	}
	if last > st.Shipped {
		return preconditionError{fmt.Errorf("workspace %s: groups %d to %d were committed on this host but its shipper reports only group %d in the remote; they would be lost: run 'wsfs sync %s' (with its shipper running) or 'wsfs push %s' first, or discard them with 'wsfs rm --force %s'", name, st.Shipped+1, last, st.Shipped, name, name, name)}
	}
	return nil
}
