package metrics

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"wsfs/internal/commit"
)

func TestServeExposesCollectors(t *testing.T) {
	m := New("ws1")
	op := m.Op("LOOKUP")
	op.Done(time.Now(), false)
	op.Done(time.Now(), true)
	m.GroupCommitted(commit.GroupStats{Group: 7, Records: 3, Objects: 2, Drain: time.Millisecond, LogSync: 2 * time.Millisecond})
	m.WatchEngine(func() EngineStats {
		return EngineStats{Pending: 5, Inodes: 3, BytesInline: 100, BytesPooled: 4096, BytesDeduped: 12, Stalled: true}
	})

	s, err := m.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	text := string(body)
	for _, want := range []string{
		`wsfs_fuse_ops_total{op="LOOKUP",workspace="ws1"} 2`,
		`wsfs_fuse_op_errors_total{op="LOOKUP",workspace="ws1"} 1`,
		`wsfs_fuse_op_seconds_count{op="LOOKUP",workspace="ws1"} 2`,
		`wsfs_commit_group_records_sum{workspace="ws1"} 3`,
		`wsfs_commit_last_group{workspace="ws1"} 7`,
		`wsfs_commit_drain_seconds_count{workspace="ws1"} 1`,
		`wsfs_commit_log_sync_seconds_count{workspace="ws1"} 1`,
		`wsfs_commit_pending_records{workspace="ws1"} 5`,
		`wsfs_engine_inodes{workspace="ws1"} 3`,
		`wsfs_bytes_pooled_total{workspace="ws1"} 4096`,
		`wsfs_bytes_deduplicated_total{workspace="ws1"} 12`,
		`wsfs_bytes_inline_total{workspace="ws1"} 100`,
		`wsfs_engine_failed{workspace="ws1"} 0`,
		`wsfs_commit_stalled{workspace="ws1"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q", want)
		}
	}
}

func TestNilIsNoop(t *testing.T) {
	var m *Metrics
	m.Op("READ").Done(time.Now(), true)
	m.GroupCommitted(commit.GroupStats{})
	m.WatchEngine(nil)
}
