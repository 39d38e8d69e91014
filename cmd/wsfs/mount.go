package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"wsfs/internal/commit"
	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/metrics"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/supervisor"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

func init() {
	register(command{
		name:    "mount",
		summary: "serve a workspace over FUSE (foreground daemon)",
		run:     runMount,
	})
}

func runMount(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "mount", "NAME [MOUNTPOINT]", `
Serves workspace NAME at MOUNTPOINT (default: the host's mount directory
/NAME, created if missing) in the foreground. Prints
"wsfs: serving NAME at MOUNTPOINT" on stderr once the mount is live.
SIGINT or SIGTERM commits every completed operation, unmounts and exits 0.

A completed close() or namespace operation is durable within one commit
window (--group-records records or --group-window, whichever comes
first); fsync returns once everything before it is durable.`)
	g.homeFlag(flags)
	groupRecords := flags.Int("group-records", workspace.DefaultGroupRecords, "close a commit group after this many records")
	groupWindow := flags.Duration("group-window", workspace.DefaultGroupWindow, "close a commit group this long after its first record")
	drain := flags.String("drain", "entry", `what a commit syncs before the log: "entry" (the group's own objects) or "syncfs" (legacy: whole filesystems)`)
	metricsAddr := flags.String("metrics", "", "serve Prometheus metrics on ADDR (host:port) at /metrics")
	passthrough := flags.Bool("passthrough", false, "let the kernel read whole-object files directly from the pool (read-only opens; a writer is refused with ETXTBSY while such a reader is open)")
	writeback := flags.Bool("writeback", false, "kernel writeback cache (buffers writes; disables passthrough; file mtimes are those of the writeback)")
	entryTimeout := flags.Duration("entry-timeout", fusefs.DefaultTimeout, "how long the kernel caches names and negative lookups")
	attrTimeout := flags.Duration("attr-timeout", fusefs.DefaultTimeout, "how long the kernel caches attributes")
	readyFile := flags.String("ready-file", "", "create this file once the mount is live (for scripts and supervisors); removed at exit")
	logLevel := flags.String("log-level", "info", "debug, info, warn or error")
	debugFUSE := flags.Bool("debug-fuse", false, "log every FUSE request (very verbose)")
	cpuProfile := flags.String("cpuprofile", "", "diagnostic: write a pprof CPU profile of the daemon to FILE at a clean exit (default: $WSFS_CPUPROFILE_DIR/NAME-PID.pprof if that variable is set)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() < 1 || flags.NArg() > 2 {
		return usageError{fmt.Sprintf("want NAME [MOUNTPOINT], got %d arguments", flags.NArg())}
	}
	name := flags.Arg(0)
	if err := host.ValidateName(name); err != nil {
		return usageError{err.Error()}
	}
	d, err := commit.ParseDrain(*drain)
	if err != nil {
		return usageError{err.Error()}
	}
	if *groupRecords < 1 || *groupWindow <= 0 {
		return usageError{"--group-records and --group-window must be positive"}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError{fmt.Sprintf("--log-level: %v", err)}
	}
	lg := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level})).With("workspace", name)
	if *cpuProfile == "" {
		if dir := os.Getenv("WSFS_CPUPROFILE_DIR"); dir != "" {
			*cpuProfile = filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, os.Getpid()))
		}
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop(lg)
	}

	h, err := openHostChecked(g.home, name)
	if err != nil {
		return err
	}
	if err := checkLayoutMounted(h); err != nil { // layoutcheck.go
		return err
	}
	if err := ensurePrivate(h, lg); err != nil {
		return err
	}
	if err := fusefs.CheckFUSE(); err != nil {
		return preconditionError{err}
	}
	mp := h.MountPoint(name)
	if flags.NArg() == 2 {
		if mp, err = filepath.Abs(flags.Arg(1)); err != nil {
			return usageError{err.Error()}
		}
	}
	if err := checkMountPoint(h, mp); err != nil {
		return err
	}
	if flags.NArg() < 2 {
		if err := os.MkdirAll(mp, 0o755); err != nil && !errors.Is(err, syscall.ENOTCONN) {
			return fmt.Errorf("create mount point %s: %w", mp, err)
		}
	}

	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{Logger: lg})
	if err != nil {
		return fmt.Errorf("open pool %s: %w", h.PoolDir(), err)
	}
	var m *metrics.Metrics
	if *metricsAddr != "" {
		m = metrics.New(name)
	}
	wsOpts := workspace.Options{
		Dir: h.WorkspaceDir(name), Pool: p,
		GroupRecords: *groupRecords, GroupWindow: *groupWindow, Drain: d,
		Logger: lg,
	}
	if m != nil {
		wsOpts.Observer = m
	}
	ws, err := workspace.Open(wsOpts)
	if err != nil {
		return classifyOpenError(name, err)
	}
	closeWS := func() error {
		if err := ws.Close(); err != nil {
			return fmt.Errorf("close workspace %s: %w", name, err)
		}
		return nil
	}
	// Holding the lock proves no live daemon serves the workspace; a wsfs
	// mount left at the mount point whose connection is gone (a SIGKILLed
	// daemon's) is detached, so the remount needs no manual umount.
	dead, err := fusefs.DetachDead(mp)
	for _, d := range dead {
		lg.Warn("detached the dead mount of a previous daemon (lazy unmount)", "mountpoint", d.Point, "source", d.Source)
	}
	if err != nil {
		closeWS()
		var pe *fusefs.PreconditionError
		if errors.As(err, &pe) {
			return preconditionError{err}
		}
		return err
	}

	srv, err := fusefs.Mount(ws, mp, fusefs.Options{
		Name: name, EntryTimeout: *entryTimeout, AttrTimeout: *attrTimeout, NegativeTimeout: *entryTimeout,
		Passthrough: *passthrough, Writeback: *writeback,
		Logger: lg, Metrics: m, Debug: *debugFUSE,
	})
	if err != nil {
		closeWS()
		var pe *fusefs.PreconditionError
		if errors.As(err, &pe) {
			return preconditionError{err}
		}
		return err
	}
	var ms *metrics.Server
	if m != nil {
		m.WatchEngine(func() metrics.EngineStats {
			s := ws.Stats()
			return metrics.EngineStats{Pending: s.Pending, LastGroup: s.CommittedGroup, Inodes: s.Inodes,
				BytesInline: s.BytesInline, BytesPooled: s.BytesPooled, BytesDeduped: s.BytesDeduped,
				Failed: s.Failed != nil, Stalled: s.Stalled != nil}
		})
		if ms, err = m.Serve(*metricsAddr); err != nil {
			return errors.Join(err, srv.Unmount(), closeWS())
		}
		defer ms.Close()
		lg.Info("metrics", "addr", "http://"+ms.Addr()+"/metrics")
	}
	// `wsfs snapshot create` reaches this daemon through it (snapctl.go).
	stopControl, err := startSnapshotControl(ws, h.WorkspaceDir(name), p, lg)
	if err != nil {
		return errors.Join(err, srv.Unmount(), closeWS())
	}
	defer stopControl()
	stopStatus := startStatusFile(ctx, filepath.Join(h.WorkspaceDir(name), supervisor.DaemonStatusName), mp, ws, lg)
	defer stopStatus()
	stopWatch := watchWorkspaceDir(h.WorkspaceDir(name), time.Second, lg)
	defer stopWatch()
	if *readyFile != "" {
		if err := writeReadyFile(*readyFile, mp); err != nil {
			return errors.Join(err, srv.Unmount(), closeWS())
		}
		defer os.Remove(*readyFile)
	}
	fmt.Fprintf(g.stderr, "wsfs: serving %s at %s\n", name, mp)

	select {
	case <-ctx.Done():
		lg.Info("signal received: committing and unmounting")
		start := time.Now()
		uerr := srv.Unmount()
		cerr := closeWS()
		if err := errors.Join(uerr, cerr); err != nil {
			return err
		}
		lg.Info("unmounted cleanly", "took", time.Since(start).Round(time.Millisecond))
		return nil
	case <-srv.Done():
		// Unmounted from outside (umount, fusermount -u): everything the
		// kernel sent is committed by Close, but the daemon did not stop
		// by request, so it exits with a failure (a supervisor restarts it).
		if err := closeWS(); err != nil {
			return err
		}
		return fmt.Errorf("the mount at %s was removed from outside; workspace committed and closed", mp)
	}
}

