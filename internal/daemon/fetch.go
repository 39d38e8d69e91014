package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"wsfs/internal/host"
	"wsfs/internal/metrics"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
	"wsfs/internal/vfs"
)

// lazyPull is the fetch side of a workspace that `wsfs pull` restored
// lazily (it has a ship.FetchState): the pool's Fetcher from the remote it
// names, and the background prefetch's progress.
type lazyPull struct {
	remote     string
	noPrefetch bool  // the host config turns the prefetch off
	objects    int64 // in the FetchState
	fetcher    *ship.RemoteFetcher
	prog       ship.PrefetchProgress
	started    bool // a prefetch runs (or ran)
}

// openLazyPull returns the workspace's lazyPull, or nil if its content is
// all local. The remote is opened without a round trip: an unreachable
// remote must not fail the mount (reads of objects not yet local fail
// with EIO until it is back).
func openLazyPull(ctx context.Context, h *host.Host, wsDir string, cfg Config) (*lazyPull, error) {
	st, ok, err := ship.ReadFetchState(vfs.Default, wsDir)
	if err != nil || !ok {
		return nil, err
	}
	rc, err := remote.ParseURL(st.Remote)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", wsDir, ship.FetchStateName, err)
	}
	// Credentials file and profile are host settings (as for `wsfs pull --from`).
	noPrefetch := false
	if hc, err := remote.ReadConfig(h); err == nil {
		rc.CredentialsFile, rc.Profile = hc.CredentialsFile, hc.Profile
		noPrefetch = hc.NoPrefetch
	}
	store, err := remote.OpenS3(ctx, rc)
	if err != nil {
		return nil, fmt.Errorf("open the remote %s this workspace was pulled from (its contents are fetched from there): %w", rc, err)
	}
	return &lazyPull{remote: rc.String(), noPrefetch: noPrefetch, objects: int64(len(st.Objects)), fetcher: &ship.RemoteFetcher{Store: store, Timeout: cfg.FetchTimeout}}, nil
}

// startPrefetch runs the background prefetch until ctx ends; wait waits
// for it to return.
func (l *lazyPull) startPrefetch(ctx context.Context, wsDir string, p *pool.Pool, parallel int, lg *slog.Logger) (wait func()) {
	l.started = true
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		lg.Info("prefetch: fetching the pulled workspace's contents in the background", "remote", l.remote, "parallel", parallel)
		err := ship.Prefetch(ctx, ship.PrefetchOptions{Dir: wsDir, Pool: p, Parallel: parallel, Logger: lg}, &l.prog)
		if err != nil && ctx.Err() == nil {
			lg.Error("prefetch failed; reads still fetch what they need (remount to retry the prefetch)", "err", err)
		}
	}()
	return wg.Wait
}

// status is the fetch part of the daemon's status file.
func (l *lazyPull) status(p *pool.Pool) *FetchStatus {
	fs := p.FetchStats()
	ps := l.prog.Status()
	return &FetchStatus{Remote: l.remote, Prefetch: l.started, Objects: max(ps.Objects, l.objects), Local: ps.Local,
		Done: ps.Done, Fetched: fs.Fetched, Bytes: fs.Bytes, Failed: fs.Failed, InFlight: fs.InFlight}
}

// metrics is the same for the metrics endpoint.
func (l *lazyPull) metrics(p *pool.Pool) metrics.FetchStats {
	s := l.status(p)
	return metrics.FetchStats{Fetched: s.Fetched, Bytes: s.Bytes, Failed: s.Failed, InFlight: s.InFlight,
		Objects: s.Objects, Local: s.Local, Done: s.Done}
}

// FetchStatus is the progress of a lazily pulled workspace's fetches in
// the daemon's status file.
type FetchStatus struct {
	Remote   string `json:"remote"`   // where the contents come from
	Prefetch bool   `json:"prefetch"` // a background prefetch runs (false: --prefetch=false)
	Objects  int64  `json:"objects"`  // objects the pulled tree references
	Local    int64  `json:"local"`    // of them, seen local by the prefetch
	Done     bool   `json:"done"`     // everything local and synced
	Fetched  int64  `json:"fetched"`  // objects fetched by this daemon (reads and prefetch)
	Bytes    int64  `json:"bytes"`    // their bytes
	Failed   int64  `json:"failed"`   // fetches that failed
	InFlight int64  `json:"in_flight"`
}
