package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/stress"
	"wsfs/internal/testenv"
)

// TestBenchToolsSmoke runs the real-tool benchmark at scale tiny on every
// arm, with real daemons and real mounts, and checks that every step ran on
// every arm and was measured (wall time; for the FUSE arms daemon CPU and
// request counts). It checks no speed: that is measured, not asserted.
func TestBenchToolsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs real tools on real mounts")
	}
	testenv.RequireFUSE(t)
	for _, tool := range []string{"tar", "find", "du", "git", "go", "rm"} {
		testenv.RequireTool(t, tool)
	}
	// Bounds against a hang, not speed targets: on a loaded 2-core CI
	// machine the build alone took over two minutes once.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// Whatever happens to the benchmark process, no mount of it outlives
	// the test (lazily detached, so a busy or dead mount does not block).
	t.Cleanup(func() { detachMountsUnder(t, dir) })
	bin := filepath.Join(dir, "wsfs")
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	// A small tree of our own: the test does not depend on GOROOT's layout.
	tree := filepath.Join(dir, "tree")
	for i := range 30 {
		p := filepath.Join(tree, "pkg"+string(rune('a'+i%5)), "f"+string(rune('a'+i))+".go")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("package x\n\nfunc F() int { return 1 }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, bin, "bench", "tools", "--scale", "tiny", "--tree", tree,
		"--small-files", "200", "--sqlite-tx", "30", "--step-timeout", "3m", "--out", out)
	// On timeout, SIGTERM lets the benchmark stop its daemons and unmount.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("wsfs bench tools: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res stress.ToolsResults
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(res.Arms) != len(stress.ToolArms) {
		t.Fatalf("arms %v, want %v", res.Arms, stress.ToolArms)
	}
	if len(res.Results) != len(stress.ToolSteps)*len(stress.ToolArms) {
		t.Fatalf("%d results, want %d steps × %d arms", len(res.Results), len(stress.ToolSteps), len(stress.ToolArms))
	}
	if res.Files < 30 || res.GoFiles < 30 {
		t.Errorf("tarball of %d files (%d Go): want the 30 of the tree plus the module", res.Files, res.GoFiles)
	}
	for _, r := range res.Results {
		if r.Error != "" || r.WallNs <= 0 {
			t.Errorf("%s on %s: error %q, wall %d ns", r.Step, r.Arm, r.Error, r.WallNs)
			continue
		}
		fuseArm := r.Arm != stress.ArmNative
		if fuseArm != (r.DaemonCPUs != nil) {
			t.Errorf("%s on %s: daemon CPU %v: want it exactly for the FUSE arms", r.Step, r.Arm, r.DaemonCPUs)
		}
		// Every step but the stat of cached entries must reach the daemon.
		if fuseArm && r.Step != "stat" && r.FuseOpsTotal <= 0 {
			t.Errorf("%s on %s: no FUSE requests counted (%v)", r.Step, r.Arm, r.FuseOps)
		}
		if r.Step == "sqlite" && len(r.Detail) == 0 {
			t.Errorf("sqlite on %s: no helper result", r.Arm)
		}
	}
	bench, err := os.ReadFile(filepath.Join(out, "bench.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(bench))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "BenchmarkTools/") {
			if f := strings.Split(sc.Text(), "\t"); len(f) < 3 || !strings.HasSuffix(f[2], " ns/op") {
				t.Errorf("bench line %q: want NAME\\tN\\tV ns/op ...", sc.Text())
			}
			lines++
		}
	}
	if want := (len(stress.ToolSteps) + 1) * len(stress.ToolArms); lines != want {
		t.Errorf("%d benchmark lines, want %d (every step and the total, per arm)", lines, want)
	}
	if rep, err := os.ReadFile(filepath.Join(out, "report.md")); err != nil || !bytes.Contains(rep, []byte("| **total** |")) {
		t.Errorf("report.md without the total row: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(out, "runs")); err == nil {
		t.Errorf("run data left behind: %v", ents)
	}
}

// detachMountsUnder lazily unmounts every mount below dir.
func detachMountsUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			t.Logf("detaching mount %s left by the benchmark", f[4])
			if err := unix.Unmount(f[4], unix.MNT_DETACH); err != nil {
				t.Errorf("umount -l %s: %v", f[4], err)
			}
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"bench"}, []string{"tools"}},
		{[]string{"bench", "compile"}, []string{"tools"}},
		{[]string{"bench", "tools", "--scale", "huge"}, []string{"--scale", "tiny, small, full"}},
		{[]string{"bench", "tools", "--arms", "native,zfs"}, []string{"--arms", `"zfs"`}},
		{[]string{"bench", "tools", "--tree", "/nonexistent/tree"}, []string{"--tree"}},
		{[]string{"bench", "tools", "--sqlite-tx", "-1"}, []string{"--sqlite-tx"}},
	} {
		var stderr bytes.Buffer
		g := &globals{stdout: &bytes.Buffer{}, stderr: &stderr}
		args := append(append([]string{}, c.args...), "--out", t.TempDir())
		if len(c.args) < 2 {
			args = c.args
		}
		if code := run(context.Background(), g, args); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, exitUsage, stderr.String())
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v: stderr %q does not mention %q", c.args, stderr.String(), w)
			}
		}
	}
}
