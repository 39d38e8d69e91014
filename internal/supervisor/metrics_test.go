package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"wsfs/internal/metrics"
)

// fakeChild is a child's metrics endpoint for the aggregator tests: a real
// metrics.Metrics of the workspace served over HTTP, its address published
// the way the children publish it.
type fakeChild struct {
	target scrapeTarget
	m      *metrics.Metrics
}

func startFakeChild(t *testing.T, dir, ws, process string) *fakeChild {
	t.Helper()
	m := metrics.New(ws)
	m.Op("LOOKUP").Done(time.Now(), false)
	s, err := m.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	file := filepath.Join(dir, ws+"."+process+".metrics")
	if err := s.PublishAddr(file); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("address file %s: %v, %v; want mode 0600", file, fi, err)
	}
	return &fakeChild{target: scrapeTarget{workspace: ws, process: process, addrFile: file}, m: m}
}

// publishAddr writes an address file for a target served by something else.
func publishAddr(t *testing.T, dir, ws, process, addr string) scrapeTarget {
	t.Helper()
	file := filepath.Join(dir, ws+"."+process+".metrics")
	if err := os.WriteFile(file, []byte(addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return scrapeTarget{workspace: ws, process: process, addrFile: file}
}

// scrapeEndpoint serves a over HTTP, as `wsfs up` does, scrapes it once in
// the text format and returns its series as "name{l1="v1",...}" -> value
// (labels sorted; histograms and summaries by their _count only).
func scrapeEndpoint(t *testing.T, a *aggregator) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(a.handler())
	defer srv.Close()
	return scrapeURL(t, srv.URL)
}

// scrapeURL is scrapeEndpoint of the endpoint at url.
func scrapeURL(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: time.Minute}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("endpoint answered %s: %s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the endpoint's output does not parse: %v", err)
	}
	out := map[string]float64{}
	for name, mf := range fams {
		for _, m := range mf.Metric {
			var ls []string
			for _, lp := range m.Label {
				ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			slices.Sort(ls)
			key := name + "{" + strings.Join(ls, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Untyped != nil:
				out[key] = m.Untyped.GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			case m.Summary != nil:
				out[key] = float64(m.Summary.GetSampleCount())
			}
		}
	}
	return out
}

func wantSeries(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			var near []string
			name, _, _ := strings.Cut(k, "{")
			for gk := range got {
				if strings.HasPrefix(gk, name+"{") {
					near = append(near, gk)
				}
			}
			slices.Sort(near)
			t.Errorf("missing %s (series of that name: %v)", k, near)
		} else if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

