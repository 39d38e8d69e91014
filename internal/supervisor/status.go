package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/daemon"
	"wsfs/internal/host"
	"wsfs/internal/mountinfo"
)

// StaleAfter is the age past which a status file is taken to belong to a
// process that no longer runs (both daemon and sidecar rewrite theirs every
// second).
const StaleAfter = 5 * time.Second

// WorkspaceStatus is one line of `wsfs status`.
type WorkspaceStatus struct {
	Name       string
	MountPoint string
	Mounted    bool
	FSType     string // of the mount, when mounted
	DeadMount  bool   // mounted, but the daemon behind it is gone (ENOTCONN); set by the caller

	Daemon      *daemon.Status // nil if there is no status file
	DaemonStale bool           // the file is older than StaleAfter
	DaemonErr   string         // unreadable status file

	Sidecar      *agentstate.Status // nil if there is no status file
	SidecarStale bool
	SidecarErr   string

	DaemonPID, SidecarPID           int // from up.json, 0 if unknown
	DaemonRestarts, SidecarRestarts int
}

// Collect gathers the status of every workspace of h at time now. It reads
// the mount table, status files and up.json, and never touches a mount;
// DeadMount is left for the caller to set.
func Collect(h *host.Host, now time.Time) ([]WorkspaceStatus, error) {
	names, err := h.Workspaces()
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	up, upErr := ReadState(h)
	var out []WorkspaceStatus
	for _, n := range names {
		ws := WorkspaceStatus{Name: n, MountPoint: h.MountPoint(n)}
		if m, ok := mountinfo.At(mounts, ws.MountPoint); ok {
			// No stat of the mount point: it would block for as long as
			// a stuck daemon does not answer. The caller tells dead
			// mounts apart, bounded (`wsfs status`: fusefs.Probe).
			ws.Mounted, ws.FSType = true, m.FSType
		}
		p := filepath.Join(h.WorkspaceDir(n), daemon.StatusName)
		if st, mtime, err := daemon.ReadStatus(p); err == nil {
			ws.Daemon = &st
			ws.DaemonStale = now.Sub(mtime) > StaleAfter
		} else if !errors.Is(err, fs.ErrNotExist) {
			ws.DaemonErr = err.Error()
		}
		sp := agentstate.PathsFor(h, n).Status
		if st, err := agentstate.ReadStatus(sp); err == nil {
			ws.Sidecar = &st
			ws.SidecarStale = now.Sub(st.UpdatedAt) > StaleAfter
		} else if !errors.Is(err, fs.ErrNotExist) {
			ws.SidecarErr = err.Error()
		}
		// up.json is only current while its supervisor lives.
		if upErr == nil && up.PID > 0 && syscall.Kill(up.PID, 0) == nil {
			for _, c := range up.Children {
				if c.Workspace != n {
					continue
				}
				switch c.Kind {
				case KindDaemon:
					ws.DaemonPID, ws.DaemonRestarts = c.PID, c.Restarts
				case KindSidecar:
					ws.SidecarPID, ws.SidecarRestarts = c.PID, c.Restarts
				}
			}
		}
		out = append(out, ws)
	}
	return out, nil
}

// Columns renders a status as the columns of `wsfs status`:
// NAME MOUNTED GROUP AGE PENDING REPLICA LAG NOTE. Unknown values are "-".
func (w WorkspaceStatus) Columns(now time.Time) []string {
	mounted := "no"
	switch {
	case w.DeadMount:
		mounted = "dead"
	case w.Mounted:
		mounted = "yes"
	}
	group, age, pending, replica, lag := "-", "-", "-", "-", "-"
	var notes []string
	if w.DeadMount {
		notes = append(notes, "mount point answers ENOTCONN: its daemon died; `wsfs up` restarts it, or unmount with umount -l")
	}
	if d := w.Daemon; d != nil {
		group = fmt.Sprint(d.Group)
		if !d.CommittedAt.IsZero() {
			age = FormatAge(now.Sub(d.CommittedAt))
		}
		pending = fmt.Sprint(d.Pending)
		if d.Failed != "" {
			notes = append(notes, "FAILED: "+d.Failed)
		}
		if d.Stalled != "" {
			notes = append(notes, "STALLED: "+d.Stalled+
				" (nothing is lost; it commits once there is space. Where state and pool share a filesystem, `wsfs gc --grace 1h` frees it while daemons serve:"+
				" it removes the objects of files deleted before the stall; deletions made while stalled free nothing until they can commit)")
		}
		if w.DaemonStale {
			notes = append(notes, "daemon status stale (daemon not running?)")
		}
	}
	if w.DaemonErr != "" {
		notes = append(notes, w.DaemonErr)
	}
	if s := w.Sidecar; s != nil {
		replica = fmt.Sprintf("txid %d", s.ReplicaTXID)
		l := fmt.Sprintf("%d ltx", s.Lag())
		if !s.LastSyncAt.IsZero() {
			l += ", synced " + FormatAge(now.Sub(s.LastSyncAt)) + " ago"
		}
		lag = l
		if s.Error != "" {
			notes = append(notes, "replica: "+s.Error)
		}
		if w.SidecarStale {
			notes = append(notes, "sidecar status stale (sidecar not running?)")
		}
	}
	if w.SidecarErr != "" {
		notes = append(notes, w.SidecarErr)
	}
	if w.DaemonRestarts > 0 || w.SidecarRestarts > 0 {
		notes = append(notes, fmt.Sprintf("restarts: daemon %d, sidecar %d", w.DaemonRestarts, w.SidecarRestarts))
	}
	note := "-"
	if len(notes) > 0 {
		note = strings.Join(notes, "; ")
	}
	return []string{w.Name, mounted, group, age, pending, replica, lag, note}
}

// FormatAge renders a duration compactly (1.2s, 3m4s, 2h5m).
func FormatAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}
