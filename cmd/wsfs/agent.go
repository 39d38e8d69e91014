package main

import (
	"context"
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
until terminated.`)
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
