package agentstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"

	"wsfs/internal/vfs"
)

// # A database that never replicated to a replica that holds state
//
// Litestream v0.5.18, started on a database whose local LTX files are
// missing (it never replicated from this host) while the replica holds
// transactions up to N, logs "detected database behind replica", fetches
// the replica's last L0 file as its local position and then converts the
// whole local database into transaction N+1, which it uploads; the
// sidecar's start-up snapshot follows. From then on a latest-state
// restore returns the local database: for a database that was just
// created empty (a pull killed before it restored the agent state, a pull
// with --no-agent-state, an agent that opened its path first) the real
// state survives only for a point-in-time restore, and only until
// retention removes it. Start therefore refuses (ReplicaAheadError) unless
// the database was restored from this very replica (the adoption record
// below) and the replica has not moved on since.

// AdoptedSuffix names the adoption record beside a database (DB.adopted):
// written by Restore with Adopt, it says that the database continues the
// replica it was restored from, which held transactions up to TXID then.
// A sidecar replicating the database to that replica starts over the
// replica's state, and removes the record once its own start-up snapshot
// is in the replica (its local LTX files record the position from then on).
const AdoptedSuffix = ".adopted"

type adoption struct {
	Replica string    `json:"replica"`
	TXID    uint64    `json:"txid"` // the replica's last transaction when restored
	At      time.Time `json:"restored_at"`
	// Inode is the restored database file's: the record speaks for that
	// file only, not for one created later at the same path.
	Inode uint64 `json:"inode"`
}

// ReplicaAheadError is the sidecar's refusal to replicate a database that
// has never replicated from this host over a replica that holds state.
type ReplicaAheadError struct {
	DB, Replica string
	Extent      ReplicaExtent
	Adopted     *adoption // the adoption record, if one names this replica
}

func (e *ReplicaAheadError) Error() string {
	const ts = time.RFC3339Nano
	why := fmt.Sprintf("%s has never been replicated from this host", e.DB)
	if e.Adopted != nil {
		why = fmt.Sprintf("%s was restored from it at %s when it held transactions up to %s, and it has moved on since (another host wrote to it)",
			e.DB, e.Adopted.At.UTC().Format(ts), ltx.TXID(e.Adopted.TXID))
	}
	return fmt.Sprintf("replica %s holds transactions %s to %s (written from %s to %s), but %s: "+
		"replicating it would make every latest-state restore return this database instead; refusing. "+
		"If the replica holds this workspace's agent state (for example after an interrupted or --no-agent-state `wsfs pull`), "+
		"move %s (and its -wal and -shm files) aside and restore it: `wsfs state restore NAME` "+
		"(or `wsfs rm NAME` and `wsfs pull NAME` again); "+
		"to replace the replica's state with this database instead (a workspace name reused after `wsfs rm`), run `wsfs state replace NAME`",
		e.Replica, e.Extent.MinTXID, e.Extent.MaxTXID, e.Extent.First.Format(ts), e.Extent.Last.Format(ts),
		why, e.DB)
}

// ReplicaExtent is what a replica holds: its first and last transaction
// and when their files were written (all zero: empty).
type ReplicaExtent struct {
	First, Last      time.Time
	MinTXID, MaxTXID ltx.TXID
}

// Extent lists every level of replica client c.
func Extent(ctx context.Context, c litestream.ReplicaClient) (ReplicaExtent, error) {
	var e ReplicaExtent
	for level := 0; level <= litestream.SnapshotLevel; level++ {
		itr, err := c.LTXFiles(ctx, level, 0, true)
		if err != nil {
			return e, err
		}
		for itr.Next() {
			f := itr.Item()
			if e.First.IsZero() || f.CreatedAt.Before(e.First) {
				e.First = f.CreatedAt
			}
			if f.CreatedAt.After(e.Last) {
				e.Last = f.CreatedAt
			}
			if e.MinTXID == 0 || f.MinTXID < e.MinTXID {
				e.MinTXID = f.MinTXID
			}
			e.MaxTXID = max(e.MaxTXID, f.MaxTXID)
		}
		if err := itr.Close(); err != nil {
			return e, err
		}
	}
	e.First, e.Last = e.First.UTC(), e.Last.UTC()
	return e, nil
}

// hasLocalPosition reports whether Litestream has a local position for the
// database at path: any LTX file in its local L0 directory (Litestream
// keeps the newest one; DB.Pos reads it).
func hasLocalPosition(path string) (bool, error) {
	names, err := os.ReadDir(litestream.NewDB(path).LTXLevelDir(0))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read Litestream's local position of %s: %w", path, err)
	}
	for _, n := range names {
		if _, _, err := ltx.ParseFilename(n.Name()); err == nil {
			return true, nil
		}
	}
	return false, nil
}

