package stress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// The tools benchmark (`wsfs bench tools`) runs the steps an agent's real
// tools take — tar, find, du, stat, git, go build, a test writing small
// files, SQLite, rm — in one directory per arm: a plain directory (native),
// a go-fuse loopback mount and a wsfs mount, all set up by setupArm (the
// daemons are real processes, as in the stress harness) and all alive for
// the whole invocation. Each step runs on every arm before the next step
// starts, the arm order rotating from step to step, so slow drift of a
// shared machine spreads over the arms instead of landing on one.
//
// Every measurement starts clean: before it the benchmark waits until the
// wsfs daemon has nothing pending and calls sync(2), so no step is charged
// with the writeback or commits of an earlier one. A step's wall time ends
// when its tool exits; the daemon CPU and request counts are read after the
// daemon has committed what the step left pending (wsfs), so they include
// the commits the step caused.

// ToolArms are the arms of the tools benchmark, in run order.
var ToolArms = []string{ArmNative, ArmLoopback, ArmWsfs}

// ToolScales are the accepted --scale values: how many files of the tree
// are unpacked (the top-level entries of the tree, in name order, that fit
// in the budget; 0 = all), and the size of the generated Go module.
var ToolScales = map[string]ToolScale{
	"tiny":  {Name: "tiny", FileBudget: 300, ModulePackages: 4, SmallFiles: 500, SQLiteTx: 100},
	"small": {Name: "small", FileBudget: 3000, ModulePackages: 16, ModuleStd: true, SmallFiles: 5000, SQLiteTx: 500},
	"full":  {Name: "full", FileBudget: 0, ModulePackages: 32, ModuleStd: true, SmallFiles: 5000, SQLiteTx: 1000},
}

// ToolScaleNames lists ToolScales in size order.
var ToolScaleNames = []string{"tiny", "small", "full"}

// ToolScale sizes one tools benchmark run.
type ToolScale struct {
	Name       string
	FileBudget int // files of the tree to unpack (whole top-level entries); 0 = the whole tree
	// ModulePackages is the number of packages of the generated module
	// built by the go-build step. With ModuleStd its packages import
	// strings, strconv and sort and a main package links them, so the
	// fresh GOCACHE in the workspace also receives the standard library's
	// compiled packages (what a first build in a fresh checkout writes);
	// without it (tiny, for the smoke test) the module imports nothing.
	ModulePackages int
	ModuleStd      bool
	SmallFiles     int // files of the smallfiles step
	SQLiteTx       int // transactions of the sqlite step
}

// ToolsOptions configure a tools benchmark run.
type ToolsOptions struct {
	Exe   string // the wsfs binary: daemons and helper steps are started from it
	Tree  string // directory whose contents the unpack step extracts
	Scale ToolScale
	Arms  []string // subset of ToolArms
	// Unavailable maps an arm to why it cannot run here (as in Options).
	Unavailable map[string]string
	// SQLiteReaders is the number of concurrent reader connections of the
	// sqlite step.
	SQLiteReaders int
	StepTimeout   time.Duration // bound of every step on every arm
	Out           string        // output directory; data under Out/runs is removed at the end
	Keep          bool
	Command       string
	Stdout        io.Writer // summary table
	Stderr        io.Writer // progress
	ProcRoot      string    // default /proc
	FUSETransport string    // the wsfs arm's `wsfs mount --fuse-transport` (as in Options)
}

// ToolStep is one step: what it runs and how it checks its result.
type ToolStep struct {
	Name  string `json:"name"`
	About string `json:"about"`
}

// ToolSteps are the steps in run order.
var ToolSteps = []ToolStep{
	{"unpack", "tar -xf of the tree (tarred once, outside the timing)"},
	{"find", "find src -name '*.go' (count checked)"},
	{"du", "du -s src"},
	{"stat", "lstat of every file and directory of the tree, by path, in the benchmark process"},
	{"git-init", "git init"},
	{"git-add", "git add -A"},
	{"git-commit", "git commit"},
	{"git-status-cold", "git status --porcelain after sync and one drop_caches before the first arm (empty output checked)"},
	{"git-status-warm", "git status --porcelain again"},
	{"git-gc", "git gc"},
	{"go-build", "go build -p 2 ./... of the generated module (-o bin/ when it has a main package), GOCACHE fresh in the workspace"},
	{"smallfiles", "wsfs agent smallfiles: create, read back and remove small files (a test suite's temp files)"},
	{"sqlite", "wsfs agent sqlite: WAL, synchronous=FULL, one writer of small transactions, concurrent readers"},
	{"rm", "rm -rf of everything the steps left (tree, .git, GOCACHE, binaries, database)"},
}

