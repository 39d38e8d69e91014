package stress

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
)

// Arm names: how a workspace's tree is served.
const (
	ArmNative      = "native"       // a plain directory, buffered writes
	ArmNativeFsync = "native-fsync" // a plain directory, fsync after every file: the durability-matched control
	ArmLoopback    = "loopback"     // go-fuse's loopback over a plain directory: the FUSE floor
	ArmWsfs        = "wsfs"         // wsfs mount, default (per-entry) drain
	ArmWsfsSyncfs  = "wsfs-syncfs"  // wsfs mount, legacy syncfs drain
)

// AllArms lists every arm in the order a run executes them.
var AllArms = []string{ArmNative, ArmNativeFsync, ArmLoopback, ArmWsfs, ArmWsfsSyncfs}

// Layouts accepted by --layout.
//
// shared: everything (trees, wsfs state and pool, agent state, neighbours) on
// the filesystem holding --out.
//
// dedicated: every run builds the layout of `wsfs layout create` under its
// own host directory: one loop-backed ext4 filesystem for state and one for
// the pool, direct I/O on. wsfs arms use it as wsfs does; the native and
// loopback arms keep their trees on the pool filesystem and their agent
// state on the state filesystem, so every arm is measured on the same
// storage. Noisy neighbours stay on the filesystem of --out (they are the
// unrelated tenants the layout shields from), and the host sampler keeps
// watching the device under --out, which backs the loop images. The layout
// is destroyed after the run.
const (
	LayoutShared    = "shared"
	LayoutDedicated = "dedicated"
)

// Timeouts of the harness's own waits.
const (
	readyTimeout   = 60 * time.Second // daemon mounted / agent prepared
	stopGrace      = 120 * time.Second
	neighbourWarm  = 3 * time.Second // head start so neighbours have dirtied gigabytes
	agentKillGrace = 10 * time.Second
)

// Options configure a stress run.
type Options struct {
	Exe            string // the wsfs binary; children are started from it
	Profile        Profile
	Workspaces     []int    // workspace counts, e.g. 1,3
	Arms           []string // subset of AllArms
	Neighbours     []int    // neighbour counts, e.g. 0 or 0,1
	NeighbourBytes int64    // bytes each neighbour keeps rewriting
	Repeat         int
	Seed           int64
	Out            string // output directory; data lives under Out/runs and is removed after each run
	Layout         string // LayoutShared or LayoutDedicated (needs root and `wsfs layout`)
	Keep           bool   // keep each run's data
	// Unavailable maps an arm to why it cannot run in this binary or on
	// this host (for example the wsfs mount command is not built in). Such
	// arms are reported as not run and never produce numbers.
	Unavailable map[string]string
	// Command is the command line, recorded in the report.
	Command string
	Stdout  io.Writer // summary table
	Stderr  io.Writer // progress
	// ProcRoot and SysRoot default to /proc and /sys.
	ProcRoot, SysRoot string
	// FUSETransport is the wsfs arms' `wsfs mount --fuse-transport`
	// ("" or "dev": /dev/fuse; "uring": FUSE over io_uring).
	FUSETransport string
}

// RunResult is one arm at one workspace count, neighbour count and repeat.
type RunResult struct {
	Arm         string         `json:"arm"`
	Workspaces  int            `json:"workspaces"`
	Neighbours  int            `json:"neighbours"`
	Repeat      int            `json:"repeat"`
	Agents      []*AgentResult `json:"agents"`
	Host        HostSummary    `json:"host"`
	HostSamples []HostSample   `json:"host_samples"`
	// Replicated is true when every workspace's agent state database had a
	// replication sidecar (the wsfs arms). ReplicaVerified is true only
	// when, after the run, every replica was restored and its progress
	// table equalled the original row for row. ReplicaSyncNs is each
	// workspace's final sync-and-wait latency, in workspace order.
	Replicated      bool     `json:"replicated"`
	ReplicaVerified bool     `json:"replica_verified"`
	ReplicaRows     []int    `json:"replica_rows,omitempty"` // progress rows verified per workspace
	ReplicaSyncNs   []int64  `json:"replica_sync_ns,omitempty"`
	Errors          []string `json:"errors,omitempty"`
}

