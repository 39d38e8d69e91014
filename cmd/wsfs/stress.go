package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"wsfs/internal/stress"
)

func init() {
	register(command{
		name:    "stress",
		summary: "run the stress harness: wsfs against native and FUSE floors at N workspaces",
		run:     runStress,
	})
}

func runStress(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "stress", "", `
Runs the stub-agent workload (write, read back and verify, overwrite 20 %,
rename 10 %, delete 30 %, walk and compare) in N workspaces at once, each with
its own agent process and, for the FUSE arms, its own daemon process, on the
filesystem holding --out. Arms:
  native        plain directory, buffered writes
  native-fsync  plain directory, fsync after every file (durability-matched control)
  loopback      go-fuse pass-through mount (the FUSE floor, no durability)
  wsfs          wsfs mount, default per-entry drain
  wsfs-syncfs   wsfs mount, legacy syncfs drain
Every arm fsyncs every 50th file. Writes results.json, report.md, bench.txt,
plot.png and fsync_p99.png into --out (OUT/logs keeps each daemon's and
sidecar's log and each agent's result with its raw latency samples), and
removes each run's data after it.
Each stub agent records its progress in its SQLite agent state database. In
the wsfs arms a replication sidecar ('wsfs sidecar', Litestream) runs per
workspace; after the run the harness syncs it, restores the replica and
compares every row with the original (replica_verified in results.json).
Exit status 1 if any run failed verification, 3 if a requested arm could not
run (the others' results are still written).`)
	profile := fs.String("profile", "small", "workload per workspace: "+strings.Join(stress.ProfileNames, ", ")+" (seed = 8,000 files, ~600 MB)")
	workspaces := fs.String("workspaces", "1,3", "comma-separated workspace counts")
	arms := fs.String("arms", strings.Join(stress.AllArms, ","), "comma-separated arms: "+strings.Join(stress.AllArms, ", "))
	repeat := fs.Int("repeat", 1, "runs of every arm and workspace count")
	seed := fs.Int64("seed", 1, "workload seed")
	out := fs.String("out", "stress-out", "output directory (data is written and removed under OUT/runs)")
	layout := fs.String("layout", stress.LayoutShared, "storage layout: shared (all on the filesystem of --out) or dedicated (a wsfs layout of loop-backed state and pool filesystems per run; needs root)")
	neighbours := fs.String("neighbours", "0", "comma-separated counts of noisy-neighbour processes writing buffered data on the same filesystem, e.g. 0,1")
	nbBytes := fs.String("neighbour-bytes", "2GiB", "bytes each neighbour keeps rewriting (suffix KiB, MiB, GiB)")
	keep := fs.Bool("keep", false, "keep each run's data instead of deleting it")
	transport := fs.String("fuse-transport", "dev", "the wsfs arms' `wsfs mount --fuse-transport`: dev or uring")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	p, err := stress.ParseProfile(*profile)
	if err != nil {
		return usageError{"--profile: " + err.Error()}
	}
	ws, err := parseCounts("--workspaces", *workspaces, 1)
	if err != nil {
		return err
	}
	nbs, err := parseCounts("--neighbours", *neighbours, 0)
	if err != nil {
		return err
	}
	armList, err := parseArms(*arms)
	if err != nil {
		return err
	}
	if *repeat < 1 {
		return usageError{fmt.Sprintf("--repeat must be at least 1, got %d", *repeat)}
	}
	nb, err := parseBytes(*nbBytes)
	if err != nil {
		return usageError{"--neighbour-bytes: " + err.Error()}
	}
	switch *layout {
	case stress.LayoutShared:
	case stress.LayoutDedicated:
		if _, ok := commands["layout"]; !ok {
			return preconditionError{fmt.Errorf("--layout dedicated needs the `wsfs layout` command, which this binary lacks; use --layout shared")}
		}
		if os.Geteuid() != 0 {
			return preconditionError{fmt.Errorf("--layout dedicated builds loop-backed filesystems and needs root; use --layout shared")}
		}
	default:
		return usageError{fmt.Sprintf("--layout %q: allowed values are shared, dedicated", *layout)}
	}
	if *transport != "dev" && *transport != "uring" {
		return usageError{fmt.Sprintf("--fuse-transport: want dev or uring, got %q", *transport)}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the wsfs binary to start agents and daemons from: %w", err)
	}
	// Library messages of this process (Litestream's, when the harness
	// restores each wsfs arm's agent state replica) go to a log file, not
	// into the live display on stderr.
	logDir := filepath.Join(*out, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(logDir, "harness.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("harness log: %w", err)
	}
	defer logf.Close()
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logf, nil)))
	defer slog.SetDefault(prev)
	opts := stress.Options{
		Exe: exe, Profile: p, Workspaces: ws, Arms: armList, Neighbours: nbs, NeighbourBytes: nb,
		Repeat: *repeat, Seed: *seed, Out: *out, Layout: *layout, Keep: *keep, FUSETransport: *transport,
		Unavailable: unavailableArms(),
		Command:     "wsfs stress " + strings.Join(args, " "),
		Stdout:      g.stdout, Stderr: g.stderr,
	}
	_, err = stress.Run(ctx, opts)
	var nr *stress.NotRunError
	if errors.As(err, &nr) {
		return preconditionError{err}
	}
	return err
}

