package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"wsfs/internal/stress"
)

// The agent command is internal: `wsfs stress` starts one per workspace (the
// stub agent) and one per noisy neighbour. It is not meant to be run by hand.
func init() {
	register(command{
		name:    "agent",
		summary: "(internal) stub agent and noisy neighbour processes of wsfs stress",
		run:     runAgent,
		subcommands: []command{
			{name: "neighbour", summary: "noisy neighbour: rewrite --bytes of buffered data in --dir until terminated", run: runNeighbour},
			{name: "smallfiles", summary: "step of wsfs bench tools: create, read back and remove small files", run: runSmallFilesAgent},
			{name: "sqlite", summary: "step of wsfs bench tools: SQLite WAL writer with concurrent readers", run: runSQLiteAgent},
		},
	})
}

func runAgent(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "agent", "", `
Stub agent of wsfs stress: runs the deterministic workload (write, read back
and verify, overwrite, rename, delete, walk) in --root, records its progress
in the SQLite database named by $WSFS_AGENT_STATE (opened as agents open it:
WAL mode, checkpoints left to the replication sidecar, which wsfs stress runs
in the wsfs arms), prints "ready", waits for
a line on stdin, runs, and writes its result JSON to --result.
'wsfs agent neighbour --dir D --bytes N' instead writes buffered data in D
until terminated. 'wsfs agent smallfiles' and 'wsfs agent sqlite' are steps
of 'wsfs bench tools' (see their -h).`)
	root := fs.String("root", "", "workspace tree to work in (must exist and be empty)")
	profile := fs.String("profile", "small", "workload profile: seed, small or tiny")
	seed := fs.Int64("seed", 1, "workload seed")
	ws := fs.Int("workspace", 0, "workspace index (part of the seed)")
	every := fs.Int("fsync-every", stress.DefaultFsyncEvery, "fsync every Nth written file (1 = every file)")
	result := fs.String("result", "", "where to write the result JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, err := stress.ParseProfile(*profile)
	if err != nil {
		return usageError{"--profile: " + err.Error()}
	}
	if *root == "" || *result == "" {
		return usageError{"--root and --result are required"}
	}
	if *every < 1 {
		return usageError{fmt.Sprintf("--fsync-every must be at least 1, got %d", *every)}
	}
	state := os.Getenv(stress.AgentEnvState)
	if state == "" {
		return usageError{"$" + stress.AgentEnvState + " must name the agent's state database"}
	}
	cfg := stress.AgentConfig{Root: *root, StatePath: state, Profile: p, Seed: *seed, Workspace: *ws, FsyncEvery: *every}
	return stress.RunAgentProcess(ctx, cfg, *result, os.Stdin, g.stdout)
}

func runNeighbour(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "agent neighbour", "", "Noisy neighbour: buffered writes in --dir, rewriting --bytes in a loop until terminated.")
	dir := fs.String("dir", "", "directory to write in")
	n := fs.Int64("bytes", 2<<30, "bytes to keep rewriting")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usageError{"--dir is required"}
	}
	return stress.RunNeighbour(ctx, *dir, *n)
}

func runSmallFilesAgent(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "agent smallfiles", "", `
Step of wsfs bench tools: creates --files small files (512 B to 4 KiB) in
--dir, reads every one back and compares, removes them, and prints the
result as JSON.`)
	dir := fs.String("dir", "", "directory to work in (must exist)")
	n := fs.Int("files", 5000, "number of files")
	seed := fs.Int64("seed", 1, "size seed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *n < 1 {
		return usageError{"--dir is required and --files must be at least 1"}
	}
	res, err := stress.RunSmallFiles(*dir, *n, *seed)
	if err != nil {
		return err
	}
	return json.NewEncoder(g.stdout).Encode(res)
}

func runSQLiteAgent(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "agent sqlite", "", `
Step of wsfs bench tools: opens --db in WAL mode with synchronous=FULL, runs
one writer doing --tx one-row transactions while --readers connections query
the table, and prints the result (transaction p50/p99) as JSON.`)
	db := fs.String("db", "", "database file (created)")
	tx := fs.Int("tx", 500, "transactions")
	readers := fs.Int("readers", 2, "concurrent reader connections")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *db == "" || *tx < 1 || *readers < 0 {
		return usageError{"--db is required, --tx must be at least 1 and --readers at least 0"}
	}
	res, err := stress.RunSQLite(ctx, *db, *tx, *readers)
	if err != nil {
		return err
	}
	return json.NewEncoder(g.stdout).Encode(res)
}
