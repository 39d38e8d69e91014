package e2e

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// SQLite workload shape: accounts hold a constant total; every transaction
// moves an amount between two accounts and appends a numbered log row.
const (
	sqlAccounts = 10
	sqlStart    = 1000
	sqlReaders  = 3
	readerPause = time.Millisecond
)

// TestToolsSQLite runs SQLite in WAL mode inside the target (its -shm index
// is a shared writable mmap): one writer commits a few thousand
// transactions while concurrent readers, each on its own connection, check
// the invariants in every read transaction (the balances sum to the same
// total; the log rows are exactly 1..max, never fewer than the reader saw
// before). Then PRAGMA integrity_check, a checkpoint, and on the mount a
// remount after which the database is checked again.
func TestToolsSQLite(t *testing.T) {
	ntx := 3000
	if raceEnabled {
		// modernc's SQLite under the race detector, against a -race
		// daemon, runs 10-25x slower: 600 transactions (40-130 s here)
		// still take the WAL past its autocheckpoint size (~300).
		ntx = 600
	}
	if testing.Short() {
		ntx = 500
	}
	forEachTarget(t, mountOpts{}, func(t *testing.T, tg *target) {
		path := filepath.Join(tg.root, "state.db")
		w := openSQLite(t, path)
		mustExec(t, w, `CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)`)
		mustExec(t, w, `CREATE TABLE log(txn INTEGER PRIMARY KEY, src INTEGER, dst INTEGER, amt INTEGER, note TEXT)`)
		for i := range sqlAccounts {
			mustExec(t, w, `INSERT INTO acct VALUES(?, ?)`, i, sqlStart)
		}
		var mode string
		if err := w.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
			t.Fatalf("journal_mode %q (%v), want wal", mode, err)
		}

		done := make(chan struct{})
		var wg sync.WaitGroup
		readErrs := make([]error, sqlReaders)
		reads := make([]int, sqlReaders)
		for i := range sqlReaders {
			db := openSQLite(t, path)
			wg.Add(1)
			go func() {
				defer wg.Done()
				reads[i], readErrs[i] = sqliteReader(db, done)
			}()
		}

		r := rand.New(rand.NewSource(5))
		var werr error
		timed(t, fmt.Sprintf("%d SQLite write transactions with %d concurrent readers", ntx, sqlReaders), func() {
			for txn := 1; txn <= ntx && werr == nil; txn++ {
				werr = sqliteTransfer(w, r, txn)
			}
			close(done)
			wg.Wait()
		})
		if werr != nil {
			t.Fatalf("writer: %v", werr)
		}
		for i, err := range readErrs {
			if err != nil {
				t.Errorf("reader %d: %v", i, err)
			}
		}
		t.Logf("read transactions: %v", reads)
		checkSQLite(t, w, ntx)
		mustExec(t, w, `PRAGMA wal_checkpoint(TRUNCATE)`)
		w.Close()

		tg.remount(t)
		db := openSQLite(t, filepath.Join(tg.root, "state.db"))
		checkSQLite(t, db, ntx)
		db.Close()
	})
}

// openSQLite opens path in WAL mode (synchronous=NORMAL, the usual WAL
// setting), with a busy timeout, closed at the end of the test.
func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(20000)&_pragma=synchronous(NORMAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// sqliteTransfer commits transaction number txn.
func sqliteTransfer(db *sql.DB, r *rand.Rand, txn int) error {
	src, dst, amt := r.Intn(sqlAccounts), r.Intn(sqlAccounts), r.Intn(100)
	note := randData(r, r.Intn(2000))
	tx, err := db.Begin()
	if err != nil {
		return fmt.Errorf("txn %d: begin: %w", txn, err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`UPDATE acct SET bal = bal - ? WHERE id = ?`, amt, src); err != nil {
		return fmt.Errorf("txn %d: %w", txn, err)
	}
	if _, err := tx.Exec(`UPDATE acct SET bal = bal + ? WHERE id = ?`, amt, dst); err != nil {
		return fmt.Errorf("txn %d: %w", txn, err)
	}
	if _, err := tx.Exec(`INSERT INTO log VALUES(?, ?, ?, ?, ?)`, txn, src, dst, amt, fmt.Sprintf("%x", note)); err != nil {
		return fmt.Errorf("txn %d: %w", txn, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("txn %d: commit: %w", txn, err)
	}
	return nil
}

// sqliteReader checks the invariants in read transactions until done is
// closed, and returns how many it ran.
func sqliteReader(db *sql.DB, done <-chan struct{}) (int, error) {
	defer db.Close()
	seen := 0
	for n := 0; ; n++ {
		select {
		case <-done:
			return n, nil
		default:
		}
		tx, err := db.Begin()
		if err != nil {
			return n, err
		}
		var sum, count, max int
		err = tx.QueryRow(`SELECT SUM(bal) FROM acct`).Scan(&sum)
		if err == nil {
			err = tx.QueryRow(`SELECT COUNT(*), IFNULL(MAX(txn), 0) FROM log`).Scan(&count, &max)
		}
		tx.Rollback()
		switch {
		case err != nil:
			return n, fmt.Errorf("read %d: %w", n, err)
		case sum != sqlAccounts*sqlStart:
			return n, fmt.Errorf("read %d: balances sum to %d, want %d", n, sum, sqlAccounts*sqlStart)
		case count != max:
			return n, fmt.Errorf("read %d: %d log rows but max txn %d (a transaction seen in part)", n, count, max)
		case count < seen:
			return n, fmt.Errorf("read %d: %d log rows, fewer than the %d seen before", n, count, seen)
		}
		seen = count
		// Readers poll, as an agent's status reader would, rather than
		// spin: three spinning readers on two cores measure the scheduler.
		time.Sleep(readerPause)
	}
}

// checkSQLite runs PRAGMA integrity_check and checks the final state.
func checkSQLite(t *testing.T, db *sql.DB, ntx int) {
	t.Helper()
	rows, err := db.Query(`PRAGMA integrity_check`)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, s)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0] != "ok" {
		t.Fatalf("PRAGMA integrity_check: %q", msgs)
	}
	var sum, count int
	if err := db.QueryRow(`SELECT (SELECT SUM(bal) FROM acct), (SELECT COUNT(*) FROM log)`).Scan(&sum, &count); err != nil {
		t.Fatal(err)
	}
	if sum != sqlAccounts*sqlStart || count != ntx {
		t.Fatalf("final state: sum %d (want %d), %d log rows (want %d)", sum, sqlAccounts*sqlStart, count, ntx)
	}
}
