package stress

import (
	"path/filepath"
	"strings"
	"testing"

	"wsfs/internal/agentstate"
)

// writeProgress creates a state database at path with the agent's progress
// table holding rows (phase, files_done, at) in order.
func writeProgress(t *testing.T, path string, rows ...progressRow) {
	t.Helper()
	db, err := openState(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, r := range rows {
		if _, err := db.Exec(`INSERT INTO progress(phase, files_done, at_unix_ns) VALUES (?, ?, ?)`, r.Phase, r.FilesDone, r.AtUnixNs); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCompareProgress(t *testing.T) {
	dir := t.TempDir()
	rows := []progressRow{{Phase: "write", FilesDone: 100, AtUnixNs: 1}, {Phase: "write:done", AtUnixNs: 2}, {Phase: "read", FilesDone: 100, AtUnixNs: 3}}
	orig := filepath.Join(dir, "orig.db")
	writeProgress(t, orig, rows...)

	same := filepath.Join(dir, "same.db")
	writeProgress(t, same, rows...)
	if n, err := CompareProgress(orig, same); err != nil || n != 3 {
		t.Errorf("identical tables: %d rows, %v; want 3, nil", n, err)
	}

	changed := filepath.Join(dir, "changed.db")
	writeProgress(t, changed, rows[0], progressRow{Phase: "write:done", AtUnixNs: 99}, rows[2])
	if _, err := CompareProgress(orig, changed); err == nil || !strings.Contains(err.Error(), "row 1 differs") {
		t.Errorf("a changed timestamp: %v, want row 1 named", err)
	}

	short := filepath.Join(dir, "short.db")
	writeProgress(t, short, rows[:2]...)
	if _, err := CompareProgress(orig, short); err == nil || !strings.Contains(err.Error(), "2 rows, the original 3") {
		t.Errorf("a lost last row: %v, want the counts named", err)
	}

	empty := filepath.Join(dir, "empty.db")
	writeProgress(t, empty)
	if _, err := CompareProgress(empty, empty); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty original: %v, want an error (nothing was verified)", err)
	}

	if _, err := CompareProgress(orig, filepath.Join(dir, "missing.db")); err == nil {
		t.Error("a missing restored database compared equal")
	}
}

// TestReplicaRoundTrip replicates a progress table with a real sidecar
// (in-process agentstate.Start, the code `wsfs sidecar` runs), syncs,
// restores and compares: the path the wsfs arms take after every run.
//
// Known failure, not in this package: with agentstate as of this writing,
// Start's own start-up snapshot races Litestream's snapshot-level
// compaction monitor, which also fires at Store.Open; both write the
// level-9 TXID-1 file through the file replica's fixed NAME.ltx.tmp, and
// now and then the interleaved file fails the restore with "file checksum
// mismatch" (about 1 in 10 under -race here). Such a failure is that bug,
// and the harness reports it the same way (replica NOT verified).
func TestReplicaRoundTrip(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agent", "state.db")
	replica := filepath.Join(dir, "replica")
	sock := filepath.Join(dir, "s.sock")
	ctx := t.Context()
	sc, err := agentstate.Start(ctx, agentstate.Options{Workspace: "ws-0", DBPath: db, ReplicaURL: replica, SocketPath: sock})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			sc.Close(ctx)
		}
	}()
	var rows []progressRow
	for i := range 50 {
		rows = append(rows, progressRow{Phase: "write", FilesDone: int64(i), AtUnixNs: int64(i)})
	}
	writeProgress(t, db, rows...)
	s := &sidecarFor{name: "ws-0", db: db, socket: sock, replica: replica, p: &proc{name: "in-process sidecar"}}
	if _, err := s.syncWait(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := sc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := s.verify(ctx, filepath.Join(dir, "check", "ws-0.db"))
	if err != nil || n != len(rows) {
		t.Fatalf("verify: %d rows, %v; want %d", n, err, len(rows))
	}
	// A row the replica never saw is caught.
	writeProgress(t, db, progressRow{Phase: "walk:done", AtUnixNs: 1 << 40})
	if _, err := s.verify(ctx, filepath.Join(dir, "check", "ws-0-again.db")); err == nil || !strings.Contains(err.Error(), "51") {
		t.Fatalf("verify after an unreplicated row: %v, want the row counts named", err)
	}
}

func TestSummarizeReplica(t *testing.T) {
	good := fakeRun(ArmWsfs, 2, 0, 1, 1)
	good.Replicated, good.ReplicaVerified, good.ReplicaSyncNs = true, true, []int64{2e6, 4e6}
	row := Summarize([]*RunResult{good})[0]
	if !row.Verified || !row.ReplicaVerified || !row.Replicated || row.ReplicaSyncMaxMs != 4 || replicaCell(row) != "ok" {
		t.Errorf("verified replicated run: %+v", row)
	}
	bad := fakeRun(ArmWsfs, 2, 0, 1, 1)
	bad.Replicated = true
	row = Summarize([]*RunResult{good, bad})[0]
	if row.Verified || row.ReplicaVerified || replicaCell(row) != "FAILED" {
		t.Errorf("a replicated run whose replica did not verify summarised as verified: %+v", row)
	}
	native := Summarize([]*RunResult{fakeRun(ArmNative, 1, 0, 1, 1)})[0]
	if !native.Verified || native.Replicated || native.ReplicaVerified || replicaCell(native) != "-" {
		t.Errorf("native row: %+v, want verified, not replicated", native)
	}
}
