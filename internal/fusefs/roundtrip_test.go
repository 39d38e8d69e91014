package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"wsfs/internal/metrics"
)

// opCounts reads wsfs_fuse_ops_total per operation.
func opCounts(t testing.TB, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wsfs_fuse_ops_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "op" {
					out[l.GetValue()] = mt.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestRoundTrips pins the kernel caching decisions by counting requests
// (not time): reading back files just written and closed must be served
// from the page cache (no READ), close of a read-only descriptor must not
// send FLUSH, and a second stat of a known name must not send LOOKUP.
func TestRoundTrips(t *testing.T) {
	m := metrics.New("rt")
	e := newEnv(t, Options{Metrics: m})
	d := e.path("rt")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("page"), 1024) // one full page
	const n = 50
	names := make([]string, n)
	for i := range names {
		names[i] = filepath.Join(d, fmt.Sprintf("f%d", i))
		mustWrite(t, names[i], data)
	}
	before := opCounts(t, m)
	for _, p := range names {
		if got := mustRead(t, p); !bytes.Equal(got, data) {
			t.Fatalf("%s: wrong content", p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
	after := opCounts(t, m)
	for _, op := range []string{"READ", "FLUSH", "LOOKUP"} {
		if d := after[op] - before[op]; d != 0 {
			t.Errorf("reading back %d cached files sent %v %s requests, want 0", n, d, op)
		}
	}
	if d := after["OPEN"] - before["OPEN"]; d != n {
		t.Errorf("%v OPEN requests for %d opens", d, n)
	}
}
