package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"wsfs/internal/daemon"
	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/ship"
	"wsfs/internal/supervisor"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "status",
		summary: "one line per workspace: mounted, last committed group and age, pending, replica position and lag",
		run:     runStatus,
	})
}

const statusAbout = `
One line per workspace of the host:

  MOUNTED   yes / no: whether its mount point (HOME/mnt/NAME) is mounted
            (mount table); dead: a wsfs mount whose daemon is gone (the
            kernel answers statfs with ENOTCONN; a stat can still succeed
            from its cache). The next 'wsfs mount' detaches it by itself.
  GROUP     last committed group, AGE since it committed, PENDING records
            (from the daemon's status file, rewritten every second)
  REPLICA   last Litestream transaction (TXID) of the agent state database
            the replica has; LAG: Litestream transactions not yet uploaded
            (each covers the SQLite transactions of one sync interval) and
            time since the last successful sync (sidecar's status file)
  NOTE      failures, stale status files (process not running), restarts

"-" means unknown (no status file yet).`

func runStatus(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "status", "", statusAbout)
	g.homeFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	h, err := openHostChecked(g.home, "") // sidecar.go
	if err != nil {
		return err
	}
	now := time.Now()
	st, err := supervisor.Collect(h, now)
	if err != nil {
		return err
	}
	markDeadMounts(st)
	if len(st) == 0 {
		fmt.Fprintf(g.stdout, "no workspaces on host %s\n", h.Home())
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMOUNTED\tGROUP\tAGE\tPENDING\tREPLICA\tLAG\tNOTE")
	for _, w := range st {
		fmt.Fprintln(tw, strings.Join(w.Columns(now), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printShipStatus(g, h, now)
	printFetchStatus(g, h)
	return nil
}

// printFetchStatus prints one line per workspace pulled lazily (wsfs
// pull) whose contents are not all local yet: the daemon's fetch
// progress, or the number of objects left when no daemon reports it.
func printFetchStatus(g *globals, h *host.Host) {
	names, err := h.Workspaces()
	if err != nil {
		return
	}
	for _, n := range names {
		fst, ok, err := ship.ReadFetchState(vfs.Default, h.WorkspaceDir(n))
		if err != nil {
			fmt.Fprintf(g.stdout, "fetch %s: %v\n", n, err)
			continue
		}
		ds, _, derr := daemon.ReadStatus(filepath.Join(h.WorkspaceDir(n), daemon.StatusName))
		switch {
		case derr == nil && ds.Fetch != nil:
			f := ds.Fetch
			progress := fmt.Sprintf("%d of %d objects local (prefetch running)", f.Local, f.Objects)
			switch {
			case f.Done:
				progress = fmt.Sprintf("all %d objects local", f.Objects)
			case !f.Prefetch:
				progress = fmt.Sprintf("prefetch off: of %d objects, those read are fetched", f.Objects)
			}
			fmt.Fprintf(g.stdout, "fetch %s: %s; %d fetched by the daemon (%s), %d failed, from %s\n",
				n, progress, f.Fetched, humanBytes(f.Bytes), f.Failed, f.Remote)
		case ok:
			fmt.Fprintf(g.stdout, "fetch %s: pulled lazily (%d objects, not all local yet; no daemon reports progress) from %s\n",
				n, len(fst.Objects), fst.Remote)
		}
	}
}

// printShipStatus prints one line per workspace with a shipper status
// file (the remote tier): shipped and local group, lag, last error.
func printShipStatus(g *globals, h *host.Host, now time.Time) {
	names, err := h.Workspaces()
	if err != nil {
		return
	}
	for _, n := range names {
		s, err := ship.ReadStatus(h.WorkspaceDir(n))
		if err != nil {
			continue
		}
		note := ""
		if age := now.Sub(s.UpdatedAt); age > 5*time.Second {
			note = fmt.Sprintf(" STALE (status %s old: no shipper running)", age.Round(time.Second))
		}
		if s.LastError != "" {
			note += " ERROR: " + s.LastError
		}
		fmt.Fprintf(g.stdout, "remote %s: shipped group %d of %d, lag %.2fs (p50 %.3fs, p99 %.3fs)%s\n",
			n, s.Shipped, s.Local, s.LagSeconds, s.LagP50, s.LagP99, note)
	}
}

// markDeadMounts marks as dead each FUSE mount in st whose connection is
// gone (fusefs.Probe: statfs, which the kernel never answers from its
// attribute cache, fails with ENOTCONN), probing all of them at once so
// that a hung daemon costs one fusefs.ProbeTimeout, not one per mount.
func markDeadMounts(st []supervisor.WorkspaceStatus) {
	var wg sync.WaitGroup
	for i := range st {
		w := &st[i]
		if !w.Mounted || w.DeadMount || !strings.HasPrefix(w.FSType, "fuse") {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if dead, err := fusefs.Probe(w.MountPoint, fusefs.ProbeTimeout); err == nil && dead {
				w.DeadMount = true
			}
		}()
	}
	wg.Wait()
}