// Failed reports whether anything in the run went wrong.
func (r *RunResult) Failed() bool {
	if len(r.Errors) > 0 || len(r.Agents) != r.Workspaces {
		return true
	}
	if r.Replicated && !r.ReplicaVerified {
		return true
	}
	for _, a := range r.Agents {
		if a == nil || !a.Verified {
			return true
		}
	}
	return false
}

// NotRun records an arm that could not run, and why.
type NotRun struct {
	Arm    string `json:"arm"`
	Reason string `json:"reason"`
}

// Results is everything one invocation produced; results.json holds it.
type Results struct {
	Command    string       `json:"command"`
	Profile    string       `json:"profile"`
	Files      int          `json:"files_per_workspace"`
	Bytes      int64        `json:"bytes_per_workspace"`
	Seed       int64        `json:"seed"`
	Layout     string       `json:"layout"`
	Device     string       `json:"device,omitempty"`
	Host       HostInfo     `json:"host_info"`
	Started    time.Time    `json:"started"`
	Summary    []SummaryRow `json:"summary"`
	Targets    []Target     `json:"targets"`
	NotRun     []NotRun     `json:"not_run,omitempty"`
	Runs       []*RunResult `json:"runs"`
	DeviceNote string       `json:"device_note,omitempty"`
}

// HostInfo describes the machine.
type HostInfo struct {
	Kernel string `json:"kernel"`
	// Load1AtStart is the one-minute load average before the first run; a
	// value above CPUs means other work was running and the figures are
	// noisy (the report says so).
	Load1AtStart float64 `json:"load1_at_start"`
	CPUs         int     `json:"cpus"`
	MemoryMB     int64   `json:"memory_mb"`
	Root         bool    `json:"root"`
}

// Run executes every arm × workspace count × neighbour count × repeat, writes
// the outputs into opts.Out, and returns the results. The error is non-nil
// when any run failed (verification, a daemon error) or any arm could not
// run; the outputs are written in every case that got that far.
func Run(ctx context.Context, opts Options) (*Results, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	switch opts.Layout {
	case LayoutShared:
	case LayoutDedicated:
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("--layout dedicated builds loop-backed filesystems and needs root")
		}
	default:
		return nil, fmt.Errorf("--layout %q: allowed values are %s, %s", opts.Layout, LayoutShared, LayoutDedicated)
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	set := GenerateFiles(opts.Profile, opts.Seed, 0)
	res := &Results{
		Command: opts.Command, Profile: opts.Profile.Name, Files: len(set.Files), Bytes: set.TotalBytes(),
		Seed: opts.Seed, Layout: opts.Layout, Host: hostInfo(), Started: time.Now().UTC(),
	}
	dev, err := BlockDevice(opts.SysRoot, opts.Out)
	if err != nil {
		res.DeviceNote = err.Error()
	}
	res.Device = dev

	var arms []string
	for _, a := range opts.Arms {
		if why, ok := opts.Unavailable[a]; ok {
			res.NotRun = append(res.NotRun, NotRun{Arm: a, Reason: why})
			continue
		}
		arms = append(arms, a)
	}
	disp := newDisplay(opts.Stderr)
	for _, nr := range res.NotRun {
		disp.logf("arm %s not run: %s", nr.Arm, nr.Reason)
	}
	total := opts.Repeat * len(opts.Neighbours) * len(opts.Workspaces) * len(arms)
	i := 0
	for rep := 1; rep <= opts.Repeat; rep++ {
		for _, nb := range opts.Neighbours {
			for _, n := range opts.Workspaces {
				// Each repeat rotates the arm order, so no arm always runs
				// first (on a cold host) or right after the same neighbour.
				for k := range arms {
					arm := arms[(k+rep-1)%len(arms)]
					if ctx.Err() != nil {
						break
					}
					i++
					label := fmt.Sprintf("[%d/%d] %s ws=%d nb=%d", i, total, arm, n, nb)
					r := runOne(ctx, opts, disp, label, i, arm, n, nb, rep, dev)
					res.Runs = append(res.Runs, r)
					disp.runEnd(label, runLine(r))
				}
			}
		}
	}
	res.Summary = Summarize(res.Runs)
	res.Targets = EvaluateTargets(res.Summary)
	if err := writeOutputs(opts, res); err != nil {
		return res, err
	}
	var errs []error
	if ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("interrupted: %w", ctx.Err()))
	}
	for _, r := range res.Runs {
		for _, e := range r.Errors {
			errs = append(errs, fmt.Errorf("%s ws=%d nb=%d repeat %d: %s", r.Arm, r.Workspaces, r.Neighbours, r.Repeat, e))
		}
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	if len(res.NotRun) > 0 {
		var names []string
		for _, nr := range res.NotRun {
			names = append(names, nr.Arm+" ("+nr.Reason+")")
		}
		return res, &NotRunError{Arms: names}
	}
	return res, nil
}

