// Package metrics holds the Prometheus collectors of one wsfs daemon: FUSE
// operation counts and latencies, group commit sizes and latencies, and the
// engine's byte counters, served on /metrics by Serve.
//
// Every daemon has its own registry (no global state), so tests and the
// stress harness can run several in one process. All methods are safe for
// concurrent use; a nil *Metrics and a nil *Op are valid and record nothing,
// so callers need no "metrics enabled" branches.
package metrics

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"wsfs/internal/commit"
	"wsfs/internal/vfs"
)

// latencyBuckets span a FUSE round trip (~20 us) to a slow disk sync (seconds).
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 2.5, 14) // 10us .. ~1.5s

// Metrics is the set of collectors of one daemon.
type Metrics struct {
	// Registry holds every collector below plus the Go runtime and process
	// collectors.
	Registry *prometheus.Registry

	ops       *prometheus.CounterVec
	opErrors  *prometheus.CounterVec
	opLatency *prometheus.HistogramVec

	groupRecords prometheus.Histogram
	groupObjects prometheus.Histogram
	drain        prometheus.Histogram
	logSync      prometheus.Histogram
	lastGroup    prometheus.Gauge

	labels     prometheus.Labels
	engineOnce sync.Once
}

// New creates the collectors, labelled with the workspace name.
func New(workspace string) *Metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"workspace": workspace}
	m := &Metrics{
		Registry: reg,
		labels:   labels,
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsfs_fuse_ops_total", Help: "FUSE requests served, by operation.", ConstLabels: labels,
		}, []string{"op"}),
		opErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsfs_fuse_op_errors_total", Help: "FUSE requests answered with an error other than ENOENT, by operation.", ConstLabels: labels,
		}, []string{"op"}),
		opLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wsfs_fuse_op_seconds", Help: "Time to serve a FUSE request in the daemon (excludes the kernel round trip), by operation.",
			ConstLabels: labels, Buckets: latencyBuckets,
		}, []string{"op"}),
		groupRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wsfs_commit_group_records", Help: "Records per committed group.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1 .. 2048
		}),
		groupObjects: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wsfs_commit_group_objects", Help: "Distinct pool objects drained per committed group.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		drain: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wsfs_commit_drain_seconds", Help: "Time to drain a group (sync its objects and their directories, or syncfs in the legacy mode).",
			ConstLabels: labels, Buckets: latencyBuckets,
		}),
		logSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wsfs_commit_log_sync_seconds", Help: "Time to append a group to the log and sync it.",
			ConstLabels: labels, Buckets: latencyBuckets,
		}),
		lastGroup: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wsfs_commit_last_group", Help: "Number of the last committed group.", ConstLabels: labels,
		}),
	}
	reg.MustRegister(m.ops, m.opErrors, m.opLatency, m.groupRecords, m.groupObjects, m.drain, m.logSync, m.lastGroup,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Op is the collectors of one FUSE operation, resolved once so that the hot
// path does no label lookups.
type Op struct {
	count   prometheus.Counter
	errs    prometheus.Counter
	latency prometheus.Observer
}

// Op returns the collectors of the FUSE operation name (e.g. "LOOKUP").
func (m *Metrics) Op(name string) *Op {
	if m == nil {
		return nil
	}
	return &Op{
		count:   m.ops.WithLabelValues(name),
		errs:    m.opErrors.WithLabelValues(name),
		latency: m.opLatency.WithLabelValues(name),
	}
}

// Done records one request that started at start; failed counts it as an
// error.
func (o *Op) Done(start time.Time, failed bool) {
	if o == nil {
		return
	}
	o.count.Inc()
	if failed {
		o.errs.Inc()
	}
	o.latency.Observe(time.Since(start).Seconds())
}

// GroupCommitted implements commit.Observer.
func (m *Metrics) GroupCommitted(s commit.GroupStats) {
	if m == nil {
		return
	}
	m.groupRecords.Observe(float64(s.Records))
	m.groupObjects.Observe(float64(s.Objects))
	m.drain.Observe(s.Drain.Seconds())
	m.logSync.Observe(s.LogSync.Seconds())
	m.lastGroup.Set(float64(s.Group))
}

var _ commit.Observer = (*Metrics)(nil)

// EngineStats are the engine's counters, read at scrape time.
type EngineStats struct {
	Pending      int    // records enqueued and not yet durable
	LastGroup    uint64 // last committed group
	Inodes       int    // inodes in memory
	BytesInline  uint64 // file bytes stored inline in log records
	BytesPooled  uint64 // file bytes published as new pool objects
	BytesDeduped uint64 // file bytes that matched an existing pool object
	Failed       bool   // the workspace has failed for good (remount it)
	Stalled      bool   // commits wait for space on the log's filesystem
}

// WatchEngine exports the engine's stats, calling stats once per scrape.
// stats must be cheap and safe for concurrent use. Only the first call has
// an effect.
func (m *Metrics) WatchEngine(stats func() EngineStats) {
	if m == nil {
		return
	}
	m.engineOnce.Do(func() {
		m.Registry.MustRegister(&engineCollector{stats: stats, labels: m.labels})
	})
}

type engineCollector struct {
	stats  func() EngineStats
	labels prometheus.Labels
}

func (c *engineCollector) desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, nil, c.labels)
}