func newTestAggregator(t *testing.T, timeout time.Duration, targets ...scrapeTarget) *aggregator {
	return newAggregator(targets, timeout, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestAggregatorLabelsEveryChild: the families of several children (two
// workspaces, two processes) come out merged, each series labelled with
// its workspace and process, the children's own workspace label (the same
// value) not doubled, and every scrape counted as up.
func TestAggregatorLabelsEveryChild(t *testing.T) {
	dir := t.TempDir()
	d1 := startFakeChild(t, dir, "ws-1", KindDaemon)
	d2 := startFakeChild(t, dir, "ws-2", KindDaemon)
	s1 := startFakeChild(t, dir, "ws-1", KindSidecar)
	d2.m.Op("LOOKUP").Done(time.Now(), false)
	a := newTestAggregator(t, time.Minute, d1.target, d2.target, s1.target)
	got := scrapeEndpoint(t, a)
	wantSeries(t, got, map[string]float64{
		`wsfs_fuse_ops_total{op="LOOKUP",process="daemon",workspace="ws-1"}`:  1,
		`wsfs_fuse_ops_total{op="LOOKUP",process="daemon",workspace="ws-2"}`:  2,
		`wsfs_fuse_ops_total{op="LOOKUP",process="sidecar",workspace="ws-1"}`: 1,
		`wsfs_up_scrape_up{process="daemon",workspace="ws-1"}`:                1,
		`wsfs_up_scrape_up{process="daemon",workspace="ws-2"}`:                1,
		`wsfs_up_scrape_up{process="sidecar",workspace="ws-1"}`:               1,
		`wsfs_up_scrape_errors_total{process="daemon",workspace="ws-1"}`:      0,
	})
	// Unlabelled families of the children (the Go collector) are told
	// apart by the labels added.
	for _, k := range []string{`go_goroutines{process="daemon",workspace="ws-1"}`, `go_goroutines{process="daemon",workspace="ws-2"}`, `go_goroutines{process="sidecar",workspace="ws-1"}`} {
		if _, ok := got[k]; !ok {
			t.Errorf("missing %s", k)
		}
	}
}

// TestAggregatorChildDown: a child with no address file (not running, or
// not serving yet) is reported as not scraped without counting an error;
// one whose endpoint refuses the connection (killed before it could remove
// its file) counts an error; neither keeps the others out.
func TestAggregatorChildDown(t *testing.T) {
	dir := t.TempDir()
	live := startFakeChild(t, dir, "ws-1", KindDaemon)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close() // nothing listens there now
	dead := publishAddr(t, dir, "ws-2", KindDaemon, deadAddr)
	absent := scrapeTarget{workspace: "ws-3", process: KindDaemon, addrFile: filepath.Join(dir, "ws-3.daemon.metrics")}
	a := newTestAggregator(t, time.Minute, live.target, dead, absent)
	for range 2 {
		scrapeEndpoint(t, a)
	}
	got := scrapeEndpoint(t, a)
	wantSeries(t, got, map[string]float64{
		`wsfs_fuse_ops_total{op="LOOKUP",process="daemon",workspace="ws-1"}`: 1,
		`wsfs_up_scrape_up{process="daemon",workspace="ws-1"}`:               1,
		`wsfs_up_scrape_up{process="daemon",workspace="ws-2"}`:               0,
		`wsfs_up_scrape_up{process="daemon",workspace="ws-3"}`:               0,
		`wsfs_up_scrape_errors_total{process="daemon",workspace="ws-1"}`:     0,
		`wsfs_up_scrape_errors_total{process="daemon",workspace="ws-2"}`:     3,
		`wsfs_up_scrape_errors_total{process="daemon",workspace="ws-3"}`:     0,
	})
	for k := range got {
		if strings.Contains(k, `workspace="ws-2"`) && !strings.HasPrefix(k, "wsfs_up_") {
			t.Errorf("series of the dead child: %s", k)
		}
	}
}

// TestAggregatorSlowChild: a child that accepts the scrape and never
// answers is cut off at the scrape timeout and counted as an error; the
// endpoint answers with the other children's series.
func TestAggregatorSlowChild(t *testing.T) {
	dir := t.TempDir()
	live := startFakeChild(t, dir, "ws-1", KindDaemon)
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) }) // runs first
	slow := publishAddr(t, dir, "ws-2", KindSidecar, strings.TrimPrefix(hung.URL, "http://"))
	// Generous for the live child on a loaded machine; the hung one waits it out.
	a := newTestAggregator(t, 3*time.Second, live.target, slow)
	got := scrapeEndpoint(t, a)
	wantSeries(t, got, map[string]float64{
		`wsfs_fuse_ops_total{op="LOOKUP",process="daemon",workspace="ws-1"}`: 1,
		`wsfs_up_scrape_up{process="daemon",workspace="ws-1"}`:               1,
		`wsfs_up_scrape_up{process="sidecar",workspace="ws-2"}`:              0,
		`wsfs_up_scrape_errors_total{process="sidecar",workspace="ws-2"}`:    1,
	})
}

