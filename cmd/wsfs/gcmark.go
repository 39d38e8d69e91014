package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// gcWorkspace is a workspace gc marks: its name and state directory.
type gcWorkspace struct{ name, dir string }

// markAll marks (calls add for) every object that the durable state of
// the workspaces in first, or of any of their snapshots, references, and
// then the same for every workspace that relist finds and first lacked. It
// returns how many workspaces it marked.
//
// The order closes the race with forks, which make new references to old
// objects (a snapshot's, with no mtime bump: a fork's cost must not grow
// with its tree): (1) the durable states of first, (2) the snapshot
// catalogs of first, (3) relist, and the durable states and catalogs of
// the workspaces new since first. A fork made from a snapshot that
// existed when its catalog was read in (2) is covered by that snapshot.
// One whose snapshot was removed before (2), and whose new workspace
// appeared before the removal, is in first or in the relist (3), whose
// durable state (a checkpoint naming the snapshot's manifest root) is
// read. A fork whose snapshot was removed before its new workspace
// appeared sees that and protects the tree itself (snapshot.Fork). A
// restore cannot be covered by this order (its workspace's state may be
// read in (1) before its checkpoint, and the snapshot removed before
// (2)): it protects the tree before publishing the checkpoint
// (snapshot.Restore). A snapshot created after marking started
// references what it took from a workspace's durable tree: objects marked
// in (1), or put or protected after marking started (kept by the grace).
func markAll(fsys vfs.FS, p *pool.Pool, first []gcWorkspace, relist func() ([]gcWorkspace, error), add func(objid.ID)) (int, error) {
	done := make(map[string]bool, len(first))
	markStates := func(ws []gcWorkspace) error {
		for _, w := range ws {
			if err := markDurable(fsys, p, w.dir, add); err != nil {
				return classifyOpenError(w.name, err)
			}
		}
		return nil
	}
	markSnapshots := func(ws []gcWorkspace) error {
		for _, w := range ws {
			if err := snapshot.ForEachObject(fsys, w.dir, p, add); err != nil {
				err = fmt.Errorf("workspace %s: snapshots: %w (gc stops before removing anything; `wsfs fsck %s` checks them)", w.name, err, w.name)
				var co *pool.CorruptObjectError
				var mo *pool.MissingObjectError
				if errors.As(err, &co) || errors.As(err, &mo) {
					return corruptError{err} // a manifest damaged or gone
				}
				return err
			}
			done[w.dir] = true
		}
		return nil
	}
	if err := markStates(first); err != nil {
		return 0, err
	}
	if err := markSnapshots(first); err != nil {
		return 0, err
	}
	again, err := relist()
	if err != nil {
		return 0, err
	}
	var added []gcWorkspace
	for _, w := range again {
		if !done[w.dir] {
			added = append(added, w)
		}
	}
	if err := markStates(added); err != nil {
		return 0, err
	}
	if err := markSnapshots(added); err != nil {
		return 0, err
	}
	return len(done), nil
}

// markRetries bounds how often markDurable starts over after the log
// changed under it (a checkpoint and segment deletion, a segment being
// created); markRetryDelay is the first pause between tries, doubling.
// (Variables so that tests can shorten the wait.)
var (
	markRetries    = 12
	markRetryDelay = 5 * time.Millisecond
)