// NotRunError reports arms that were requested but could not run; the other
// arms' results are complete.
type NotRunError struct{ Arms []string }

func (e *NotRunError) Error() string {
	return "arms not run: " + strings.Join(e.Arms, "; ")
}

func runLine(r *RunResult) string {
	if len(r.Errors) > 0 {
		return "FAILED: " + strings.Join(r.Errors, "; ")
	}
	var walls []float64
	for _, a := range r.Agents {
		walls = append(walls, float64(a.WallNs)/1e9)
	}
	mx := 0.0
	for _, w := range walls {
		mx = max(mx, w)
	}
	return fmt.Sprintf("median %.2fs max %.2fs, peak dirty %.0f MB, verified", Median(walls), mx, r.Host.PeakDirtyMB)
}

func hostInfo() HostInfo {
	h := HostInfo{Root: os.Geteuid() == 0}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				h.MemoryMB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		if c, err := parseProcStat(b); err == nil {
			h.CPUs = c.CPUs
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.Load1AtStart, _ = parseLoadavg(b)
	}
	return h
}

// workspaceSetup is where one workspace's agent works, and what serves it.
type workspaceSetup struct {
	tree, state string
	daemon      *proc
	mnt         string // "" for native arms
}

// servers are the long-running children of one run besides the agents, as
// far as setupArm got; runOne stops them all.
type servers struct {
	daemons  []*proc
	sidecars []*sidecarFor
	mounts   []string
}

