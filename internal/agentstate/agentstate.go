// Package agentstate is the agent's SQLite state database of one workspace
// and its replication sidecar.
//
// Each workspace has one database, STATE/workspaces/NAME/agent/state.db, in
// WAL mode. The agent finds its path in the environment variable
// WSFS_AGENT_STATE and opens it with OpenDB (or any SQLite library using the
// same file locking; inside one Go process it must be modernc.org/sqlite,
// the driver Litestream itself uses: two drivers in one process break
// SQLite's POSIX locks).
//
// A Sidecar replicates that database continuously with Litestream (v0.5,
// used as a library: litestream.DB, Replica and Store, not a
// reimplementation). The replica is a file replica under
// POOL/replicas/NAME by default, or any Litestream replica URL compiled
// into this binary (see ReplicaSchemes).
//
// # What Litestream promises, and what it does not
//
// Replication is asynchronous. A transaction that SQLite has committed
// locally reaches the replica within roughly one sync interval (Litestream
// polls the WAL every MonitorInterval and uploads every SyncInterval; one
// second each by default). If the host dies, or the sidecar is killed and
// the local disk is lost, the transactions of the last interval can be
// missing from the replica: a restore returns a consistent database (a
// prefix of the committed transactions), not necessarily the latest one.
//
// A caller that needs a confirmed position uses sync-and-wait: Sidecar.Sync
// (or RequestSync over the sidecar's socket, `wsfs state sync NAME`) turns
// every committed WAL frame into an LTX file, uploads it, and returns only
// when the replica client has acknowledged the upload (for the file replica:
// written, fsynced, renamed, directory fsynced). Every transaction committed
// before the call is then in the replica; the returned Position names the
// last one. A failed sync returns an error and never a position.
//
// If the sidecar is killed, the local database keeps every committed
// transaction (SQLite's own durability); a restarted sidecar resumes from
// the replica's position and uploads what it missed, then uploads a full
// snapshot taken from the database itself. That snapshot is a workaround:
// with Litestream v0.5.18, when the application checkpointed while the
// sidecar was down, the incremental files written at the restart lost a
// page now and then (rows missing from the middle of a restored table,
// SQLite's quick_check passing; upstream: benbjohnson/litestream#1164,
// #1198). A latest-state restore starts from the newest snapshot and is
// complete; a point-in-time restore (--at) to a moment between such a
// kill and the restart can still hit the lost page. Agents should leave
// checkpoints to Litestream anyway (wal_autocheckpoint=0, as OpenDB and DSN
// set): then the hazard needs a checkpoint on close of the last connection
// while the sidecar is down.
//
// A second workaround of the same kind: a transaction that shrinks the
// database (RestoreLive to a smaller snapshot copy, or the agent's VACUUM)
// while another connection commits left, with v0.5.18, incremental files
// from which the latest state restored "malformed" in about one run in
// two; the sidecar uploads a full snapshot whenever it sees the database
// shrink (Sidecar.shrinkWatch), and a point-in-time restore to the moment
// between the shrink and that snapshot can still hit the damage.
package agentstate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // the driver Litestream uses; see the package doc

	"wsfs/internal/host"
	"wsfs/internal/vfs"
)

// EnvVar is the environment variable that hands an agent the path of its
// state database.
const EnvVar = "WSFS_AGENT_STATE"

// File names inside the agent directory STATE/workspaces/NAME/agent.
const (
	DBName     = "state.db"     // the database
	SocketName = "sidecar.sock" // the running sidecar's control socket
	StatusName = "sidecar.json" // the sidecar's status, rewritten every second
)

// Paths are the files of one workspace's agent state.
type Paths struct {
	DB         string // STATE/workspaces/NAME/agent/state.db
	Socket     string // the sidecar's control socket
	Status     string // the sidecar's status file
	ReplicaDir string // POOL/replicas/NAME, the default file replica
}

// PathsFor returns the agent-state paths of workspace name on host h.
func PathsFor(h *host.Host, name string) Paths {
	dir := h.AgentDir(name)
	return Paths{
		DB:         filepath.Join(dir, DBName),
		Socket:     socketPath(dir),
		Status:     filepath.Join(dir, StatusName),
		ReplicaDir: filepath.Join(h.PoolDir(), "replicas", name),
	}
}

