package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AgentStats are an agent-state sidecar's replication counters
// (agentstate.Status), read at scrape time.
type AgentStats struct {
	LocalTXID   uint64    // last Litestream transaction taken from the WAL
	ReplicaTXID uint64    // last one the replica acknowledged
	LastSyncAt  time.Time // last successful replica sync (zero: never)
	Error       bool      // the sidecar reports a replication error now
}

// WatchAgent exports an agent-state sidecar's replication position, lag,
// last sync time and error state, calling stats once per scrape (it must
// be safe for concurrent use). Call it at most once.
func (m *Metrics) WatchAgent(stats func() AgentStats) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(&agentCollector{stats: stats, labels: m.labels})
}

type agentCollector struct {
	stats  func() AgentStats
	labels prometheus.Labels
}

var agentDescs = []struct{ name, help string }{
	{"wsfs_agent_local_txid", "Last Litestream transaction (LTX file) taken from the agent state database's WAL."},
	{"wsfs_agent_replica_txid", "Last Litestream transaction the replica has acknowledged."},
	{"wsfs_agent_replica_lag_txids", "Litestream transactions taken from the WAL and not yet acknowledged by the replica."},
	{"wsfs_agent_last_sync_timestamp_seconds", "Unix time of the last successful replica sync (0: none yet)."},
	{"wsfs_agent_replica_error", "1 while the sidecar reports a replication error (see its log and 'wsfs status'), else 0."},
}

// Describe sends nothing: the collector is unchecked (like engineCollector).
func (c *agentCollector) Describe(chan<- *prometheus.Desc) {}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	var lag uint64
	if s.LocalTXID > s.ReplicaTXID {
		lag = s.LocalTXID - s.ReplicaTXID
	}
	var last float64
	if !s.LastSyncAt.IsZero() {
		last = float64(s.LastSyncAt.UnixNano()) / 1e9
	}
	vals := []float64{float64(s.LocalTXID), float64(s.ReplicaTXID), float64(lag), last, gauge01(s.Error)}
	for i, d := range agentDescs {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(d.name, d.help, nil, c.labels), prometheus.GaugeValue, vals[i])
	}
}