// ToolStepResult is one step on one arm.
type ToolStepResult struct {
	Step   string `json:"step"`
	Arm    string `json:"arm"`
	WallNs int64  `json:"wall_ns"`
	// DaemonCPUs is the user+system CPU seconds of the arm's daemon process
	// during the step (from /proc/PID/stat); absent for native.
	DaemonCPUs *float64 `json:"daemon_cpu_s,omitempty"`
	// HostCPUs is the busy CPU seconds of the whole machine during the
	// step (all cores, from /proc/stat): the tool, the daemon, the kernel,
	// and whatever else the machine ran.
	HostCPUs float64 `json:"host_cpu_s"`
	// Load1 is the one-minute load average when the step started.
	Load1 float64 `json:"load1"`
	// FuseOps are the FUSE requests the daemon served during the step, by
	// opcode (nil for native); FuseOpsTotal their sum.
	FuseOps      map[string]int64 `json:"fuse_ops,omitempty"`
	FuseOpsTotal int64            `json:"fuse_ops_total,omitempty"`
	// Detail is what a helper step reported (e.g. the SQLite transaction
	// percentiles).
	Detail json.RawMessage `json:"detail,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// ToolsResults is everything one invocation produced; results.json holds it.
type ToolsResults struct {
	Command string            `json:"command"`
	Tree    string            `json:"tree"`
	Scale   string            `json:"scale"`
	Entries []string          `json:"tree_entries"` // top-level entries of the tree unpacked
	Files   int               `json:"files"`        // regular files in the tarball (tree and module)
	Bytes   int64             `json:"bytes"`        // their bytes
	GoFiles int               `json:"go_files"`     // entries named *.go (what the find step lists)
	Host    HostInfo          `json:"host_info"`
	Tools   map[string]string `json:"tools"` // tool -> version line
	Started time.Time         `json:"started"`
	Steps   []ToolStep        `json:"steps"`
	Arms    []string          `json:"arms"`
	NotRun  []NotRun          `json:"not_run,omitempty"`
	// FuseCounters says, per FUSE arm, where its request counts come from.
	FuseCounters map[string]string `json:"fuse_counters"`
	Notes        []string          `json:"notes,omitempty"`
	Results      []*ToolStepResult `json:"results"`
	Errors       []string          `json:"errors,omitempty"`
}

// toolArm is one arm's directory and daemon.
type toolArm struct {
	name    string
	root    string // where the steps work: the mount, or the native directory
	daemon  *proc  // nil for native
	metrics string // the daemon's /metrics URL
	failed  string // a step that failed and that every later step needs; they are skipped
	logDir  string
}

// toolsRun is the state of one RunTools.
type toolsRun struct {
	opts    ToolsOptions
	res     *ToolsResults
	tarball string
	paths   []string // every entry of the tarball, relative to the arm root
	module  string   // the module's directory relative to the arm root
	env     []string
	cold    bool // drop_caches is possible (root)
	disp    display
}

// RunTools runs the tools benchmark and writes results.json, report.md and
// bench.txt into opts.Out. The error is non-nil when a step failed or an
// arm could not run; the outputs are written in every case that got that
// far.
func RunTools(ctx context.Context, opts ToolsOptions) (*ToolsResults, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.StepTimeout <= 0 {
		opts.StepTimeout = 20 * time.Minute
	}
	for _, tool := range []string{"tar", "find", "du", "git", "go", "rm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the tools benchmark needs %s in PATH: %w", tool, err)
		}
	}
	// The steps run in the arms' directories: every path must be absolute.
	for _, p := range []*string{&opts.Out, &opts.Tree} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	if err := os.MkdirAll(filepath.Join(opts.Out, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	t := &toolsRun{opts: opts, cold: os.Geteuid() == 0, disp: newDisplay(opts.Stderr)}
	t.res = &ToolsResults{
		Command: opts.Command, Tree: opts.Tree, Scale: opts.Scale.Name, Host: hostInfo(), Tools: toolVersions(),
		Started: time.Now().UTC(), Steps: ToolSteps,
		FuseCounters: map[string]string{
			ArmWsfs: "the daemon's wsfs_fuse_ops_total (--metrics), counted in its FUSE adapter; requests go-fuse answers " +
				"before the adapter are not counted (the GETXATTR security.capability the kernel sends per write(2), INIT, INTERRUPT)",
			ArmLoopback: "wsfs loopback --metrics: the same collectors around go-fuse's raw file system; as root, go-fuse's " +
				"loopback files use FUSE passthrough, so their READs and WRITEs are served by the kernel and never counted",
		},
	}
	if !t.cold {
		t.res.Notes = append(t.res.Notes, "not root: git-status-cold could not drop caches and ran warm")
	}
	if t.res.Host.Load1AtStart > float64(max(t.res.Host.CPUs, 1)) {
		t.res.Notes = append(t.res.Notes, fmt.Sprintf("load average %.1f on %d CPUs at start: other work was running; compare ratios, not absolute times", t.res.Host.Load1AtStart, t.res.Host.CPUs))
	}
	for _, a := range opts.Arms {
		if why, ok := opts.Unavailable[a]; ok {
			t.res.NotRun = append(t.res.NotRun, NotRun{Arm: a, Reason: why})
			t.disp.logf("arm %s not run: %s", a, why)
			continue
		}
		t.res.Arms = append(t.res.Arms, a)
	}
	runDir := filepath.Join(opts.Out, "runs")
	if err := os.RemoveAll(runDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, err
	}
	if !opts.Keep {
		defer os.RemoveAll(runDir)
	}
	if err := t.prepare(runDir); err != nil {
		return nil, err
	}
	var srv servers
	arms, err := t.setupArms(runDir, &srv)
	defer func() {
		for _, e := range srv.stopDaemons() {
			t.res.Errors = append(t.res.Errors, e)
		}
	}()
	if err != nil {
		t.res.Errors = append(t.res.Errors, err.Error())
	} else {
		t.runSteps(ctx, arms)
	}
	for _, e := range srv.stopDaemons() {
		t.res.Errors = append(t.res.Errors, e)
	}
	if err := t.writeOutputs(); err != nil {
		return t.res, err
	}
	var errs []error
	if ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("interrupted: %w", ctx.Err()))
	}
	for _, e := range t.res.Errors {
		errs = append(errs, errors.New(e))
	}
	for _, r := range t.res.Results {
		if r.Error != "" {
			errs = append(errs, fmt.Errorf("%s on %s: %s", r.Step, r.Arm, r.Error))
		}
	}
	if len(errs) > 0 {
		return t.res, errors.Join(errs...)
	}
	if len(t.res.NotRun) > 0 {
		var names []string
		for _, nr := range t.res.NotRun {
			names = append(names, nr.Arm+" ("+nr.Reason+")")
		}
		return t.res, &NotRunError{Arms: names}
	}
	return t.res, nil
}

// prepare builds the tarball (the chosen entries of the tree plus the
// generated module, under src/) and the environment of the steps.
func (t *toolsRun) prepare(runDir string) error {
	ents, err := os.ReadDir(t.opts.Tree)
	if err != nil {
		return fmt.Errorf("--tree: %w", err)
	}
	budget := t.opts.Scale.FileBudget
	used := 0
	for _, e := range ents {
		if e.Name() == "benchmod" {
			continue // the generated module's name
		}
		n := 1
		if e.IsDir() {
			n = countFiles(filepath.Join(t.opts.Tree, e.Name()))
		}
		if budget > 0 && used+n > budget {
			continue
		}
		used += n
		t.res.Entries = append(t.res.Entries, e.Name())
	}
	if len(t.res.Entries) == 0 {
		return fmt.Errorf("--tree %s: no top-level entry fits the scale's budget of %d files", t.opts.Tree, budget)
	}
	stage := filepath.Join(runDir, "stage")
	if err := writeModule(filepath.Join(stage, "benchmod"), t.opts.Scale); err != nil {
		return fmt.Errorf("generate the Go module: %w", err)
	}
	t.tarball = filepath.Join(runDir, "tree.tar")
	args := append([]string{"-cf", t.tarball, "-C", t.opts.Tree}, t.res.Entries...)
	args = append(args, "-C", stage, "benchmod")
	if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("tar the tree: %v: %s", err, out)
	}
	if err := t.listTarball(); err != nil {
		return err
	}
	t.module = filepath.Join("src", "benchmod")
	t.env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=wsfs bench", "GIT_AUTHOR_EMAIL=bench@wsfs.invalid",
		"GIT_COMMITTER_NAME=wsfs bench", "GIT_COMMITTER_EMAIL=bench@wsfs.invalid",
		// No automatic gc: after add and commit of thousands of loose
		// objects git would start a detached `gc --auto` that runs into
		// the next steps (and makes the git-gc step find gc running).
		"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=gc.auto", "GIT_CONFIG_VALUE_0=0",
		"GIT_CONFIG_KEY_1=maintenance.auto", "GIT_CONFIG_VALUE_1=false",
		"GOTOOLCHAIN=local", "GOFLAGS=", "GOWORK=off", "GOPROXY=off", "CGO_ENABLED=0", "GO111MODULE=on",
		"LC_ALL=C")
	// The tarball is read by every arm's unpack: read it once now, so the
	// first arm does not pay the disk read the others get from the cache.
	f, err := os.Open(t.tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}

// listTarball records every path of the tarball (for the stat step) and
// counts its files, bytes and Go files (for the report and the find check).
func (t *toolsRun) listTarball() error {
	cmd := exec.Command("tar", "-tvf", t.tarball)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("list the tarball: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// -rw-r--r-- user/group SIZE DATE TIME NAME (GNU tar); names
		// with " -> " are symlinks.
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		name := strings.Join(f[5:], " ")
		if f[0][0] == 'l' {
			name, _, _ = strings.Cut(name, " -> ")
		}
		name = strings.TrimSuffix(name, "/")
		t.paths = append(t.paths, filepath.Join("src", name))
		if strings.HasSuffix(name, ".go") { // any type: find -name matches them all
			t.res.GoFiles++
		}
		if f[0][0] == '-' {
			t.res.Files++
			n, _ := strconv.ParseInt(f[2], 10, 64)
			t.res.Bytes += n
		}
	}
	return sc.Err()
}

// countFiles counts the entries under dir (errors count as nothing).
func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// writeModule generates the Go module of the go-build step in dir.
func writeModule(dir string, sc ToolScale) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module benchmod\n\ngo 1.22\n"), 0o644); err != nil {
		return err
	}
	var mainImports, mainCalls strings.Builder
	for p := range sc.ModulePackages {
		pkg := fmt.Sprintf("p%02d", p)
		if err := os.MkdirAll(filepath.Join(dir, pkg), 0o755); err != nil {
			return err
		}
		for f := range 4 {
			var b strings.Builder
			fmt.Fprintf(&b, "// Code generated by wsfs bench tools. DO NOT EDIT.\n\npackage %s\n\n", pkg)
			if sc.ModuleStd {
				b.WriteString("import (\n\t\"sort\"\n\t\"strconv\"\n\t\"strings\"\n)\n\n")
			}
			for fn := range 12 {
				name := fmt.Sprintf("F%d_%d", f, fn)
				fmt.Fprintf(&b, "type T%d_%d struct {\n\tA, B int\n\tS    []string\n}\n\n", f, fn)
				if sc.ModuleStd {
					fmt.Fprintf(&b, "func %s(xs []string, n int) string {\n\tys := append([]string(nil), xs...)\n\tsort.Strings(ys)\n\tfor i := 0; i < n; i++ {\n\t\tys = append(ys, strconv.Itoa(i*%d))\n\t}\n\treturn strings.Join(ys, %q)\n}\n\n", name, fn+1, pkg)
				} else {
					fmt.Fprintf(&b, "func %s(xs []int, n int) int {\n\ts := 0\n\tfor i, x := range xs {\n\t\tif i%%%d == 0 {\n\t\t\ts += x * n\n\t\t}\n\t}\n\treturn s\n}\n\n", name, fn+2)
				}
			}
			src, err := format.Source([]byte(b.String()))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, pkg, fmt.Sprintf("f%d.go", f)), src, 0o644); err != nil {
				return err
			}
		}
		fmt.Fprintf(&mainImports, "\t%q\n", "benchmod/"+pkg)
		fmt.Fprintf(&mainCalls, "\tprintln(%s.F0_0(nil, len(os.Args)))\n", pkg)
	}
	if !sc.ModuleStd {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "cmd", "benchmod"), 0o755); err != nil {
		return err
	}
	main, err := format.Source([]byte("// Code generated by wsfs bench tools. DO NOT EDIT.\n\npackage main\n\nimport (\n\t\"os\"\n\n" + mainImports.String() + ")\n\nfunc main() {\n" + mainCalls.String() + "}\n"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cmd", "benchmod", "main.go"), main, 0o644)
}

// toolVersions records the versions of the tools the steps run.
func toolVersions() map[string]string {
	v := map[string]string{}
	for tool, args := range map[string][]string{"git": {"--version"}, "go": {"version"}, "tar": {"--version"}} {
		out, err := exec.Command(tool, args...).Output()
		if err != nil {
			continue
		}
		line, _, _ := strings.Cut(string(out), "\n")
		v[tool] = strings.TrimSpace(line)
	}
	return v
}

// metricsAddrRe finds the metrics URL a daemon logs at start-up (wsfs mount
// logs `msg=metrics workspace=NAME addr=URL`, wsfs loopback `metrics addr=URL`).
var metricsAddrRe = regexp.MustCompile(`metrics\b.*?\baddr=(http://\S+/metrics)`)

// setupArms starts one workspace per FUSE arm (metrics on a free port, no
// replication sidecar: the benchmark measures the tools, not the agent
// state replication) and makes the native directory.
func (t *toolsRun) setupArms(runDir string, srv *servers) ([]*toolArm, error) {
	var arms []*toolArm
	so := Options{Exe: t.opts.Exe, Layout: LayoutShared, FUSETransport: t.opts.FUSETransport}
	for _, name := range t.res.Arms {
		dir := filepath.Join(runDir, name)
		logDir := filepath.Join(t.opts.Out, "logs", name)
		for _, d := range []string{dir, logDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
		cfg := armConfig{daemonArgs: []string{"--metrics", "127.0.0.1:0"}, noSidecars: true}
		setups, err := setupArm(so, name, 1, dir, filepath.Join(dir, "home"), logDir, cfg, srv)
		if err != nil {
			return nil, fmt.Errorf("set up %s: %w", name, err)
		}
		a := &toolArm{name: name, root: setups[0].tree, daemon: setups[0].daemon, logDir: logDir}
		if a.daemon != nil {
			if a.metrics, err = waitMetricsURL(a.daemon, 10*time.Second); err != nil {
				return nil, fmt.Errorf("set up %s: %w", name, err)
			}
		}
		arms = append(arms, a)
	}
	return arms, nil
}

// waitMetricsURL reads the daemon's metrics URL from its log.
func waitMetricsURL(p *proc, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(p.logPath); err == nil {
			if m := metricsAddrRe.FindSubmatch(b); m != nil {
				return string(m[1]), nil
			}
		}
		if p.exited() || time.Now().After(deadline) {
			return "", fmt.Errorf("%s logged no metrics address within %v%s", p.name, timeout, p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runSteps runs every step on every arm, rotating the arm order.
func (t *toolsRun) runSteps(ctx context.Context, arms []*toolArm) {
	for i, st := range ToolSteps {
		for k := range arms {
			a := arms[(k+i)%len(arms)]
			if ctx.Err() != nil {
				return
			}
			if a.failed != "" {
				t.res.Results = append(t.res.Results, &ToolStepResult{Step: st.Name, Arm: a.name, Error: "not run: step " + a.failed + " failed"})
				continue
			}
			r := t.measure(ctx, a, st, k == 0)
			t.res.Results = append(t.res.Results, r)
			line := fmt.Sprintf("%-16s %-9s %8.2fs", st.Name, a.name, float64(r.WallNs)/1e9)
			if r.Error != "" {
				if st.Name == "unpack" { // every later step works on the tree
					a.failed = st.Name
				}
				line += "  FAILED: " + r.Error
			} else if r.FuseOpsTotal > 0 {
				line += fmt.Sprintf("  %d requests", r.FuseOpsTotal)
			}
			t.disp.logf("%s", line)
		}
	}
}

// counters is one reading of what a step is charged with.
type counters struct {
	daemonTicks uint64 // utime+stime of the daemon, clock ticks
	hostBusy    uint64 // busy jiffies of the machine
	ops         map[string]float64
}

// userHZ is the unit of /proc/stat and /proc/PID/stat times on Linux.
const userHZ = 100

func (t *toolsRun) read(a *toolArm) (counters, error) {
	var c counters
	b, err := os.ReadFile(filepath.Join(t.opts.ProcRoot, "stat"))
	if err != nil {
		return c, err
	}
	cs, err := parseProcStat(b)
	if err != nil {
		return c, err
	}
	c.hostBusy = cs.Total - cs.Idle
	if a.daemon == nil {
		return c, nil
	}
	if c.daemonTicks, err = procCPUTicks(t.opts.ProcRoot, a.daemon.cmd.Process.Pid); err != nil {
		return c, err
	}
	m, err := scrapeMetrics(a.metrics)
	if err != nil {
		return c, err
	}
	c.ops = fuseOps(m)
	return c, nil
}

// procCPUTicks returns utime+stime of process pid, in clock ticks.
func procCPUTicks(procRoot string, pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parsePIDStatTicks(b)
}

// parsePIDStatTicks parses utime and stime (fields 14 and 15) of a
// /proc/PID/stat line; the command name (field 2) may hold spaces and
// parentheses, so fields are counted from its last ')'.
func parsePIDStatTicks(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, f[11].
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc stat: utime %q stime %q", f[11], f[12])
	}
	return u + s, nil
}

// scrapeMetrics fetches a Prometheus text exposition and returns its
// samples by series (name with labels, as written).
func scrapeMetrics(url string) (map[string]float64, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return parseExposition(b), nil
}

// parseExposition parses the sample lines of the Prometheus text format.
func parseExposition(b []byte) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// opLabelRe finds the op label of a wsfs_fuse_ops_total series.
var opLabelRe = regexp.MustCompile(`op="([^"]+)"`)

// fuseOps picks the request counts by opcode out of scraped samples.
func fuseOps(m map[string]float64) map[string]float64 {
	ops := map[string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, "wsfs_fuse_ops_total{") {
			continue
		}
		if s := opLabelRe.FindStringSubmatch(k); s != nil {
			ops[s[1]] = v
		}
	}
	return ops
}

// pendingRecords reads wsfs_commit_pending_records; ok is false when the
// daemon does not export it (loopback).
func pendingRecords(m map[string]float64) (n float64, ok bool) {
	for k, v := range m {
		if k == "wsfs_commit_pending_records" || strings.HasPrefix(k, "wsfs_commit_pending_records{") {
			return v, true
		}
	}
	return 0, false
}

// settle waits (bounded) until the arm's daemon has committed everything
// pending; with sync it then syncs the machine, so the step that follows
// starts clean.
func (t *toolsRun) settle(a *toolArm, sync bool) error {
	if a.metrics != "" {
		deadline := time.Now().Add(60 * time.Second)
		for {
			m, err := scrapeMetrics(a.metrics)
			if err != nil {
				return err
			}
			n, ok := pendingRecords(m)
			if !ok || n == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%.0f records still pending in the daemon after 60 s", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if sync {
		unix.Sync()
	}
	return nil
}

// measure runs one step on one arm; first says it is the first arm of the
// step.
func (t *toolsRun) measure(ctx context.Context, a *toolArm, st ToolStep, first bool) *ToolStepResult {
	r := &ToolStepResult{Step: st.Name, Arm: a.name}
	fail := func(err error) *ToolStepResult { r.Error = err.Error(); return r }
	if err := t.settle(a, true); err != nil {
		return fail(err)
	}
	if st.Name == "git-status-cold" && t.cold && first {
		// Dirty pages are gone (settle synced); drop the clean ones and
		// the dentries and inodes: for a FUSE mount this also makes the
		// kernel forget its cached entries, so the walk asks the daemon.
		// Once for all arms, before the first: a drop before a later
		// arm's cold status would also empty the caches an earlier arm's
		// warm status (the next step) is meant to find.
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
			return fail(fmt.Errorf("drop caches: %w", err))
		}
	}
	if b, err := os.ReadFile(filepath.Join(t.opts.ProcRoot, "loadavg")); err == nil {
		r.Load1, _ = parseLoadavg(b)
	}
	before, err := t.read(a)
	if err != nil {
		return fail(err)
	}
	sctx, cancel := context.WithTimeout(ctx, t.opts.StepTimeout)
	start := time.Now()
	detail, runErr := t.runStep(sctx, a, st.Name)
	r.WallNs = int64(time.Since(start))
	timedOut := sctx.Err() != nil && ctx.Err() == nil
	cancel()
	if runErr != nil {
		if timedOut {
			runErr = fmt.Errorf("%w (step timeout %v)", runErr, t.opts.StepTimeout)
		}
		return fail(runErr)
	}
	r.Detail = detail
	// The counters include the commits the step left pending (but not the
	// sync before the next step).
	if err := t.settle(a, false); err != nil {
		return fail(err)
	}
	after, err := t.read(a)
	if err != nil {
		return fail(err)
	}
	r.HostCPUs = float64(after.hostBusy-before.hostBusy) / userHZ
	if a.daemon != nil {
		d := float64(after.daemonTicks-before.daemonTicks) / userHZ
		r.DaemonCPUs = &d
		r.FuseOps = map[string]int64{}
		for op, v := range after.ops {
			if n := int64(v - before.ops[op]); n > 0 {
				r.FuseOps[op] = n
				r.FuseOpsTotal += n
			}
		}
	}
	if a.daemon != nil && a.daemon.exited() {
		return fail(fmt.Errorf("daemon exited: %v", a.daemon.exitErr()))
	}
	return r
}

// runStep runs one step's work in arm a and checks its result.
func (t *toolsRun) runStep(ctx context.Context, a *toolArm, step string) (json.RawMessage, error) {
	src := filepath.Join(a.root, "src")
	logPath := filepath.Join(a.logDir, step+".log")
	run := func(dir string, env []string, name string, args ...string) ([]byte, error) {
		return t.exec(ctx, dir, env, logPath, name, args...)
	}
	switch step {
	case "unpack":
		if err := os.Mkdir(src, 0o755); err != nil {
			return nil, err
		}
		_, err := run(src, nil, "tar", "-xf", t.tarball)
		return nil, err
	case "find":
		out, err := run(a.root, nil, "find", "src", "-name", "*.go")
		if err != nil {
			return nil, err
		}
		if n := bytes.Count(out, []byte("\n")); n != t.res.GoFiles {
			return nil, fmt.Errorf("find listed %d Go files, the tarball holds %d", n, t.res.GoFiles)
		}
		return nil, nil
	case "du":
		_, err := run(a.root, nil, "du", "-s", "src")
		return nil, err
	case "stat":
		for _, p := range t.paths {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if _, err := os.Lstat(filepath.Join(a.root, p)); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case "git-init":
		_, err := run(src, nil, "git", "init", "-q")
		return nil, err
	case "git-add":
		_, err := run(src, nil, "git", "add", "-A")
		return nil, err
	case "git-commit":
		_, err := run(src, nil, "git", "commit", "-q", "-m", "import the tree")
		return nil, err
	case "git-status-cold", "git-status-warm":
		out, err := run(src, nil, "git", "status", "--porcelain")
		if err == nil && len(bytes.TrimSpace(out)) > 0 {
			err = fmt.Errorf("git status reports changes after the commit: %.200s", out)
		}
		return nil, err
	case "git-gc":
		_, err := run(src, nil, "git", "gc", "-q")
		return nil, err
	case "go-build":
		cache := filepath.Join(a.root, "gocache")
		env := []string{"GOCACHE=" + cache, "GOPATH=" + filepath.Join(a.root, "gopath"), "GOENV=off"}
		if err := os.Mkdir(cache, 0o755); err != nil {
			return nil, err
		}
		args := []string{"build", "-p", "2", "./..."}
		if t.opts.Scale.ModuleStd { // a main package: link it into bin/
			args = []string{"build", "-p", "2", "-o", filepath.Join(a.root, "bin") + "/", "./..."}
		}
		_, err := run(filepath.Join(a.root, t.module), env, "go", args...)
		if err == nil && t.opts.Scale.ModuleStd {
			if _, serr := os.Stat(filepath.Join(a.root, "bin", "benchmod")); serr != nil {
				err = fmt.Errorf("go build wrote no binary: %w", serr)
			}
		}
		return nil, err
	case "smallfiles":
		dir := filepath.Join(a.root, "tmp")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		out, err := run(a.root, nil, t.opts.Exe, "agent", "smallfiles", "--dir", dir, "--files", strconv.Itoa(t.opts.Scale.SmallFiles))
		return jsonDetail(out), err
	case "sqlite":
		dir := filepath.Join(a.root, "db")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		out, err := run(a.root, nil, t.opts.Exe, "agent", "sqlite", "--db", filepath.Join(dir, "app.db"),
			"--tx", strconv.Itoa(t.opts.Scale.SQLiteTx), "--readers", strconv.Itoa(t.opts.SQLiteReaders))
		return jsonDetail(out), err
	case "rm":
		ents, err := os.ReadDir(a.root)
		if err != nil {
			return nil, err
		}
		args := []string{"-rf"}
		for _, e := range ents {
			args = append(args, e.Name())
		}
		if _, err := run(a.root, nil, "rm", args...); err != nil {
			return nil, err
		}
		if left, _ := os.ReadDir(a.root); len(left) > 0 {
			return nil, fmt.Errorf("rm -rf left %d entries", len(left))
		}
		return nil, nil
	}
	return nil, fmt.Errorf("unknown step %q", step)
}

// jsonDetail returns a helper's JSON output line, or nil.
func jsonDetail(out []byte) json.RawMessage {
	out = bytes.TrimSpace(out)
	if !json.Valid(out) {
		return nil
	}
	return json.RawMessage(out)
}

// exec runs one tool to completion in dir and returns its stdout; stderr
// (and stdout, unless returned) goes to logPath. The tool is killed when
// ctx ends.
func (t *toolsRun) exec(ctx context.Context, dir string, env []string, logPath, name string, args ...string) ([]byte, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(slices.Clone(t.env), env...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On timeout kill the whole group (git and go start children).
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	err = cmd.Run()
	if err != nil {
		tail := out.Bytes()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		logf.Write(tail)
		b, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 6 {
			lines = lines[len(lines)-6:]
		}
		return out.Bytes(), fmt.Errorf("%s %s: %v\n    %s", name, strings.Join(args, " "), err, strings.Join(lines, "\n    "))
	}
	return out.Bytes(), nil
}

// toolsSummary is the per-step comparison the table, report and bench
// lines print.
type toolsSummary struct {
	Step string
	By   map[string]*ToolStepResult // arm -> result (nil: not run)
}

func (t *toolsRun) summary() []toolsSummary {
	var rows []toolsSummary
	for _, st := range ToolSteps {
		row := toolsSummary{Step: st.Name, By: map[string]*ToolStepResult{}}
		for _, r := range t.res.Results {
			if r.Step == st.Name {
				row.By[r.Arm] = r
			}
		}
		rows = append(rows, row)
	}
	// The total: every step that ran on every arm it was run on.
	total := toolsSummary{Step: "total", By: map[string]*ToolStepResult{}}
	for _, arm := range t.res.Arms {
		tr := &ToolStepResult{Step: "total", Arm: arm, FuseOps: map[string]int64{}}
		var dcpu float64
		for _, r := range t.res.Results {
			if r.Arm != arm {
				continue
			}
			if r.Error != "" && tr.Error == "" {
				tr.Error = "incomplete: " + r.Step + " failed"
			}
			tr.WallNs += r.WallNs
			tr.HostCPUs += r.HostCPUs
			if r.DaemonCPUs != nil {
				dcpu += *r.DaemonCPUs
				tr.DaemonCPUs = &dcpu
			}
			for op, n := range r.FuseOps {
				tr.FuseOps[op] += n
			}
			tr.FuseOpsTotal += r.FuseOpsTotal
		}
		total.By[arm] = tr
	}
	return append(rows, total)
}

// ratio returns a/b of two arms' wall times, or 0 when one is missing.
func ratio(row toolsSummary, a, b string) float64 {
	ra, rb := row.By[a], row.By[b]
	if ra == nil || rb == nil || ra.Error != "" || rb.Error != "" || rb.WallNs == 0 {
		return 0
	}
	return float64(ra.WallNs) / float64(rb.WallNs)
}

func ratioCell(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", x)
}

func wallCell(r *ToolStepResult) string {
	switch {
	case r == nil:
		return "–"
	case r.Error != "":
		return "FAIL"
	}
	return fmt.Sprintf("%.2f", float64(r.WallNs)/1e9)
}

func cpuCell(r *ToolStepResult) string {
	if r == nil || r.DaemonCPUs == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *r.DaemonCPUs)
}

// usPerReq is the daemon's CPU microseconds per request.
func usPerReq(r *ToolStepResult) string {
	if r == nil || r.DaemonCPUs == nil || r.FuseOpsTotal == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", *r.DaemonCPUs*1e6/float64(r.FuseOpsTotal))
}

func reqCell(r *ToolStepResult) string {
	if r == nil || r.FuseOps == nil {
		return "–"
	}
	return strconv.FormatInt(r.FuseOpsTotal, 10)
}

func hostCell(r *ToolStepResult) string {
	if r == nil || r.Error != "" {
		return "–"
	}
	return fmt.Sprintf("%.1f", r.HostCPUs)
}

// topOps names the n opcodes with most requests, with their counts.
func topOps(ops map[string]int64, n int) string {
	type kv struct {
		op string
		n  int64
	}
	var s []kv
	for op, c := range ops {
		s = append(s, kv{op, c})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].n > s[j].n || (s[i].n == s[j].n && s[i].op < s[j].op) })
	var parts []string
	for i, e := range s {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", e.op, e.n))
	}
	return strings.Join(parts, ", ")
}

// writeToolsTable prints the comparison: wall seconds per arm, ratios,
// daemon CPU, host CPU and requests.
func (t *toolsRun) writeTable(w io.Writer, rows []toolsSummary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tnative s\tloopback s\twsfs s\twsfs/native\twsfs/loopback\tdaemon CPU s (loop/wsfs)\thost CPU s (nat/loop/wsfs)\trequests (loop/wsfs)\twsfs µs CPU/req")
	for _, row := range rows {
		n, l, ws := row.By[ArmNative], row.By[ArmLoopback], row.By[ArmWsfs]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s / %s\t%s / %s / %s\t%s / %s\t%s\n", row.Step,
			wallCell(n), wallCell(l), wallCell(ws), ratioCell(ratio(row, ArmWsfs, ArmNative)), ratioCell(ratio(row, ArmWsfs, ArmLoopback)),
			cpuCell(l), cpuCell(ws), hostCell(n), hostCell(l), hostCell(ws), reqCell(l), reqCell(ws), usPerReq(ws))
	}
	tw.Flush()
}

func (t *toolsRun) writeOutputs() error {
	rows := t.summary()
	if t.opts.Stdout != nil {
		t.writeTable(t.opts.Stdout, rows)
	}
	if err := writeJSONFile(filepath.Join(t.opts.Out, "results.json"), t.res); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(t.opts.Out, "report.md"), []byte(t.report(rows)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(t.opts.Out, "bench.txt"), []byte(t.bench(rows)), 0o644)
}

// report renders report.md.
func (t *toolsRun) report(rows []toolsSummary) string {
	var b strings.Builder
	r := t.res
	fmt.Fprintf(&b, "# wsfs bench tools\n\n")
	fmt.Fprintf(&b, "- Command: `%s`\n- Started: %s\n", r.Command, r.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "- Machine: %d CPUs, %d MB, Linux %s, root %v, load average %.2f at start\n", r.Host.CPUs, r.Host.MemoryMB, r.Host.Kernel, r.Host.Root, r.Host.Load1AtStart)
	var tv []string
	for _, k := range []string{"go", "git", "tar"} {
		if v, ok := r.Tools[k]; ok {
			tv = append(tv, v)
		}
	}
	fmt.Fprintf(&b, "- Tools: %s\n", strings.Join(tv, "; "))
	fmt.Fprintf(&b, "- Tree: scale `%s`, %d files (%d Go files), %.1f MB, from %d top-level entries of the tree plus a generated module of %d packages\n",
		r.Scale, r.Files, r.GoFiles, float64(r.Bytes)/1e6, len(r.Entries), t.opts.Scale.ModulePackages)
	fmt.Fprintf(&b, "- Arms: %s (each step on every arm before the next step; arm order rotates per step)\n", strings.Join(r.Arms, ", "))
	for _, nr := range r.NotRun {
		fmt.Fprintf(&b, "- Not run: %s: %s\n", nr.Arm, nr.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- Note: %s\n", n)
	}
	b.WriteString("\n## Steps\n\nSeconds of wall time; ratios of wall times; daemon CPU is user+system of the daemon process; host CPU is the busy time of the whole machine (all cores); requests are FUSE requests the daemon served.\n\n")
	b.WriteString("| step | native s | loopback s | wsfs s | wsfs/native | wsfs/loopback | loopback/native | daemon CPU s loopback | daemon CPU s wsfs | host CPU s native | host CPU s loopback | host CPU s wsfs | requests loopback | requests wsfs | wsfs µs CPU/request |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		n, l, ws := row.By[ArmNative], row.By[ArmLoopback], row.By[ArmWsfs]
		name := row.Step
		if name == "total" {
			name = "**total**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name,
			wallCell(n), wallCell(l), wallCell(ws), ratioCell(ratio(row, ArmWsfs, ArmNative)), ratioCell(ratio(row, ArmWsfs, ArmLoopback)),
			ratioCell(ratio(row, ArmLoopback, ArmNative)), cpuCell(l), cpuCell(ws), hostCell(n), hostCell(l), hostCell(ws), reqCell(l), reqCell(ws), usPerReq(ws))
	}
	b.WriteString("\n## Requests by opcode\n\nThe five most frequent opcodes per step and FUSE arm.\n\n| step | loopback | wsfs |\n|---|---|---|\n")
	for _, row := range rows {
		cell := func(arm string) string {
			if x := row.By[arm]; x != nil && x.FuseOps != nil {
				return topOps(x.FuseOps, 5)
			}
			return "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", row.Step, cell(ArmLoopback), cell(ArmWsfs))
	}
	var details []string
	for _, x := range r.Results {
		if len(x.Detail) > 0 {
			details = append(details, fmt.Sprintf("| %s | %s | `%s` |", x.Step, x.Arm, x.Detail))
		}
	}
	if len(details) > 0 {
		b.WriteString("\n## Helper results\n\n| step | arm | result |\n|---|---|---|\n" + strings.Join(details, "\n") + "\n")
	}
	var fails []string
	for _, x := range r.Results {
		if x.Error != "" {
			fails = append(fails, fmt.Sprintf("- %s on %s: %s", x.Step, x.Arm, strings.ReplaceAll(x.Error, "\n", " ")))
		}
	}
	for _, e := range r.Errors {
		fails = append(fails, "- "+strings.ReplaceAll(e, "\n", " "))
	}
	if len(fails) > 0 {
		b.WriteString("\n## Failures\n\n" + strings.Join(fails, "\n") + "\n")
	}
	b.WriteString("\n## Request counters\n\n")
	for _, arm := range []string{ArmLoopback, ArmWsfs} {
		if slices.Contains(r.Arms, arm) {
			fmt.Fprintf(&b, "- %s: %s\n", arm, r.FuseCounters[arm])
		}
	}
	return b.String()
}

// bench renders bench.txt in the Go benchmark format (benchstat compares
// two such files: one result per step and arm, and the total).
func (t *toolsRun) bench(rows []toolsSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "goos: linux\ngoarch: %s\npkg: wsfs/bench/tools\n", runtime.GOARCH)
	for _, row := range rows {
		for _, arm := range t.res.Arms {
			r := row.By[arm]
			if r == nil || r.Error != "" {
				continue
			}
			fmt.Fprintf(&b, "BenchmarkTools/scale=%s/step=%s/arm=%s\t1\t%d ns/op\t%.2f host-cpu-s/op", t.res.Scale, row.Step, arm, r.WallNs, r.HostCPUs)
			if r.DaemonCPUs != nil {
				fmt.Fprintf(&b, "\t%.2f daemon-cpu-s/op\t%d fuse-req/op", *r.DaemonCPUs, r.FuseOpsTotal)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
