package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
)

// TestGCKeepsAgentState: the chunks of a snapshot's agent state copy are
// referenced by nothing but the snapshot (the live database is not in
// the pool); with every object backdated past the grace, gc keeps them,
// fsck checks them (a missing one is named, exit 4), restore brings the
// rows back from them; once the snapshots are removed gc reclaims them.
func TestGCKeepsAgentState(t *testing.T) {
	t.Setenv(pool.TestMinGraceEnv, "1s")
	home, _ := snapHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, errs := snapRun(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
		return out + errs
	}
	dbPath := filepath.Join(h.AgentDir("ws"), agentstate.DBName)
	if err := agentstate.Ensure(dbPath, "ws"); err != nil {
		t.Fatal(err)
	}
	db, err := agentstate.OpenDB(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)`)
	for i := range 400 { // about 1.6 MiB: two chunks
		exec(`INSERT INTO t (id, v) VALUES (?, randomblob(4000))`, i)
	}
	if out := mustRun("snapshot", "create", "--home", home, "ws"); !strings.Contains(out, "agent state 1.") {
		t.Fatalf("snapshot create does not report the agent state copy:\n%s", out)
	}
	in, err := snapshot.Get(vfs.Default, h.WorkspaceDir("ws"), 1)
	if err != nil || in.Agent == nil || len(in.Agent.Content.Chunks) != 2 {
		t.Fatalf("ws@1 agent copy %+v, %v; want 2 chunks", in.Agent, err)
	}
	var listed []snapshotJSON
	if err := json.Unmarshal([]byte(mustRun("snapshot", "ls", "--home", home, "--json", "ws")), &listed); err != nil ||
		len(listed) != 1 || listed[0].Agent == nil || listed[0].Agent.Bytes != in.Agent.Size || listed[0].Agent.Chunks != 2 {
		t.Fatalf("snapshot ls --json: %+v %v", listed, err)
	}
	exec(`DELETE FROM t`)
	exec(`VACUUM`)

	gc := func() string {
		t.Helper()
		backdate(t, h.PoolDir(), 48*time.Hour)
		return mustRun("gc", "--home", home, "--test-grace", "1s")
	}
	if out := gc(); !strings.Contains(out, "removed 0 ") {
		t.Fatalf("gc removed what only a snapshot's agent state references: %s", out)
	}
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range in.Agent.Content.Chunks {
		if _, err := os.Stat(p.Path(c)); err != nil {
			t.Fatalf("agent chunk %s gone after gc: %v", c, err)
		}
	}
	mustRun("fsck", "--home", home, "--verify-data", "ws")
	if out := mustRun("restore", "--home", home, "ws@1"); !strings.Contains(out, "files and agent state") {
		t.Fatalf("restore: %s", out)
	}
	if n := count(); n != 400 {
		t.Fatalf("after restore the open connection counts %d rows, want 400", n)
	}

	// A missing chunk is named by fsck (exit 4), and restore refuses.
	missing := p.Path(in.Agent.Content.Chunks[0])
	saved, err := os.ReadFile(missing)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	code, out, errs := snapRun("fsck", "--home", home, "ws")
	if code != exitCorrupt || !strings.Contains(out+errs, "a chunk of the agent state copy of ws@1") {
		t.Fatalf("fsck with a missing agent chunk: exit %d\n%s%s", code, out, errs)
	}
	exec(`DELETE FROM t WHERE id >= 100`)
	if code, out, errs := snapRun("restore", "--home", home, "ws@1"); code == 0 {
		t.Fatalf("restore with a missing agent chunk succeeded:\n%s%s", out, errs)
	}
	if n := count(); n != 100 {
		t.Fatalf("a refused restore changed the agent state: %d rows, want 100", n)
	}
	if err := os.WriteFile(missing, saved, 0o400); err != nil {
		t.Fatal(err)
	}

	// Without the snapshots nothing references the chunks.
	all, err := snapshot.List(vfs.Default, h.WorkspaceDir("ws"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		mustRun("snapshot", "rm", "--home", home, fmt.Sprintf("ws@%d", s.ID))
	}
	if out := gc(); strings.Contains(out, "removed 0 ") {
		t.Fatalf("gc kept the agent state chunks of removed snapshots: %s", out)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("agent chunk of removed snapshots still in the pool: %v", err)
	}
}
