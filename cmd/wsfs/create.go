package main

import (
	"context"
	"errors"
	"fmt"

	"wsfs/internal/host"
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
'wsfs mount NAME'.`)
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
	if err := h.CreateWorkspace(name); err != nil {
		if errors.Is(err, host.ErrWorkspaceExists) {
			return preconditionError{err}
		}
		return identityError(err)
	}
	fmt.Fprintf(g.stdout, "wsfs: created workspace %s (mount it with: wsfs mount --home %s %s)\n", name, h.Home(), name)
	return nil
}
