package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"wsfs/internal/host"
	"wsfs/internal/metrics"
)

// The host-wide metrics endpoint (Options.MetricsListener).
//
// Every child is started with --metrics=127.0.0.1:0 and
// --metrics-file=HOME/run/NAME.KIND.metrics, where it publishes the port it
// bound once it serves (metrics.Server.PublishAddr) and which it removes at
// exit; the supervisor removes it too before each start and after each
// exit, so the file names a port of the current process of that child or
// does not exist. A scrape of the endpoint scrapes every child that has
// such a file, in parallel, each bounded by Options.MetricsTimeout, and
// re-exports each child's families with the labels workspace=NAME and
// process=KIND (daemon, sidecar, shipper), plus the supervisor's own
// families (wsfs_up_*, and its Go and process collectors with
// process="up"). A child that is down, slow or answers garbage costs its
// own series only: wsfs_up_scrape_up says whether its last scrape
// succeeded, wsfs_up_scrape_errors_total counts failures; the endpoint
// always answers.

// MetricsFile is HOME/run/NAME.KIND.metrics, where a child publishes the
// address of its metrics endpoint.
func MetricsFile(h *host.Host, name, kind string) string {
	return filepath.Join(RunDir(h), name+"."+kind+".metrics")
}

// Labels the endpoint adds to every child series.
const (
	LabelWorkspace = "workspace"
	LabelProcess   = "process"
)

// maxScrapeBytes bounds what is read from one child per scrape.
const maxScrapeBytes = 32 << 20

// scrapeTarget is one child whose metrics are re-exported.
type scrapeTarget struct {
	workspace, process string
	addrFile           string
}

// aggregator is the endpoint's prometheus.Gatherer.
type aggregator struct {
	targets []scrapeTarget
	timeout time.Duration
	client  *http.Client
	own     *prometheus.Registry // the supervisor's own collectors
	log     *slog.Logger

	scrapeUp      *prometheus.GaugeVec
	scrapeErrors  *prometheus.CounterVec
	scrapeSeconds *prometheus.GaugeVec

	mu      sync.Mutex
	failing map[scrapeTarget]bool // for logging transitions only
}

// newAggregator returns the gatherer of targets; own receives its scrape
// collectors (the caller registers its others there).
func newAggregator(targets []scrapeTarget, timeout time.Duration, own *prometheus.Registry, log *slog.Logger) *aggregator {
	labels := []string{LabelWorkspace, LabelProcess}
	a := &aggregator{
		targets: targets, timeout: timeout, own: own, log: log,
		client:  &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}},
		failing: map[scrapeTarget]bool{},
		scrapeUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wsfs_up_scrape_up",
			Help: "1 if the last scrape of the child's metrics succeeded; 0 if it failed or the child has no endpoint now (not running, or not serving yet).",
		}, labels),
		scrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wsfs_up_scrape_errors_total",
			Help: "Scrapes of the child's metrics that failed (refused, timed out, unparsable) or whose families clashed with another child's type.",
		}, labels),
		scrapeSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wsfs_up_scrape_duration_seconds",
			Help: "Duration of the last scrape of the child's metrics.",
		}, labels),
	}
	for _, t := range targets {
		a.scrapeUp.WithLabelValues(t.workspace, t.process)
		a.scrapeErrors.WithLabelValues(t.workspace, t.process)
	}
	own.MustRegister(a.scrapeUp, a.scrapeErrors, a.scrapeSeconds)
	return a
}

