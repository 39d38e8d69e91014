package agentstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
)

// copyCut takes a cut of the database at path and returns its copy.
func copyCut(t testing.TB, path string, during func()) []byte {
	t.Helper()
	ctx := context.Background()
	c, err := BeginCut(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		t.Fatalf("no database at %s", path)
	}
	defer c.Close()
	if during != nil {
		during()
	}
	var buf bytes.Buffer
	n, err := c.Copy(ctx, 1<<20, func(b []byte) error {
		if len(b) > 1<<20 {
			t.Errorf("chunk of %d bytes", len(b))
		}
		buf.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Copy says %d bytes, put %d", n, buf.Len())
	}
	return buf.Bytes()
}

// rowsOf writes image to a file and dumps it.
func rowsOf(t *testing.T, image []byte) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.db")
	if err := os.WriteFile(p, image, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := integrityCheck(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return dump(t, p)
}

func TestBeginCutNoDatabase(t *testing.T) {
	c, err := BeginCut(context.Background(), filepath.Join(t.TempDir(), "agent", DBName))
	if c != nil || err != nil {
		t.Fatalf("BeginCut of a missing database = %v, %v; want nil, nil", c, err)
	}
}

// TestCutIsOneInstant: with a writer committing one row per transaction
// throughout, the copy holds every row committed before BeginCut was
// called, none committed after the copy returned, and no gap (one
// instant, not a mix of pages from several).
func TestCutIsOneInstant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent", DBName)
	if err := Ensure(path, "ws"); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, path)
	w.insert(t, 200)
	stop := w.background(t)
	defer stop()
	for round := range 5 {
		w.mu.Lock()
		before := w.next - 1 // committed before BeginCut
		w.mu.Unlock()
		var image []byte
		image = copyCut(t, path, func() {
			time.Sleep(20 * time.Millisecond) // the writer commits meanwhile
		})
		w.mu.Lock()
		after := w.next - 1
		w.mu.Unlock()
		rows := rowsOf(t, image)
		var ids []int
		for _, r := range rows {
			if strings.HasPrefix(r, "meta ") {
				continue
			}
			var id int
			fmt.Sscanf(r, "%d", &id)
			ids = append(ids, id)
		}
		for i, id := range ids {
			if id != i+1 {
				t.Fatalf("round %d: row %d has id %d: a gap", round, i, id)
			}
		}
		if len(ids) < before || len(ids) > after {
			t.Fatalf("round %d: copy holds %d rows; %d were committed before the cut, %d after the copy", round, len(ids), before, after)
		}
	}
}

// TestRestoreLiveUnderOpenConnections: a database restored to an earlier
// copy while the agent holds a connection open and the sidecar
// replicates it: the held connection reads the restored rows, the
// database passes integrity_check, and the replica restores to the
// restored content.
func TestRestoreLiveUnderOpenConnections(t *testing.T) {
	ctx, opts, s := startTestSidecar(t)
	defer s.Close(ctx)
	w := newWriter(t, opts.DBPath)
	w.insert(t, 300)
	image := copyCut(t, opts.DBPath, nil)
	want := dump(t, opts.DBPath)
	w.insert(t, 500) // after the snapshot: gone after the restore
	if _, err := w.db.Exec(`CREATE TABLE later (x)`); err != nil {
		t.Fatal(err)
	}
	held, err := w.db.Conn(ctx) // the agent's connection, open across the restore
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var n int
	if err := held.QueryRowContext(ctx, `SELECT count(*) FROM progress`).Scan(&n); err != nil || n != 800 {
		t.Fatalf("before restore: %d rows, %v", n, err)
	}
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	err = RestoreLive(ctx, opts.DBPath, "ws-test", func(wr io.Writer) error {
		_, err := wr.Write(image)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := held.QueryRowContext(ctx, `SELECT count(*) FROM progress`).Scan(&n); err != nil || n != 300 {
		t.Fatalf("held connection after restore: %d rows, %v; want 300", n, err)
	}
	if err := held.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'later'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("held connection after restore: table 'later' count %d, %v", n, err)
	}
	var res string
	if err := held.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q, %v", res, err)
	}
	sameRows(t, "live database after restore", dump(t, opts.DBPath), want)
	// The agent keeps writing on its connection.
	if _, err := held.ExecContext(ctx, `INSERT INTO progress (id, step, payload) VALUES (301, 'after', x'00')`); err != nil {
		t.Fatal(err)
	}
	want = dump(t, opts.DBPath)
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "from-replica.db")
	if err := Restore(ctx, RestoreOptions{ReplicaURL: opts.ReplicaURL, To: out}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, "replica restored after the live restore", dump(t, out), want)
}

