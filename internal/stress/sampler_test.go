package stress

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseMeminfo(t *testing.T) {
	m, err := parseMeminfo(readTestdata(t, "meminfo"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Dirty != 2384*1024 || m.Writeback != 0 {
		t.Fatalf("got %+v, want Dirty 2384 kB, Writeback 0", m)
	}
	if _, err := parseMeminfo([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Error("meminfo without Dirty parsed")
	}
}

func TestParseDiskstats(t *testing.T) {
	d, err := parseDiskstats(readTestdata(t, "diskstats"), "vda")
	if err != nil {
		t.Fatal(err)
	}
	want := diskStat{Reads: 50175, ReadTicksMs: 28725, Writes: 1535107, SectorsWritten: 44637272, WriteTicksMs: 312272, IOMsec: 98684}
	if d != want {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	if _, err := parseDiskstats(readTestdata(t, "diskstats"), "sdz"); err == nil {
		t.Error("unknown device parsed")
	}
}

func TestParseProcStatAndLoadavg(t *testing.T) {
	c, err := parseProcStat(readTestdata(t, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// cpu  34934 0 15033 129257 4921 0 794 52 0 0
	if c.CPUs != 2 || c.Total != 34934+15033+129257+4921+794+52 || c.Idle != 129257+4921 {
		t.Fatalf("got %+v", c)
	}
	l, err := parseLoadavg(readTestdata(t, "loadavg"))
	if err != nil || l != 6.89 {
		t.Fatalf("load = %v, %v; want 6.89", l, err)
	}
}

func TestSampleBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := snapshot{
		at:   t0,
		disk: diskStat{Reads: 100, ReadTicksMs: 50, Writes: 1000, WriteTicksMs: 500, SectorsWritten: 0, IOMsec: 1000},
		cpu:  cpuStat{Total: 1000, Idle: 800, CPUs: 2},
	}
	cur := snapshot{
		at:   t0.Add(500 * time.Millisecond),
		mem:  memInfo{Dirty: 300e6, Writeback: 20e6},
		disk: diskStat{Reads: 110, ReadTicksMs: 60, Writes: 1090, WriteTicksMs: 590, SectorsWritten: 200_000, IOMsec: 1250},
		cpu:  cpuStat{Total: 1100, Idle: 850, CPUs: 2},
		load: 3.5,
	}
	s := sampleBetween(prev, cur, t0)
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("util", s.UtilPct, 50)                         // 250 ms busy in 500 ms
	near("write MB/s", s.WriteMBs, 200_000*512/1e6/0.5) // 204.8
	near("await", s.AwaitMs, 1)                         // (10+90) ms over 100 I/Os
	near("busy cores", s.BusyCores, 1)                  // 50 % of 2 CPUs
	near("dirty", s.DirtyMB, 300)
	near("writeback", s.WritebackMB, 20)
	near("load", s.Load1, 3.5)
	if s.AtMs != 500 {
		t.Errorf("AtMs = %d, want 500", s.AtMs)
	}
	sum := summarizeHost([]HostSample{s, {DirtyMB: 100, UtilPct: 10}})
	near("peak dirty", sum.PeakDirtyMB, 300)
	near("mean dirty", sum.MeanDirtyMB, 200)
	near("mean util", sum.MeanUtilPct, 30)
}

func TestBlockDeviceAndSamplerOnThisHost(t *testing.T) {
	dir := t.TempDir()
	dev, err := BlockDevice("/sys", dir)
	if err != nil {
		t.Logf("no block device under %s: %v (disk figures are skipped)", dir, err)
	}
	s, err := StartSampler("/proc", dev)
	if err != nil {
		t.Fatal(err)
	}
	samples, sum, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	// Stop takes a final sample, so even an instant run has one.
	if len(samples) == 0 || sum.Samples != len(samples) || sum.Device != dev {
		t.Fatalf("samples %d, summary %+v", len(samples), sum)
	}
}
