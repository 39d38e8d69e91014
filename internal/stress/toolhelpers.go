package stress

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the project's SQLite driver (pure Go)
)

// The helpers below are steps of the tools benchmark that no standard tool
// does the same way everywhere; `wsfs agent smallfiles` and `wsfs agent
// sqlite` run them as their own processes, so they are measured like the
// real tools around them (the benchmark process only waits).

// SmallFilesResult is what RunSmallFiles did.
type SmallFilesResult struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// RunSmallFiles does what a test suite's temporary files do: it creates n
// small files (512 B to 4 KiB, deterministic content) in n/100 directories
// under dir, closes each, reads every one back and compares, then removes
// them all. dir must exist.
func RunSmallFiles(dir string, n int, seed int64) (SmallFilesResult, error) {
	var res SmallFilesResult
	rng := rand.New(rand.NewPCG(uint64(seed), 0x736d616c6c))
	dirs := max(1, n/100)
	content := func(i, size int) []byte {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte('a' + (i+j)%26)
		}
		return b
	}
	sizes := make([]int, n)
	for d := range dirs {
		if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("t%03d", d)), 0o755); err != nil {
			return res, err
		}
	}
	name := func(i int) string {
		return filepath.Join(dir, fmt.Sprintf("t%03d", i%dirs), fmt.Sprintf("f%05d.txt", i))
	}
	for i := range n {
		sizes[i] = 512 + rng.IntN(4096-512+1)
		if err := os.WriteFile(name(i), content(i, sizes[i]), 0o644); err != nil {
			return res, err
		}
		res.Files++
		res.Bytes += int64(sizes[i])
	}
	for i := range n {
		b, err := os.ReadFile(name(i))
		if err != nil {
			return res, err
		}
		if !bytes.Equal(b, content(i, sizes[i])) {
			return res, fmt.Errorf("%s: read back %d bytes that differ from the %d written", name(i), len(b), sizes[i])
		}
	}
	for i := range n {
		if err := os.Remove(name(i)); err != nil {
			return res, err
		}
	}
	for d := range dirs {
		if err := os.Remove(filepath.Join(dir, fmt.Sprintf("t%03d", d))); err != nil {
			return res, err
		}
	}
	return res, nil
}

// SQLiteResult is what RunSQLite measured.
type SQLiteResult struct {
	Transactions int     `json:"transactions"`
	TxP50Ms      float64 `json:"tx_p50_ms"`
	TxP99Ms      float64 `json:"tx_p99_ms"`
	Reads        int     `json:"reads"` // queries the readers completed while the writer ran
	Rows         int     `json:"rows"`  // rows found by a final read
}

// RunSQLite opens (creating) the database at path in WAL mode with
// synchronous=FULL, the durable setting an application that cares uses,
// and runs one writer doing tx small transactions (one 100-byte row each)
// while readers goroutines, each on its own connection, query the table
// until the writer is done. The WAL is checkpointed by SQLite itself
// (default wal_autocheckpoint), as in an application without a sidecar.
func RunSQLite(ctx context.Context, path string, tx, readers int) (SQLiteResult, error) {
	var res SQLiteResult
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)&_pragma=synchronous(full)"
	open := func() (*sql.DB, error) {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(1)
		return db, db.PingContext(ctx)
	}
	w, err := open()
	if err != nil {
		return res, fmt.Errorf("open %s: %w", path, err)
	}
	defer w.Close()
	if _, err := w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS kv (id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB NOT NULL)`); err != nil {
		return res, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	readErrs := make([]error, readers)
	reads := make([]int, readers)
	for r := range readers {
		db, err := open()
		if err != nil {
			close(stop)
			wg.Wait()
			return res, fmt.Errorf("open reader: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer db.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var n int
				var last sql.NullInt64
				if err := db.QueryRowContext(ctx, `SELECT count(*), max(id) FROM kv`).Scan(&n, &last); err != nil {
					readErrs[r] = err
					return
				}
				if last.Valid {
					var k string
					if err := db.QueryRowContext(ctx, `SELECT k FROM kv WHERE id = ?`, last.Int64).Scan(&k); err != nil {
						readErrs[r] = err
						return
					}
				}
				reads[r]++
			}
		}()
	}
	lat := make([]int64, 0, tx)
	v := bytes.Repeat([]byte{'v'}, 100)
	var werr error
	for i := range tx {
		t := time.Now()
		if _, err := w.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)`, fmt.Sprintf("key-%06d", i), v); err != nil {
			werr = fmt.Errorf("transaction %d: %w", i, err)
			break
		}
		lat = append(lat, int64(time.Since(t)))
		res.Transactions++
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		return res, werr
	}
	for r, err := range readErrs {
		if err != nil {
			return res, fmt.Errorf("reader %d: %w", r, err)
		}
		res.Reads += reads[r]
	}
	if err := w.QueryRowContext(ctx, `SELECT count(*) FROM kv`).Scan(&res.Rows); err != nil {
		return res, err
	}
	if res.Rows != tx {
		return res, fmt.Errorf("%d rows after %d transactions", res.Rows, tx)
	}
	res.TxP50Ms, res.TxP99Ms = ms(Percentile(lat, 50)), ms(Percentile(lat, 99))
	return res, nil
}
