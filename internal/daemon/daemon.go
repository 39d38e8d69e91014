// Package daemon assembles and runs one workspace daemon: the pool, the
// recovered workspace, its FUSE mount, and beside them the metrics server,
// the snapshot control socket (control.go), the status file `wsfs status`
// reads (status.go) and the watch on the workspace directory (watch.go).
// `wsfs mount` parses its flags into a Config and calls Run; tests can run a
// daemon in process the same way.
//
// Run's contract: it returns only after the workspace is closed, with
// everything that completed committed or the failure that prevented it.
// Cancelling ctx (SIGINT, SIGTERM) is a requested stop: it unmounts (lazily
// if files are still open), commits, and returns nil. A mount removed from
// outside is not a requested stop: Run commits and returns an error, so a
// supervisor restarts the daemon.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"wsfs/internal/commit"
	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/metrics"
	"wsfs/internal/pool"
	"wsfs/internal/ship"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// Config describes one daemon. The caller has checked the host (layout
// mounted, private modes) and the mount point (host.CheckMountPoint; it
// exists).
type Config struct {
	Host       *host.Host
	Name       string // the workspace
	MountPoint string // absolute

	GroupRecords int           // records per commit group (workspace default if 0)
	GroupWindow  time.Duration // commit window (workspace default if 0)
	Drain        commit.Drain

	EntryTimeout, AttrTimeout time.Duration // kernel caches (fusefs defaults if 0)
	Passthrough, Writeback    bool
	IOUring                   bool // FUSE over io_uring (fusefs.Options.IOUring)
	DebugFUSE                 bool // log every FUSE request

	MetricsAddr string // serve Prometheus metrics there ("" for none)
	// MetricsFile, with MetricsAddr, receives the address the metrics
	// endpoint bound (metrics.Server.PublishAddr), removed at exit.
	MetricsFile string
	ReadyFile   string // created once the mount is live, removed at exit ("" for none)
	Logger      *slog.Logger
	// Serving, if set, is called once the mount is live.
	Serving func(mountPoint string)
	// Remote, if set: the workspace's lease is held while serving, and
	// fsync may wait for the remote (see Remote).
	Remote *Remote

	// For a workspace pulled lazily (`wsfs pull`; see fetch.go):
	// NoPrefetch turns the background prefetch off (objects then stay
	// remote until read); PrefetchParallel bounds its concurrent fetches
	// (default 4); FetchTimeout bounds one fetch (default 60s).
	NoPrefetch       bool
	PrefetchParallel int
	FetchTimeout     time.Duration

	// RestoreAgent, if set, is called at the moment of an online restore
	// (see ControlHooks.RestoreAgent), after snapshot.RestoreServing has
	// set the agent state database to the snapshot's copy.
	RestoreAgent func(before, target snapshot.Info) error
}

// MetricsError is a metrics endpoint that could not listen at
// Config.MetricsAddr (the address is in use or malformed): the caller's
// mistake, reported before the workspace is opened.
type MetricsError struct{ Err error }

func (e *MetricsError) Error() string { return e.Err.Error() }
func (e *MetricsError) Unwrap() error { return e.Err }

// OpenError wraps a failure to open (recover) the workspace, so that the
// caller can classify it (corrupt log or object, served by another daemon).
type OpenError struct{ Err error }

func (e *OpenError) Error() string { return e.Err.Error() }
func (e *OpenError) Unwrap() error { return e.Err }

