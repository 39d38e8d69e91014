// Package ship copies a workspace's committed state to the remote tier and
// brings it back on another host (Pull).
//
// # The shipper reads from disk
//
// A Shipper needs no hook in the daemon: it reads the workspace's durable
// state the way a second reader of the log would — the segment files
// (seglog.Tail: complete groups only, tolerating appends, rollover and the
// deletion of segments after a checkpoint), the checkpoint files and the
// pool objects — so it runs as its own process (`wsfs ship NAME`) or
// goroutine, next to a running daemon or with none. A daemon signals each
// group commit on the shipper's wake socket, and the shipper signals the
// waiters of its status after each change (wake.go); the signals only
// shorten waits, every side also polls.
//
// A group read from the active segment may not be durable yet (the daemon
// appends, then syncs). After reading, the shipper fdatasyncs the segment
// it read from; only groups read before a successful sync are shipped. A
// failed sync fails the shipper for good (fsyncgate: a retried sync proves
// nothing; the daemon's own next sync of that file sees the same error and
// fails the workspace). Groups in a complete frame never change: the
// daemon cuts back only incomplete appends (a full disk) and truncates
// only torn tails, so a shipped group is never rolled back locally.
//
// # Order: the remote is never ahead of what a restore can use
//
// A head names a group only after, in this order, each step only after
// the previous ones returned:
//
//  1. the pool objects that group and every earlier one (and the
//     checkpoint, if one is shipped) reference: HEAD, then PUT if absent,
//     keyed by hash (remote.ObjectKey), so they dedupe across workspaces
//     and hosts;
//  2. the checkpoint file, when one is needed (the segments holding the
//     next group were deleted locally, or the head lists too many
//     batches);
//  3. the groups, re-framed as segment files (log/<first>-<last>.seg);
//  4. the head (workspaces/NAME/head), naming the checkpoint and the
//     batches that bring it to the last shipped group;
//  5. the snapshots whose group the head now names: their objects, then
//     their catalog entries (snapshots.go, "Snapshots in the bucket").
//
// Round does these for every durable group, waiting for all their
// objects. Run pipelines them (pipeline.go): objects are uploaded in the
// background as groups are read, lowest group first, and each step ships
// the longest prefix of pending groups whose objects are all up — so a
// group waits for the objects of the groups before it, never for those
// after it.
//
// A restore reads only what the head names, so a crash or an error between
// any two uploads leaves the previous head, whose every referenced file and
// object was uploaded before it: the remote restores to the last shipped
// group, a committed prefix of the workspace. Uploads are idempotent (a
// batch key names its groups, which never change; an object key names its
// bytes), so a round that failed half-way is simply redone.
//
// Objects are not deleted from the bucket by the shipper; superseded
// batches and checkpoints are left for a remote GC (docs/architecture.md,
// "Remote tier").
package ship

import (
	"encoding/json"
	"time"
)

// HeadVersion is the format version of the head object.
const HeadVersion = 1

// Head is the per-workspace head object (JSON): what a restore of the
// workspace reads, and the only object the shipper ever overwrites.
type Head struct {
	Version   int    `json:"version"`
	Workspace string `json:"workspace"`
	// Group is the last group a restore yields (0: an empty workspace).
	Group uint64 `json:"group"`
	// Checkpoint, if set, is the starting state: the tree at the end of
	// its group. Without one a restore starts from an empty tree.
	Checkpoint *CheckpointRef `json:"checkpoint,omitempty"`
	// Batches hold the groups after the checkpoint through Group, in
	// order and contiguous (a batch may start at or before the
	// checkpoint's group; those groups are skipped).
	Batches   []Batch   `json:"batches"`
	ShippedAt time.Time `json:"shipped_at"`
	// LastDigest identifies group Group as the shipping host's log held
	// it (groupDigest); empty when the head's last group came from a
	// checkpoint alone, or in heads written before it existed. A shipper
	// compares it with its own log's group of that number before it
	// ships anything after it: equal numbers with different contents
	// mean the local copy and the remote's are two histories (a state
	// directory restored from a backup, segments removed by hand), and
	// shipping on would append one history onto the other.
	LastDigest string `json:"last_digest,omitempty"`
}

// CheckpointRef names a shipped checkpoint file.
type CheckpointRef struct {
	Group uint64 `json:"group"`
	Key   string `json:"key"`
	Size  int64  `json:"size"`
	// ShippedAt is when the head first naming it was written: every group
	// it holds was committed by then (pull --at TIME). Zero in heads
	// written before it existed: such a head is not selectable by time.
	ShippedAt time.Time `json:"shipped_at,omitzero"`
}

// Batch names a shipped run of groups First..Last in segment format.
type Batch struct {
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
	Key   string `json:"key"`
	Size  int64  `json:"size"`
	// ShippedAt is when the head first naming group Last was written
	// (see CheckpointRef.ShippedAt).
	ShippedAt time.Time `json:"shipped_at,omitzero"`
}

func decodeHead(b []byte) (Head, error) {
	var h Head
	if err := json.Unmarshal(b, &h); err != nil {
		return Head{}, err
	}
	return h, nil
}
