package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"wsfs/internal/host"
	"wsfs/internal/layout"
)

func init() {
	register(command{
		name:    "layout",
		summary: "create, show or destroy the dedicated layout (loop-backed ext4 for state and pool)",
		about:   layoutAbout,
		subcommands: []command{
			{name: "create", summary: "make, attach and mount the state and pool filesystems (idempotent)", run: runLayoutCreate},
			{name: "status", summary: "devices, mounts, usage and direct-I/O state of each filesystem", run: runLayoutStatus},
			{name: "destroy", summary: "unmount, detach and delete both filesystems and everything in them", run: runLayoutDestroy},
		},
	})
}

const layoutAbout = `
The dedicated layout gives the host's state directory and pool directory
each their own loop-backed ext4 filesystem, with direct I/O on the loop
devices, so that one filesystem's flushes never drag the other's dirty
pages along. The filesystems are mounted exactly at the directories the
host config names, so 'wsfs up', 'wsfs mount' and 'wsfs stress' use them
without further configuration. Needs root. Record: D/layout.json (--dir D,
default HOME/layout).`

const layoutCreateAbout = `
Makes sparse image files under --dir, mkfs.ext4s them, attaches them to
loop devices and mounts them at the host's state and pool directories.
Refuses (exit 3) if the state or pool directory holds files (they would be
hidden). Idempotent: a second run reports what exists; after a reboot it
re-attaches and re-mounts the same images and never reformats them.`

const layoutStatusAbout = `
Shows the devices, mounts, usage and direct-I/O state of each filesystem of
the layout. Exit 1 if one is not as recorded, 3 if there is no layout.`

const layoutDestroyAbout = `
Unmounts, detaches and removes the images: EVERYTHING stored in the state
and pool directories is deleted. Refuses (exit 3) while any workspace
daemon runs or anything is mounted under the host's mount directory.`

func runLayoutCreate(ctx context.Context, g *globals, args []string) error {
	return runLayoutSub(ctx, g, "create", layoutCreateAbout, args)
}

func runLayoutStatus(ctx context.Context, g *globals, args []string) error {
	return runLayoutSub(ctx, g, "status", layoutStatusAbout, args)
}

func runLayoutDestroy(ctx context.Context, g *globals, args []string) error {
	return runLayoutSub(ctx, g, "destroy", layoutDestroyAbout, args)
}

// runLayoutSub runs one layout subcommand; they share --home and --dir.
func runLayoutSub(ctx context.Context, g *globals, sub, about string, args []string) error {
	fs := newFlagSet(g, "layout "+sub, "", about)
	g.homeFlag(fs)
	dir := fs.String("dir", "", "directory of the image files and layout.json (default HOME/layout)")
	var stateSize, poolSize *string
	var directIO *bool
	if sub == "create" {
		stateSize = fs.String("state-size", "4G", "size of the state filesystem image (sparse; K, M, G, T suffixes)")
		poolSize = fs.String("pool-size", "16G", "size of the pool filesystem image (sparse)")
		directIO = fs.Bool("direct-io", true, "turn direct I/O on for the loop devices")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	opts := layout.DefaultOptions()
	opts.Dir = *dir
	opts.Log = func(f string, a ...any) { fmt.Fprintf(g.stdout, f+"\n", a...) }
	wrap := func(err error) error {
		switch {
		case errors.Is(err, layout.ErrNotRoot), errors.Is(err, layout.ErrBusy), errors.Is(err, host.ErrNoHost),
			errors.Is(err, layout.ErrNotEmpty), errors.Is(err, layout.ErrNoLayout):
			return preconditionError{err}
		}
		return err
	}

	switch sub {
	case "create":
		var err error
		if opts.StateSize, err = layout.ParseSize(*stateSize); err != nil {
			return usageError{"--state-size: " + err.Error()}
		}
		if opts.PoolSize, err = layout.ParseSize(*poolSize); err != nil {
			return usageError{"--pool-size: " + err.Error()}
		}
		opts.DirectIO = *directIO
		if err := layout.CheckRoot(os.Geteuid()); err != nil {
			return preconditionError{err}
		}
		// The layout is mounted where the host config says, so the host
		// must exist; create it (default config) if it does not.
		h, err := host.Init(g.home)
		if err != nil {
			return wrap(err)
		}
		rec, err := layout.Create(h, opts)
		if err != nil {
			return wrap(err)
		}
		fmt.Fprintf(g.stdout, "layout ready (%s):\n", filepath.Join(filepath.Dir(rec.Filesystems[0].Image), layout.RecordName))
		for _, f := range rec.Filesystems {
			fmt.Fprintf(g.stdout, "  %-5s %s on %s at %s\n", f.Role, layout.FormatSize(f.Size), f.Device, f.MountPoint)
		}
		return nil
	case "status":
		h, err := host.Open(g.home)
		if err != nil {
			return wrap(err)
		}
		d := opts.Dir
		if d == "" {
			d = filepath.Join(h.Home(), "layout")
		}
		st, err := layout.Status(h, d)
		if err != nil {
			return wrap(err)
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROLE\tDEVICE\tDIRECT-IO\tMOUNTED AT\tSIZE\tUSED\tAVAIL\tINODES FREE\tIMAGE\tPROBLEM")
		bad := 0
		for _, s := range st {
			dev, dio, mp := "-", "-", "-"
			if s.Attached != "" {
				dev = s.Attached
				dio = "off"
				if s.DirectIOOn {
					dio = "on"
				}
			}
			size, used, avail, inodes := "-", "-", "-", "-"
			if s.Mounted {
				mp = s.MountPoint
				size, used, avail = layout.FormatSize(int64(s.Size)), layout.FormatSize(int64(s.Used)), layout.FormatSize(int64(s.Avail))
				inodes = fmt.Sprintf("%d/%d", s.InodesFree, s.Inodes)
			}
			problem := "-"
			if s.Problem != "" {
				problem = s.Problem
				bad++
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Role, dev, dio, mp, size, used, avail, inodes, s.Image, problem)
		}
		tw.Flush()
		if bad > 0 {
			return fmt.Errorf("%d of %d filesystems are not as recorded", bad, len(st))
		}
		return nil
	default: // destroy
		h, err := host.Open(g.home)
		if err != nil {
			return wrap(err)
		}
		if err := layout.Destroy(h, opts); err != nil {
			return wrap(err)
		}
		fmt.Fprintln(g.stdout, "layout destroyed")
		return nil
	}
}
