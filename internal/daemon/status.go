package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// StatusName is the status file a daemon rewrites every second in
// STATE/workspaces/NAME (read by `wsfs status`).
const StatusName = "status.json"

// Status is the content of a daemon's status file.
type Status struct {
	Group       uint64    `json:"group"`             // last committed group
	CommittedAt time.Time `json:"committed_at"`      // when it committed
	Pending     int64     `json:"pending"`           // records not yet committed
	Failed      string    `json:"failed"`            // non-empty once the workspace failed
	Stalled     string    `json:"stalled,omitempty"` // non-empty while commits wait for space on the log's filesystem
	// Fetch is the progress of a lazily pulled workspace's fetches from
	// the remote tier (nil for a workspace whose contents are all local).
	Fetch *FetchStatus `json:"fetch,omitempty"`
}

// ReadStatus reads the status file at path and returns it with the file's
// modification time (the caller judges staleness from it).
func ReadStatus(path string) (Status, time.Time, error) {
	fi, err := vfs.Default.Stat(path)
	if err != nil {
		return Status{}, time.Time{}, err
	}
	f, err := vfs.Default.Open(path)
	if err != nil {
		return Status{}, time.Time{}, err
	}
	defer f.Close()
	var st Status
	if err := json.NewDecoder(f).Decode(&st); err != nil {
		return Status{}, time.Time{}, fmt.Errorf("daemon status %s: %w", path, err)
	}
	return st, fi.ModTime(), nil
}

// startStatusFile rewrites the daemon's status file every second until ctx
// ends or the returned stop is called; stop writes it once more so the
// file shows the final commit. The file is replaced by rename and never
// synced: it is a live view, not state.
//
// fetch, if not nil, gives the Fetch part.
func startStatusFile(ctx context.Context, path string, ws *workspace.Workspace, fetch func() *FetchStatus, lg *slog.Logger) (stop func()) {
	write := func() {
		s := ws.Stats()
		st := Status{Group: s.CommittedGroup, CommittedAt: s.CommittedAt, Pending: int64(s.Pending)}
		if fetch != nil {
			st.Fetch = fetch()
		}
		if s.Failed != nil {
			st.Failed = s.Failed.Error()
		}
		if s.Stalled != nil {
			st.Stalled = s.Stalled.Error()
		}
		err := vfs.Publish(vfs.Default, path, false, func(f vfs.File) error {
			return json.NewEncoder(f).Encode(st)
		})
		if err != nil {
			lg.Debug("status file not written", "path", path, "err", err)
		}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			write()
			select {
			case <-t.C:
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		write()
	}
}
