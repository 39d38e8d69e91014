package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/metrics"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "ship",
		summary: "ship one workspace's committed state to the remote tier, continuously",
		run:     runShip,
	})
}

const shipAbout = `
Ships workspace NAME to the host's remote tier (the "remote" section of
HOME/wsfs.json: an S3-compatible bucket) until SIGINT/SIGTERM, then ships a
last time and exits 0. It reads what is durable on local disk — the log,
checkpoints and pool objects — so it runs beside the workspace's daemon or
without one, and needs no hook in it: a daemon only signals each commit on
STATE/workspaces/NAME/ship.wake so that a step starts at once (without
it, the shipper looks every --interval).

Shipping is pipelined. Each step reads the groups committed since the last
one and hands the pool objects they reference to background uploads
(HEAD, then PUT if absent or old; keyed by hash, shared by every workspace
and host; several at a time, the oldest group's first). It then ships the
longest run of pending groups, oldest first, whose objects are all in the
bucket: their log batches (and a checkpoint when the local log no longer
holds them), then the workspace's head naming them. A step never waits
for uploads; another starts when one finishes, so a small group committed
after a large one ships as soon as the large one's objects and its own
are up. The head never names a group before every object of it and of
every earlier group is in the bucket, so the remote always restores to
some committed group. Merging the head's small batches also runs in the
background. Shipping is asynchronous; its lag is in STATE/workspaces/NAME/
ship.json and in 'wsfs status' ('wsfs sync' waits until the head names
every group committed before it). A failed upload is reported and retried
with backoff, never skipped (the head waits for it); the workspace keeps
serving from local disk meanwhile. On SIGINT/SIGTERM the background uploads stop and one last
complete round ships everything durable.

The shipper holds the workspace's lease in the bucket (renewed every 10s,
valid 30s; the host is named by HOME/host-id) and ships only while it does:
a workspace another host serves is refused with the holder and the lease's
age. Its head is written with conditional PUTs, so a host that lost the
workspace can never overwrite the new owner's head.

--metrics ADDR serves the shipper's Prometheus metrics (wsfs_ship_*: lag,
shipped and local group, bytes and objects uploaded, snapshots, rounds
(steps), retries, errors by kind) at http://ADDR/metrics.

Credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or the
config's credentials_file); they are never logged.`

// openRemote returns the host's remote store, or a precondition error when
// the host has none.
//
// A failed check returns the opened store with the error; every caller
// but the daemon's start treats it as a failure.
func openRemote(ctx context.Context, h *host.Host, from string) (remote.Config, *remote.S3, error) {
	var cfg remote.Config
	var err error
	if from != "" {
		cfg, err = remote.ParseURL(from)
		if err != nil {
			return cfg, nil, usageError{err.Error()}
		}
		// Credentials file and profile are host settings.
		if hc, err := remote.ReadConfig(h); err == nil {
			cfg.CredentialsFile, cfg.Profile, cfg.LeaseTTLSeconds = hc.CredentialsFile, hc.Profile, hc.LeaseTTLSeconds
		}
	} else if cfg, err = remoteConfig(h); err != nil {
		return cfg, nil, err
	}
	st, err := remote.OpenS3(ctx, cfg)
	if err != nil {
		return cfg, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := st.Check(cctx); err != nil {
		return cfg, st, err // the store, for callers that tolerate a remote that is down
	}
	return cfg, st, nil
}

// openRemoteServing opens the host's remote tier (which it has) for a
// process that serves from local disk while the remote is down (a daemon,
// a sidecar): a remote that cannot be reached is no error here, every
// other failure is; it also returns the host's ID.
func openRemoteServing(ctx context.Context, h *host.Host) (*remote.S3, string, error) {
	_, st, err := openRemote(ctx, h, "")
	if err != nil && (st == nil || !ship.RemoteDown(err)) {
		return nil, "", err
	}
	id, err := remote.HostID(h)
	if err != nil {
		return nil, "", err
	}
	return st, id, nil
}

// remoteConfig returns the host's remote tier configuration, or a
// precondition error when the host has none.
func remoteConfig(h *host.Host) (remote.Config, error) {
	cfg, err := remote.ReadConfig(h)
	if err != nil {
		return cfg, err
	}
	if !cfg.Enabled() {
		return cfg, preconditionError{fmt.Errorf("host %s has no remote tier: add a \"remote\" section to %s/%s (see README, \"Remote tier\")", h.Home(), h.Home(), host.ConfigFile)}
	}
	return cfg, nil
}

func shipOptions(h *host.Host, name string, cfg remote.Config, st remote.Store, lg *slog.Logger) (ship.Options, error) {
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{Logger: lg})
	if err != nil {
		return ship.Options{}, err
	}
	id, err := remote.HostID(h)
	if err != nil {
		return ship.Options{}, err
	}
	return ship.Options{Dir: h.WorkspaceDir(name), Name: name, Pool: p, Store: st, Logger: lg, HostID: id, LeaseTTL: cfg.LeaseTTL()}, nil
}

func runShip(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "ship", "NAME", shipAbout)
	g.homeFlag(fs)
	interval := fs.Duration("interval", 50*time.Millisecond, "how often to look for newly committed groups")
	metricsAddr := fs.String("metrics", "", "serve the shipper's Prometheus metrics (lag, bytes and objects shipped, errors by kind, retries) on ADDR (host:port) at /metrics")
	metricsFile := fs.String("metrics-file", "", "with --metrics: write the address the endpoint bound to FILE (0600, atomically; removed at exit)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs)
	if err != nil {
		return err
	}
	if err := checkMetricsFile(*metricsAddr, *metricsFile); err != nil {
		return err
	}
	h, err := openHostChecked(g.home, name)
	if err != nil {
		return err
	}
	lg := slog.New(slog.NewTextHandler(g.stderr, nil))
	cfg, st, err := openRemote(ctx, h, "")
	if err != nil {
		return err
	}
	lk, err := ship.Lock(vfs.Default, h.WorkspaceDir(name))
	if errors.Is(err, vfs.ErrLocked) {
		return preconditionError{fmt.Errorf("workspace %s already has a shipper (its lock %s/%s is held)", name, h.WorkspaceDir(name), ship.LockName)}
	}
	if err != nil {
		return err
	}
	defer lk.Close()
	opts, err := shipOptions(h, name, cfg, st, lg)
	if err != nil {
		return err
	}
	sh := ship.New(opts)
	if *metricsAddr != "" {
		m := metrics.New(name)
		if err := m.Registry.Register(sh.Collector()); err != nil {
			return err
		}
		ms, err := serveMetrics(m, *metricsAddr, *metricsFile)
		if err != nil {
			return err
		}
		defer ms.Close()
		lg.Info("metrics", "addr", "http://"+ms.Addr()+"/metrics")
	}
	lg.Info("ship: shipping", "workspace", name, "remote", st.String())
	return sh.Run(ctx, ship.RunOptions{Interval: *interval, WriteStatus: true, Wake: true})
}