// TestAggregatorLabelCollision: a child that labels its series with
// another workspace or a process label of its own keeps them, renamed
// exported_workspace / exported_process; the labels that name the child are
// always the supervisor's. A family another child exports with another
// type is dropped from the second child and counted as its error, the rest
// of that child still exported.
func TestAggregatorLabelCollision(t *testing.T) {
	dir := t.TempDir()
	text := func(body string) scrapeTarget {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return scrapeTarget{addrFile: srv.URL}
	}
	liar := text("# TYPE wsfs_x counter\nwsfs_x{workspace=\"ws-2\",process=\"daemon\"} 7\n# TYPE wsfs_clash gauge\nwsfs_clash 1\n")
	liar = publishAddr(t, dir, "ws-1", KindShipper, strings.TrimPrefix(liar.addrFile, "http://"))
	other := text("# TYPE wsfs_clash counter\nwsfs_clash 2\n# TYPE wsfs_y gauge\nwsfs_y 3\n")
	other = publishAddr(t, dir, "ws-2", KindShipper, strings.TrimPrefix(other.addrFile, "http://"))
	a := newTestAggregator(t, time.Minute, liar, other)
	got := scrapeEndpoint(t, a)
	wantSeries(t, got, map[string]float64{
		`wsfs_x{exported_process="daemon",exported_workspace="ws-2",process="shipper",workspace="ws-1"}`: 7,
		`wsfs_clash{process="shipper",workspace="ws-1"}`:                                                 1,
		`wsfs_y{process="shipper",workspace="ws-2"}`:                                                     3,
		`wsfs_up_scrape_up{process="shipper",workspace="ws-2"}`:                                          1,
		`wsfs_up_scrape_errors_total{process="shipper",workspace="ws-1"}`:                                0,
		`wsfs_up_scrape_errors_total{process="shipper",workspace="ws-2"}`:                                1,
	})
	if _, ok := got[`wsfs_clash{process="shipper",workspace="ws-2"}`]; ok {
		t.Error("the clashing family of the second child was exported")
	}
}

// TestRelabelKeepsOwnValue: a child's workspace label equal to its own is
// not duplicated, and the result is sorted by label name (as the
// exposition formats require).
func TestRelabelKeepsOwnValue(t *testing.T) {
	name, v := "wsfs_z", 1.0
	ws, op := "workspace", "op"
	wsv, opv := "ws-1", "READ"
	mf := &dto.MetricFamily{Name: &name, Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{
		Label: []*dto.LabelPair{{Name: &op, Value: &opv}, {Name: &ws, Value: &wsv}},
		Gauge: &dto.Gauge{Value: &v},
	}}}
	relabel(mf, "ws-1", KindDaemon)
	var got []string
	for _, lp := range mf.Metric[0].Label {
		got = append(got, lp.GetName()+"="+lp.GetValue())
	}
	if want := []string{"op=READ", "process=daemon", "workspace=ws-1"}; !slices.Equal(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
}

// TestMetricsOfSupervisedChildren: Run with a MetricsListener starts its
// children with --metrics=127.0.0.1:0 --metrics-file=HOME/run/NAME.KIND.metrics
// and serves what they publish there, labelled; a child that keeps dying
// (here the sidecar) shows as not up and not scraped, with its restarts
// counted, and never breaks the endpoint. At the end the address files
// are gone and the endpoint is closed.
func TestMetricsOfSupervisedChildren(t *testing.T) {
	t.Setenv("WSFS_SUPERVISOR_TEST_CHILD", "metrics")
	h := testHost(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/metrics"
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Host: h, Workspaces: []string{"ws-1"}, Exe: os.Args[0],
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, StopTimeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(log, nil)), MetricsListener: ln,
		})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	defer stop()
	deadline := time.Now().Add(time.Minute)
	var got map[string]float64
	for {
		got = scrapeURL(t, url)
		if got[`wsfs_up_child_restarts_total{process="sidecar",workspace="ws-1"}`] >= 2 &&
			got[`wsfs_up_scrape_up{process="daemon",workspace="ws-1"}`] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no daemon series and sidecar restarts within a minute: %v\n%s", got, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantSeries(t, got, map[string]float64{
		`test_child_pid{process="daemon",workspace="ws-1"}`:              float64(childOf(t, h, "ws-1", KindDaemon).PID),
		`wsfs_up_child_up{process="daemon",workspace="ws-1"}`:            1,
		`wsfs_up_scrape_errors_total{process="daemon",workspace="ws-1"}`: 0,
		`wsfs_up_scrape_up{process="sidecar",workspace="ws-1"}`:          0,
		`wsfs_up_children{}`: 2,
	})
	stop()
	for _, kind := range []string{KindDaemon, KindSidecar} {
		if _, err := os.Stat(MetricsFile(h, "ws-1", kind)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s's metrics address file after the stop: %v", kind, err)
		}
	}
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("the endpoint still answers after Run returned")
	}
}