// Run serves the workspace until ctx is cancelled or the mount is removed
// from outside (see the package doc).
func Run(ctx context.Context, cfg Config) (err error) {
	h, name, mp, lg := cfg.Host, cfg.Name, cfg.MountPoint, cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	lazy, err := openLazyPull(ctx, h, h.WorkspaceDir(name), cfg)
	if err != nil {
		return &OpenError{err}
	}
	popts := pool.Options{Logger: lg}
	if lazy != nil {
		popts.Fetcher = lazy.fetcher
	}
	p, err := pool.Open(vfs.Default, h.PoolDir(), popts)
	if err != nil {
		return fmt.Errorf("open pool %s: %w", h.PoolDir(), err)
	}
	// The metrics endpoint listens before anything else is done, so that
	// an address that cannot be bound (in use, malformed) is refused at
	// once (a MetricsError) instead of after the workspace was recovered,
	// its lease taken and its mount made. Its collectors are registered
	// below; the address file is published only then.
	var m *metrics.Metrics
	var ms *metrics.Server
	if cfg.MetricsAddr != "" {
		m = metrics.New(name)
		if ms, err = m.Serve(cfg.MetricsAddr); err != nil {
			return &MetricsError{err}
		}
		defer ms.Close()
	}
	wsOpts := workspace.Options{
		Dir: h.WorkspaceDir(name), Pool: p,
		GroupRecords: cfg.GroupRecords, GroupWindow: cfg.GroupWindow, Drain: cfg.Drain,
		Logger: lg,
	}
	if m != nil {
		wsOpts.Observer = m
	}
	// fsyncWake is set once the workspace lock is held (below), before
	// anything is mounted: no fsync can run earlier.
	var fsyncWake *ship.WakeListener
	if r := cfg.Remote; r != nil {
		// Each durable group wakes the shipper (ship/wake.go); with no
		// shipper listening this is one failed sendto.
		shipWake := filepath.Join(h.WorkspaceDir(name), ship.ShipWakeName)
		wsOpts.AfterCommit = func(uint64) { ship.Wake(shipWake) }
		if r.SyncFsync {
			dir := h.WorkspaceDir(name)
			wsOpts.AfterFsync = func(g uint64) error { return r.waitShipped(dir, g, fsyncWake) }
		}
	}
	ws, err := workspace.Open(wsOpts)
	if err != nil {
		return &OpenError{err}
	}
	if r := cfg.Remote; r != nil && r.SyncFsync {
		// The workspace lock is held: a socket there is a dead daemon's.
		l, err := ship.ListenWake(filepath.Join(h.WorkspaceDir(name), ship.FsyncWakeName))
		if err != nil {
			lg.Warn("remote fsync: no wakeups from the shipper; polling its status only", "err", err)
		} else {
			fsyncWake = l
			defer l.Close()
		}
	}
	var leaseLost <-chan error
	if r := cfg.Remote; r != nil {
		// The local lock is held (Open): no other daemon of this host
		// serves the workspace; the lease says no other host does.
		if err := r.acquire(ctx, h.WorkspaceDir(name), name, lg); err != nil {
			return errors.Join(err, ws.Close())
		}
		lctx, stopLease := context.WithCancel(ctx)
		defer stopLease()
		leaseLost = r.keepLease(lctx, ws, h.WorkspaceDir(name), name, lg)
	}
	// From here on every return closes the workspace (committing what is
	// pending) and reports a failure to do so with the error that ended
	// the daemon.
	closed := false
	closeWS := func() error {
		closed = true
		if err := ws.Close(); err != nil {
			return fmt.Errorf("close workspace %s: %w", name, err)
		}
		return nil
	}
	defer func() {
		if !closed {
			err = errors.Join(err, closeWS())
		}
	}()
	// Holding the lock proves no live daemon serves the workspace; a wsfs
	// mount left at the mount point whose connection is gone (a SIGKILLed
	// daemon's) is detached, so the remount needs no manual umount.
	dead, err := fusefs.DetachDead(mp)
	for _, d := range dead {
		lg.Warn("detached the dead mount of a previous daemon (lazy unmount)", "mountpoint", d.Point, "source", d.Source)
	}
	if err != nil {
		return err
	}
	srv, err := fusefs.Mount(ws, mp, fusefs.Options{
		Name: h.MountName(name), EntryTimeout: cfg.EntryTimeout, AttrTimeout: cfg.AttrTimeout, NegativeTimeout: cfg.EntryTimeout,
		Passthrough: cfg.Passthrough, Writeback: cfg.Writeback, IOUring: cfg.IOUring,
		Logger: lg, Metrics: m, Debug: cfg.DebugFUSE,
		SpareProcs: spareProcs(),
	})
	if err != nil {
		return err
	}
	unmounted := false
	defer func() {
		if !unmounted {
			err = errors.Join(err, srv.Unmount())
		}
	}()
	if m != nil {
		m.WatchEngine(func() metrics.EngineStats {
			s := ws.Stats()
			return metrics.EngineStats{Pending: s.Pending, LastGroup: s.CommittedGroup, Inodes: s.Inodes,
				BytesInline: s.BytesInline, BytesPooled: s.BytesPooled, BytesDeduped: s.BytesDeduped,
				Failed: s.Failed != nil, Stalled: s.Stalled != nil}
		})
		if lazy != nil {
			m.WatchFetch(func() metrics.FetchStats { return lazy.metrics(p) })
		}
		if cfg.MetricsFile != "" {
			if err := ms.PublishAddr(cfg.MetricsFile); err != nil {
				return err
			}
		}
		lg.Info("metrics", "addr", "http://"+ms.Addr()+"/metrics")
	}
	// `wsfs snapshot create`, `wsfs restore` and `wsfs diff` reach this
	// daemon through it.
	stopControl, err := StartControl(ws, h.WorkspaceDir(name), p, lg, ControlHooks{
		Invalidate: srv.InvalidateRestored, RestoreAgent: cfg.RestoreAgent,
	})
	if err != nil {
		return err
	}
	defer stopControl()
	var fetchStatus func() *FetchStatus
	if lazy != nil {
		fetchStatus = func() *FetchStatus { return lazy.status(p) }
		if !cfg.NoPrefetch && !lazy.noPrefetch {
			pctx, cancelPrefetch := context.WithCancel(ctx)
			wait := lazy.startPrefetch(pctx, h.WorkspaceDir(name), p, cfg.PrefetchParallel, lg)
			defer func() { cancelPrefetch(); wait() }()
		} else {
			lg.Info("prefetch off: contents are fetched from the remote only when read", "remote", lazy.remote)
		}
	}
	stopStatus := startStatusFile(ctx, filepath.Join(h.WorkspaceDir(name), StatusName), ws, fetchStatus, lg)
	defer stopStatus()
	stopWatch := watchWorkspaceDir(h.WorkspaceDir(name), time.Second, lg)
	defer stopWatch()
	if cfg.ReadyFile != "" {
		if err := writeReadyFile(cfg.ReadyFile, mp); err != nil {
			return err
		}
		defer vfs.Default.Remove(cfg.ReadyFile)
	}
	if cfg.Serving != nil {
		cfg.Serving(mp)
	}

	select {
	case <-ctx.Done():
		lg.Info("signal received: committing and unmounting")
		start := time.Now()
		unmounted = true
		if err := errors.Join(srv.Unmount(), closeWS()); err != nil {
			return err
		}
		lg.Info("unmounted cleanly", "took", time.Since(start).Round(time.Millisecond))
		return nil
	case lerr := <-leaseLost:
		unmounted = true
		return errors.Join(lerr, srv.Unmount(), closeWS())
	case <-srv.Done():
		// Unmounted from outside (umount, fusermount -u): everything the
		// kernel sent is committed by Close, but the daemon did not stop
		// by request, so it exits with a failure (a supervisor restarts it).
		unmounted = true
		if err := closeWS(); err != nil {
			return err
		}
		return fmt.Errorf("the mount at %s was removed from outside; workspace committed and closed", mp)
	}
}

// writeReadyFile creates path atomically, holding the mount point (not
// synced: it tells a script or supervisor the mount is live, it is not
// state).
func writeReadyFile(path, mp string) error {
	if err := vfs.Publish(vfs.Default, path, false, func(f vfs.File) error {
		_, err := f.Write([]byte(mp + "\n"))
		return err
	}); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// spareProcs is fusefs.Options.SpareProcs for the daemon's one mount: 2
// (one P for the commit flusher, which spends much of its time in
// fdatasync, and one left idle), or 0 when the GOMAXPROCS environment
// variable is set: an explicit choice is kept. Measured in
// docs/benchmarks.md ("Daemon CPU per request: spare Ps and fewer allocations").
func spareProcs() int {
	if os.Getenv("GOMAXPROCS") != "" {
		return 0
	}
	return 2
}