// readAdoption reads the adoption record of the database at path (nil: none).
func readAdoption(path string) (*adoption, error) {
	b, err := os.ReadFile(path + AdoptedSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var a adoption
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("adoption record %s%s: %w (remove it and restore the database again)", path, AdoptedSuffix, err)
	}
	return &a, nil
}

// Adopt records beside the database at path, restored from somewhere
// other than the replica at url (a snapshot's copy, by `wsfs pull --at`),
// that it continues that replica as it is now, so that a sidecar
// replicating it there starts (and uploads it as the replica's next
// state) rather than refusing (ReplicaAheadError). An empty replica needs
// no record.
func Adopt(ctx context.Context, path, url string) error {
	client, err := NewReplicaClient(url)
	if err != nil {
		return err
	}
	ext, err := Extent(ctx, client)
	if err != nil {
		return fmt.Errorf("adopt %s: list replica %s: %w", path, url, err)
	}
	if ext.MaxTXID == 0 {
		return nil
	}
	return writeAdoption(path, path, url, ext.MaxTXID)
}

// writeAdoption records durably that the database file restored (to be
// linked at path) continues replica url, which held transactions up to
// txid.
func writeAdoption(path, restored, url string, txid ltx.TXID) error {
	ino, err := inode(restored)
	if err != nil {
		return err
	}
	b, err := json.Marshal(adoption{Replica: url, TXID: uint64(txid), At: time.Now().UTC(), Inode: ino})
	if err != nil {
		return err
	}
	return vfs.Publish(vfs.Default, path+AdoptedSuffix, true, func(f vfs.File) error {
		_, err := f.Write(b)
		return err
	})
}

// checkReplicaBehind refuses (*ReplicaAheadError) to replicate the
// database at path to replica c (URL url) when the replica holds
// transactions, Litestream has no local position for the database, and no
// adoption record says it was restored from this replica when that held
// everything it holds now. adopted reports an adoption record that
// allowed the start.
func checkReplicaBehind(ctx context.Context, c litestream.ReplicaClient, path, url string, timeout time.Duration) (adopted bool, err error) {
	local, err := hasLocalPosition(path)
	if err != nil || local {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ext, err := Extent(ctx, c)
	if err != nil {
		return false, fmt.Errorf("replica %s: list it: %w", url, err)
	}
	a, err := readAdoption(path)
	if err != nil {
		return false, err
	}
	if a != nil && a.Replica != url {
		a = nil // restored from another replica: says nothing about this one
	}
	if a != nil {
		// Only for the file restored: not for a database created since
		// (or about to be created by Ensure) at the same path.
		ino, err := inode(path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && ino != a.Inode) {
			a = nil
		} else if err != nil {
			return false, err
		}
	}
	if ext.MaxTXID == 0 {
		return a != nil, nil
	}
	if a != nil && uint64(ext.MaxTXID) <= a.TXID {
		return true, nil
	}
	return false, &ReplicaAheadError{DB: path, Replica: url, Extent: ext, Adopted: a}
}

// dropAdoption removes the adoption record of the database at path, once
// Litestream's local files hold the position.
func dropAdoption(path string) error {
	err := vfs.Default.Remove(path + AdoptedSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return vfs.SyncDir(vfs.Default, filepath.Dir(path))
}

func inode(path string) (uint64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("%s: no inode number", path)
	}
	return sys.Ino, nil
}

// Replace declares that the database at path (created, empty, if missing)
// replaces the state replica url holds: it writes the adoption record with
// the replica's last transaction, so that the next sidecar start
// replicates the database over it (the replaced state stays reachable by
// point-in-time restores until Litestream's retention removes it). For a
// workspace name reused after `wsfs rm`, or a database deliberately
// started afresh; it returns what the replica held.
func Replace(ctx context.Context, path, url, workspace string) (ReplicaExtent, error) {
	client, err := NewReplicaClient(url)
	if err != nil {
		return ReplicaExtent{}, err
	}
	if err := CheckReplica(ctx, client, url, 30*time.Second); err != nil {
		return ReplicaExtent{}, err
	}
	ext, err := Extent(ctx, client)
	if err != nil {
		return ext, fmt.Errorf("replica %s: list it: %w", url, err)
	}
	if err := Ensure(path, workspace); err != nil {
		return ext, err
	}
	return ext, writeAdoption(path, path, url, ext.MaxTXID)
}
