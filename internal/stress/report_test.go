package stress

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRun builds a run whose every agent took wall seconds and whose write
// and read samples are the given milliseconds.
func fakeRun(arm string, ws, nb int, wall float64, readMs int64) *RunResult {
	r := &RunResult{Arm: arm, Workspaces: ws, Neighbours: nb, Repeat: 1, Host: HostSummary{PeakDirtyMB: 10 * float64(ws)}}
	for i := range ws {
		r.Agents = append(r.Agents, &AgentResult{
			Workspace: i, WallNs: int64(wall*1e9) * int64(i+1), BytesWritten: 100e6, BytesRead: 50e6, Verified: true,
			Samples: map[string][]int64{
				OpWrite: {1e6, 2e6, 3e6},
				OpRead:  {readMs * 1e6},
				OpFsync: {5e6},
			},
		})
	}
	return r
}

func TestSummarize(t *testing.T) {
	runs := []*RunResult{fakeRun(ArmNative, 3, 0, 1, 1), fakeRun(ArmNative, 1, 0, 2, 1)}
	rows := Summarize(runs)
	if len(rows) != 2 || rows[0].Workspaces != 3 || rows[1].Workspaces != 1 {
		t.Fatalf("rows %+v", rows)
	}
	r := rows[0]
	// walls 1, 2, 3 s
	if r.MedianWallS != 2 || r.MaxWallS != 3 || !r.Verified {
		t.Errorf("median %v max %v verified %v", r.MedianWallS, r.MaxWallS, r.Verified)
	}
	if r.AggWriteMBs != 100 { // 300 MB over the slowest 3 s
		t.Errorf("agg MB/s %v, want 100", r.AggWriteMBs)
	}
	if r.WriteP50Ms != 2 || r.WriteP95Ms != 3 || r.FsyncP99Ms != 5 || r.PeakDirtyMB != 30 {
		t.Errorf("row %+v", r)
	}
	bad := fakeRun(ArmNative, 1, 0, 1, 1)
	bad.Agents[0].Verified = false
	bad.Agents[0].Error = "verification failed in read phase: a/b: content hash differs"
	if Summarize([]*RunResult{bad})[0].Verified {
		t.Error("a run with an unverified agent summarised as verified")
	}
	short := fakeRun(ArmNative, 2, 0, 1, 1)
	short.Agents = short.Agents[:1]
	if Summarize([]*RunResult{short})[0].Verified {
		t.Error("a run missing an agent's result summarised as verified")
	}
}

func targetByPrefix(t *testing.T, ts []Target, prefix string) Target {
	t.Helper()
	for _, x := range ts {
		if strings.HasPrefix(x.Name, prefix) {
			return x
		}
	}
	t.Fatalf("no target %q in %+v", prefix, ts)
	return Target{}
}

