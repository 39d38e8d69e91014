package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/layout"
	"wsfs/internal/mountinfo"
)

// mountsForCheck reads the mount table; a variable so that tests can
// present a layout whose filesystems are not mounted without root.
var mountsForCheck = mountinfo.Read

// wsfsMountsForCheck lists the wsfs mounts (a variable for tests).
var wsfsMountsForCheck = fusefs.WsfsMountPoints

// checkLayoutMounted refuses (a preconditionError) when the host has a
// dedicated layout (HOME/layout/layout.json) and one of its filesystems is
// not mounted where the record says: the directory underneath the mount
// point is not the host's state or pool, and writing there (or reading it
// as the host's state) would silently use the wrong data. A host without a
// layout passes.
func checkLayoutMounted(h *host.Host) error {
	dir := filepath.Join(h.Home(), "layout")
	rec, err := layout.ReadRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return preconditionError{err}
	}
	if len(rec.Filesystems) == 0 {
		return nil
	}
	mounts, err := mountsForCheck()
	if err != nil {
		return err
	}
	for _, f := range rec.Filesystems {
		if _, ok := mountinfo.At(mounts, f.MountPoint); !ok {
			return preconditionError{fmt.Errorf("the layout's %s filesystem (%s) is not mounted at %s, so %s is only the directory "+
				"underneath it: run `wsfs layout create --home %s` to re-attach and mount it (`wsfs layout status` shows the layout)",
				f.Role, f.Image, f.MountPoint, f.MountPoint, h.Home())}
		}
	}
	return nil
}

// identityError maps a host identity failure to the precondition exit
// code.
func identityError(err error) error {
	if errors.Is(err, host.ErrIdentity) {
		return preconditionError{err}
	}
	return err
}