// handler serves the endpoint.
func (a *aggregator) handler() http.Handler {
	return promhttp.HandlerFor(a, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

type scrapeResult struct {
	families []*dto.MetricFamily
	absent   bool  // no address file: the child has no endpoint now
	err      error // the scrape failed: no families
	clash    error // a family clashed with another child's: it was dropped
	took     time.Duration
}

// Gather scrapes every target in parallel and returns their families,
// relabelled, merged with the supervisor's own. Failures of children are
// recorded in the scrape collectors, never returned.
func (a *aggregator) Gather() ([]*dto.MetricFamily, error) {
	results := make([]scrapeResult, len(a.targets))
	var wg sync.WaitGroup
	for i, t := range a.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			results[i] = a.scrape(t)
			results[i].took = time.Since(start)
		}()
	}
	wg.Wait()

	set := familySet{}
	for i, t := range a.targets {
		r := &results[i]
		for _, mf := range r.families {
			relabel(mf, t.workspace, t.process)
			if err := set.add(mf, false); err != nil && r.clash == nil {
				r.clash = err
			}
		}
		a.record(t, *r)
	}
	own, err := a.own.Gather()
	for _, mf := range own {
		set.add(mf, true)
	}
	return set.sorted(), err
}

// scrape fetches one child's families, bounded by a.timeout.
func (a *aggregator) scrape(t scrapeTarget) scrapeResult {
	addr, err := metrics.ReadAddrFile(t.addrFile)
	if errors.Is(err, fs.ErrNotExist) {
		return scrapeResult{absent: true}
	}
	if err != nil {
		return scrapeResult{err: err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	url := "http://" + addr + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return scrapeResult{err: err}
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err := a.client.Do(req)
	if err != nil {
		return scrapeResult{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return scrapeResult{err: fmt.Errorf("GET %s: %s", url, resp.Status)}
	}
	dec := expfmt.NewDecoder(io.LimitReader(resp.Body, maxScrapeBytes), expfmt.ResponseFormat(resp.Header))
	var out []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err == io.EOF {
			return scrapeResult{families: out}
		} else if err != nil {
			return scrapeResult{err: fmt.Errorf("GET %s: %w", url, err)}
		}
		out = append(out, mf)
	}
}

// record updates the scrape collectors of t and logs a change of state.
func (a *aggregator) record(t scrapeTarget, r scrapeResult) {
	up := 0.0
	if !r.absent && r.err == nil {
		up = 1
	}
	a.scrapeUp.WithLabelValues(t.workspace, t.process).Set(up)
	if !r.absent {
		a.scrapeSeconds.WithLabelValues(t.workspace, t.process).Set(r.took.Seconds())
	}
	err := r.err
	if err == nil {
		err = r.clash
	}
	if err != nil {
		a.scrapeErrors.WithLabelValues(t.workspace, t.process).Inc()
	}
	a.mu.Lock()
	was := a.failing[t]
	a.failing[t] = err != nil
	a.mu.Unlock()
	if err != nil && !was {
		a.log.Warn("wsfs up: metrics of a child not scraped (counted in wsfs_up_scrape_errors_total; logged once until it recovers)",
			"workspace", t.workspace, "kind", t.process, "err", err)
	} else if err == nil && was {
		a.log.Info("wsfs up: metrics of a child scraped again", "workspace", t.workspace, "kind", t.process)
	}
}

// relabel sets workspace and process on every series of mf. A child's own
// label of either name is kept if it has the same value, and otherwise
// renamed exported_NAME (as Prometheus does with honor_labels=false), so a
// child can never pass its series off as another workspace's.
func relabel(mf *dto.MetricFamily, workspace, process string) {
	for _, m := range mf.Metric {
		have := map[string]bool{}
		for _, lp := range m.Label {
			have[lp.GetName()] = true
		}
		var labels []*dto.LabelPair
		for _, lp := range m.Label {
			name := lp.GetName()
			if want, ours := map[string]string{LabelWorkspace: workspace, LabelProcess: process}[name]; ours {
				if lp.GetValue() == want {
					continue
				}
				for name = "exported_" + name; have[name]; name = "exported_" + name {
				}
				have[name] = true
				lp = &dto.LabelPair{Name: &name, Value: lp.Value}
			}
			labels = append(labels, lp)
		}
		labels = append(labels, labelPair(LabelWorkspace, workspace), labelPair(LabelProcess, process))
		slices.SortFunc(labels, func(x, y *dto.LabelPair) int { return strings.Compare(x.GetName(), y.GetName()) })
		m.Label = labels
	}
}

func labelPair(name, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: &name, Value: &value}
}

// familySet merges families by name.
type familySet map[string]*dto.MetricFamily

// add merges mf into the set. A family whose type differs from the one
// already there is refused with an error (and dropped), unless own: the
// supervisor's own family then replaces the children's. A series whose
// labels are already there is dropped.
func (s familySet) add(mf *dto.MetricFamily, own bool) error {
	have, ok := s[mf.GetName()]
	if !ok {
		mf.Metric = dedupe(nil, mf.Metric)
		s[mf.GetName()] = mf
		return nil
	}
	if have.GetType() != mf.GetType() {
		if own {
			s[mf.GetName()] = mf
			return nil
		}
		return fmt.Errorf("metric family %s is a %s, but another process exports it as a %s: dropped", mf.GetName(), mf.GetType(), have.GetType())
	}
	have.Metric = dedupe(have.Metric, mf.Metric)
	return nil
}

// dedupe appends the series of more whose label sets are not in have.
func dedupe(have, more []*dto.Metric) []*dto.Metric {
	seen := map[string]bool{}
	key := func(m *dto.Metric) string {
		var b strings.Builder
		for _, lp := range m.Label {
			b.WriteString(lp.GetName())
			b.WriteByte(0)
			b.WriteString(lp.GetValue())
			b.WriteByte(0)
		}
		return b.String()
	}
	for _, m := range have {
		seen[key(m)] = true
	}
	for _, m := range more {
		if k := key(m); !seen[k] {
			seen[k] = true
			have = append(have, m)
		}
	}
	return have
}

func (s familySet) sorted() []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, 0, len(s))
	for _, mf := range s {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(x, y *dto.MetricFamily) int { return strings.Compare(x.GetName(), y.GetName()) })
	return out
}