func TestEvaluateTargets(t *testing.T) {
	rows := Summarize([]*RunResult{
		fakeRun(ArmNativeFsync, 1, 0, 10, 1), fakeRun(ArmNativeFsync, 3, 0, 10, 1),
		fakeRun(ArmLoopback, 1, 0, 4, 1), fakeRun(ArmLoopback, 3, 0, 4, 1),
		fakeRun(ArmWsfs, 1, 0, 4, 1), fakeRun(ArmWsfs, 3, 0, 6, 3),
		fakeRun(ArmWsfsSyncfs, 1, 0, 4, 1), fakeRun(ArmWsfsSyncfs, 1, 1, 20, 1),
		fakeRun(ArmWsfs, 1, 1, 8, 1),
	})
	ts := EvaluateTargets(rows)
	// N=1: wsfs 4 s vs native-fsync 10 s -> 0.4 <= 0.5.
	if x := targetByPrefix(t, ts, "wsfs <= 0.5x native-fsync median wall, N=1"); x.Status != TargetMet || x.Value != 0.4 {
		t.Errorf("%+v", x)
	}
	// N=3: medians wsfs 12 s (6,12,18), native-fsync 20 s -> 0.6 > 0.5.
	if x := targetByPrefix(t, ts, "wsfs <= 0.5x native-fsync median wall, N=3"); x.Status != TargetMissed || x.Value != 0.6 {
		t.Errorf("%+v", x)
	}
	// N=1: 4/4 = 1 <= 1.5.
	if x := targetByPrefix(t, ts, "wsfs <= 1.5x loopback median wall, N=1"); x.Status != TargetMet {
		t.Errorf("%+v", x)
	}
	// Degradation: wsfs 4 -> 12 (3x), native-fsync 10 -> 20 (2x): missed.
	if x := targetByPrefix(t, ts, "degradation"); x.Status != TargetMissed || x.Value != 3 || x.Limit != 2 {
		t.Errorf("%+v", x)
	}
	// Neighbours at N=1: wsfs 4 -> 8 (2x), syncfs 4 -> 20 (5x): extra 1 <= 0.5*4 met.
	if x := targetByPrefix(t, ts, "noisy neighbours (1): wsfs slowdown-1 <= 0.5x (wsfs-syncfs slowdown-1), N=1"); x.Status != TargetMet || x.Value != 1 || x.Limit != 2 {
		t.Errorf("%+v", x)
	}
	// N=3 has no neighbour rows.
	if x := targetByPrefix(t, ts, "noisy neighbours (1): wsfs slowdown-1 <= 0.5x (wsfs-syncfs slowdown-1), N=3"); x.Status != TargetNotEvaluated {
		t.Errorf("%+v", x)
	}
	// Read p50 1 ms -> 3 ms: 3 > 2 missed.
	if x := targetByPrefix(t, ts, "wsfs read p50"); x.Status != TargetMissed || x.Value != 3 {
		t.Errorf("%+v", x)
	}

	// Without the wsfs arm nothing is evaluated, and each says why.
	for _, x := range EvaluateTargets(Summarize([]*RunResult{fakeRun(ArmNative, 1, 0, 1, 1), fakeRun(ArmNative, 2, 0, 1, 1)})) {
		if x.Status != TargetNotEvaluated || x.Detail == "" {
			t.Errorf("without wsfs: %+v", x)
		}
	}
}

func TestWriteOutputs(t *testing.T) {
	dir := t.TempDir()
	res := &Results{Command: "wsfs stress --profile tiny", Profile: "tiny", Layout: LayoutShared,
		Runs:   []*RunResult{fakeRun(ArmNative, 1, 0, 1, 1), fakeRun(ArmNative, 2, 0, 1, 1), fakeRun(ArmNativeFsync, 1, 0, 3, 1)},
		NotRun: []NotRun{{Arm: ArmWsfs, Reason: "no mount command"}}}
	res.Summary = Summarize(res.Runs)
	res.Targets = EvaluateTargets(res.Summary)
	var table bytes.Buffer
	if err := writeOutputs(Options{Out: dir, Stdout: &table}, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Summary []map[string]any `json:"summary"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Summary) != 3 {
		t.Fatalf("%d summary rows, want 3", len(got.Summary))
	}
	for _, k := range []string{"arm", "workspaces", "neighbours", "median_wall_s", "max_wall_s", "write_p50_ms", "write_p95_ms",
		"read_p50_ms", "read_p95_ms", "fsync_p99_ms", "agg_write_mb_s", "peak_dirty_mb", "verified"} {
		if _, ok := got.Summary[0][k]; !ok {
			t.Errorf("summary rows lack the stable key %q", k)
		}
	}
	for _, name := range []string{"plot.png", "fsync_p99.png"} {
		png, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG: %v", name, err)
		}
	}
	rep, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(rep), "`wsfs`: no mount command") || !strings.Contains(string(rep), "| native-fsync | 1 | 0 | 3.00 |") {
		t.Errorf("report.md lacks the not-run arm or the table:\n%s", rep)
	}
	bench, _ := os.ReadFile(filepath.Join(dir, "bench.txt"))
	if !strings.Contains(string(bench), "BenchmarkStress/arm=native/ws=2/nb=0\t1\t1500000000 ns/op") {
		t.Errorf("bench.txt:\n%s", bench)
	}
	if !strings.Contains(table.String(), "native-fsync") {
		t.Errorf("table:\n%s", table.String())
	}
}
