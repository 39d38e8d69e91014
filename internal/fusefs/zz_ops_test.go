package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"wsfs/internal/metrics"
)

func opsSnapshot(t testing.TB, m *metrics.Metrics) map[string]float64 {
	out := map[string]float64{}
	mfs, _ := m.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "wsfs_fuse_ops_total" {
			for _, mt := range mf.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == "op" {
						out[l.GetValue()] = mt.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out
}

func diff(a, b map[string]float64, n int) string {
	s := ""
	for k, v := range b {
		if d := v - a[k]; d > 0 {
			s += fmt.Sprintf("%s=%.2f ", k, d/float64(n))
		}
	}
	return s
}

func TestZZOps(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
	}{{"1s", Options{EntryTimeout: time.Second, AttrTimeout: time.Second, NegativeTimeout: time.Second}}, {"60s", Options{}}, {"wb", Options{Writeback: true}}} {
		m := metrics.New("x")
		c.o.Metrics = m
		e := newEnv(t, c.o)
		data := bytes.Repeat([]byte("x"), 4096)
		d := e.path("d")
		os.Mkdir(d, 0o755)
		const n = 200
		s0 := opsSnapshot(t, m)
		for j := 0; j < n; j++ {
			os.WriteFile(filepath.Join(d, fmt.Sprint(j)), data, 0o644)
		}
		s1 := opsSnapshot(t, m)
		for j := 0; j < n; j++ {
			os.ReadFile(filepath.Join(d, fmt.Sprint(j)))
		}
		s2 := opsSnapshot(t, m)
		time.Sleep(1200 * time.Millisecond)
		s3 := opsSnapshot(t, m)
		for j := 0; j < n; j++ {
			os.Stat(filepath.Join(d, fmt.Sprint(j)))
			os.ReadFile(filepath.Join(d, fmt.Sprint(j)))
		}
		s4 := opsSnapshot(t, m)
		t.Logf("%s create: %s", c.name, diff(s0, s1, n))
		t.Logf("%s read:   %s", c.name, diff(s1, s2, n))
		t.Logf("%s idle:   %s", c.name, diff(s3, s4, n))
	}
}
