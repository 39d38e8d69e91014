package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/ship"
	"wsfs/internal/supervisor"
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
            (mount table); dead: mounted but its daemon is gone
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
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	h, err := host.Open(g.home)
	if err != nil {
		if errors.Is(err, host.ErrNoHost) {
			return preconditionError{err}
		}
		return err
	}
	now := time.Now()
	st, err := supervisor.Collect(h, now)
	if err != nil {
		return err
	}
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
	return nil
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
