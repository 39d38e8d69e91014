package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "ls",
		summary: "list workspaces: served or not, mount points, log size",
		run:     runLs,
	})
}

func runLs(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "ls", "", `
Lists the host's workspaces: whether a daemon serves it (holds its lock),
where it is mounted, and the size of its log and checkpoints.`)
	g.homeFlag(flags)
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usageError{fmt.Sprintf("ls takes no arguments, got %q", flags.Args())}
	}
	h, err := openHostChecked(g.home, "")
	if err != nil {
		return err
	}
	names, err := h.Workspaces()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSERVED\tMOUNTED AT\tLOG")
	for _, n := range names {
		served := "no"
		if locked, err := h.Locked(n); err != nil {
			served = "? (" + err.Error() + ")"
		} else if locked {
			served = "yes"
		}
		mps, err := hostMounts(h, n) // hostmounts.go
		at := strings.Join(mps, ",")
		if err != nil {
			at = "? (" + err.Error() + ")"
		} else if at == "" {
			at = "-"
		}
		size := dirBytes(filepath.Join(h.WorkspaceDir(n), "log")) + dirBytes(filepath.Join(h.WorkspaceDir(n), "checkpoint"))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, served, at, humanBytes(size))
	}
	return tw.Flush()
}

// dirBytes sums the sizes of the files directly in dir (0 if missing).
func dirBytes(dir string) int64 {
	names, err := vfs.Default.List(dir)
	if err != nil {
		return 0
	}
	var total int64
	for _, n := range names {
		if st, err := vfs.Default.Stat(filepath.Join(dir, n)); err == nil && st.Mode().IsRegular() {
			total += st.Size()
		}
	}
	return total
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
