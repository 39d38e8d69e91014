package ship

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/remote"
	"wsfs/internal/snapshot"
)

// ErrNoSuchState is wrapped by Pull when At matches no shipped state; the
// message says which range exists.
var ErrNoSuchState = errors.New("no shipped state matches")

// At selects the state Pull restores; the zero At is the head.
//
// Snapshot names a shipped snapshot by ID ("7") or label (the newest
// snapshot with that label). Time selects the latest shipped committed
// state at or before it, among two kinds of candidates: every shipped
// snapshot (its state was committed when it was taken) and every prefix
// of the head that ends at a batch boundary (each batch records when the
// head naming it was written; every group in it was committed by then).
// So the state chosen is always a committed group of the workspace, never
// later than Time; it may be earlier than Time by up to the shipping lag
// or the gap between snapshots, and a prefix older than the head's
// checkpoint is gone (compaction): take snapshots to keep points to go
// back to.
type At struct {
	Snapshot string
	Time     time.Time
}

// IsZero reports whether a selects the head.
func (a At) IsZero() bool { return a.Snapshot == "" && a.Time.IsZero() }

func (a At) String() string {
	if a.Snapshot != "" {
		return "snapshot " + a.Snapshot
	}
	return a.Time.UTC().Format(time.RFC3339Nano)
}

// ParseAt parses the argument of pull --at: a snapshot ID or label, an
// RFC 3339 time, or a duration ago ("90m", "2h30m": before now).
func ParseAt(s string, now time.Time) (At, error) {
	if s == "" {
		return At{}, errors.New("--at needs a snapshot ID or label, an RFC 3339 time, or a duration ago (for example 15m)")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return At{Time: t}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return At{}, fmt.Errorf("--at %s: a duration ago must be positive", s)
		}
		return At{Time: now.Add(-d)}, nil
	}
	return At{Snapshot: s}, nil
}

// selected is the state At chose.
type selected struct {
	tree  *namespace.Tree
	group uint64 // the workspace group whose state tree is
	what  string // for messages: "snapshot 3 (label) of ...", "group 41 shipped at ..."
	time  time.Time
	got   int64
	snap  *snapshot.Info // the snapshot chosen, nil for a prefix of the head
}

// selectState resolves at against head h and the shipped snapshots and
// loads the chosen tree (verified).
func selectState(ctx context.Context, st remote.Store, name string, h Head, snaps []snapshot.Info, at At) (selected, error) {
	fromSnap := func(in snapshot.Info) (selected, error) {
		t, _, err := manifest.LoadTree(remoteManifests{ctx, st}, in.Root)
		if err != nil {
			return selected{}, fmt.Errorf("pull %s --at %s: load shipped snapshot %d: %w", name, at, in.ID, err)
		}
		return selected{tree: t, group: in.Group, time: in.Time, snap: &in,
			what: fmt.Sprintf("snapshot %d %q (group %d, taken %s)", in.ID, in.Label, in.Group, in.Time.UTC().Format(time.RFC3339))}, nil
	}
	if at.Snapshot != "" {
		id, idErr := strconv.ParseUint(at.Snapshot, 10, 64)
		var match *snapshot.Info
		for i := range snaps {
			if (idErr == nil && snaps[i].ID == id) || (idErr != nil && snaps[i].Label == at.Snapshot) {
				match = &snaps[i] // ascending: the newest match wins
			}
		}
		if match == nil {
			return selected{}, fmt.Errorf("pull %s --at %s: %w: %s (list them with the IDs or labels above, or give a time)", name, at.Snapshot, ErrNoSuchState, describeSnaps(snaps))
		}
		return fromSnap(*match)
	}
	// By time: the latest prefix of the head and the latest snapshot at
	// or before it.
	var prefix *Head
	var prefixAt time.Time
	base := h.Checkpoint == nil || (!h.Checkpoint.ShippedAt.IsZero() && !h.Checkpoint.ShippedAt.After(at.Time))
	if base {
		p := Head{Version: h.Version, Workspace: h.Workspace, Checkpoint: h.Checkpoint}
		if h.Checkpoint != nil {
			p.Group, prefixAt = h.Checkpoint.Group, h.Checkpoint.ShippedAt
		}
		for _, b := range h.Batches {
			if b.ShippedAt.IsZero() || b.ShippedAt.After(at.Time) {
				break
			}
			p.Batches = append(p.Batches, b)
			if b.Last > p.Group {
				p.Group, prefixAt = b.Last, b.ShippedAt
			}
		}
		if !prefixAt.IsZero() || p.Group > 0 {
			prefix = &p
		}
	}
	var snap *snapshot.Info
	for i := range snaps {
		if !snaps[i].Time.After(at.Time) && (snap == nil || !snaps[i].Time.Before(snap.Time)) {
			snap = &snaps[i]
		}
	}
	switch {
	case snap != nil && (prefix == nil || snap.Time.After(prefixAt) || (snap.Time.Equal(prefixAt) && snap.Group > prefix.Group)):
		return fromSnap(*snap)
	case prefix != nil:
		t, g, got, _, err := restoreTree(ctx, st, name, *prefix)
		if err != nil {
			return selected{}, err
		}
		return selected{tree: t, group: g, time: prefixAt, got: got,
			what: fmt.Sprintf("group %d (shipped %s)", g, prefixAt.UTC().Format(time.RFC3339Nano))}, nil
	}
	return selected{}, fmt.Errorf("pull %s --at %s: %w: the head's log reaches back to %s and the shipped snapshots are %s",
		name, at, ErrNoSuchState, earliestPrefix(h), describeSnaps(snaps))
}

func earliestPrefix(h Head) string {
	if h.Checkpoint != nil {
		if h.Checkpoint.ShippedAt.IsZero() {
			return fmt.Sprintf("group %d (a head written before shipping times were recorded: not selectable by time)", h.Checkpoint.Group)
		}
		return fmt.Sprintf("group %d shipped %s", h.Checkpoint.Group, h.Checkpoint.ShippedAt.UTC().Format(time.RFC3339Nano))
	}
	if len(h.Batches) > 0 {
		if b := h.Batches[0]; !b.ShippedAt.IsZero() {
			return fmt.Sprintf("group %d shipped %s", b.Last, b.ShippedAt.UTC().Format(time.RFC3339Nano))
		}
		return "groups shipped before shipping times were recorded (not selectable by time)"
	}
	return "nothing (no group shipped)"
}

func describeSnaps(snaps []snapshot.Info) string {
	if len(snaps) == 0 {
		return "none (no snapshot was shipped)"
	}
	var b strings.Builder
	for i, in := range snaps {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 8 && len(snaps) > 10 {
			fmt.Fprintf(&b, "... (%d more), ", len(snaps)-9)
			in = snaps[len(snaps)-1]
		}
		fmt.Fprintf(&b, "%d %q taken %s", in.ID, in.Label, in.Time.UTC().Format(time.RFC3339))
		if i == 8 && len(snaps) > 10 {
			break
		}
	}
	return b.String()
}
