package snapshot

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/objid"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// agentDB creates workspace name's agent database (on the real disk:
// SQLite opens its own files) with a table t.
func agentDB(t *testing.T, e *env, name string) *sql.DB {
	t.Helper()
	path := agentstate.DBIn(e.wsDir(name))
	noErr(t, agentstate.Ensure(path, name))
	db, err := agentstate.OpenDB(path)
	noErr(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB)`)
	noErr(t, err)
	return db
}

// insertRows adds rows [from, to) to t, one transaction each, with a
// payload large enough to span several chunks over a few hundred rows.
func insertRows(t *testing.T, db *sql.DB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		_, err := db.Exec(`INSERT INTO t (id, v) VALUES (?, randomblob(?))`, i, 4000+i%3000)
		noErr(t, err)
	}
}

// agentRows returns every row of t in the agent database of wsDir.
func agentRows(t *testing.T, wsDir string) []string {
	t.Helper()
	db, err := agentstate.OpenDB(agentstate.DBIn(wsDir))
	noErr(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT id, hex(v) FROM t ORDER BY id`)
	noErr(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int
		var v string
		noErr(t, rows.Scan(&id, &v))
		out = append(out, fmt.Sprintf("%d %s", id, v))
	}
	noErr(t, rows.Err())
	return out
}

// TestAgentStateSnapshotForkRestore: a snapshot of a workspace with an
// agent database records a copy of it (catalog version 2, chunks in the
// pool, listed by ForEachObject); a fork gets that copy; a restore sets
// the database back to it, and the undo snapshot holds the state it
// replaced. A workspace without an agent database records none, and a
// restore to such a snapshot leaves the database alone.
func TestAgentStateSnapshotForkRestore(t *testing.T) {
	e := newEnv(t, vfs.Default, t.TempDir())
	w := e.open("w")
	writeFile(t, w, workspace.RootIno, "f", []byte("one"))
	noErr(t, w.Close())
	bare, _, err := CreateOffline(e.opts("w"), "no agent", time.Now())
	noErr(t, err)
	if bare.Agent != nil {
		t.Fatalf("snapshot of a workspace without agent database records %+v", bare.Agent)
	}

	db := agentDB(t, e, "w")
	insertRows(t, db, 1, 400) // > 1 MiB: several chunks
	want := agentRows(t, e.wsDir("w"))
	in, _, err := CreateOffline(e.opts("w"), "", time.Now())
	noErr(t, err)
	if in.Agent == nil || len(in.Agent.Content.Chunks) < 2 {
		t.Fatalf("agent copy %+v, want several chunks", in.Agent)
	}
	got, err := Get(e.fs, e.wsDir("w"), in.ID)
	noErr(t, err)
	if got.Agent == nil || got.Agent.Size != in.Agent.Size || !slices.Equal(got.Agent.Content.Chunks, in.Agent.Content.Chunks) {
		t.Fatalf("catalog entry agent %+v, want %+v", got.Agent, in.Agent)
	}
	listed := map[objid.ID]bool{}
	noErr(t, ForEachObject(e.fs, e.wsDir("w"), e.pool, func(id objid.ID) { listed[id] = true }))
	for _, c := range in.Agent.Content.Chunks {
		if !listed[c] {
			t.Errorf("agent chunk %s not listed for GC", c)
		}
	}
	rep, err := Check(e.fs, e.wsDir("w"), e.pool, true, nil)
	noErr(t, err)
	if len(rep.Damage) != 0 {
		t.Fatalf("fsck of healthy snapshots: %+v", rep.Damage)
	}

	// Change files and agent state, then fork and restore.
	insertRows(t, db, 400, 450)
	_, err = db.Exec(`DELETE FROM t WHERE id < 10`)
	noErr(t, err)
	changed := agentRows(t, e.wsDir("w"))
	must[Info](t)(Fork(e.fs, e.pool, e.wsDir("w"), in.ID, e.wsDir("f")))
	sameStrings(t, "fork's agent state", agentRows(t, e.wsDir("f")), want)

	before, target, err := Restore(e.opts("w"), in.ID, time.Now())
	noErr(t, err)
	if target.ID != in.ID {
		t.Fatalf("restored to %d", target.ID)
	}
	// The agent's connection, open across the restore, reads the
	// snapshot's rows.
	var n int
	noErr(t, db.QueryRow(`SELECT count(*) FROM t`).Scan(&n))
	if n != len(want) {
		t.Fatalf("open connection after restore: %d rows, want %d", n, len(want))
	}
	sameStrings(t, "restored agent state", agentRows(t, e.wsDir("w")), want)
	if before.Agent == nil {
		t.Fatal("undo snapshot records no agent state")
	}
	// The undo snapshot brings the replaced rows back.
	_, _, err = Restore(e.opts("w"), before.ID, time.Now())
	noErr(t, err)
	sameStrings(t, "agent state after undo", agentRows(t, e.wsDir("w")), changed)

	// A snapshot without agent state leaves the database alone.
	_, _, err = Restore(e.opts("w"), bare.ID, time.Now())
	noErr(t, err)
	sameStrings(t, "agent state after restoring a snapshot without one", agentRows(t, e.wsDir("w")), changed)

	// A missing chunk: fsck names it; restore refuses before changing
	// anything (files or agent state).
	noErr(t, e.fs.Remove(e.pool.Path(in.Agent.Content.Chunks[1])))
	rep, err = Check(e.fs, e.wsDir("w"), e.pool, false, nil)
	noErr(t, err)
	if len(rep.Damage) != 1 || !strings.Contains(rep.Damage[0].What, "agent state copy of w@"+fmt.Sprint(in.ID)) {
		t.Fatalf("fsck with a missing agent chunk: %+v", rep.Damage)
	}
	// The same object not yet fetched by a lazy pull (the remote holds
	// it) is counted as such, not reported missing.
	missing := in.Agent.Content.Chunks[1]
	rep, err = Check(e.fs, e.wsDir("w"), e.pool, false, func(id objid.ID) bool { return id == missing })
	noErr(t, err)
	if len(rep.Damage) != 0 || rep.NotFetched != 1 {
		t.Fatalf("fsck with an object not yet fetched: %d not fetched, damage %+v; want 1 and none", rep.NotFetched, rep.Damage)
	}
	if _, _, err := Restore(e.opts("w"), in.ID, time.Now()); err == nil {
		t.Fatal("restore with a missing agent chunk succeeded")
	}
	sameStrings(t, "agent state after a failed restore", agentRows(t, e.wsDir("w")), changed)
	if leftovers, _ := filepath.Glob(filepath.Join(e.wsDir("w"), "agent", ".tmp-*")); len(leftovers) > 0 {
		t.Fatalf("temp files left: %v", leftovers)
	}
}

func sameStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("first difference at row %d:\n got  %.60s\n want %.60s", i, got[i], want[i])
			break
		}
	}
}
