package main

import (
	"context"
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
	"wsfs/internal/daemon"
	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/seglog"
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
	metricsAddr := flags.String("metrics", "", "serve Prometheus metrics on ADDR (host:port; port 0 picks one) at /metrics")
	metricsFile := flags.String("metrics-file", "", "with --metrics: write the address the endpoint bound to FILE (0600, atomically; removed at exit)")
	passthrough := flags.Bool("passthrough", false, "let the kernel read whole-object files directly from the pool (read-only opens; a writer is refused with ETXTBSY while such a reader is open)")
	transport := flags.String("fuse-transport", "dev", `how the kernel and the daemon exchange FUSE requests: "dev" (read/write on /dev/fuse) or "uring" (FUSE over io_uring; needs /sys/module/fuse/parameters/enable_uring set to Y by an administrator)`)
	writeback := flags.Bool("writeback", false, "kernel writeback cache (buffers writes; disables passthrough; file mtimes are those of the writeback)")
	entryTimeout := flags.Duration("entry-timeout", fusefs.DefaultTimeout, "how long the kernel caches names and negative lookups")
	attrTimeout := flags.Duration("attr-timeout", fusefs.DefaultTimeout, "how long the kernel caches attributes")
	readyFile := flags.String("ready-file", "", "create this file once the mount is live (for scripts and supervisors); removed at exit")
	logLevel := flags.String("log-level", "info", "debug, info, warn or error")
	prefetch := flags.Bool("prefetch", true, "for a workspace pulled lazily (wsfs pull): fetch its contents from the remote in the background (false: only when read; also the host config's remote.no_prefetch)")
	prefetchParallel := flags.Int("prefetch-parallel", 4, "concurrent fetches of the background prefetch")
	fetchTimeout := flags.Duration("fetch-timeout", time.Minute, "bound on one fetch of a not-yet-local object from the remote (a read past it fails with EIO)")
	debugFUSE := flags.Bool("debug-fuse", false, "log every FUSE request (very verbose)")
	steal := flags.Bool("steal", false, "remote tier: take the workspace's lease over although another host holds it (only once that lease has expired: its host is gone)")
	remoteFsync := flags.Bool("remote-fsync", false, "remote tier: every fsync returns only once its group is in the remote (as the config's remote.sync_fsync); needs the workspace's shipper running")
	remoteFsyncTimeout := flags.Duration("remote-fsync-timeout", 60*time.Second, "with --remote-fsync: an fsync whose group is not in the remote this long after it committed locally fails with EIO")
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
	if err := checkMetricsFile(*metricsAddr, *metricsFile); err != nil {
		return err
	}
	d, err := commit.ParseDrain(*drain)
	if err != nil {
		return usageError{err.Error()}
	}
	if *groupRecords < 1 || *groupWindow <= 0 {
		return usageError{"--group-records and --group-window must be positive"}
	}
	if *transport != "dev" && *transport != "uring" {
		return usageError{fmt.Sprintf("--fuse-transport: want dev or uring, got %q", *transport)}
	}
	if *prefetchParallel < 1 || *fetchTimeout <= 0 {
		return usageError{"--prefetch-parallel and --fetch-timeout must be positive"}
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

	rem, err := daemonRemote(ctx, h, *steal, *remoteFsync, *remoteFsyncTimeout)
	if err != nil {
		return err
	}
	err = daemon.Run(ctx, daemon.Config{
		Remote: rem,
		Host:   h, Name: name, MountPoint: mp,
		GroupRecords: *groupRecords, GroupWindow: *groupWindow, Drain: d,
		EntryTimeout: *entryTimeout, AttrTimeout: *attrTimeout,
		Passthrough: *passthrough, Writeback: *writeback, IOUring: *transport == "uring", DebugFUSE: *debugFUSE,
		MetricsAddr: *metricsAddr, MetricsFile: *metricsFile, ReadyFile: *readyFile, Logger: lg,
		NoPrefetch: !*prefetch, PrefetchParallel: *prefetchParallel, FetchTimeout: *fetchTimeout,
		Serving: func(mp string) { fmt.Fprintf(g.stderr, "wsfs: serving %s at %s\n", name, mp) },
	})
	var oe *daemon.OpenError
	var pe *fusefs.PreconditionError
	var re *daemon.RefusedError
	var me *daemon.MetricsError
	switch {
	case errors.As(err, &me):
		return metricsListenError(me.Err)
	case errors.As(err, &oe):
		return classifyOpenError(name, oe.Err)
	case errors.As(err, &re):
		return preconditionError{err}
	case errors.As(err, &pe):
		return preconditionError{err}
	}
	return err
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
	var mo *pool.MissingObjectError
	var ue *seglog.UnsyncedBaseError
	switch {
	case errors.As(err, &ue):
		// A pulled checkpoint a crash tore before it was synced: not
		// damage to repair, but a pull to redo (the message says so).
		msg := strings.ReplaceAll(ue.Error(), "NAME", name)
		return corruptError{&reworded{msg: "workspace " + name + ": " + msg, err: err}}
	case errors.As(err, &co), errors.As(err, &mo):
		// An object opening needs (a manifest of the tree a fork's or
		// restore's checkpoint names) is damaged or gone: corrupt data,
		// as fsck reports it.
		return corruptError{fmt.Errorf("workspace %s: %w. Run `wsfs fsck %s` to see what is affected", name, err, name)}
	case errors.Is(err, workspace.ErrReplay):
		return corruptError{fmt.Errorf("workspace %s: %w. Run `wsfs fsck %s` to see what is affected", name, err, name)}
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

// daemonRemote returns the daemon's remote-tier settings when the host has
// a remote tier (nil when it has none; --steal and --remote-fsync then
// are refused, exit 3).
func daemonRemote(ctx context.Context, h *host.Host, steal, remoteFsync bool, timeout time.Duration) (*daemon.Remote, error) {
	cfg, err := remote.ReadConfig(h)
	if err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		if steal || remoteFsync {
			return nil, preconditionError{fmt.Errorf("--steal and --remote-fsync need a remote tier: host %s has no \"remote\" section in %s (see README, \"Remote tier\")", h.Home(), host.ConfigFile)}
		}
		return nil, nil
	}
	// A remote that is down is not refused here: the lease decides
	// (daemon.Remote: a host may start on the lease it still holds).
	st, id, err := openRemoteServing(ctx, h)
	if err != nil {
		return nil, err
	}
	return &daemon.Remote{Store: st, HostID: id, LeaseTTL: cfg.LeaseTTL(), Steal: steal, SyncFsync: remoteFsync || cfg.SyncFsync, SyncTimeout: timeout}, nil
}
