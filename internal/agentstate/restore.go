package agentstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"wsfs/internal/vfs"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// RestoreOptions say what to restore and where.
type RestoreOptions struct {
	// ReplicaURL is the replica to restore from (path or URL).
	ReplicaURL string
	// To is the database file to create. It must not exist (nor its -wal
	// and -shm files): a restore never overwrites a database.
	To string
	// At, if set, restores the state as of that time (the last transaction
	// replicated at or before it); zero restores the latest replicated state.
	At time.Time
	// Adopt records beside To (To+AdoptedSuffix, before To appears) that
	// the database continues this replica, so that a sidecar replicating
	// To to ReplicaURL starts (see adopt.go). For a workspace's own
	// database; without it such a sidecar refuses.
	Adopt bool
}

// Restore rebuilds a database from a replica into opt.To, written to a
// temporary file, synced and renamed into place, then checked with SQLite's
// quick_check. The result holds the transactions the replica had; anything
// committed locally but never uploaded (see the package doc) is not there.
func Restore(ctx context.Context, opt RestoreOptions) error {
	if opt.To == "" {
		return fmt.Errorf("restore: no output path")
	}
	for _, p := range []string{opt.To, opt.To + "-wal", opt.To + "-shm"} {
		ok, err := exists(p)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if ok {
			return fmt.Errorf("restore: %s exists; restore never overwrites a database: choose another path or move it aside", p)
		}
	}
	client, err := NewReplicaClient(opt.ReplicaURL)
	if err != nil {
		return err
	}
	if err := CheckReplica(ctx, client, opt.ReplicaURL, 30*time.Second); err != nil {
		return err
	}
	// The database holds the agent's state: it is built in a private
	// directory beside opt.To and made 0600 before it appears under its
	// name (Litestream creates it with the umask's mode, 0644 by default,
	// readable by every user of the host wherever --to points).
	// The directory may not exist yet (a workspace just pulled onto a new
	// host has no agent/ directory): made private and durably, like the
	// sidecar's.
	if err := vfs.MkdirAllDurable(vfs.Default, filepath.Dir(opt.To), dirPerm); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	tmpDir, err := os.MkdirTemp(filepath.Dir(opt.To), ".tmp-restore-")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	out := filepath.Join(tmpDir, filepath.Base(opt.To))
	// What the replica holds before the restore reads it: the adoption
	// record must not claim more than the restored database continues.
	var ext ReplicaExtent
	if opt.Adopt {
		if ext, err = Extent(ctx, client); err != nil {
			return fmt.Errorf("restore %s: list replica %s: %w", opt.To, opt.ReplicaURL, err)
		}
	}
	r := litestream.NewReplicaWithClient(nil, client)
	ro := litestream.NewRestoreOptions()
	ro.OutputPath = out
	ro.Timestamp = opt.At
	ro.IntegrityCheck = litestream.IntegrityCheckQuick
	err = r.Restore(ctx, ro)
	if err == nil && opt.Adopt {
		err = writeAdoption(opt.To, out, opt.ReplicaURL, ext.MaxTXID)
	}
	if err == nil {
		err = publishPrivate(out, opt.To)
	}
	if err != nil {
		if errors.Is(err, litestream.ErrTxNotAvailable) || errors.Is(err, litestream.ErrNoSnapshots) {
			return fmt.Errorf("restore %s: %w", opt.To, notAvailable(ctx, client, opt, err))
		}
		if de := findDamage(ctx, client, opt); de != nil {
			return fmt.Errorf("restore %s: %w", opt.To, de)
		}
		if !opt.At.IsZero() {
			return fmt.Errorf("restore %s as of %s from %s: %w", opt.To, opt.At.Format(time.RFC3339Nano), opt.ReplicaURL, err)
		}
		return fmt.Errorf("restore %s from %s: %w", opt.To, opt.ReplicaURL, err)
	}
	return nil
}

// NotAvailableError is Restore's refusal when the replica does not hold the
// state asked for: it is empty, or --at lies before its first transaction.
// It says what the replica does hold.
type NotAvailableError struct {
	ReplicaURL string
	At         time.Time // the time asked for; zero: the latest state
	// First and Last are the times of the replica's first and last
	// transaction files, zero if the replica is empty (or could not be
	// listed: then ListErr says why).
	First, Last      time.Time
	MinTXID, MaxTXID ltx.TXID
	ListErr          error
	Err              error // Litestream's error
}

func (e *NotAvailableError) Unwrap() error { return e.Err }

