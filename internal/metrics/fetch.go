package metrics

import "github.com/prometheus/client_golang/prometheus"

// FetchStats are the counters of a lazily pulled workspace's fetches from
// the remote tier (on first read and by the background prefetch).
type FetchStats struct {
	Fetched, Bytes, Failed, InFlight int64 // the pool's fetches (pool.FetchStats)
	Objects, Local                   int64 // the pulled tree's objects, and how many are local
	Done                             bool  // everything local and synced
}

// WatchFetch exports a lazily pulled workspace's fetch progress, calling
// stats once per scrape (it must be cheap and safe for concurrent use).
// Call it at most once.
func (m *Metrics) WatchFetch(stats func() FetchStats) {
	if m == nil {
		return
	}
	g := func(name, help string, v func(FetchStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: m.labels},
			func() float64 { return v(stats()) })
	}
	c := func(name, help string, v func(FetchStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: m.labels},
			func() float64 { return v(stats()) })
	}
	m.Registry.MustRegister(
		c("wsfs_fetch_objects_total", "Pool objects fetched from the remote tier (first reads and prefetch).", func(s FetchStats) float64 { return float64(s.Fetched) }),
		c("wsfs_fetch_bytes_total", "Bytes of pool objects fetched from the remote tier.", func(s FetchStats) float64 { return float64(s.Bytes) }),
		c("wsfs_fetch_failures_total", "Fetches from the remote tier that failed (remote error, or a corrupt copy).", func(s FetchStats) float64 { return float64(s.Failed) }),
		g("wsfs_fetch_in_flight", "Fetches from the remote tier running now.", func(s FetchStats) float64 { return float64(s.InFlight) }),
		g("wsfs_prefetch_objects", "Pool objects the lazily pulled tree references.", func(s FetchStats) float64 { return float64(s.Objects) }),
		g("wsfs_prefetch_local_objects", "Of them, local now (as the prefetch has seen).", func(s FetchStats) float64 { return float64(s.Local) }),
		g("wsfs_prefetch_done", "1 once every object of the pull is local and synced, else 0.", func(s FetchStats) float64 { return gauge01(s.Done) }),
	)
}
