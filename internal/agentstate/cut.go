package agentstate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"wsfs/internal/host"
	"wsfs/internal/vfs"
)

// A snapshot records the agent state database as a consistent copy (the
// SQLite online backup API), not as a Litestream replica position: the
// copy lives in the host's pool like the files (deduplicated, marked by
// gc, checked by fsck, shipped with the snapshot) and stays restorable as
// long as the snapshot exists, whatever the replica has retained or
// compacted since. docs/benchmarks.md has the measurement behind the
// choice.
//
// The copy and the file tree form one cut by a bracket: BeginCut opens a
// read transaction on the database before the file cut, and Cut.Copy
// copies from inside that same transaction after it. The copy is then
// the database as of one instant between the call of BeginCut and the
// file cut: it holds every transaction committed before BeginCut was
// called and none committed after the file cut.

// sqliteConn is what modernc.org/sqlite's driver connection offers to
// copy a database page by page (sqlite3_backup_*).
type sqliteConn interface {
	NewBackup(dstURI string) (*sqlite.Backup, error)
	NewRestore(srcURI string) (*sqlite.Backup, error)
}

// newDriverBackup starts a backup between the driver connection dc and
// the database file at path: from dc into path, or (restore) from path
// into dc.
func newDriverBackup(dc any, path string, restore bool) (*sqlite.Backup, error) {
	c, ok := dc.(sqliteConn)
	if !ok {
		return nil, fmt.Errorf("the SQLite driver's connection (%T) has no backup API", dc)
	}
	if restore {
		return c.NewRestore(path)
	}
	return c.NewBackup(path)
}

// runBackup copies, with SQLite's backup API, conn's main database into
// the database file at path (restore false) or that file's database into
// conn's (restore true), all of it in one step: one transaction on the
// destination, so a failure leaves it unchanged.
func runBackup(conn *sql.Conn, path string, restore bool) error {
	return conn.Raw(func(dc any) error {
		b, err := newDriverBackup(dc, path, restore)
		if err != nil {
			return err
		}
		_, serr := b.Step(-1)
		if ferr := b.Finish(); serr == nil {
			serr = ferr
		}
		return serr
	})
}

// Cut is a pinned state of an agent database: an open read transaction
// on one connection. Close it when done (it ends the transaction).
type Cut struct {
	path string
	db   *sql.DB
	conn *sql.Conn
}

// DBIn returns the agent state database of the workspace whose directory
// is wsDir (STATE/workspaces/NAME/agent/state.db; see host.AgentDirIn).
func DBIn(wsDir string) string { return filepath.Join(host.AgentDirIn(wsDir), DBName) }

// BeginCut pins the committed state of the database at path (a read
// transaction) and returns it; it returns nil and no error when there is
// no database at path. It opens the database read-only, so it never
// writes to it (no checkpoint on close either), and it never waits for
// writers (WAL readers do not block, and are not blocked by, the agent or
// the sidecar). One exception: a database in rollback-journal mode with a
// hot journal (an agent killed inside a transaction) cannot be read
// read-only; BeginCut then rolls the journal back first, as SQLite does
// at any read-write open (rollbackHotJournal), and pins the committed
// state that leaves.
func BeginCut(ctx context.Context, path string) (*Cut, error) {
	c, err := beginCut(ctx, path)
	if isReadonlyRollback(err) {
		if rerr := rollbackHotJournal(ctx, path); rerr != nil {
			return nil, fmt.Errorf("agent state %s: roll back the hot journal a killed writer left: %w", path, rerr)
		}
		c, err = beginCut(ctx, path)
	}
	return c, err
}

// isReadonlyRollback reports whether err is SQLite's refusal to read a
// database whose hot journal it cannot roll back on a read-only
// connection (SQLITE_READONLY_ROLLBACK).
func isReadonlyRollback(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_READONLY_ROLLBACK
}

// rollbackHotJournal opens the database at path read-write and reads its
// schema, which makes SQLite roll back a hot journal (under its exclusive
// lock, waiting for other connections as OpenDB does). The connection
// sets no journal mode: the database stays in rollback-journal mode, so
// closing it checkpoints nothing.
func rollbackHotJournal(ctx context.Context, path string) error {
	u := url.URL{Scheme: "file", Opaque: path}
	db, err := sql.Open("sqlite", u.String()+"?_pragma=busy_timeout(30000)")
	if err != nil {
		return err
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
		return err
	}
	return db.Close()
}

// roDSN opens the database at path read-only, with OpenDB's busy
// timeout and no other PRAGMA.
func roDSN(path string) string {
	u := url.URL{Scheme: "file", Opaque: path}
	return u.String() + "?mode=ro&_pragma=busy_timeout(30000)"
}

