package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

func init() {
	register(command{
		name:    "gc",
		summary: "remove pool objects no workspace references",
		run:     runGC,
	})
}

func runGC(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "gc", "", `
Removes content objects that no workspace of the host references and whose
last use is older than --grace, and stale temps in the pool's tmp/.

Every workspace is opened (recovered from its checkpoint and log) to learn
what it references, and stays locked until the pass ends, so no daemon may
serve any workspace meanwhile: stop them first ('wsfs up' or the systemd
units). A workspace that cannot be opened stops the pass before anything
is removed.`)
	g.homeFlag(flags)
	grace := flags.Duration("grace", 24*time.Hour, fmt.Sprintf("keep unreferenced objects used more recently than this (at least %v)", pool.MinGrace))
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usageError{fmt.Sprintf("gc takes no arguments, got %q", flags.Args())}
	}
	if *grace < pool.MinGrace {
		return usageError{fmt.Sprintf("--grace %v is shorter than the minimum %v", *grace, pool.MinGrace)}
	}
	h, err := openHostChecked(g.home, "")
	if err != nil {
		return err
	}
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		return fmt.Errorf("open pool %s: %w", h.PoolDir(), err)
	}
	names, err := h.Workspaces()
	if err != nil {
		return err
	}
	referenced := make(map[pool.ID]struct{})
	for _, name := range names {
		ws, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir(name), Pool: p})
		if err != nil {
			if errors.Is(err, vfs.ErrLocked) {
				return preconditionError{fmt.Errorf("workspace %s is served by a daemon; stop every daemon of the host before gc: %w", name, err)}
			}
			return classifyOpenError(name, err)
		}
		ws.ForEachObject(func(id pool.ID) { referenced[id] = struct{}{} })
		// Closed at the end, so that no daemon can start and reference an
		// object between this scan and the removal.
		defer ws.Close()
	}
	st, err := p.GC(func(id pool.ID) bool { _, ok := referenced[id]; return ok }, *grace)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "wsfs gc: %d workspaces reference %d objects; scanned %d, removed %d (%s) and %d stale temps (%s)\n",
		len(names), len(referenced), st.Scanned, st.Removed, humanBytes(st.Bytes), st.TempsRemoved, humanBytes(st.TempBytes))
	return nil
}