func (c *engineCollector) descs() (pending, group, inodes, inline, pooled, dedup, failed, stalled *prometheus.Desc) {
	return c.desc("wsfs_commit_pending_records", "Records enqueued and not yet durable."),
		c.desc("wsfs_engine_last_group", "Last committed group as the engine reports it."),
		c.desc("wsfs_engine_inodes", "Inodes in memory (open orphans included)."),
		c.desc("wsfs_bytes_inline_total", "File bytes stored inline in log records."),
		c.desc("wsfs_bytes_pooled_total", "File bytes published as new pool objects."),
		c.desc("wsfs_bytes_deduplicated_total", "File bytes that matched an existing pool object."),
		c.desc("wsfs_engine_failed", "1 once the workspace has failed for good (it commits nothing more; remount it), else 0."),
		c.desc("wsfs_commit_stalled", "1 while commits wait for space on the filesystem holding the log (fsync returns ENOSPC; free space there), else 0.")
}

func gauge01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Describe sends nothing: the collector is unchecked, because the byte
// counters exist only when the engine keeps them.
func (c *engineCollector) Describe(chan<- *prometheus.Desc) {}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	pending, group, inodes, inline, pooled, dedup, failed, stalled := c.descs()
	ch <- prometheus.MustNewConstMetric(pending, prometheus.GaugeValue, float64(s.Pending))
	ch <- prometheus.MustNewConstMetric(group, prometheus.GaugeValue, float64(s.LastGroup))
	ch <- prometheus.MustNewConstMetric(inodes, prometheus.GaugeValue, float64(s.Inodes))
	ch <- prometheus.MustNewConstMetric(inline, prometheus.CounterValue, float64(s.BytesInline))
	ch <- prometheus.MustNewConstMetric(pooled, prometheus.CounterValue, float64(s.BytesPooled))
	ch <- prometheus.MustNewConstMetric(dedup, prometheus.CounterValue, float64(s.BytesDeduped))
	ch <- prometheus.MustNewConstMetric(failed, prometheus.GaugeValue, gauge01(s.Failed))
	ch <- prometheus.MustNewConstMetric(stalled, prometheus.GaugeValue, gauge01(s.Stalled))
}

// Server is a running /metrics endpoint.
type Server struct {
	srv      *http.Server
	addr     string
	done     chan error
	addrFile string      // see PublishAddr
	addrInfo os.FileInfo // the file PublishAddr wrote, for Close's SameFile check

	closeOnce sync.Once
	closeErr  error
}

