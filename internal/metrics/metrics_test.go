package metrics

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestPublishAddr: the address file holds the bound address, is private,
// and is gone once the endpoint is closed.
func TestPublishAddr(t *testing.T) {
	s, err := New("ws1").Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ws1.daemon.metrics")
	if err := s.PublishAddr(path); err != nil {
		s.Close()
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("address file: %v, %v; want mode 0600", fi, err)
	}
	if got, err := ReadAddrFile(path); err != nil || got != s.Addr() {
		t.Errorf("ReadAddrFile = %q, %v; want %q", got, err, s.Addr())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAddrFile(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Close, ReadAddrFile: %v; want not exist", err)
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAddrFile(path); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a garbled address file: %v; want an error naming it", err)
	}
}

// TestPublishAddrRefusesOtherFiles: a mistyped --metrics-file must not
// destroy the file it names, and Close must not remove a file another
// process put at the path since.
func TestPublishAddrRefusesOtherFiles(t *testing.T) {
	s, err := New("ws1").Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	precious := filepath.Join(dir, "wsfs.json")
	if err := os.WriteFile(precious, []byte(`{"state": "x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{precious, dir, filepath.Join(dir, "missing", "x")} {
		if err := s.PublishAddr(path); err == nil {
			t.Errorf("PublishAddr(%s) succeeded; want a refusal", path)
		}
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != `{"state": "x"}` {
		t.Fatalf("the refused file changed: %q, %v", b, err)
	}
	// A stale address file (a dead process's) is replaced.
	path := filepath.Join(dir, "ws1.daemon.metrics")
	if err := os.WriteFile(path, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishAddr(path); err != nil {
		t.Fatalf("a stale address file: %v", err)
	}
	// Another process replaces it: Close leaves the new one. Rewritten in
	// place, it keeps the inode, as a new file may reuse the number of
	// the one removed: the same inode alone does not make it ours.
	if err := os.WriteFile(path, []byte("127.0.0.1:2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadAddrFile(path); err != nil || got != "127.0.0.1:2" {
		t.Fatalf("after Close, the other process's file: %q, %v", got, err)
	}
}

func TestWatchAgent(t *testing.T) {
	m := New("ws1")
	at := time.Unix(1700000000, 0)
	m.WatchAgent(func() AgentStats { return AgentStats{LocalTXID: 9, ReplicaTXID: 7, LastSyncAt: at, Error: true} })
	var b strings.Builder
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, mt := range f.Metric {
			fmt.Fprintf(&b, "%s %v\n", f.GetName(), mt.GetGauge().GetValue())
		}
	}
	for _, want := range []string{
		"wsfs_agent_local_txid 9", "wsfs_agent_replica_txid 7", "wsfs_agent_replica_lag_txids 2",
		"wsfs_agent_last_sync_timestamp_seconds 1.7e+09", "wsfs_agent_replica_error 1",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}

// TestPublishAddrRefusesLinksAndFIFOs: a symbolic link at the path (to an
// address file, or dangling) is refused and left in place, since
// publishing would replace the link itself; a FIFO is refused, and reading
// one as an address file fails at once instead of blocking the reader (a
// supervisor's scrape) forever.
func TestPublishAddrRefusesLinksAndFIFOs(t *testing.T) {
	s, err := New("ws1").Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere.metrics")
	if err := os.WriteFile(target, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{target, filepath.Join(dir, "missing")} {
		link := filepath.Join(dir, "link-to-"+filepath.Base(to))
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
		if err := s.PublishAddr(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("PublishAddr(a link to %s): %v; want refused, naming the link", to, err)
		}
		if got, err := os.Readlink(link); err != nil || got != to {
			t.Errorf("the link after PublishAddr: %q, %v; want it left pointing at %s", got, err, to)
		}
	}
	fifo := filepath.Join(dir, "fifo.metrics")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishAddr(fifo); err == nil {
		t.Error("PublishAddr(a FIFO) succeeded; want a refusal")
	}
	done := make(chan error, 1)
	go func() { _, err := ReadAddrFile(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadAddrFile(a FIFO): %v; want an error naming it", err)
		}
	case <-time.After(30 * time.Second):
		// Unblock the reader before failing.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("ReadAddrFile(a FIFO) blocked")
	}
}