// markDurable calls add for every pool object that the durable state of
// the workspace in dir references: its newest checkpoint with every
// committed group after it applied (what recovery would rebuild). It takes
// no lock and writes nothing, so a daemon may be serving the workspace
// meanwhile: appending (a torn tail being written is skipped), cutting a
// failed append back, writing a checkpoint and deleting the segments it
// covers. When the log no longer covers the checkpoint read, or a segment
// or checkpoint vanished, it reads again from the newest checkpoint
// (objects added by an abandoned try stay added: a superset is safe).
//
// Every group committed before markDurable started is included: the
// checkpoint read is the newest complete one at that moment or later, and
// seglog.ReadCommitted hands out every group complete before it listed the
// log. Later groups may be missed; their objects were put or protected
// within a commit window and are kept by the grace period (see gc.go).
//
// A log that still does not read consistently after every retry, and whose
// checkpoint and log directories did not change at all meanwhile (names,
// sizes, modification times), is not being written: it is damaged, and the
// error is corrupt data (exit 4), like the mount's refusal of the same log.
func markDurable(fsys vfs.FS, p *pool.Pool, dir string, add func(objid.ID)) error {
	delay := markRetryDelay
	var last error
	var before string // logState at the first failed read
	start := time.Now()
	for range markRetries {
		err := markOnce(fsys, p, dir, add)
		if err == nil {
			return nil
		}
		// A missing pool object (a manifest of the checkpoint's tree) is
		// no change of the log: nothing but gc removes objects.
		// A record that does not apply may be a race with an online
		// restore (a checkpoint read before it, groups read after it).
		var mo *pool.MissingObjectError
		if errors.As(err, &mo) || (!errors.Is(err, seglog.ErrChanged) && !errors.Is(err, workspace.ErrReplay) && !errors.Is(err, fs.ErrNotExist)) {
			return err
		}
		if last == nil {
			before = logState(fsys, dir)
		}
		last = err
		time.Sleep(delay)
		delay *= 2
	}
	if (errors.Is(last, seglog.ErrChanged) || errors.Is(last, workspace.ErrReplay)) && logState(fsys, dir) == before {
		return corruptError{fmt.Errorf("workspace %s: its log is damaged: it did not change in %d reads over %s, and still does not read consistently: %w",
			dir, markRetries, time.Since(start).Round(time.Millisecond), last)}
	}
	return fmt.Errorf("workspace %s: its log kept changing or stays inconsistent after %d reads (damaged? run `wsfs mount` on it to see what recovery says): %w",
		dir, markRetries, last)
}

// logState describes what a writer of the workspace in dir changes: every
// entry of its checkpoint and log directories with its size and
// modification time.
func logState(fsys vfs.FS, dir string) string {
	var b strings.Builder
	for _, sub := range []string{"checkpoint", "log"} {
		d := filepath.Join(dir, sub)
		names, err := fsys.List(d)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", sub, err)
			continue
		}
		for _, n := range names {
			fi, err := fsys.Stat(filepath.Join(d, n))
			if err != nil {
				fmt.Fprintf(&b, "%s/%s: %v\n", sub, n, err)
				continue
			}
			fmt.Fprintf(&b, "%s/%s %d %d\n", sub, n, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

func markOnce(fsys vfs.FS, p *pool.Pool, dir string, add func(objid.ID)) error {
	ckGroup, payload, err := seglog.ReadLatestCheckpoint(fsys, filepath.Join(dir, "checkpoint"))
	if err != nil {
		return fmt.Errorf("workspace %s: read checkpoint: %w", dir, err)
	}
	var tree *namespace.Tree
	if payload != nil {
		// A fork's or restore's first checkpoint names a snapshot's
		// manifest root: its manifests are referenced too.
		if manifest.IsRef(payload) {
			root, _, err := manifest.DecodeRef(payload)
			if err != nil {
				return fmt.Errorf("workspace %s: checkpoint of group %d: %w", dir, ckGroup, err)
			}
			if err := manifest.ForEachObject(&manifest.PoolStore{Pool: p}, root, nil, add); err != nil {
				return fmt.Errorf("workspace %s: manifests of checkpoint %d: %w", dir, ckGroup, err)
			}
		}
		if tree, err = workspace.DecodeCheckpointPayload(p, payload); err != nil {
			return fmt.Errorf("workspace %s: checkpoint of group %d: %w", dir, ckGroup, err)
		}
	} else {
		tree = namespace.New(0o755, 0, 0, 0)
	}
	_, err = seglog.ReadCommitted(fsys, filepath.Join(dir, "log"), ckGroup, func(group uint64, records [][]byte) error {
		for i, data := range records {
			rec, err := namespace.DecodeRecord(data)
			if err == nil {
				rec.Content.Inline = bytes.Clone(rec.Content.Inline)
				rec.Value = bytes.Clone(rec.Value)
				err = tree.Apply(rec)
			}
			if err != nil {
				return fmt.Errorf("workspace %s: group %d record %d: %w (%w)", dir, group, i, err, workspace.ErrReplay)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, n := range tree.Inodes() {
		n.Content.Objects(func(id objid.ID) { add(id) })
	}
	return nil
}