// TestRestoreLiveRefusesDamagedCopy: a copy that is not a whole database
// changes nothing.
func TestRestoreLiveRefusesDamagedCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent", DBName)
	if err := Ensure(path, "ws"); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, path)
	w.insert(t, 50)
	image := copyCut(t, path, nil)
	want := dump(t, path)
	bad := bytes.Clone(image)
	for i := 4096; i < len(bad); i++ {
		bad[i] ^= 0x5a
	}
	err := RestoreLive(context.Background(), path, "ws", func(wr io.Writer) error {
		_, err := wr.Write(bad)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "unchanged") {
		t.Fatalf("restore of a damaged copy: %v", err)
	}
	sameRows(t, "after the refused restore", dump(t, path), want)
}

// TestRestoreLiveCreates: restoring into a workspace without an agent
// database (a fork) creates it, private.
func TestRestoreLiveCreates(t *testing.T) {
	src := filepath.Join(t.TempDir(), "agent", DBName)
	if err := Ensure(src, "ws"); err != nil {
		t.Fatal(err)
	}
	newWriter(t, src).insert(t, 20)
	image := copyCut(t, src, nil)
	dst := filepath.Join(t.TempDir(), "new", "agent", DBName)
	if err := RestoreLive(context.Background(), dst, "new", func(wr io.Writer) error {
		_, err := wr.Write(image)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, "fresh database restored", dump(t, dst), dump(t, src))
	st, err := os.Stat(dst)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("restored database mode %v, %v", st.Mode(), err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".tmp-*")); len(leftovers) > 0 {
		t.Fatalf("temp files left: %v", leftovers)
	}
}

// TestCutWritesNothing: a cut of a database that has a WAL with frames
// and no other connection open (an agent killed, no sidecar) leaves its
// files exactly as they were: read-only, no checkpoint of the WAL when
// the cut's connection closes.
func TestCutWritesNothing(t *testing.T) {
	src := filepath.Join(t.TempDir(), "agent", DBName)
	if err := Ensure(src, "ws"); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, src)
	w.insert(t, 100)
	// The files as a killed agent leaves them: database and WAL, copied
	// while the writer holds them open.
	path := filepath.Join(t.TempDir(), DBName)
	for _, sfx := range []string{"", "-wal"} {
		b, err := os.ReadFile(src + sfx)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+sfx, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := fileSums(t, path)
	if !strings.Contains(before, DBName+"-wal:0:") && strings.Contains(before, "-wal:") {
		image := copyCut(t, path, nil)
		if n := len(rowsOf(t, image)); n != 101 {
			t.Fatalf("copy holds %d rows, want 101", n)
		}
	} else {
		t.Fatalf("no WAL frames to keep: %s", before)
	}
	if after := fileSums(t, path); after != before {
		t.Fatalf("the cut changed the database's files:\n before %s\n after  %s", before, after)
	}
}

// fileSums describes the database file and its WAL (size and a hash).
func fileSums(t *testing.T, path string) string {
	var out string
	for _, p := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		out += fmt.Sprintf("%s:%d:%x ", filepath.Base(p), len(b), sha256.Sum256(b))
	}
	return out
}

