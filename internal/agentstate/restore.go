package agentstate

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/litestream"
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
	r := litestream.NewReplicaWithClient(nil, client)
	ro := litestream.NewRestoreOptions()
	ro.OutputPath = opt.To
	ro.Timestamp = opt.At
	ro.IntegrityCheck = litestream.IntegrityCheckQuick
	if err := r.Restore(ctx, ro); err != nil {
		if !opt.At.IsZero() {
			return fmt.Errorf("restore %s as of %s from %s: %w", opt.To, opt.At.Format(time.RFC3339Nano), opt.ReplicaURL, err)
		}
		return fmt.Errorf("restore %s from %s: %w", opt.To, opt.ReplicaURL, err)
	}
	return nil
}
