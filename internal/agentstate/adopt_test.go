package agentstate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartRefusesOverReplicaWithState: a sidecar whose database never
// replicated from here (missing, or created by the agent) refuses a
// replica that holds transactions, creates nothing, and leaves the
// replica restoring the original rows; a database restored from the
// replica with Adopt starts (and the record goes once its snapshot is
// up), unless the replica moved on since the restore or the file at the
// path is not the one restored.
func TestStartRefusesOverReplicaWithState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := testOptions(t)
	s, err := Start(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, a.DBPath)
	w.insert(t, 20)
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	want := dump(t, a.DBPath)

	// other is a second host's sidecar for the same replica.
	other := func() Options {
		o := testOptions(t)
		o.ReplicaURL = a.ReplicaURL
		return o
	}
	refused := func(what string, o Options, says ...string) {
		t.Helper()
		s2, err := Start(ctx, o)
		if err == nil {
			s2.Close(ctx)
			t.Fatalf("%s: the sidecar started over a replica holding state", what)
		}
		var ra *ReplicaAheadError
		if !errors.As(err, &ra) {
			t.Fatalf("%s: %v, want a ReplicaAheadError", what, err)
		}
		for _, w := range append(says, "wsfs state restore", o.DBPath) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", what, err, w)
			}
		}
	}
	checkReplica := func(what string, want []string) {
		t.Helper()
		to := filepath.Join(t.TempDir(), "check.db")
		if err := Restore(ctx, RestoreOptions{ReplicaURL: a.ReplicaURL, To: to}); err != nil {
			t.Fatalf("%s: restore: %v", what, err)
		}
		sameRows(t, what, dump(t, to), want)
	}

	missing := other()
	refused("no database", missing, "never been replicated from this host")
	if _, err := os.Stat(missing.DBPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused sidecar created %s (%v)", missing.DBPath, err)
	}
	byAgent := other()
	if err := os.MkdirAll(filepath.Dir(byAgent.DBPath), 0o700); err != nil {
		t.Fatal(err)
	}
	newWriter(t, byAgent.DBPath).db.Close()
	refused("a database the agent created", byAgent)
	checkReplica("after the refusals", want)
	// Restored with Adopt: it continues the replica.
	adopted := other()
	if err := Restore(ctx, RestoreOptions{ReplicaURL: a.ReplicaURL, To: adopted.DBPath, Adopt: true}); err != nil {
		t.Fatal(err)
	}
	// A second restore, to be overtaken by the replica below.
	stale := other()
	if err := Restore(ctx, RestoreOptions{ReplicaURL: a.ReplicaURL, To: stale.DBPath, Adopt: true}); err != nil {
		t.Fatal(err)
	}
	// A third whose file is replaced after the restore.
	replaced := other()
	if err := Restore(ctx, RestoreOptions{ReplicaURL: a.ReplicaURL, To: replaced.DBPath, Adopt: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(replaced.DBPath); err != nil {
		t.Fatal(err)
	}
	refused("adoption record of a removed database", replaced, "never been replicated from this host")

	// A writes on: the replica moves past what stale was restored from.
	w.insert(t, 5)
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	want = dump(t, a.DBPath)
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	refused("restored before the replica moved on", stale, "moved on since")

	// adopted was restored before A's last rows too; restore it again.
	for _, p := range []string{adopted.DBPath, adopted.DBPath + "-wal", adopted.DBPath + "-shm", adopted.DBPath + AdoptedSuffix} {
		os.Remove(p)
	}
	if err := Restore(ctx, RestoreOptions{ReplicaURL: a.ReplicaURL, To: adopted.DBPath, Adopt: true}); err != nil {
		t.Fatal(err)
	}
	s2, err := Start(ctx, adopted)
	if err != nil {
		t.Fatalf("a database restored with Adopt: %v", err)
	}
	if _, err := os.Stat(adopted.DBPath + AdoptedSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("adoption record still there after the start-up snapshot (%v)", err)
	}
	w2 := newWriter(t, adopted.DBPath)
	w2.next = w.next
	w2.insert(t, 3)
	if _, err := s2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	want = dump(t, adopted.DBPath)
	if _, err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkReplica("after the adopted database replicated", want)
	// And it restarts from its own local position.
	s3, err := Start(ctx, adopted)
	if err != nil {
		t.Fatalf("restart of the adopted database's sidecar: %v", err)
	}
	s3.Close(ctx)

	// Unless told that it replaces the replica's state.
	replacing := other()
	refused("before Replace", replacing)
	if _, err := Replace(ctx, replacing.DBPath, a.ReplicaURL, "ws-test"); err != nil {
		t.Fatal(err)
	}
	s4, err := Start(ctx, replacing)
	if err != nil {
		t.Fatalf("after Replace: %v", err)
	}
	if _, err := s4.Close(ctx); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "replaced.db")
	if err := Restore(ctx, RestoreOptions{ReplicaURL: a.ReplicaURL, To: to}); err != nil {
		t.Fatal(err)
	}
	db, err := OpenDB(to)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'progress'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("after Replace the replica restores a progress table (%d, %v), want the new database without it", n, err)
	}
}