// childCollector exports the supervisor's view of its children.
type childCollector struct{ s *supervisor }

var (
	childLabels   = []string{LabelWorkspace, LabelProcess}
	descChildUp   = prometheus.NewDesc("wsfs_up_child_up", "1 while the child process runs, else 0 (dead and waiting for its restart, or stopped).", childLabels, nil)
	descRestarts  = prometheus.NewDesc("wsfs_up_child_restarts_total", "Times the child died (or failed to start) and was restarted.", childLabels, nil)
	descBackoff   = prometheus.NewDesc("wsfs_up_child_backoff_seconds", "Restart delay of the child: while it is down, the wait in progress; while it runs, what its next death would wait.", childLabels, nil)
	descSupervise = prometheus.NewDesc("wsfs_up_children", "Child processes supervised (daemons, sidecars and shippers of every workspace).", nil, nil)
)

func (c childCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descChildUp
	ch <- descRestarts
	ch <- descBackoff
	ch <- descSupervise
}

func (c childCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.s.children {
		k.mu.Lock()
		st, backoff := k.mu.st, k.mu.backoff
		k.mu.Unlock()
		up := 0.0
		if st.PID != 0 {
			up = 1
			if time.Since(st.StartedAt) >= c.s.opts.StableAfter {
				backoff = c.s.opts.MinBackoff
			}
		}
		ch <- prometheus.MustNewConstMetric(descChildUp, prometheus.GaugeValue, up, k.ws, k.kind)
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(st.Restarts), k.ws, k.kind)
		ch <- prometheus.MustNewConstMetric(descBackoff, prometheus.GaugeValue, backoff.Seconds(), k.ws, k.kind)
	}
	ch <- prometheus.MustNewConstMetric(descSupervise, prometheus.GaugeValue, float64(len(c.s.children)))
}

// newMetricsHandler builds the endpoint of s.
func (s *supervisor) newMetricsHandler() http.Handler {
	own := prometheus.NewRegistry()
	prometheus.WrapRegistererWith(prometheus.Labels{LabelProcess: "up"}, own).MustRegister(
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	own.MustRegister(childCollector{s})
	var targets []scrapeTarget
	for _, c := range s.children {
		targets = append(targets, scrapeTarget{workspace: c.ws, process: c.kind, addrFile: c.metricsFile})
	}
	return newAggregator(targets, s.opts.MetricsTimeout, own, s.log).handler()
}