func (e *NotAvailableError) Error() string {
	const ts = time.RFC3339Nano
	switch {
	case e.ListErr != nil:
		return fmt.Sprintf("replica %s has no restorable state (%v), and listing it failed: %v", e.ReplicaURL, e.Err, e.ListErr)
	case e.First.IsZero():
		return fmt.Sprintf("replica %s holds no copy of this database: its sidecar has not uploaded anything there yet "+
			"(is `wsfs sidecar NAME` or `wsfs up` running? `wsfs state sync NAME` waits for an upload), "+
			"or this is not the replica the sidecar writes (check --replica and agent_state.replica_url in wsfs.json)", e.ReplicaURL)
	case !e.At.IsZero():
		return fmt.Sprintf("replica %s has no state as of %s: it holds transactions %s to %s, written from %s to %s; "+
			"restore --at a time after %s, or leave --at out for the latest state",
			e.ReplicaURL, e.At.UTC().Format(ts), e.MinTXID, e.MaxTXID, e.First.Format(ts), e.Last.Format(ts), e.First.Format(ts))
	}
	return fmt.Sprintf("replica %s holds transactions %s to %s (written from %s to %s) but no restorable sequence of them (%v): "+
		"restart the workspace's sidecar, which uploads a full snapshot at start, then restore again",
		e.ReplicaURL, e.MinTXID, e.MaxTXID, e.First.Format(ts), e.Last.Format(ts), e.Err)
}

// notAvailable lists the replica to say what it holds.
func notAvailable(ctx context.Context, c litestream.ReplicaClient, opt RestoreOptions, cause error) *NotAvailableError {
	e := &NotAvailableError{ReplicaURL: opt.ReplicaURL, At: opt.At, Err: cause}
	ext, err := Extent(ctx, c)
	if err != nil {
		e.ListErr = err
		return e
	}
	e.First, e.Last, e.MinTXID, e.MaxTXID = ext.First, ext.Last, ext.MinTXID, ext.MaxTXID
	return e
}

// publishPrivate makes the restored database out 0600 and links it to to
// (which must not exist: a restore never overwrites a database), then
// syncs to's directory.
func publishPrivate(out, to string) error {
	if err := os.Chmod(out, 0o600); err != nil {
		return err
	}
	if err := os.Link(out, to); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(to))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// DamagedReplicaError is Restore's refusal when the replica holds the
// state asked for but a file the restore needs is damaged (fails its
// checksums or is cut short: the replica's storage lost or changed it)
// or missing from the middle of the sequence. It names the file and what
// to do; the restore wrote no database.
type DamagedReplicaError struct {
	ReplicaURL string
	// File is the damaged file (ltx/LEVEL/MIN-MAX.ltx under the
	// replica), empty when a file is missing: then MinTXID..MaxTXID is
	// the gap.
	File             string
	MinTXID, MaxTXID ltx.TXID
	CreatedAt        time.Time // when the damaged file was written
	Err              error     // what checking the file found
}

func (e *DamagedReplicaError) Unwrap() error { return e.Err }

func (e *DamagedReplicaError) Error() string {
	const ts = time.RFC3339Nano
	what := fmt.Sprintf("replica %s is damaged: its file %s (transactions %s to %s, written %s) fails its checks (%v)",
		e.ReplicaURL, e.File, e.MinTXID, e.MaxTXID, e.CreatedAt.UTC().Format(ts), e.Err)
	if e.File == "" {
		what = fmt.Sprintf("replica %s is damaged: transactions %s to %s are missing from it (%v)",
			e.ReplicaURL, e.MinTXID, e.MaxTXID, e.Err)
	}
	return what + "; if the workspace's database is intact on its host, restart its sidecar, which uploads a full " +
		"snapshot at start that later restores begin from (then `wsfs state sync NAME` and restore again); " +
		"otherwise an earlier state may restore with --at a time before the damage"
}

// findDamage explains a failed restore by the replica's files: it
// recomputes the restore plan and reads every file in it in full
// (checksums), and returns the first gap or damaged file, or nil when
// the files are sound (the failure is elsewhere: the network, the local
// disk).
func findDamage(ctx context.Context, c litestream.ReplicaClient, opt RestoreOptions) *DamagedReplicaError {
	de := &DamagedReplicaError{ReplicaURL: opt.ReplicaURL}
	plan, err := litestream.CalcRestorePlan(ctx, c, 0, opt.At, slog.New(slog.DiscardHandler))
	if err != nil {
		var from, to ltx.TXID
		if _, serr := fmt.Sscanf(errText(err, "non-contiguous ltx files: "), "have up to %x but next file starts at %x", &from, &to); serr == nil {
			de.MinTXID, de.MaxTXID, de.Err = from+1, to-1, err
			return de
		}
		return nil
	}
	for _, f := range plan {
		if err := verifyLTX(ctx, c, f); err != nil {
			de.File = path.Join("ltx", strconv.Itoa(f.Level), ltx.FormatFilename(f.MinTXID, f.MaxTXID))
			de.MinTXID, de.MaxTXID, de.CreatedAt, de.Err = f.MinTXID, f.MaxTXID, f.CreatedAt, err
			return de
		}
	}
	return nil
}

// errText returns the part of err's message after marker, or "".
func errText(err error, marker string) string {
	_, after, ok := strings.Cut(err.Error(), marker)
	if !ok {
		return ""
	}
	return after
}

// verifyLTX reads the LTX file f from c in full and checks its checksums.
func verifyLTX(ctx context.Context, c litestream.ReplicaClient, f *ltx.FileInfo) error {
	rc, err := c.OpenLTXFile(ctx, f.Level, f.MinTXID, f.MaxTXID, 0, 0)
	if err != nil {
		return err
	}
	defer rc.Close()
	return ltx.NewDecoder(rc).Verify()
}