// ensurePrivate makes the host's private directories private
// (host.EnsurePrivate), logging a WARN line for each one it tightened.
func ensurePrivate(h *host.Host, lg *slog.Logger) error {
	changed, err := h.EnsurePrivate()
	for _, c := range changed {
		lg.Warn("host directory was open to other users: made it private", "dir", c.Path, "was", fmt.Sprintf("%04o", c.Old), "now", fmt.Sprintf("%04o", c.New))
	}
	return err
}

// checkMountPoint refuses (exit 3) a mount point inside the host's own
// directories, one that contains them, and a host whose state or pool lies
// on a wsfs mount: the daemon would write through its own mount.
func checkMountPoint(h *host.Host, mp string) error {
	mounts, err := fusefs.WsfsMountPoints()
	if err != nil {
		return err
	}
	if err := h.CheckMountPoint(mp, mounts); err != nil {
		return preconditionError{err}
	}
	return nil
}

// reworded is err with a different text (the fsck advice naming the
// workspace); errors.As still finds what err wraps.
type reworded struct {
	msg string
	err error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.err }

// classifyOpenError maps workspace.Open failures to exit codes.
func classifyOpenError(name string, err error) error {
	var ce *seglog.CorruptError
	var co *pool.CorruptObjectError
	switch {
	case errors.As(err, &co):
		return corruptError{fmt.Errorf("workspace %s: %w", name, err)}
	case errors.Is(err, vfs.ErrLocked):
		return preconditionError{err} // the engine's message names the lock and says what to do
	case errors.As(err, &ce):
		// The seglog message says what is damaged and that fsck repairs
		// it; name the exact commands for this workspace.
		msg := strings.ReplaceAll(err.Error(), "wsfs fsck NAME", "wsfs fsck "+name)
		msg = strings.ReplaceAll(msg, "wsfs fsck --repair NAME", "wsfs fsck --repair "+name)
		if !strings.Contains(msg, "wsfs fsck --repair "+name) {
			msg += fmt.Sprintf(". Run `wsfs fsck %s` to see what is affected and `wsfs fsck --repair %s` to repair what can be repaired without losing more", name, name)
		}
		return corruptError{&reworded{msg: "workspace " + name + ": " + msg, err: err}}
	}
	return fmt.Errorf("open workspace %s: %w", name, err)
}

// writeReadyFile creates path atomically, holding the mount point.
func writeReadyFile(path, mp string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(mp+"\n"), 0o644); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// startStatusFile rewrites the daemon's status file (read by `wsfs status`)
// every second until ctx ends or the returned stop is called; stop writes it
// once more so the file shows the final commit. The file is replaced by
// rename and never synced: it is a live view, not state.
func startStatusFile(ctx context.Context, path, mp string, ws *workspace.Workspace, lg *slog.Logger) (stop func()) {
	write := func() {
		s := ws.Stats()
		st := supervisor.DaemonStatus{Group: s.CommittedGroup, CommittedAt: s.CommittedAt, Pending: int64(s.Pending), MountPoint: mp}
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

// startCPUProfile starts a pprof CPU profile written to path; the returned
// stop ends it and closes the file (a diagnostic: errors are logged).
func startCPUProfile(path string) (stop func(*slog.Logger), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func(lg *slog.Logger) {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			lg.Warn("CPU profile not written", "path", path, "err", err)
		}
	}, nil
}
