package stress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeAgent writes a shell script that speaks the agent protocol (ready,
// wait for the start line, write the result, done), reports result as its
// JSON and exits with code. It stands in for `wsfs agent` to test the
// harness's plumbing; the real agent is tested in agent_test.go and end to
// end by TestStressSmoke in cmd/wsfs.
func fakeAgent(t *testing.T, result string, code int) string {
	t.Helper()
	script := fmt.Sprintf(`#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in --result) res="$2"; shift;; esac
  shift
done
echo ready
read line || exit 3
echo "progress write 1 1"
cat > "$res" <<'RESULT'
%s
RESULT
echo done
exit %d
`, result, code)
	p := filepath.Join(t.TempDir(), "fake-wsfs")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func testOptions(t *testing.T, exe string) Options {
	return Options{
		Exe: exe, Profile: Profiles["tiny"], Workspaces: []int{2}, Arms: []string{ArmNative},
		Neighbours: []int{0}, Repeat: 1, Seed: 1, Out: t.TempDir(), Layout: LayoutShared,
		Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{},
	}
}

func runWithTimeout(t *testing.T, opts Options) (*Results, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return Run(ctx, opts)
}

func TestRunCollectsAgentResults(t *testing.T) {
	exe := fakeAgent(t, `{"workspace":0,"files":80,"wall_ns":2000000000,"bytes_written":6000000,"verified":true,
	  "samples_ns":{"write":[1000000,3000000],"read":[500000],"fsync":[7000000]}}`, 0)
	opts := testOptions(t, exe)
	opts.Unavailable = map[string]string{ArmWsfs: "no mount command"}
	opts.Arms = append(opts.Arms, ArmWsfs)
	res, err := runWithTimeout(t, opts)
	var nr *NotRunError
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "no mount command") {
		t.Fatalf("Run = %v, want a NotRunError naming the wsfs arm", err)
	}
	if len(res.Summary) != 1 || len(res.NotRun) != 1 {
		t.Fatalf("summary %+v, not run %+v: want one native row and wsfs not run (never as numbers)", res.Summary, res.NotRun)
	}
	row := res.Summary[0]
	// Two agents, each 6 MB in 2 s: 12 MB over the slowest 2 s.
	if !row.Verified || row.MedianWallS != 2 || row.WriteP95Ms != 3 || row.FsyncP99Ms != 7 || row.AggWriteMBs != 6 {
		t.Errorf("row %+v", row)
	}
	b, err := os.ReadFile(filepath.Join(opts.Out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("samples_ns")) {
		t.Error("results.json carries raw samples; they belong in the agent result files")
	}
	var back Results
	if err := json.Unmarshal(b, &back); err != nil || len(back.Runs) != 1 || back.Runs[0].Agents[0].Latency[OpWrite].P95 != 3 {
		t.Errorf("results.json round trip: %v %+v", err, back.Runs)
	}
	if ents, _ := os.ReadDir(filepath.Join(opts.Out, "runs")); len(ents) != 0 {
		t.Errorf("run data left behind: %v", ents)
	}
}

func TestRunFailsLoudlyOnMismatch(t *testing.T) {
	exe := fakeAgent(t, `{"workspace":0,"files":80,"wall_ns":1000,"verified":false,
	  "error":"verification failed in read phase: src3/f00042.go: content hash differs from what was written (size 17, version 0)"}`, 1)
	opts := testOptions(t, exe)
	res, err := runWithTimeout(t, opts)
	if err == nil || !strings.Contains(err.Error(), "src3/f00042.go") {
		t.Fatalf("Run = %v, want an error naming the mismatching file", err)
	}
	if len(res.Summary) != 1 || res.Summary[0].Verified {
		t.Fatalf("summary %+v: want one unverified row", res.Summary)
	}
	rep, _ := os.ReadFile(filepath.Join(opts.Out, "report.md"))
	if !strings.Contains(string(rep), "## Failures") || !strings.Contains(string(rep), "src3/f00042.go") {
		t.Errorf("report.md does not list the failure:\n%s", rep)
	}
}

func TestRunReportsAgentThatNeverStarts(t *testing.T) {
	p := filepath.Join(t.TempDir(), "broken-wsfs")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho 'cannot open state database' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := runWithTimeout(t, testOptions(t, p))
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "cannot open state database") {
		t.Fatalf("Run = %v, want the agent's own complaint", err)
	}
}

func TestRunRejectsUnknownLayout(t *testing.T) {
	opts := testOptions(t, "/nonexistent")
	opts.Layout = "striped"
	if _, err := Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "shared, dedicated") {
		t.Fatalf("Run = %v, want the allowed layouts named", err)
	}
}
