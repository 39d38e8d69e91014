package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
	"wsfs/internal/supervisor"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "up",
		summary: "run every workspace of the host: its daemon and its agent-state sidecar, restarted when they die",
		run:     runUp,
	})
}

const upAbout = `
Starts, for every workspace of the host, its daemon ('wsfs mount NAME
HOME/mnt/NAME') and its agent-state replication sidecar ('wsfs sidecar
NAME') as child processes, and restarts a child that dies, with exponential
backoff (--min-backoff doubling up to --max-backoff), logging who died, how
and when it restarts. --workspaces N first creates ws-1..ws-N where missing
(and the host, if HOME has none). A workspace pushed from this host ('wsfs
push') is skipped with a WARN line. Prints "ready" on stdout once every
workspace is mounted; logs go to stderr. Runtime files: HOME/run/NAME.ready
(daemon ready files) and HOME/run/up.json (pids, restarts; read by 'wsfs
status').

Agents find their state database in $` + agentstate.EnvVar + `
(STATE/workspaces/NAME/agent/state.db); see 'wsfs state -h' for what its
replication promises.

On SIGINT/SIGTERM: stops the sidecars (each syncs its replica a last time),
then the daemons (each commits what is pending and unmounts); a child that
does not stop within --stop-timeout is killed (daemons then lazily
unmounted) and the log says so. Exits 0.

--gc-interval D runs 'wsfs gc' every D while the daemons serve (it needs no
downtime); each pass is logged with what it reclaimed.

--metrics ADDR serves the metrics of the whole host at http://ADDR/metrics
(Prometheus): every child's own (the daemons' wsfs_fuse_*, wsfs_commit_*,
..., the sidecars' wsfs_agent_*, the shippers' wsfs_ship_*), labelled
workspace=NAME and process=daemon|sidecar|shipper, and the supervisor's
wsfs_up_*: child_up, child_restarts_total, child_backoff_seconds, and per
child scrape_up and scrape_errors_total. Each child serves on a port of
127.0.0.1 it picks, published in HOME/run/NAME.KIND.metrics; a child that
is down or does not answer within --metrics-timeout shows as
wsfs_up_scrape_up 0 and never fails the endpoint.`

func runUp(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "up", "", upAbout)
	g.homeFlag(fs)
	n := fs.Int("workspaces", 0, "create ws-1..ws-N where missing before starting")
	minBackoff := fs.Duration("min-backoff", 500*time.Millisecond, "first restart delay after a child dies")
	maxBackoff := fs.Duration("max-backoff", 30*time.Second, "cap of the restart delay")
	stopTimeout := fs.Duration("stop-timeout", 30*time.Second, "how long to wait for a child after SIGTERM before SIGKILL")
	gcInterval := fs.Duration("gc-interval", 0, "run 'wsfs gc' (default grace) this often while the daemons serve; 0: never")
	metricsAddr := fs.String("metrics", "", "serve the Prometheus metrics of every workspace's daemon, sidecar and shipper, labelled by workspace and process, on ADDR (host:port) at /metrics")
	metricsTimeout := fs.Duration("metrics-timeout", 5*time.Second, "with --metrics: bound on the scrape of one child (a slower child is reported as not scraped)")
	transport := fs.String("fuse-transport", "dev", `every daemon's wsfs mount --fuse-transport: "dev" or "uring" (FUSE over io_uring; needs /sys/module/fuse/parameters/enable_uring set to Y by an administrator)`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	var daemonArgs []string
	switch *transport {
	case "dev":
	case "uring":
		// Checked once here: otherwise every daemon would be refused
		// and restarted with backoff, forever.
		if err := fusefs.CheckURing(); err != nil {
			return preconditionError{err}
		}
		daemonArgs = []string{"--fuse-transport=uring"}
	default:
		return usageError{fmt.Sprintf("--fuse-transport: want dev or uring, got %q", *transport)}
	}
	if *n < 0 || *minBackoff <= 0 || *maxBackoff < *minBackoff || *stopTimeout <= 0 || *gcInterval < 0 || *metricsTimeout <= 0 {
		return usageError{"--workspaces must be >= 0, backoffs positive with --max-backoff >= --min-backoff, --stop-timeout and --metrics-timeout positive, --gc-interval >= 0"}
	}
	if h0, err := host.Open(g.home); err == nil {
		if err := checkLayoutMounted(h0); err != nil { // layoutcheck.go
			return err
		}
	}
	var h *host.Host
	var err error
	if *n > 0 {
		h, err = host.Init(g.home)
	} else {
		h, err = host.Open(g.home)
	}
	if err != nil {
		if errors.Is(err, host.ErrNoHost) {
			return preconditionError{err}
		}
		return err
	}
	log := slog.New(slog.NewTextHandler(g.stderr, nil))
	if err := ensurePrivate(h, log); err != nil {
		return err
	}
	for i := 1; i <= *n; i++ {
		name := fmt.Sprintf("ws-%d", i)
		if err := h.CreateWorkspace(name); err == nil {
			log.Info("created workspace", "workspace", name)
		} else if !errors.Is(err, host.ErrWorkspaceExists) {
			return identityError(err)
		}
	}
	names, err := h.Workspaces()
	if err != nil {
		return err
	}
	if names, err = servable(h, names, log); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the wsfs executable to start children from: %w", err)
	}
	for _, name := range names {
		log.Info("workspace", "workspace", name, "mount_point", h.MountPoint(name), agentstate.EnvVar, agentstate.PathsFor(h, name).DB)
	}
	rcfg, err := remote.ReadConfig(h)
	if err != nil {
		return err
	}
	var metricsLn net.Listener
	if *metricsAddr != "" {
		// Bound here, before any child starts: a taken or bad address is
		// the caller's to fix (exit 2), not a half-started host.
		if metricsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			return metricsListenError(err)
		}
	}
	err = supervisor.Run(ctx, supervisor.Options{
		Ship:        rcfg.Enabled(),
		Host:        h,
		Workspaces:  names,
		Exe:         exe,
		DaemonArgs:  daemonArgs,
		MinBackoff:  *minBackoff,
		MaxBackoff:  *maxBackoff,
		StopTimeout: *stopTimeout,
		GCInterval:  *gcInterval,
		Logger:      log,

		MetricsListener: metricsLn,
		MetricsTimeout:  *metricsTimeout,
		Ready:           func() { fmt.Fprintln(g.stdout, "ready") },
	})
	if err != nil {
		return preconditionError{err}
	}
	return nil
}

// servable drops from names the workspaces pushed from this host (a
// ship.PushedName marker), with a WARN line each: the host that pulled
// them serves them, and their daemon, shipper and sidecar all refuse to
// start here, so supervising them would only restart refusals. A host
// whose every workspace was pushed is refused (exit 3).
func servable(h *host.Host, names []string, log *slog.Logger) ([]string, error) {
	var kept, pushed []string
	for _, name := range names {
		if ship.Pushed(vfs.Default, h.WorkspaceDir(name)) {
			log.Warn("not serving a workspace pushed from this host (the host that pulled it serves it): remove it with 'wsfs rm NAME'", "workspace", name)
			pushed = append(pushed, name)
			continue
		}
		kept = append(kept, name)
	}
	if len(kept) == 0 && len(pushed) > 0 {
		return nil, preconditionError{fmt.Errorf("every workspace of host %s was pushed from it (%s): nothing to serve; remove them (wsfs rm NAME), create or pull workspaces", h.Home(), strings.Join(pushed, ", "))}
	}
	return kept, nil
}