func beginCut(ctx context.Context, path string) (*Cut, error) {
	if ok, err := exists(path); err != nil {
		return nil, fmt.Errorf("agent state %s: %w", path, err)
	} else if !ok {
		return nil, nil
	}
	// Read-only: the cut never writes to the database, not even the
	// checkpoint SQLite runs when the last connection closes (a
	// checkpoint behind a stopped sidecar's back is the hazard the
	// package doc describes).
	// Nor does it set a journal mode (DSN's journal_mode(wal) is a write
	// on a database in rollback-journal mode, refused read-only): the
	// database is read in whatever mode it is in.
	db, err := sql.Open("sqlite", roDSN(path))
	if err != nil {
		return nil, fmt.Errorf("agent state %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	c := &Cut{path: path, db: db}
	c.conn, err = db.Conn(ctx)
	if err == nil {
		_, err = c.conn.ExecContext(ctx, `BEGIN`)
	}
	if err == nil {
		// BEGIN is deferred: the first read starts the transaction and
		// fixes the state it sees.
		var n int
		err = c.conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("agent state %s: begin the snapshot's read transaction: %w", path, err)
	}
	return c, nil
}

// Copy writes a consistent copy of the pinned state (the SQLite backup API
// run inside the cut's read transaction, into a private temp file beside
// the database) and hands it to put in pieces of chunk bytes, in order
// (the last one shorter). It returns the copy's size. The temp file is
// removed before Copy returns.
func (c *Cut) Copy(ctx context.Context, chunk int, put func([]byte) error) (int64, error) {
	tmp, err := privateTemp(filepath.Dir(c.path), ".tmp-cut-")
	if err != nil {
		return 0, fmt.Errorf("agent state %s: copy: %w", c.path, err)
	}
	defer removeTemp(tmp)
	err = runBackup(c.conn, tmp, false)
	if err != nil {
		return 0, fmt.Errorf("agent state %s: copy with the backup API: %w", c.path, err)
	}
	f, err := os.Open(tmp)
	if err != nil {
		return 0, fmt.Errorf("agent state %s: copy: %w", c.path, err)
	}
	defer f.Close()
	buf := make([]byte, chunk)
	var size int64
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			size += int64(n)
			if perr := put(buf[:n]); perr != nil {
				return size, perr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return size, nil
		}
		if err != nil {
			return size, fmt.Errorf("agent state %s: read copy: %w", c.path, err)
		}
	}
}

// Close ends the read transaction and closes the database.
func (c *Cut) Close() error {
	if c.conn != nil {
		c.conn.ExecContext(context.Background(), `ROLLBACK`)
		c.conn.Close()
	}
	return c.db.Close()
}

// RestoreLive sets the database at path to the database image that write
// produces (for a snapshot: its copy, chunk by chunk from the pool), in
// one ordinary write transaction of the database itself: the SQLite
// backup API with the live database as its destination. It is safe while
// the agent and the Litestream sidecar have the database open: nothing
// replaces the file under them; their connections see the new content at
// their next transaction, as after any other writer's commit, and the
// sidecar replicates it as ordinary WAL frames. It waits for the write
// lock (busy timeout, as OpenDB's) and is durable when it returns
// (synchronous FULL: the WAL is synced at the commit). A database that
// does not exist yet is created first (Ensure) with its private
// directory. The image is checked (SQLite's integrity_check) before it
// is copied in, so a damaged copy changes nothing; the result is
// checked again after.
//
// This is the one way wsfs sets an agent database to a snapshot's copy:
// fork (into the new workspace's fresh database), offline restore and
// the daemon's online restore all call it (through
// snapshot.RestoreAgent).
func RestoreLive(ctx context.Context, path, workspace string, write func(w io.Writer) error) error {
	if err := Ensure(path, workspace); err != nil {
		return err
	}
	tmp, err := privateTemp(filepath.Dir(path), ".tmp-restore-")
	if err != nil {
		return fmt.Errorf("agent state %s: restore: %w", path, err)
	}
	defer removeTemp(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_TRUNC, filePerm)
	if err != nil {
		return fmt.Errorf("agent state %s: restore: %w", path, err)
	}
	werr := write(f)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("agent state %s: restore: write the snapshot's copy: %w", path, werr)
	}
	if err := integrityCheck(ctx, tmp); err != nil {
		return fmt.Errorf("agent state %s: restore: the snapshot's copy is damaged (%w); the database is unchanged", path, err)
	}
	db, err := OpenDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("agent state %s: restore: %w", path, err)
	}
	defer conn.Close()
	err = runBackup(conn, tmp, true)
	if err != nil {
		return fmt.Errorf("agent state %s: restore with the backup API: %w (the database is unchanged: the copy runs in one transaction)", path, err)
	}
	var res string
	if err := conn.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&res); err != nil || res != "ok" {
		return fmt.Errorf("agent state %s: restored database fails quick_check: %q %v", path, res, err)
	}
	return nil
}

// integrityCheck runs SQLite's integrity_check on the database file at
// path (opened read-only).
func integrityCheck(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&res); err != nil {
		return err
	}
	if res != "ok" {
		return fmt.Errorf("integrity_check: %s", res)
	}
	return nil
}

// privateTemp creates an empty 0600 file with a random name under dir and
// returns its path.
func privateTemp(dir, prefix string) (string, error) {
	if err := vfs.MkdirAllDurable(vfs.Default, dir, dirPerm); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, prefix+"*.db")
	if err != nil {
		return "", err
	}
	name := f.Name()
	if err := f.Chmod(filePerm); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	return name, f.Close()
}

// removeTemp removes a temp database and the journal files SQLite may
// have left beside it.
func removeTemp(path string) {
	for _, p := range []string{path, path + "-journal", path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			_ = err // a leftover .tmp- file is harmless; the next Ensure ignores it
		}
	}
}