// Serve listens on addr (host:port; port 0 picks one) and serves the
// registry on /metrics until Close.
func (m *Metrics) Serve(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the endpoint listens on.
func (s *Server) Addr() string { return s.addr }

// PublishAddr writes the address the endpoint listens on (host:port and a
// newline) to path, atomically and private (0600), so that a supervisor that
// started this process with --metrics=127.0.0.1:0 finds the port picked.
// Close removes the file: it exists only while the endpoint may serve. The
// file is advisory and not synced. It refuses (CheckAddrFile) to replace a
// file that is not an address file: a mistyped path must not destroy one.
func (s *Server) PublishAddr(path string) error {
	if err := CheckAddrFile(path); err != nil {
		return err
	}
	if err := vfs.Publish(vfs.Default, path, false, func(f vfs.File) error {
		_, err := f.Write([]byte(s.addr + "\n"))
		return err
	}); err != nil {
		return fmt.Errorf("metrics address file: %w", err)
	}
	fi, err := vfs.Default.Stat(path)
	if err != nil {
		return fmt.Errorf("metrics address file: %w", err)
	}
	s.addrFile, s.addrInfo = path, fi
	return nil
}

// CheckAddrFile reports whether path may receive an address file: its
// directory exists, and path is missing or holds an address file (left by
// an earlier process: ReadAddrFile accepts it). Anything else, a config
// file or a directory given by mistake, is refused with an error naming it.
// So is a symbolic link, whatever it points at: publishing renames a new
// file over the path, which would replace the link itself (and Close would
// then remove it), not write through it.
func CheckAddrFile(path string) error {
	if fi, err := vfs.Default.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return fmt.Errorf("metrics address file %s: its directory %s does not exist", path, filepath.Dir(path))
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("metrics address file %s: %w", path, err)
	}
	if fi.Mode().Type()&fs.ModeSymlink != 0 {
		return fmt.Errorf("metrics address file %s is a symbolic link; refusing to replace it (wsfs would replace the link, not write through it): name the file itself, or a path that does not exist", path)
	}
	if !fi.Mode().IsRegular() || fi.Size() > 512 {
		return fmt.Errorf("metrics address file %s exists and is not an address file (%s); refusing to replace it (choose another path)", path, describe(fi))
	}
	if _, err := ReadAddrFile(path); err != nil {
		return fmt.Errorf("metrics address file %s exists and does not hold an address; refusing to replace it (choose another path)", path)
	}
	return nil
}

// describe names what fi is, for an error message.
func describe(fi os.FileInfo) string {
	switch {
	case fi.IsDir():
		return "a directory"
	case fi.Mode().IsRegular():
		return fmt.Sprintf("a regular file of %d bytes", fi.Size())
	default:
		return "a " + fi.Mode().Type().String() + " file"
	}
}

// ReadAddrFile reads an address written by PublishAddr. Its error satisfies
// errors.Is(err, fs.ErrNotExist) when there is none (the process has not
// bound its endpoint yet, or has exited). Anything at path but a regular
// file (a FIFO, whose open would block the reader forever; a symbolic
// link) is an error, without opening it.
func ReadAddrFile(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("metrics address file %s is not an address file (%s)", path, describe(fi))
	}
	data, err := vfs.ReadFile(vfs.Default, path)
	if err != nil {
		return "", err
	}
	addr := strings.TrimSpace(string(data))
	// The listener's own address: always a numeric IP and port.
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return "", fmt.Errorf("metrics address file %s: %w", path, err)
	}
	return addr, nil
}

// Close stops the endpoint and removes its address file (PublishAddr).
// Later calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	// Remove the address file only while it is still the one PublishAddr
	// wrote: another process may have replaced it since. The same inode
	// is not enough (a file created after ours was removed may reuse its
	// number); it must also still hold our address, which no other
	// process can have published while we listen on it.
	if s.addrFile != "" {
		fi, err := vfs.Default.Stat(s.addrFile)
		if err == nil && os.SameFile(fi, s.addrInfo) {
			if addr, err := ReadAddrFile(s.addrFile); err == nil && addr == s.addr {
				vfs.Default.Remove(s.addrFile)
			}
		}
	}
	err := s.srv.Close()
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
