package main

import (
	"path/filepath"

	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/supervisor"
)

// mountsOfName lists the wsfs mounts of workspaces called name, of any
// host (a variable for tests).
var mountsOfName = fusefs.Mounts

// hostMounts returns the wsfs mounts of host h's workspace name: the mount
// table names only the workspace (source wsfs:NAME), and every host may
// have a ws-1, so a mount counts as h's if it is at h's default mount
// point for name or where h's daemon of name last said it mounted it
// (its status file). Another host's mount of a workspace of the same name
// is none of h's business (rm, ls and fsck took it for h's).
func hostMounts(h *host.Host, name string) ([]string, error) {
	mps, err := mountsOfName(name)
	if err != nil || len(mps) == 0 {
		return mps, err
	}
	own := map[string]bool{canonMountPoint(h.MountPoint(name)): true}
	if st, err := supervisor.ReadDaemonStatus(filepath.Join(h.WorkspaceDir(name), supervisor.DaemonStatusName)); err == nil && st.MountPoint != "" {
		own[canonMountPoint(st.MountPoint)] = true
	}
	var out []string
	for _, mp := range mps {
		if own[canonMountPoint(mp)] {
			out = append(out, mp)
		}
	}
	return out, nil
}

// canonMountPoint resolves symbolic links in mp's parent (the mount table
// shows resolved paths; mp itself may be a dead mount that cannot be
// stat'ed).
func canonMountPoint(mp string) string {
	mp = filepath.Clean(mp)
	if d, err := filepath.EvalSymlinks(filepath.Dir(mp)); err == nil {
		return filepath.Join(d, filepath.Base(mp))
	}
	return mp
}