// TestCutRollsBackHotJournal: an agent may use a rollback journal
// (journal_mode DELETE, SQLite's default): the cut used to set WAL mode
// on its read-only connection, and failed ("attempt to write a readonly
// database") on every such database. Killed inside a transaction, the
// agent leaves a hot journal. SQLite rolls it back at the next open, which needs write
// access: a read-only cut used to fail ("attempt to write a readonly
// database"), so no snapshot could be taken until something else opened
// the database. The cut holds every committed row and none of the
// transaction that was cut short.
func TestCutRollsBackHotJournal(t *testing.T) {
	src := filepath.Join(t.TempDir(), DBName)
	db, err := sql.Open("sqlite", "file:"+src+"?_pragma=journal_mode(delete)&_pragma=cache_size(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema + `; CREATE TABLE wsfs_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 40; i++ {
		if _, err := db.Exec(`INSERT INTO progress (id, step, payload) VALUES (?, 'committed', randomblob(2000))`, i); err != nil {
			t.Fatal(err)
		}
	}
	// A database in rollback-journal mode, no journal.
	if rows := rowsOf(t, copyCut(t, src, nil)); len(rows) != 40 {
		t.Fatalf("copy of the database in rollback-journal mode holds %d rows, want 40", len(rows))
	}
	// A transaction big enough to spill pages into the database file
	// (cache of one page), left open: the journal is hot in a copy of
	// the files, which no process holds a lock on (the killed agent).
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`UPDATE progress SET step = 'cut short', payload = randomblob(3000)`); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent", DBName)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, sfx := range []string{"", "-journal"} {
		b, err := os.ReadFile(src + sfx)
		if err != nil {
			t.Fatalf("no %s file mid-transaction: %v", sfx, err)
		}
		if err := os.WriteFile(path+sfx, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	image := copyCut(t, path, nil)
	rows := rowsOf(t, image)
	if len(rows) != 40 {
		t.Fatalf("copy holds %d rows, want the 40 committed", len(rows))
	}
	for _, r := range rows {
		if strings.Contains(r, "cut short") {
			t.Fatalf("copy holds a row of the transaction cut short: %.40s", r)
		}
	}
	if _, err := os.Stat(path + "-journal"); err == nil {
		t.Errorf("hot journal still there after the cut")
	}
}

// TestRestoreLiveUnderWritesReplicates: a restore to an earlier, smaller
// copy while the agent keeps committing shrinks the database under
// Litestream, which (v0.5.18) then left incremental files from which the
// latest state restored "malformed" in about one run in two. The
// sidecar uploads a full snapshot once it sees the database shrink, and
// the replica then restores to exactly the live database.
func TestRestoreLiveUnderWritesReplicates(t *testing.T) {
	ctx, opts, s := startTestSidecar(t)
	defer s.Close(ctx)
	w := newWriter(t, opts.DBPath)
	w.insert(t, 30)
	image := copyCut(t, opts.DBPath, nil)
	w.insert(t, 300) // the database grows well past the copy
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	client, err := NewReplicaClient(opts.ReplicaURL)
	if err != nil {
		t.Fatal(err)
	}
	snapshots := func() int {
		itr, err := client.LTXFiles(ctx, litestream.SnapshotLevel, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		defer itr.Close()
		n := 0
		for itr.Next() {
			n++
		}
		return n
	}
	before := snapshots()
	stop := w.background(t)
	if err := RestoreLive(ctx, opts.DBPath, "ws-test", func(wr io.Writer) error {
		_, err := wr.Write(image)
		return err
	}); err != nil {
		stop()
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the agent commits on
	stop()
	// Bounded: one look at the size takes a SyncInterval (50 ms here).
	for deadline := time.Now().Add(20 * time.Second); snapshots() == before; {
		if time.Now().After(deadline) {
			t.Fatalf("no full snapshot uploaded after the database shrank (%d snapshots)", before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "from-replica.db")
	if err := Restore(ctx, RestoreOptions{ReplicaURL: opts.ReplicaURL, To: out}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, "replica restored after a live restore under writes", dump(t, out), dump(t, opts.DBPath))
}
