package daemon

import (
	"log/slog"
	"syscall"
	"time"
)

// watchWorkspaceDir checks every interval that dir is still the directory
// the daemon locked (same device and inode as at the start), and logs an
// ERROR (at once, then every minute) while it is not. The lock is on the
// directory's inode, so a daemon keeps it through a rename; but if the
// directory was moved away (or replaced by a copy), a new daemon for the
// path would lock another directory, and this daemon's commits go where
// nobody will look for them.
func watchWorkspaceDir(dir string, interval time.Duration, lg *slog.Logger) (stop func()) {
	var want syscall.Stat_t
	if err := syscall.Stat(dir, &want); err != nil {
		lg.Warn("cannot watch the workspace directory", "dir", dir, "err", err)
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		var lastErr time.Time
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var st syscall.Stat_t
			err := syscall.Stat(dir, &st)
			if err == nil && st.Dev == want.Dev && st.Ino == want.Ino {
				lastErr = time.Time{}
				continue
			}
			if time.Since(lastErr) < time.Minute {
				continue
			}
			lastErr = time.Now()
			what := "replaced by another directory"
			if err != nil {
				what = "moved or removed (" + err.Error() + ")"
			}
			lg.Error("the workspace directory was "+what+" while this daemon serves it: its commits go to the directory it locked, which is no longer at this path; put it back, or stop this daemon before starting another", "dir", dir)
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
