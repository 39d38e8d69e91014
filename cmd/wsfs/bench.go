package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"wsfs/internal/stress"
)

func init() {
	register(command{
		name:    "bench",
		summary: "real-tool benchmark: tar, find, git, go build, SQLite, rm on wsfs, native and loopback",
		about:   "Benchmarks of real tools on wsfs against a plain directory and a loopback FUSE mount.",
		subcommands: []command{
			{name: "tools", summary: "tar, find, du, stat, git, go build, small files, SQLite, rm: per step times, ratios, CPU and FUSE requests", run: runBenchTools},
		},
	})
}

func runBenchTools(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "bench tools", "", `
Runs the steps an agent's real tools take, on every arm in one invocation:
  native    a plain directory
  loopback  go-fuse pass-through mount (the FUSE floor, no durability)
  wsfs      wsfs mount, default drain
Steps, each timed: unpack a source tree (tar -xf of --tree, tarred once
outside the timing, plus a generated Go module), find, du -s, a stat of
every path, git init / add -A / commit, git status cold (after sync and
drop_caches; needs root) and warm, git gc, go build -p 2 of the module
with a fresh GOCACHE in the workspace, a test-suite-like run creating,
reading back and removing small files, SQLite in WAL mode
(synchronous=FULL: one writer of small transactions, concurrent readers),
and rm -rf of everything. Each step runs on every arm before the next
(arm order rotating), starting after the daemon has committed what is
pending and sync(2). Per step it reports wall time, wsfs/native and
wsfs/loopback ratios, CPU seconds of the daemon (/proc/PID/stat) and of
the whole machine (/proc/stat), and the FUSE requests each daemon served,
by opcode (both daemons run with --metrics). Writes results.json,
report.md and bench.txt (Go benchmark format, for benchstat) into --out;
OUT/logs keeps each daemon's log and each step's output.
Needs tar, find, du, git, go and rm in PATH; the FUSE arms need root
and /dev/fuse. Exit status 1 if a step failed, 3 if an arm could not run.`)
	goroot := ""
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		goroot = strings.TrimSpace(string(out))
	}
	tree := fs.String("tree", filepath.Join(goroot, "src"), "source tree to unpack: by default Go's own src, from go env GOROOT")
	scale := fs.String("scale", "small", "how much of the tree: tiny (~300 files), small (~3,000), full (all); also sizes the Go module, small-file and SQLite steps")
	arms := fs.String("arms", strings.Join(stress.ToolArms, ","), "comma-separated arms: "+strings.Join(stress.ToolArms, ", "))
	readers := fs.Int("sqlite-readers", 2, "concurrent SQLite reader connections")
	smallFiles := fs.Int("small-files", 0, "files of the smallfiles step (0: the scale's)")
	sqliteTx := fs.Int("sqlite-tx", 0, "transactions of the sqlite step (0: the scale's)")
	stepTimeout := fs.Duration("step-timeout", 20*time.Minute, "bound of each step on each arm")
	out := fs.String("out", "bench-out", "output directory (data is written and removed under OUT/runs)")
	keep := fs.Bool("keep", false, "keep the run's data instead of deleting it")
	transport := fs.String("fuse-transport", "dev", "the wsfs arm's `wsfs mount --fuse-transport`: dev or uring")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	if *transport != "dev" && *transport != "uring" {
		return usageError{fmt.Sprintf("--fuse-transport: want dev or uring, got %q", *transport)}
	}
	sc, ok := stress.ToolScales[*scale]
	if !ok {
		return usageError{fmt.Sprintf("--scale %q: allowed values are %s", *scale, strings.Join(stress.ToolScaleNames, ", "))}
	}
	if *smallFiles < 0 || *sqliteTx < 0 || *readers < 0 || *stepTimeout <= 0 {
		return usageError{"--small-files, --sqlite-tx and --sqlite-readers must not be negative, --step-timeout must be positive"}
	}
	if *smallFiles > 0 {
		sc.SmallFiles = *smallFiles
	}
	if *sqliteTx > 0 {
		sc.SQLiteTx = *sqliteTx
	}
	armList, err := parseToolArms(*arms)
	if err != nil {
		return err
	}
	if st, err := os.Stat(*tree); err != nil || !st.IsDir() {
		return usageError{fmt.Sprintf("--tree %q is not a directory (%v)", *tree, err)}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the wsfs binary to start daemons and helpers from: %w", err)
	}
	for _, tool := range []string{"tar", "find", "du", "git", "go", "rm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return preconditionError{fmt.Errorf("the benchmark runs %s, which is not in PATH", tool)}
		}
	}
	un := unavailableArms()
	opts := stress.ToolsOptions{
		Exe: exe, Tree: *tree, Scale: sc, Arms: armList, Unavailable: un, FUSETransport: *transport,
		SQLiteReaders: *readers, StepTimeout: *stepTimeout, Out: *out, Keep: *keep,
		Command: "wsfs bench tools " + strings.Join(args, " "),
		Stdout:  g.stdout, Stderr: g.stderr,
	}
	_, err = stress.RunTools(ctx, opts)
	var nr *stress.NotRunError
	if errors.As(err, &nr) {
		return preconditionError{err}
	}
	return err
}

// parseToolArms parses --arms of bench tools, keeping the canonical order.
func parseToolArms(s string) ([]string, error) {
	var out []string
	for _, a := range stress.ToolArms {
		for _, f := range strings.Split(s, ",") {
			if strings.TrimSpace(f) == a {
				out = append(out, a)
				break
			}
		}
	}
	for _, f := range strings.Split(s, ",") {
		found := false
		for _, a := range stress.ToolArms {
			found = found || strings.TrimSpace(f) == a
		}
		if !found {
			return nil, usageError{fmt.Sprintf("--arms: unknown arm %q (allowed: %s)", strings.TrimSpace(f), strings.Join(stress.ToolArms, ", "))}
		}
	}
	return out, nil
}
