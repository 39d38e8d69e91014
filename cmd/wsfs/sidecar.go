package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/daemon"
	"wsfs/internal/host"
	"wsfs/internal/metrics"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
	"wsfs/internal/vfs"
)

// The sidecar command is internal: `wsfs up` starts one per workspace (and
// systemd's wsfs-sidecar@.service does in production).
func init() {
	register(command{
		name:    "sidecar",
		summary: "(internal) replicate one workspace's agent state database with Litestream",
		run:     runSidecar,
	})
}

const sidecarAbout = `
Replicates the agent state database of workspace NAME
(STATE/workspaces/NAME/agent/state.db, created in WAL mode if missing) with
Litestream until SIGINT/SIGTERM, then syncs a last time and exits 0.
'wsfs up' starts one per workspace; run it by hand only for debugging.

The replica is the file replica POOL/replicas/NAME unless --replica or the
host config's "agent_state": {"replica_url": ...} names another. A replica
that cannot be reached is an error at start-up (exit 1); the workspace's
daemon does not depend on it and keeps serving files.

A database that has never replicated from this host (no Litestream
position beside it: missing, just created, or written by the agent first)
is not replicated to a replica that holds transactions: that would make
every restore of the latest state return it (Litestream uploads it as the
next transaction). The sidecar refuses (exit 3) naming what the replica
holds: move the database aside and 'wsfs state restore NAME', or 'wsfs rm
NAME' and 'wsfs pull NAME' again; or 'wsfs state replace NAME' to replace
the replica's state with the database. A database restored from that replica
(by pull or state restore, which record it in state.db.adopted) starts,
unless the replica has moved on since.

On a host with a remote tier the sidecar replicates only while no other
host holds the workspace's lease: another host's lease refuses the start
(exit 3), and a takeover while it runs stops it without a final sync
(exit 1, "lease lost").

Replication is asynchronous: a transaction reaches the replica within about
one --sync-interval, so a host loss can cost the last interval. Callers
that need a confirmed position run 'wsfs state sync NAME'.

--metrics ADDR serves the sidecar's Prometheus metrics (wsfs_agent_*:
local and replica transaction, lag, last successful sync, error) at
http://ADDR/metrics.`

func runSidecar(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "sidecar", "NAME", sidecarAbout)
	g.homeFlag(fs)
	replica := fs.String("replica", "", "replica path or Litestream replica URL for this workspace (default: config, else POOL/replicas/NAME)")
	interval := fs.Duration("sync-interval", time.Second, "how often Litestream uploads new transactions (the window that can be lost)")
	metricsAddr := fs.String("metrics", "", "serve the sidecar's Prometheus metrics (replica position, lag, last sync, error) on ADDR (host:port; port 0 picks one) at /metrics")
	metricsFile := fs.String("metrics-file", "", "with --metrics: write the address the endpoint bound to FILE (0600, atomically; removed at exit)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs)
	if err != nil {
		return err
	}
	if *interval <= 0 {
		return usageError{"--sync-interval must be positive"}
	}
	if err := checkMetricsFile(*metricsAddr, *metricsFile); err != nil {
		return err
	}
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return err
	}
	// As the daemon: a workspace pushed from here is served by the host
	// that pulls it, whose sidecar replicates into the same replica.
	if ship.Pushed(vfs.Default, h.WorkspaceDir(name)) {
		return preconditionError{fmt.Errorf("workspace %s was pushed from this host (%s exists): its agent state is replicated by the host that serves it now; remove it here (wsfs rm %s) and pull it to serve it here again",
			name, filepath.Join(h.WorkspaceDir(name), ship.PushedName), name)}
	}
	url, err := agentstate.ReplicaURL(h, name, *replica)
	if err != nil {
		return err
	}
	lg := slog.New(slog.NewTextHandler(g.stderr, nil))
	if err := ensurePrivate(h, lg); err != nil {
		return err
	}
	watch, err := sidecarLease(ctx, h, name, lg)
	if err != nil {
		return err
	}
	ctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	if watch != nil {
		go watch(ctx, lost)
	}
	p := agentstate.PathsFor(h, name)
	sc, err := agentstate.Start(ctx, agentstate.Options{
		Workspace:    name,
		DBPath:       p.DB,
		ReplicaURL:   url,
		SocketPath:   p.Socket,
		StatusPath:   p.Status,
		SyncInterval: *interval,
		Logger:       lg,
	})
	if ra := (*agentstate.ReplicaAheadError)(nil); errors.Is(err, vfs.ErrLocked) || errors.As(err, &ra) {
		// A second sidecar for the workspace, or a database that would
		// replace the replica's state (never replicated from here).
		return preconditionError{err}
	}
	if err != nil {
		return err
	}
	var ms *metrics.Server
	if *metricsAddr != "" {
		m := metrics.New(name)
		m.WatchAgent(func() metrics.AgentStats {
			st := sc.Status()
			return metrics.AgentStats{LocalTXID: st.LocalTXID, ReplicaTXID: st.ReplicaTXID, LastSyncAt: st.LastSyncAt, Error: st.Error != ""}
		})
		if ms, err = serveMetrics(m, *metricsAddr, *metricsFile); err != nil {
			_, cerr := sc.Close(context.WithoutCancel(ctx))
			return errors.Join(err, cerr)
		}
		lg.Info("metrics", "addr", "http://"+ms.Addr()+"/metrics")
	}
	<-ctx.Done()
	if ms != nil {
		ms.Close() // before Close: no scrape reads a closing database
	}
	if cause := context.Cause(ctx); errors.Is(cause, daemon.ErrLeaseLost) {
		return errors.Join(cause, sc.Abort())
	}
	_, err = sc.Close(context.WithoutCancel(ctx))
	return err
}

