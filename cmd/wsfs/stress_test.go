package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/stress"
	"wsfs/internal/testenv"
)

// TestStressSmoke is the CI run of the harness: profile tiny at 1 and 2
// workspaces with every arm. Where FUSE is promised (CI, WSFS_REQUIRE) an
// arm that cannot run fails the test; elsewhere it is named in the log and
// left out.
func TestStressSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs real workloads")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "wsfs")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var arms []string
	un := unavailableArms()
	for _, a := range stress.AllArms {
		if why, ok := un[a]; ok {
			// Every arm runs where the environment promises FUSE: a
			// dropped arm would be comparison coverage CI does not have.
			if testenv.Promised(testenv.FUSE) {
				t.Fatalf("arm %s cannot run: %s", a, why)
			}
			t.Logf("arm %s skipped: %s", a, why)
			continue
		}
		arms = append(arms, a)
	}
	out := filepath.Join(dir, "out")
	cmd := exec.CommandContext(ctx, bin, "stress", "--profile", "tiny", "--workspaces", "1,2",
		"--arms", strings.Join(arms, ","), "--out", out)
	// On timeout, SIGTERM lets the harness stop its daemons and unmount.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Minute
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("wsfs stress: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Summary []struct {
			Arm        string  `json:"arm"`
			Workspaces int     `json:"workspaces"`
			Verified   bool    `json:"verified"`
			MedianWall float64 `json:"median_wall_s"`
			// The wsfs arms replicate each agent state database with a
			// sidecar and verify the restored replica row for row.
			Replicated      bool    `json:"replicated"`
			ReplicaVerified bool    `json:"replica_verified"`
			ReplicaSyncMax  float64 `json:"replica_sync_max_ms"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(res.Summary) != 2*len(arms) {
		t.Fatalf("%d summary rows, want %d (arms %v at 1 and 2 workspaces)", len(res.Summary), 2*len(arms), arms)
	}
	for _, r := range res.Summary {
		if !r.Verified || r.MedianWall <= 0 || !slices.Contains(arms, r.Arm) {
			t.Errorf("row %+v: want a verified run of a requested arm", r)
		}
		wsfsArm := r.Arm == stress.ArmWsfs || r.Arm == stress.ArmWsfsSyncfs
		if wsfsArm && (!r.Replicated || !r.ReplicaVerified || r.ReplicaSyncMax <= 0) {
			t.Errorf("row %+v: want the agent state replicated, restored and verified, with a sync-and-wait latency", r)
		}
		if !wsfsArm && (r.Replicated || r.ReplicaVerified) {
			t.Errorf("row %+v: an arm without a sidecar reports replication", r)
		}
	}
	png, err := os.ReadFile(filepath.Join(out, "plot.png"))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("plot.png is not a PNG: %v", err)
	}
	// Sidecar logs are files under logs/ (never pipes).
	if logs, _ := filepath.Glob(filepath.Join(out, "logs", "*-wsfs-ws1-*", "sidecar-0.log")); slices.Contains(arms, stress.ArmWsfs) && len(logs) != 1 {
		t.Errorf("sidecar logs %v: want one file for the wsfs arm at 1 workspace", logs)
	}
	// Each run's data is removed after it; only logs remain.
	if ents, err := os.ReadDir(filepath.Join(out, "runs")); err != nil || len(ents) != 0 {
		t.Errorf("run data left behind: %v %v", ents, err)
	}
}

func TestStressFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--profile", "huge"}, []string{"--profile", "seed, small, tiny"}},
		{[]string{"--arms", "native,zfs"}, []string{"--arms", `"zfs"`, "native-fsync"}},
		{[]string{"--workspaces", "1,x"}, []string{"--workspaces"}},
		{[]string{"--workspaces", "0"}, []string{"--workspaces", ">= 1"}},
		{[]string{"--layout", "striped"}, []string{"--layout", "shared, dedicated"}},
		{[]string{"--neighbour-bytes", "lots"}, []string{"--neighbour-bytes"}},
		{[]string{"--repeat", "0"}, []string{"--repeat"}},
	} {
		var stderr bytes.Buffer
		g := &globals{stdout: &bytes.Buffer{}, stderr: &stderr}
		code := run(context.Background(), g, append([]string{"stress", "--out", t.TempDir()}, c.args...))
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, exitUsage, stderr.String())
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v: stderr %q does not mention %q", c.args, stderr.String(), w)
			}
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"2GiB": 2 << 30, "512MiB": 512 << 20, "64KiB": 64 << 10, "1000": 1000, "1.5GiB": 3 << 29} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "GiB", "2TB"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) succeeded", in)
		}
	}
}
