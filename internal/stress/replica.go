package stress

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"wsfs/internal/agentstate"
)

// Agent state replication in the wsfs arms.
//
// A wsfs host runs one replication sidecar per workspace (`wsfs sidecar
// NAME`, Litestream with its default one-second sync interval, the file
// replica POOL/replicas/NAME) next to the daemon, so the wsfs arms do too:
// the harness starts a sidecar per workspace before the agents, and the
// agents' progress rows are replicated while they run. After the agents
// finished it asks each sidecar for a sync-and-wait (the latency is
// reported), stops it with SIGTERM (it syncs once more and exits 0),
// restores the database from the replica into the run directory and
// compares every progress row with the original. Any difference, a failed
// sync or restore, or a sidecar that does not exit cleanly fails the run.
//
// The native and loopback arms keep the same agent database, written the
// same way, without a sidecar: `wsfs sidecar` replicates a workspace of a
// wsfs host, which those arms do not have. Giving the replication cost to
// the wsfs arms alone biases every comparison against wsfs, never for it.
const (
	sidecarStopGrace = 30 * time.Second // above the sidecar's own 20 s shutdown-sync bound
	replicaTimeout   = 60 * time.Second // one sync-and-wait, one restore
)

// sidecarFor is the replication sidecar of one wsfs-arm workspace.
type sidecarFor struct {
	name    string // workspace name on the run's host
	db      string // the agent state database it replicates
	socket  string // its control socket (sync-and-wait)
	replica string // the replica URL or path, for the restore
	p       *proc
}

// startSidecar starts `wsfs sidecar NAME` for workspace name of the host at
// home and waits until its control socket exists. Its output goes to
// logPath: a file, never a pipe, so the sidecar cannot be killed by SIGPIPE
// when the harness stops reading.
func startSidecar(exe, home, name string, paths agentstate.Paths, replica, logPath string) (*sidecarFor, error) {
	p, err := startProc("sidecar "+name, exe, []string{"sidecar", "--home", home, name}, nil, logPath, nil)
	if err != nil {
		return nil, err
	}
	s := &sidecarFor{name: name, db: paths.DB, socket: paths.Socket, replica: replica, p: p}
	if err := waitReady(p, paths.Socket, readyTimeout); err != nil {
		return s, err
	}
	return s, nil
}

// syncWait asks the sidecar to upload every committed transaction and waits
// for the replica's acknowledgement; it returns how long that took.
func (s *sidecarFor) syncWait(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, replicaTimeout)
	defer cancel()
	t0 := time.Now()
	if _, err := agentstate.RequestSync(ctx, s.socket); err != nil {
		return 0, fmt.Errorf("sidecar %s: sync-and-wait: %w%s", s.name, err, s.p.logTail())
	}
	return time.Since(t0), nil
}

// verify restores the replica into to (which must not exist) and compares
// its progress table with the original database's, row by row. The
// sidecar must have stopped: the original is then read without a
// replicator behind it, and nothing is left to upload.
func (s *sidecarFor) verify(ctx context.Context, to string) (rows int, err error) {
	ctx, cancel := context.WithTimeout(ctx, replicaTimeout)
	defer cancel()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return 0, err
	}
	if err := agentstate.Restore(ctx, agentstate.RestoreOptions{ReplicaURL: s.replica, To: to}); err != nil {
		return 0, fmt.Errorf("workspace %s: %w", s.name, err)
	}
	n, err := CompareProgress(s.db, to)
	if err != nil {
		return n, fmt.Errorf("workspace %s: replica of %s: %w", s.name, s.db, err)
	}
	return n, nil
}

// progressRow is one row of the agent's progress table.
type progressRow struct {
	ID        int64
	Phase     string
	FilesDone int64
	AtUnixNs  int64
}

// CompareProgress reads the progress table of the databases at orig and
// copy and returns the number of rows when both hold exactly the same rows
// (every column); otherwise an error naming the first difference. An empty
// original is an error: the agent writes rows in every phase, so there is
// nothing to verify only if it never ran.
func CompareProgress(orig, copy string) (int, error) {
	want, err := readProgress(orig)
	if err != nil {
		return 0, err
	}
	got, err := readProgress(copy)
	if err != nil {
		return 0, err
	}
	if len(want) == 0 {
		return 0, fmt.Errorf("the original progress table in %s is empty: the agent recorded nothing to verify", orig)
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return i, fmt.Errorf("progress row %d differs: original %+v, restored %+v", i, want[i], got[i])
		}
	}
	if len(got) != len(want) {
		return min(len(want), len(got)), fmt.Errorf("restored progress table has %d rows, the original %d (first missing or extra: row %d)",
			len(got), len(want), min(len(want), len(got)))
	}
	return len(want), nil
}

func readProgress(path string) ([]progressRow, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("progress table: %w", err)
	}
	db, err := agentstate.OpenDB(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id, phase, files_done, at_unix_ns FROM progress ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read progress table of %s: %w", path, err)
	}
	defer rows.Close()
	var out []progressRow
	for rows.Next() {
		var r progressRow
		if err := rows.Scan(&r.ID, &r.Phase, &r.FilesDone, &r.AtUnixNs); err != nil {
			return nil, fmt.Errorf("read progress table of %s: %w", path, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read progress table of %s: %w", path, err)
	}
	return out, nil
}