// stopDaemons stops every daemon (each commits and unmounts on SIGTERM and
// must exit 0), then detaches any mount left behind. It returns what went
// wrong, one message each.
func (s *servers) stopDaemons() []string {
	var errs []string
	for _, d := range s.daemons {
		if err := d.stop(stopGrace); err != nil {
			errs = append(errs, fmt.Sprintf("daemon %v", err))
		}
	}
	for _, m := range s.mounts {
		if isMounted(m) {
			errs = append(errs, fmt.Sprintf("mount %s still present after its daemon exited; detaching it", m))
			if err := forceUnmount(m); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	s.daemons, s.mounts = nil, nil
	return errs
}

// runOne runs one arm at n workspaces with nb neighbours, as run number
// idx of the invocation. Errors are recorded in the result; the data
// directory is always cleaned up (unless --keep) and every mount it made is
// gone when it returns.
func runOne(ctx context.Context, opts Options, disp display, label string, idx int, arm string, n, nb, rep int, dev string) *RunResult {
	ru := &run{
		opts: opts, arm: arm, n: n,
		r: &RunResult{Arm: arm, Workspaces: n, Neighbours: nb, Repeat: rep},
		// The data directory is named by the run's number (the
		// [idx/total] of the progress display), not by name, to keep
		// paths short (the sidecars' unix sockets live there when their
		// paths fit in a socket address). The logs keep the descriptive
		// name.
		runDir: runDataDir(opts.Out, idx),
		logDir: filepath.Join(opts.Out, "logs", fmt.Sprintf("r%d-%s-ws%d-nb%d", rep, arm, n, nb)),
	}
	ru.home = filepath.Join(ru.runDir, "home")
	if !ru.makeDirs() {
		return ru.r
	}
	defer ru.teardown()

	// 1. The servers (and, in the wsfs arms, the replication sidecars).
	setups, err := setupArm(opts, arm, n, ru.runDir, ru.home, ru.logDir, armConfig{}, &ru.srv)
	if err != nil {
		ru.fail("set up %s: %v", arm, err)
		return ru.r
	}
	// 2. Noisy neighbours, with a head start to fill the page cache.
	defer ru.stopNeighbours()
	if !ru.startNeighbours(ctx, nb) {
		return ru.r
	}
	// 3. The agents, released together, with the host sampled meanwhile.
	disp.runStart(label, n)
	ready := ru.runAgents(ctx, setups, disp, dev)
	// 4. The replicas, synced under the run's conditions (neighbours still
	// writing), then verified with the sidecars stopped.
	replicaErrs := len(ru.r.Errors)
	if ready {
		ru.syncReplicas(ctx)
	}
	ru.stopNeighbours()
	if ready && ru.r.Replicated {
		ru.verifyReplicas(ctx, replicaErrs)
	}
	// Daemons that died during the run are a failure even if the agents
	// finished (their mounts would have returned errors anyway).
	for _, d := range ru.srv.daemons {
		if d.exited() {
			ru.fail("daemon exited during the run: %v", d.exitErr())
		}
	}
	return ru.r
}

// run is the state of one runOne: its directories, the processes it
// started (each stopped by teardown or earlier), and the result it fills.
type run struct {
	opts                 Options
	arm                  string
	n                    int
	r                    *RunResult
	runDir, logDir, home string
	srv                  servers
	neighbours           []*proc
}

// fail records an error of the run.
func (ru *run) fail(format string, args ...any) {
	ru.r.Errors = append(ru.r.Errors, fmt.Sprintf(format, args...))
}

// makeDirs creates fresh run and log directories. Fresh every run: on ext4
// without a journal, creates after mass deletes are slower, so reusing a
// directory would skew the next arm.
func (ru *run) makeDirs() bool {
	if err := os.RemoveAll(ru.runDir); err != nil {
		ru.fail("remove stale run directory: %v", err)
		return false
	}
	for _, d := range []string{ru.runDir, ru.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			ru.fail("%v", err)
			return false
		}
	}
	return true
}

// teardown stops what the run started, in the order `wsfs up` uses, and
// removes the run's data: sidecars (after a final sync; each must exit 0),
// then daemons (each commits and unmounts on SIGTERM and must exit 0), then
// any mount left behind, the dedicated layout, and the data directory.
func (ru *run) teardown() {
	ru.stopSidecars()
	for _, e := range ru.srv.stopDaemons() {
		ru.fail("%s", e)
	}
	if ru.opts.Layout == LayoutDedicated {
		// Destroy unmounts and removes the images; it refuses while a
		// daemon holds a workspace, which the stops above prevent.
		if _, err := os.Stat(filepath.Join(ru.home, "layout", "layout.json")); err == nil {
			if err := runTool(ru.opts.Exe, filepath.Join(ru.logDir, "setup.log"), "layout", "destroy", "--home", ru.home); err != nil {
				ru.fail("%v", err)
			}
		}
	}
	if !ru.opts.Keep {
		if err := os.RemoveAll(ru.runDir); err != nil {
			ru.fail("remove run data: %v", err)
		}
		dropCaches()
	}
}

// stopSidecars stops every sidecar still running; each must exit 0.
func (ru *run) stopSidecars() {
	for _, s := range ru.srv.sidecars {
		if err := s.p.stop(sidecarStopGrace); err != nil {
			ru.fail("sidecar %v", err)
		}
	}
	ru.srv.sidecars = nil
}

// startNeighbours starts nb noisy neighbours and gives them a head start.
// It reports whether the run can go on.
func (ru *run) startNeighbours(ctx context.Context, nb int) bool {
	for j := range nb {
		p, err := startProc(fmt.Sprintf("neighbour %d", j), ru.opts.Exe,
			[]string{"agent", "neighbour", "--dir", filepath.Join(ru.runDir, fmt.Sprintf("neighbour-%d", j)),
				"--bytes", strconv.FormatInt(ru.opts.NeighbourBytes, 10)},
			nil, filepath.Join(ru.logDir, fmt.Sprintf("neighbour-%d.log", j)), nil)
		if err != nil {
			ru.fail("%v", err)
			return false
		}
		ru.neighbours = append(ru.neighbours, p)
	}
	if nb > 0 {
		select {
		case <-time.After(neighbourWarm):
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// stopNeighbours stops every neighbour still running.
func (ru *run) stopNeighbours() {
	for _, p := range ru.neighbours {
		if err := p.stop(stopGrace); err != nil {
			ru.fail("neighbour %v", err)
		}
	}
	ru.neighbours = nil
}

// runAgents starts one agent per workspace, waits until every one is
// prepared, releases them together with the host sampler running, and
// collects their results. It reports whether the agents were released (an
// unready run's agents are stopped and their errors not counted twice).
func (ru *run) runAgents(ctx context.Context, setups []workspaceSetup, disp display, dev string) bool {
	every := DefaultFsyncEvery
	if ru.arm == ArmNativeFsync {
		every = 1
	}
	agents := make([]*agentProc, ru.n)
	for i, s := range setups {
		a, err := startAgent(ctx, ru.opts, i, every, s, ru.logDir, disp)
		if err != nil {
			ru.fail("workspace %d: %v", i, err)
			break
		}
		agents[i] = a
	}
	ready := len(ru.r.Errors) == 0
	for i, a := range agents {
		if a != nil && ready {
			if err := a.waitReady(readyTimeout); err != nil {
				ru.fail("workspace %d: %v", i, err)
				ready = false
			}
		}
	}
	var sampler *Sampler
	if ready {
		var err error
		if sampler, err = StartSampler(ru.opts.ProcRoot, dev); err != nil {
			ru.fail("%v", err)
			ready = false
		}
	}
	for _, a := range agents {
		if a != nil {
			a.release(ready) // an unready run closes stdin too, and the agents are killed below
			if !ready {
				a.p.signal(syscall.SIGTERM)
			}
		}
	}
	for i, a := range agents {
		if a == nil {
			continue
		}
		<-a.p.done
		res, err := a.result()
		if res != nil {
			ru.r.Agents = append(ru.r.Agents, res)
		}
		if err != nil && ready {
			ru.fail("workspace %d: %v", i, err)
		}
	}
	if sampler != nil {
		samples, sum, err := sampler.Stop()
		ru.r.HostSamples, ru.r.Host = samples, sum
		if err != nil {
			ru.fail("host sampler: %v", err)
		}
	}
	return ready
}

// syncReplicas sync-and-waits every sidecar's replica and records how long
// each took.
func (ru *run) syncReplicas(ctx context.Context) {
	if len(ru.srv.sidecars) == 0 {
		return
	}
	ru.r.Replicated = len(ru.srv.sidecars) == ru.n
	for _, s := range ru.srv.sidecars {
		d, err := s.syncWait(ctx)
		if err != nil {
			ru.fail("%v", err)
			continue
		}
		ru.r.ReplicaSyncNs = append(ru.r.ReplicaSyncNs, int64(d))
	}
}

// verifyReplicas stops the sidecars and restores and checks every replica
// row for row; the run's replicas are verified if neither the sync nor the
// checks added an error to the errors counted before the sync.
func (ru *run) verifyReplicas(ctx context.Context, before int) {
	sidecars := ru.srv.sidecars
	ru.stopSidecars()
	for _, s := range sidecars {
		rows, err := s.verify(ctx, filepath.Join(ru.runDir, "replica-check", s.name+".db"))
		ru.r.ReplicaRows = append(ru.r.ReplicaRows, rows)
		if err != nil {
			ru.fail("replica NOT verified: %v", err)
		}
	}
	ru.r.ReplicaVerified = len(ru.r.Errors) == before
}

// runDataDir is the data directory of run number idx.
func runDataDir(out string, idx int) string {
	return filepath.Join(out, "runs", strconv.Itoa(idx))
}

// transportArgs are the wsfs daemon flags for Options.FUSETransport.
func transportArgs(transport string) []string {
	if transport == "" {
		return nil
	}
	return []string{"--fuse-transport", transport}
}

// armConfig is what a caller of setupArm changes in an arm's standard
// setup (the stress harness uses the zero value; the tools benchmark asks
// for metrics and leaves out the sidecars).
type armConfig struct {
	// daemonArgs are extra flags for every daemon of a FUSE arm, placed
	// before its positional arguments (e.g. --metrics 127.0.0.1:0).
	daemonArgs []string
	// noSidecars leaves out the wsfs arms' replication sidecars.
	noSidecars bool
}

// setupArm prepares the trees (and daemons, for the FUSE arms, and the
// replication sidecars, for the wsfs arms unless cfg says otherwise) of n
// workspaces. It records every process and mount it started in srv, also on
// error, so the caller can stop them.
func setupArm(opts Options, arm string, n int, runDir, home, logDir string, cfg armConfig, srv *servers) ([]workspaceSetup, error) {
	var setups []workspaceSetup
	// data(i) holds workspace i's tree (native) or loopback source; state(i)
	// its agent state database, outside the measured tree.
	data := func(i int) string { return filepath.Join(runDir, fmt.Sprintf("ws-%d", i)) }
	state := func(i int) string { return filepath.Join(runDir, fmt.Sprintf("ws-%d", i), "agent", "state.db") }
	if opts.Layout == LayoutDedicated {
		if err := createLayout(opts, n, home, logDir); err != nil {
			return nil, err
		}
		data = func(i int) string { return filepath.Join(home, "pool", arm, fmt.Sprintf("ws-%d", i)) }
		state = func(i int) string {
			return filepath.Join(home, "state", "workspaces", fmt.Sprintf("ws-%d", i), "agent", "state.db")
		}
	}
	switch arm {
	case ArmNative, ArmNativeFsync:
		for i := range n {
			tree := filepath.Join(data(i), "tree")
			if err := os.MkdirAll(tree, 0o755); err != nil {
				return nil, err
			}
			setups = append(setups, workspaceSetup{tree: tree, state: state(i)})
		}
	case ArmLoopback:
		for i := range n {
			src, mnt := filepath.Join(data(i), "src"), filepath.Join(runDir, "mnt", fmt.Sprintf("ws-%d", i))
			for _, d := range []string{src, mnt} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return nil, err
				}
			}
			readyFile := filepath.Join(runDir, fmt.Sprintf("ws-%d.ready", i))
			p, err := startProc(fmt.Sprintf("loopback daemon %d", i), opts.Exe,
				slices.Concat([]string{"loopback", "--ready-file", readyFile}, cfg.daemonArgs, []string{src, mnt}), nil,
				filepath.Join(logDir, fmt.Sprintf("daemon-%d.log", i)), nil)
			if err != nil {
				return nil, err
			}
			srv.daemons, srv.mounts = append(srv.daemons, p), append(srv.mounts, mnt)
			if err := waitReady(p, readyFile, readyTimeout); err != nil {
				return nil, err
			}
			setups = append(setups, workspaceSetup{tree: mnt, state: state(i), daemon: p, mnt: mnt})
		}
	case ArmWsfs, ArmWsfsSyncfs:
		drain := "entry"
		if arm == ArmWsfsSyncfs {
			drain = "syncfs"
		}
		if opts.Layout != LayoutDedicated { // layout create has made the host
			if err := runTool(opts.Exe, filepath.Join(logDir, "setup.log"), "init", "--home", home); err != nil {
				return nil, err
			}
		}
		for i := range n {
			name := fmt.Sprintf("ws-%d", i)
			if err := runTool(opts.Exe, filepath.Join(logDir, "setup.log"), "create", "--home", home, name); err != nil {
				return nil, err
			}
			mnt := filepath.Join(runDir, "mnt", name)
			if err := os.MkdirAll(mnt, 0o755); err != nil {
				return nil, err
			}
			readyFile := filepath.Join(runDir, name+".ready")
			p, err := startProc(fmt.Sprintf("wsfs daemon %s", name), opts.Exe,
				slices.Concat([]string{"mount", "--home", home, "--drain", drain, "--ready-file", readyFile}, cfg.daemonArgs, transportArgs(opts.FUSETransport), []string{name, mnt}), nil,
				filepath.Join(logDir, fmt.Sprintf("daemon-%d.log", i)), nil)
			if err != nil {
				return nil, err
			}
			srv.daemons, srv.mounts = append(srv.daemons, p), append(srv.mounts, mnt)
			if err := waitReady(p, readyFile, readyTimeout); err != nil {
				return nil, err
			}
			if cfg.noSidecars {
				setups = append(setups, workspaceSetup{tree: mnt, state: state(i), daemon: p, mnt: mnt})
				continue
			}
			// The sidecar creates the agent database (agentstate.Ensure)
			// and replicates it from before the agent's first row.
			h, err := host.Open(home)
			if err != nil {
				return nil, err
			}
			paths := agentstate.PathsFor(h, name)
			replica, err := agentstate.ReplicaURL(h, name, "")
			if err != nil {
				return nil, err
			}
			sc, err := startSidecar(opts.Exe, home, name, paths, replica, filepath.Join(logDir, fmt.Sprintf("sidecar-%d.log", i)))
			if sc != nil {
				srv.sidecars = append(srv.sidecars, sc)
			}
			if err != nil {
				return nil, err
			}
			setups = append(setups, workspaceSetup{tree: mnt, state: paths.DB, daemon: p, mnt: mnt})
		}
	default:
		return nil, fmt.Errorf("unknown arm %q", arm)
	}
	return setups, nil
}

// createLayout builds the dedicated layout for one run under home. The
// images are sparse, so generous sizes cost nothing: the pool holds three
// times the run's data (overwrites leave garbage until GC), the state 4 GiB.
func createLayout(opts Options, n int, home, logDir string) error {
	pool := max(int64(16)<<30, 3*int64(n)*opts.Profile.Bytes)
	return runTool(opts.Exe, filepath.Join(logDir, "setup.log"), "layout", "create", "--home", home,
		"--state-size", "4G", "--pool-size", fmt.Sprintf("%dM", pool>>20))
}

// runTool runs a short wsfs command (init, create) to completion.
func runTool(exe, logPath string, args ...string) error {
	cmd := exec.Command(exe, args...)
	out, err := cmd.CombinedOutput()
	if f, ferr := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); ferr == nil {
		fmt.Fprintf(f, "$ wsfs %s\n%s", strings.Join(args, " "), out)
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("wsfs %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// agentProc is a running stub agent.
type agentProc struct {
	p          *proc
	stdin      io.WriteCloser
	resultPath string
	readyCh    chan struct{}
	readyOnce  sync.Once
	scanDone   chan struct{}
}

func startAgent(ctx context.Context, opts Options, i, fsyncEvery int, s workspaceSetup, logDir string, disp display) (*agentProc, error) {
	a := &agentProc{
		resultPath: filepath.Join(logDir, fmt.Sprintf("agent-%d.json", i)),
		readyCh:    make(chan struct{}),
		scanDone:   make(chan struct{}),
	}
	// The agent's stdout is a pipe the harness owns (not cmd.StdoutPipe),
	// so reading it to EOF does not race with the process being reaped.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	args := []string{"agent", "--root", s.tree, "--profile", opts.Profile.Name,
		"--seed", strconv.FormatInt(opts.Seed, 10), "--workspace", strconv.Itoa(i),
		"--fsync-every", strconv.Itoa(fsyncEvery), "--result", a.resultPath}
	p, err := startProc(fmt.Sprintf("agent %d", i), opts.Exe, args,
		[]string{AgentEnvState + "=" + s.state},
		filepath.Join(logDir, fmt.Sprintf("agent-%d.log", i)),
		func(cmd *exec.Cmd) error {
			var err error
			if a.stdin, err = cmd.StdinPipe(); err != nil {
				return err
			}
			cmd.Stdout = pw
			return nil
		})
	pw.Close() // the child holds its own copy
	if err != nil {
		pr.Close()
		return nil, err
	}
	a.p = p
	go func() {
		defer close(a.scanDone)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			m, ok := parseAgentLine(sc.Text())
			if !ok {
				continue
			}
			switch m.kind {
			case msgReady:
				a.readyOnce.Do(func() { close(a.readyCh) })
			case msgProgress:
				disp.update(i, m.phase, m.done, m.total)
			}
		}
	}()
	// Stop the agent if the harness is interrupted; kill it if it does not
	// stop (an agent blocked on a hung FUSE mount ignores SIGTERM until its
	// request returns, but SIGKILL aborts the request).
	go func() {
		select {
		case <-ctx.Done():
			p.signal(syscall.SIGTERM)
		case <-p.done:
			return
		}
		select {
		case <-time.After(agentKillGrace):
			p.signal(syscall.SIGKILL)
		case <-p.done:
		}
	}()
	return a, nil
}

func (a *agentProc) waitReady(timeout time.Duration) error {
	select {
	case <-a.readyCh:
		return nil
	case <-a.p.done:
		return fmt.Errorf("agent exited before it was ready: %v%s", a.p.err, a.p.logTail())
	case <-time.After(timeout):
		return fmt.Errorf("agent not ready after %v%s", timeout, a.p.logTail())
	}
}

// release starts the agent (start=true) or lets it see EOF before it is
// stopped.
func (a *agentProc) release(start bool) {
	if start {
		io.WriteString(a.stdin, "go\n")
	}
	a.stdin.Close()
}

// result reads the agent's result file after it exited.
func (a *agentProc) result() (*AgentResult, error) {
	<-a.scanDone
	b, err := os.ReadFile(a.resultPath)
	if err != nil {
		if a.p.err != nil {
			return nil, a.p.exitErr()
		}
		return nil, fmt.Errorf("agent wrote no result: %w", err)
	}
	var res AgentResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("agent result %s: %w", a.resultPath, err)
	}
	if res.Error != "" {
		return &res, errors.New(res.Error)
	}
	if a.p.err != nil {
		return &res, a.p.exitErr()
	}
	if !res.Verified {
		return &res, errors.New("agent reported an unverified run without an error")
	}
	return &res, nil
}

// dropCaches empties the page cache between runs when running as root, so
// no run reads what the previous one left cached. The previous run's data
// has been deleted by then, so this does not need (and does not call) sync:
// the pages of deleted files are discarded, not written.
func dropCaches() {
	if os.Geteuid() != 0 {
		return
	}
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("1\n"), 0o200)
}