// socketPath is the sidecar's control socket for the agent directory dir:
// the file dir/sidecar.sock, reached through its directory's handle when
// the path is too long for a unix socket address (unixsock; never an
// abstract socket, which another local user could bind first, keeping the
// sidecar from starting).
func socketPath(dir string) string { return filepath.Join(dir, SocketName) }

// DSN is the data source name OpenDB uses. PRAGMAs given as DSN parameters
// apply to every connection of the pool (unlike an Exec of PRAGMA):
//
//   - journal_mode(wal): Litestream follows the WAL.
//   - busy_timeout(30000): wait for Litestream's write lock instead of
//     failing. Litestream's checkpoint holds it across an LTX write, the
//     PASSIVE checkpoint (1000 pages or more into the database) and their
//     fsyncs: milliseconds on an idle disk, but more than the 5 s its docs
//     suggest on a slow or loaded one (in e2e TestPowerCutUp on a loaded
//     2-core machine transactions took up to 4.1 s, and an agent failed
//     with SQLITE_BUSY after 5 s). 30 s is the
//     supervisor's stop timeout: a sidecar holding the lock longer is as
//     good as hung, and the agent's error then says so.
//   - wal_autocheckpoint(0): the application never checkpoints; Litestream
//     does (passive checkpoints every ~1000 pages, as Litestream's own tips
//     recommend), so the application does not checkpoint behind a dead
//     sidecar's back (see the package doc). The WAL grows while no
//     sidecar runs and shrinks at the sidecar's next checkpoint.
//
// Synchronous stays at SQLite's default FULL: a committed transaction
// survives a power loss locally.
func DSN(path string) string {
	u := url.URL{Scheme: "file", Opaque: path}
	return u.String() + "?_pragma=busy_timeout(30000)&_pragma=journal_mode(wal)&_pragma=wal_autocheckpoint(0)"
}

// OpenDB opens (creating if needed) the state database at path in WAL mode
// with the modernc.org/sqlite driver. Its directory must exist.
func OpenDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open agent state %s: %w", path, err)
	}
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("open agent state %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("open agent state %s: journal mode is %q, want wal (is the file on a filesystem without shared-memory support?)", path, mode)
	}
	return db, nil
}

// Ensure creates the agent directory and the database (in WAL mode, with a
// small wsfs_meta table naming the workspace) if they do not exist. A
// database file of zero pages has no WAL for Litestream to follow, hence
// the table. It is safe while an agent writes: the table is created in an
// IMMEDIATE transaction (which waits for the write lock instead of failing
// on a stale read snapshot), and only when missing.
//
// The database is private to the user running wsfs (0600; SQLite gives its
// -wal and -shm files the database's mode): Ensure creates the file empty
// with that mode before SQLite opens it, and removes group and other bits
// from a database (and its -wal, -shm) that an older version created
// world-readable.
func Ensure(path, workspace string) error {
	// Durably: SQLite syncs the directory of the database's WAL, not the
	// directories above it (a power cut found the database gone).
	if err := vfs.MkdirAllDurable(vfs.Default, filepath.Dir(path), dirPerm); err != nil {
		return fmt.Errorf("create agent state directory: %w", err)
	}
	if f, err := vfs.Default.CreateExcl(path, filePerm); err == nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("create agent state %s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create agent state %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, st.Mode().Perm()&^0o077); err != nil {
				return fmt.Errorf("make agent state %s private: %w", p, err)
			}
		}
	}
	db, err := OpenDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'wsfs_meta'`).Scan(&n); err != nil {
		return fmt.Errorf("initialise agent state %s: %w", path, err)
	}
	if n > 0 {
		return db.Close()
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("initialise agent state %s: %w", path, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return fmt.Errorf("initialise agent state %s: %w", path, err)
	}
	_, err = conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS wsfs_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO wsfs_meta (key, value) VALUES ('workspace', ?)`, workspace)
	if err != nil {
		conn.ExecContext(ctx, `ROLLBACK`)
		return fmt.Errorf("initialise agent state %s: %w", path, err)
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return fmt.Errorf("initialise agent state %s: %w", path, err)
	}
	conn.Close()
	return db.Close()
}

// dirPerm and filePerm keep the agent state and file replicas private to
// the user running wsfs (as host.DirPerm and host.FilePerm).
const (
	dirPerm  = 0o700
	filePerm = 0o600
)

// exists reports whether path exists.
func exists(path string) (bool, error) {
	_, err := vfs.Default.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