// unavailableArms says which arms this binary or host cannot run, and why.
func unavailableArms() map[string]string {
	un := map[string]string{}
	fuseWhy := ""
	if _, err := os.Stat("/dev/fuse"); err != nil {
		fuseWhy = "no /dev/fuse on this host"
	} else if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			fuseWhy = "not root and no fusermount3 in PATH, so FUSE mounts are impossible"
		}
	}
	if fuseWhy != "" {
		un[stress.ArmLoopback] = fuseWhy
	}
	var missing []string
	for _, c := range []string{"init", "create", "mount", "sidecar"} {
		if _, ok := commands[c]; !ok {
			missing = append(missing, "wsfs "+c)
		}
	}
	for _, a := range []string{stress.ArmWsfs, stress.ArmWsfsSyncfs} {
		switch {
		case len(missing) > 0:
			un[a] = "this wsfs binary has no " + strings.Join(missing, ", ") + " command yet"
		case fuseWhy != "":
			un[a] = fuseWhy
		}
	}
	return un
}

// parseCounts parses a comma-separated list of distinct integers >= lo.
func parseCounts(flagName, s string, lo int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo {
			return nil, usageError{fmt.Sprintf("%s %q: want a comma-separated list of integers >= %d, e.g. 1,3,9", flagName, s, lo)}
		}
		if slices.Contains(out, n) {
			return nil, usageError{fmt.Sprintf("%s %q: %d listed twice", flagName, s, n)}
		}
		out = append(out, n)
	}
	return out, nil
}

func parseArms(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		a := strings.TrimSpace(f)
		if !slices.Contains(stress.AllArms, a) {
			return nil, usageError{fmt.Sprintf("--arms: unknown arm %q (allowed: %s)", a, strings.Join(stress.AllArms, ", "))}
		}
		if slices.Contains(out, a) {
			return nil, usageError{fmt.Sprintf("--arms: %q listed twice", a)}
		}
		out = append(out, a)
	}
	// Run in the canonical order whatever order they were given in, so runs
	// compare like for like.
	slices.SortFunc(out, func(a, b string) int {
		return slices.Index(stress.AllArms, a) - slices.Index(stress.AllArms, b)
	})
	return out, nil
}

// parseBytes parses a size like 2GiB, 512MiB, 64KiB or a plain byte count.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	num := s
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a positive size like 2GiB, 512MiB or 1048576", s)
	}
	return int64(n * float64(mult)), nil
}