// sidecarLease: on a host with a remote tier, a sidecar replicates the
// agent state only while no other host holds the workspace's lease. The
// daemon holds the lease and the sidecar only reads it (ship.CheckLease):
// at start-up a lease of another host refuses the start (exit 3), as it
// refuses the daemon's, and while running the sidecar reads it every
// third of the lease's TTL; finding it taken over (--steal on another
// host, which then replicates the state it restored into the same
// replica), it stops replicating without a last sync (Sidecar.Abort) and
// exits 1 with ErrLeaseLost, so that two hosts never write one replica
// for longer than the daemon's own window (daemon.Remote). A remote that
// cannot be reached only logs, as for the daemon. It returns the watch
// to run (nil without a remote tier).
func sidecarLease(ctx context.Context, h *host.Host, name string, lg *slog.Logger) (func(context.Context, context.CancelCauseFunc), error) {
	cfg, err := remote.ReadConfig(h)
	if err != nil || !cfg.Enabled() {
		return nil, err
	}
	st, id, err := openRemoteServing(ctx, h)
	if err != nil {
		return nil, err
	}
	var le *ship.LeaseError
	switch err := ship.CheckLease(ctx, st, name, id, time.Now()); {
	case errors.As(err, &le):
		return nil, preconditionError{fmt.Errorf("not replicating the agent state: %w", err)}
	case err != nil:
		lg.Warn("cannot read the workspace's lease; replicating, and reading it again later", "err", err)
	}
	ttl := cfg.LeaseTTL()
	if ttl <= 0 {
		ttl = ship.DefaultLeaseTTL
	}
	return func(ctx context.Context, lost context.CancelCauseFunc) {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := ship.CheckLease(ctx, st, name, id, time.Now())
			switch {
			case errors.As(err, &le):
				lg.Error("the workspace was taken over by another host: stopping the replication of its agent state", "err", err)
				lost(fmt.Errorf("%w: %w", daemon.ErrLeaseLost, err))
				return
			case err != nil && ctx.Err() == nil:
				lg.Warn("cannot read the workspace's lease; still replicating", "err", err)
			}
		}
	}, nil
}

// openHostChecked opens the host at home and checks that workspace name
// exists; both failures are unmet preconditions.
func openHostChecked(home, name string) (*host.Host, error) {
	h, err := host.Open(home)
	if err != nil {
		if errors.Is(err, host.ErrNoHost) {
			return nil, preconditionError{err}
		}
		return nil, err
	}
	// Before anything reads the state or the pool: underneath a layout
	// filesystem that is not mounted, every workspace looks missing.
	if err := checkLayoutMounted(h); err != nil { // layoutcheck.go
		return nil, err
	}
	if name != "" {
		if err := checkWorkspace(h, name); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// checkWorkspace is h.CheckWorkspace with its exit code: an invalid name
// is the caller's mistake (exit 2), an unknown workspace a precondition
// (exit 3), and anything else (a directory that cannot be read, or is not
// a directory) a failure (exit 1), never a usage error.
func checkWorkspace(h *host.Host, name string) error {
	err := h.CheckWorkspace(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, host.ErrNoWorkspace):
		return preconditionError{err}
	case errors.Is(err, host.ErrInvalidName):
		return usageError{err.Error()}
	}
	return err
}
