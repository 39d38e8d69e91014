package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
)

// runCLI runs one wsfs command line in-process.
func runCLI(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	g := &globals{stdout: &o, stderr: &e}
	code = run(ctx, g, args)
	return code, o.String(), e.String()
}

func tableRows(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", agentstate.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := db.Query(`SELECT id || ':' || v FROM t ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	for r.Next() {
		var s string
		r.Scan(&s)
		out = append(out, s)
	}
	return out
}

func TestStateSyncAndRestoreCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	h, err := host.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CreateWorkspace("ws-1"); err != nil {
		t.Fatal(err)
	}
	p := agentstate.PathsFor(h, "ws-1")

	// No sidecar yet: sync fails, exit 1, saying so.
	code, _, stderr := runCLI(ctx, "state", "sync", "--home", home, "ws-1")
	if code != exitFailure || !strings.Contains(stderr, "no sidecar answers") {
		t.Errorf("state sync without a sidecar: exit %d, %q", code, stderr)
	}

	sc, err := agentstate.Start(ctx, agentstate.Options{Workspace: "ws-1", DBPath: p.DB, ReplicaURL: p.ReplicaDir, SocketPath: p.Socket, StatusPath: p.Status})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(ctx)
	db, err := agentstate.OpenDB(p.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := db.Exec(`INSERT INTO t VALUES (?, ?)`, i, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := runCLI(ctx, "state", "sync", "--home", home, "ws-1")
	if code != exitOK || !strings.Contains(stdout, "ws-1: replica confirmed txid") {
		t.Fatalf("state sync: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// LTX timestamps have millisecond resolution: step past the current
	// millisecond so that --at falls strictly between the two batches.
	atT := time.Now()
	at := atT.UTC().Format(time.RFC3339Nano)
	for time.Now().UnixMilli() <= atT.UnixMilli()+1 {
		time.Sleep(time.Millisecond)
	}
	for i := 30; i < 40; i++ {
		if _, err := db.Exec(`INSERT INTO t VALUES (?, ?)`, i, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runCLI(ctx, "state", "sync", "--home", home, "ws-1"); code != exitOK {
		t.Fatalf("second state sync: %d %s", code, stderr)
	}

	to := filepath.Join(t.TempDir(), "latest.db")
	if code, _, stderr := runCLI(ctx, "state", "restore", "--home", home, "--to", to, "ws-1"); code != exitOK {
		t.Fatalf("state restore: %d %s", code, stderr)
	}
	if got, want := tableRows(t, to), tableRows(t, p.DB); !slices.Equal(got, want) || len(got) != 40 {
		t.Errorf("restored %d rows, want the original's %d (40)", len(got), len(want))
	}
	toAt := filepath.Join(t.TempDir(), "at.db")
	if code, _, stderr := runCLI(ctx, "state", "restore", "--home", home, "--to", toAt, "--at", at, "ws-1"); code != exitOK {
		t.Fatalf("state restore --at: %d %s", code, stderr)
	}
	if got := tableRows(t, toAt); len(got) != 30 {
		t.Errorf("restore --at %s: %d rows, want the 30 synced before it", at, len(got))
	}

	// Refusals.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"state", "restore", "--home", home, "ws-1"}, exitFailure, "restore never overwrites"},
		{[]string{"state", "restore", "--home", home, "--at", "yesterday", "ws-1"}, exitUsage, "RFC 3339"},
		{[]string{"state", "restore", "--home", home, "ws-9"}, exitPrecondition, "no such workspace"},
		{[]string{"state", "frobnicate"}, exitUsage, "unknown subcommand"},
		{[]string{"state", "sync", "--home", home}, exitUsage, "expected one workspace"},
	} {
		code, _, stderr := runCLI(ctx, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("wsfs %s: exit %d, %q; want exit %d saying %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}
}

// TestHostPreconditions: the host commands of this helper on a directory
// without a host, and with a config that is not JSON.
func TestHostPreconditions(t *testing.T) {
	ctx := context.Background()
	empty := t.TempDir()
	for _, args := range [][]string{
		{"up", "--home", empty},
		{"status", "--home", empty},
		{"state", "sync", "--home", empty, "ws-1"},
		{"state", "restore", "--home", empty, "ws-1"},
		{"sidecar", "--home", empty, "ws-1"},
		{"layout", "status", "--home", empty},
	} {
		code, _, stderr := runCLI(ctx, args...)
		if code != exitPrecondition || !strings.Contains(stderr, "wsfs init") {
			t.Errorf("wsfs %s without a host: exit %d, %q; want exit 3 pointing to wsfs init", strings.Join(args, " "), code, stderr)
		}
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, host.ConfigFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"up", "--home", bad}, {"status", "--home", bad}} {
		code, _, stderr := runCLI(ctx, args...)
		if code == exitOK || !strings.Contains(stderr, "not valid JSON") {
			t.Errorf("wsfs %s with a broken config: exit %d, %q", strings.Join(args, " "), code, stderr)
		}
	}
}

// TestSidecarRefusesReplicaWithStateCLI: a workspace name reused after
// rm (its replica still holds the old workspace's state): `wsfs sidecar`
// refuses (exit 3) naming `wsfs state restore` and `wsfs state replace`
// and creates no database; after `wsfs state replace` a sidecar starts.
func TestSidecarRefusesReplicaWithStateCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	h, err := host.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CreateWorkspace("ws-1"); err != nil {
		t.Fatal(err)
	}
	p := agentstate.PathsFor(h, "ws-1")
	opts := agentstate.Options{Workspace: "ws-1", DBPath: p.DB, ReplicaURL: p.ReplicaDir, SocketPath: p.Socket, StatusPath: p.Status}
	sc, err := agentstate.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.RemoveWorkspace("ws-1"); err != nil {
		t.Fatal(err)
	}
	if err := h.CreateWorkspace("ws-1"); err != nil {
		t.Fatal(err)
	}
	// The refusal returns at once; a sidecar that started would run
	// until this deadline and exit 0.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	code, _, stderr := runCLI(sctx, "sidecar", "--home", home, "ws-1")
	scancel()
	if code != exitPrecondition || !strings.Contains(stderr, "wsfs state restore") || !strings.Contains(stderr, "wsfs state replace") {
		t.Fatalf("sidecar over the old workspace's replica: exit %d, %q; want exit 3 naming state restore and state replace", code, stderr)
	}
	if _, err := os.Stat(p.DB); err == nil {
		t.Errorf("the refused sidecar created %s", p.DB)
	}
	code, stdout, stderr := runCLI(ctx, "state", "replace", "--home", home, "ws-1")
	if code != exitOK || !strings.Contains(stdout, "replicates the database over replica") {
		t.Fatalf("state replace: exit %d, %q, %q", code, stdout, stderr)
	}
	if sc, err = agentstate.Start(ctx, opts); err != nil {
		t.Fatalf("sidecar after state replace: %v", err)
	}
	if _, err := sc.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
