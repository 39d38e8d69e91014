package stress

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestParsePIDStatTicks(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (wsfs (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 731 269 0 0 20 0 12 0 100 0 0\n"
	got, err := parsePIDStatTicks([]byte(line))
	if err != nil || got != 731+269 {
		t.Fatalf("parsePIDStatTicks = %d, %v; want 1000", got, err)
	}
	if _, err := parsePIDStatTicks([]byte("4242 wsfs S 1")); err == nil {
		t.Error("a line without a command name parsed")
	}
	if _, err := parsePIDStatTicks([]byte("4242 (wsfs) S 1 2 3")); err == nil {
		t.Error("a short line parsed")
	}
}

func TestFuseOpsFromExposition(t *testing.T) {
	text := `# HELP wsfs_fuse_ops_total FUSE requests served, by operation.
# TYPE wsfs_fuse_ops_total counter
wsfs_fuse_ops_total{op="LOOKUP",workspace="ws-0"} 1234
wsfs_fuse_ops_total{op="GETATTR",workspace="ws-0"} 1.5e+06
wsfs_fuse_op_errors_total{op="LOOKUP",workspace="ws-0"} 7
wsfs_commit_pending_records{workspace="ws-0"} 3
`
	m := parseExposition([]byte(text))
	ops := fuseOps(m)
	if len(ops) != 2 || ops["LOOKUP"] != 1234 || ops["GETATTR"] != 1.5e6 {
		t.Errorf("fuseOps = %v", ops)
	}
	if n, ok := pendingRecords(m); !ok || n != 3 {
		t.Errorf("pendingRecords = %v, %v; want 3", n, ok)
	}
	if _, ok := pendingRecords(parseExposition([]byte(`wsfs_fuse_ops_total{op="READ",workspace="loopback"} 1`))); ok {
		t.Error("pending records found in a loopback exposition")
	}
}

func TestMetricsAddrInLogs(t *testing.T) {
	for _, line := range []string{
		`time=2026-12-01T08:25:01.557Z level=INFO msg=metrics workspace=ws-0 addr=http://127.0.0.1:35115/metrics`,
		`metrics addr=http://127.0.0.1:35115/metrics`,
	} {
		m := metricsAddrRe.FindStringSubmatch("wsfs: something\n" + line + "\nwsfs: serving\n")
		if m == nil || m[1] != "http://127.0.0.1:35115/metrics" {
			t.Errorf("%q: got %v", line, m)
		}
	}
}

// TestGeneratedModuleBuilds checks that the go-build step's module is valid
// Go at every scale (gofmt-clean, and vet-clean where go is installed).
func TestGeneratedModuleBuilds(t *testing.T) {
	for _, name := range ToolScaleNames {
		dir := filepath.Join(t.TempDir(), "benchmod")
		if err := writeModule(dir, ToolScales[name]); err != nil {
			t.Fatal(err)
		}
		if _, err := exec.LookPath("go"); err != nil {
			continue
		}
		cmd := exec.Command("go", "vet", "./...")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOPROXY=off", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("scale %s: go vet: %v\n%s", name, err, out)
		}
		out, err := exec.Command("gofmt", "-l", dir).CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) != "" {
			t.Errorf("scale %s: not gofmt-clean: %s", name, out)
		}
	}
}
