package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestUpMetrics runs a real `wsfs up --metrics 127.0.0.1:0` with two
// workspaces (a daemon and a sidecar each, real processes on real FUSE
// mounts) and scrapes its one endpoint: both workspaces' daemon series are
// there labelled workspace=NAME and process=daemon, a FUSE operation in
// ws-1's mount shows under ws-1 only, the sidecars' wsfs_agent_* series
// and the supervisor's wsfs_up_* series are there, and every child counts
// as up and scraped.
func TestUpMetrics(t *testing.T) {
	requireMount(t)
	home := filepath.Join(t.TempDir(), "home")
	names := []string{"ws-1", "ws-2"}
	t.Cleanup(func() { // after startUp's stop: leave no mount behind
		for _, n := range names {
			if mnt := filepath.Join(home, "mnt", n); isFUSEMount(mnt) {
				lazyUnmount(t, mnt)
			}
		}
	})
	u := startUp(t, home, "--workspaces", "2", "--metrics", "127.0.0.1:0")
	url := upMetricsURL(t, u.stderr.String())
	if err := os.WriteFile(filepath.Join(home, "mnt", "ws-1", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	want := []string{
		`wsfs_commit_pending_records{process="daemon",workspace="ws-1"}`,
		`wsfs_commit_pending_records{process="daemon",workspace="ws-2"}`,
		`go_goroutines{process="daemon",workspace="ws-2"}`,
		`wsfs_agent_replica_txid{process="sidecar",workspace="ws-1"}`,
		`wsfs_agent_replica_txid{process="sidecar",workspace="ws-2"}`,
		`wsfs_up_child_up{process="daemon",workspace="ws-1"} 1`,
		`wsfs_up_child_up{process="sidecar",workspace="ws-2"} 1`,
		`wsfs_up_child_restarts_total{process="daemon",workspace="ws-2"} 0`,
		`wsfs_up_scrape_up{process="daemon",workspace="ws-1"} 1`,
		`wsfs_up_scrape_up{process="daemon",workspace="ws-2"} 1`,
		`wsfs_up_scrape_up{process="sidecar",workspace="ws-1"} 1`,
		`wsfs_up_scrape_up{process="sidecar",workspace="ws-2"} 1`,
		`wsfs_up_scrape_errors_total{process="daemon",workspace="ws-1"} 0`,
		`go_goroutines{process="up"}`,
	}
	// The sidecars serve their metrics once their start-up snapshot is
	// uploaded, possibly after "ready": poll, bounded.
	got := waitSeries(t, url, want, readyTimeout, u.stderr)
	var ws1Creates, ws2Creates bool
	for k, v := range got {
		if strings.HasPrefix(k, "wsfs_fuse_ops_total{") && strings.Contains(k, `op="CREATE"`) && v != "0" {
			ws1Creates = ws1Creates || strings.Contains(k, `workspace="ws-1"`)
			ws2Creates = ws2Creates || strings.Contains(k, `workspace="ws-2"`)
		}
		if strings.Contains(k, "exported_") {
			t.Errorf("a child's label clashed with the supervisor's: %s", k)
		}
	}
	if !ws1Creates || ws2Creates {
		t.Errorf("the CREATE in ws-1's mount: counted under ws-1 %v (want true), under ws-2 %v (want false)", ws1Creates, ws2Creates)
	}
}

// upMetricsURL is the URL of the endpoint `wsfs up --metrics` logged.
func upMetricsURL(t *testing.T, log string) string {
	t.Helper()
	m := regexp.MustCompile(`msg="wsfs up: metrics of every workspace" addr=(http://\S+/metrics)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("wsfs up did not log its metrics address:\n%s", log)
	}
	return m[1]
}

// waitSeries scrapes url until every one of want is there ("series" or
// "series value", series as scrapeSeries writes them), bounded, and returns
// the last scrape; it fails t with what is missing and log.
func waitSeries(t *testing.T, url string, want []string, bound time.Duration, log fmt.Stringer) map[string]string {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		got := scrapeSeries(t, url)
		var missing []string
		for _, w := range want {
			key, val, hasVal := strings.Cut(w, " ")
			if v, ok := got[key]; !ok || hasVal && v != val {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("series missing or wrong after %v: %q\nwsfs up log:\n%s", bound, missing, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scrapeSeries GETs url (bounded) and returns its series as
// `name{labels}` (labels sorted, as the text format writes them) -> value.
func scrapeSeries(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	out := map[string]string{}
	for name, mf := range fams {
		for _, m := range mf.Metric {
			var ls []string
			for _, lp := range m.Label {
				ls = append(ls, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			out[name+"{"+strings.Join(ls, ",")+"}"] = model.SampleValue(value(m)).String()
		}
	}
	return out
}

// value is a counter's, gauge's or untyped series' value (a histogram's or
// summary's sample count).
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount())
	}
	return 0
}
