package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/remote"
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
refuses while a daemon serves the workspace, while it is mounted, or
while its shipper or sidecar runs (also with --force), and,
on a host with a remote tier, while its shipper's status says groups
committed here are not in the remote yet (run 'wsfs sync NAME' or 'wsfs
push NAME' first; --force discards them). Pool objects it referenced are
removed later by 'wsfs gc'.

With --remote it also deletes the workspace from the host's remote tier
(also when it is not on this host): its head, log, checkpoints, shipped
snapshots and agent state replica, so that it can no longer be pulled.
It takes the workspace's lease first, so it refuses (exit 3) while another
host serves the workspace; --steal takes over a lease that host let
expire. The remote copy goes before the local one, and nothing local is
removed if that fails; running it again finishes a removal that stopped
part-way. Objects in the bucket go with 'wsfs remote-gc'.`)
	g.homeFlag(flags)
	force := flags.Bool("force", false, "remove it even if groups committed here are not in the remote")
	fromRemote := flags.Bool("remote", false, "also delete it from the remote tier, the last copy of it: nothing can restore it afterwards")
	steal := flags.Bool("steal", false, "with --remote: take over the lease of a host that let it expire")
	timeout := flags.Duration("timeout", 5*time.Minute, "with --remote: give up (exit 1) after this long")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usageError{fmt.Sprintf("want one workspace NAME, got %d arguments", flags.NArg())}
	}
	if *steal && !*fromRemote {
		return usageError{"--steal applies only with --remote"}
	}
	name := flags.Arg(0)
	if err := host.ValidateName(name); err != nil {
		return usageError{err.Error()}
	}
	h, err := openHostChecked(g.home, "")
	if err != nil {
		return err
	}
	local := true
	if err := checkWorkspace(h, name); err != nil {
		if !errors.Is(err, host.ErrNoWorkspace) || !*fromRemote {
			return err
		}
		local = false
	}
	if local {
		mps, err := fusefs.Mounts(h.MountName(name))
		if err != nil {
			return err
		}
		if len(mps) > 0 {
			return preconditionError{fmt.Errorf("workspace %s is mounted at %s: unmount it first (stop its daemon, or umount %s)", name, strings.Join(mps, ", "), mps[0])}
		}
		if !*force && !*fromRemote {
			if err := unshipped(h, name); err != nil {
				return err
			}
		}
		release, err := lockCompanions(h, name)
		if err != nil {
			return err
		}
		defer release()
	}
	var first func() error
	if *fromRemote {
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		first = func() error { return rmRemote(ctx, g, h, name, local, *steal) }
	}
	if !local {
		return first()
	}
	if err := h.RemoveWorkspaceAfter(name, first); err != nil {
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

// rmRemote deletes workspace name from the host's remote tier
// (ship.RemoveRemote). With the workspace on this host (local), it runs
// under the daemon's locks and the shipper's and the sidecar's
// (lockCompanions), so that nothing of this host ships or replicates it
// meanwhile.
func rmRemote(ctx context.Context, g *globals, h *host.Host, name string, local, steal bool) error {
	cfg, st, err := openRemote(ctx, h, "")
	if err != nil {
		return err
	}
	id, err := remote.HostID(h)
	if err != nil {
		return err
	}
	rs, err := ship.RemoveRemote(ctx, st, name, id, cfg.LeaseTTL(), steal, time.Now())
	var le *ship.LeaseError
	if errors.As(err, &le) {
		return preconditionError{fmt.Errorf("not removed from %s: %w", st, err)}
	}
	if err != nil {
		return fmt.Errorf("%w (run 'wsfs rm --remote %s' again to finish)", err, name)
	}
	if !local && !rs.Head && rs.Files == 0 && rs.AgentFiles == 0 {
		return preconditionError{fmt.Errorf("no workspace %s on this host nor in %s", name, st)}
	}
	fmt.Fprintf(g.stdout, "wsfs: removed workspace %s from %s (head: %v, %d log, checkpoint and snapshot files, %d agent state files); its objects go with 'wsfs remote-gc'\n",
		name, st, rs.Head, rs.Files, rs.AgentFiles)
	return nil
}

// lockCompanions takes the locks of workspace name's shipper and sidecar
// for rm, which holds them until the workspace is gone: neither may run
// while it is removed (a shipper would go on failing in a directory that
// no longer exists, holding the workspace's lease), so rm refuses while
// one runs, with --force too. A workspace without an agent state
// directory never had a sidecar: there is nothing of it to lock.
func lockCompanions(h *host.Host, name string) (release func(), err error) {
	dir := h.WorkspaceDir(name)
	var held []io.Closer
	release = func() {
		for _, c := range held {
			c.Close()
		}
	}
	for _, l := range []struct {
		what string
		lock func() (io.Closer, error)
	}{
		{"shipper", func() (io.Closer, error) { return ship.Lock(vfs.Default, dir) }},
		{"sidecar", func() (io.Closer, error) { return agentstate.LockSidecar(agentstate.DBIn(dir)) }},
	} {
		c, err := l.lock()
		if l.what == "sidecar" && errors.Is(err, fs.ErrNotExist) {
			if _, serr := vfs.Default.Stat(host.AgentDirIn(dir)); errors.Is(serr, fs.ErrNotExist) {
				continue
			}
		}
		if err != nil {
			release()
			if errors.Is(err, vfs.ErrLocked) {
				return nil, preconditionError{fmt.Errorf("workspace %s has a running %s: stop it (and wsfs up) first", name, l.what)}
			}
			return nil, err
		}
		held = append(held, c)
	}
	return release, nil
}

// unshipped refuses the removal of a workspace whose shipper reported
// fewer groups in the remote than its local log holds: those groups exist
// only here. A workspace without a shipper status (never shipped from
// this host) or pushed (everything is in the remote) passes. The status
// can only lag behind the remote, so the check errs on the side of
// refusing.
func unshipped(h *host.Host, name string) error {
	dir := h.WorkspaceDir(name)
	if ship.Pushed(vfs.Default, dir) {
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
