package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"wsfs/internal/namespace"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
)

// markRetries bounds how often markDurable starts over after the log
// changed under it (a checkpoint and segment deletion, a segment being
// created); markRetryDelay is the first pause between tries, doubling.
const (
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
func markDurable(fsys vfs.FS, dir string, add func(pool.ID)) error {
	delay := markRetryDelay
	var last error
	for range markRetries {
		err := markOnce(fsys, dir, add)
		if err == nil {
			return nil
		}
		if !errors.Is(err, seglog.ErrChanged) && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		last = err
		time.Sleep(delay)
		delay *= 2
	}
	return fmt.Errorf("workspace %s: its log kept changing or stays inconsistent after %d reads (damaged? run `wsfs mount` on it to see what recovery says): %w",
		dir, markRetries, last)
}

func markOnce(fsys vfs.FS, dir string, add func(pool.ID)) error {
	ckGroup, payload, err := seglog.ReadLatestCheckpoint(fsys, filepath.Join(dir, "checkpoint"))
	if err != nil {
		return fmt.Errorf("workspace %s: read checkpoint: %w", dir, err)
	}
	var tree *namespace.Tree
	if payload != nil {
		if tree, err = namespace.DecodeCheckpoint(payload); err != nil {
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
				return fmt.Errorf("workspace %s: group %d record %d: %w", dir, group, i, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, n := range tree.Inodes() {
		n.Content.Objects(func(id namespace.ObjectID) { add(pool.ID(id)) })
	}
	return nil
}
