package ship

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
)

// Options configure a Shipper.
type Options struct {
	FS    vfs.FS // default vfs.Default
	Dir   string // the workspace directory, STATE/workspaces/NAME
	Name  string // the workspace name (its place in the bucket)
	Pool  *pool.Pool
	Store remote.Store
	// BatchBytes bounds one uploaded batch of groups (default 8 MiB; a
	// single larger group makes one larger batch).
	BatchBytes int
	// Parallel object uploads (default 8).
	Parallel int
	// CompactBatches: once the head lists this many batches and a newer
	// local checkpoint exists, the checkpoint is shipped and the head
	// restarts from it (default 64), so a restore reads a bounded log.
	CompactBatches int
	Logger         *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// HostID, if set, makes the shipper hold the workspace's lease in the
	// bucket (AcquireLease, renewed every LeaseTTL/3) and ship only while
	// it does. Empty: no lease (tests of the shipping order alone).
	HostID   string
	LeaseTTL time.Duration
	// RefreshAfter: an object found present but older than this is
	// uploaded again before a head references it, so that remote GC
	// (whose grace must be at least twice this) never sweeps it. Default
	// DefaultGCGrace/2.
	RefreshAfter time.Duration
}

func (s *Shipper) refreshAfter() time.Duration {
	if s.opts.RefreshAfter > 0 {
		return s.opts.RefreshAfter
	}
	return DefaultGCGrace / 2
}

// group is one committed group read from the local log.
type group struct {
	n       uint64
	records [][]byte
	size    int
	seenAt  time.Time
	ids     []objid.ID // the objects its records set as content
	idsRead bool
	// Pipeline (pipeline.go): the uploader its objects were submitted
	// to, at which of its generations; ids[:freshTo] were fresh when
	// last scanned.
	submitted    *uploader
	submittedGen uint64
	freshTo      int
	// readyAt: when a step first found its objects and those of every
	// group before it in the bucket (phases.go).
	readyAt time.Time
}

// groupObjects fills g.ids (once).
func (s *Shipper) groupObjects(g *group) error {
	if g.idsRead {
		return nil
	}
	seen := map[objid.ID]bool{}
	for i, data := range g.records {
		r, err := namespace.DecodeRecord(data)
		if err != nil {
			return fmt.Errorf("ship %s: group %d record %d: %w", s.opts.Name, g.n, i, err)
		}
		if r.Op == namespace.OpSetContent {
			r.Content.Objects(func(id objid.ID) {
				if !seen[id] {
					seen[id] = true
					g.ids = append(g.ids, id)
				}
			})
		}
	}
	g.idsRead = true
	return nil
}

// Stats describe a Shipper's progress; Status embeds them.
type Stats struct {
	// Shipped is the last group the remote head names.
	Shipped uint64 `json:"shipped_group"`
	// Local is the last durable group the shipper has read from the log.
	Local uint64 `json:"local_group"`
	// LagSeconds is how long the oldest group not yet shipped has been
	// durable locally (0 when everything read is shipped), as seen by
	// the shipper (its polling interval included).
	LagSeconds float64 `json:"lag_seconds"`
	// LastLagSeconds is the lag of the last shipped group: from the
	// moment the shipper saw it durable to the moment the head naming it
	// was written.
	LastLagSeconds  float64 `json:"last_lag_seconds"`
	ObjectsUploaded int64   `json:"objects_uploaded"`
	ObjectsPresent  int64   `json:"objects_present"`
	// ObjectsRemoteOnly counts objects found in the bucket but not in the
	// local pool of a lazily pulled workspace (not fetched yet): not
	// uploaded again, since this host does not have them (see
	// uploadObject).
	ObjectsRemoteOnly int64     `json:"objects_remote_only,omitempty"`
	BytesUploaded     int64     `json:"bytes_uploaded"`
	Checkpoints       int64     `json:"checkpoints_shipped"`
	Merges            int64     `json:"batch_merges"`
	Rounds            int64     `json:"rounds"`
	SnapshotsShipped  int64     `json:"snapshots_shipped"`
	SnapshotsRemoved  int64     `json:"snapshots_removed"`
	LastShippedAt     time.Time `json:"last_shipped_at,omitzero"`
	// Retries counts rounds run after a failed round; Errors counts
	// failed rounds by ErrorKind.
	Retries          int64            `json:"retries"`
	Errors           map[string]int64 `json:"errors_by_kind,omitempty"`
	LastError        string           `json:"last_error,omitempty"`
	ConsecutiveFails int              `json:"consecutive_failures,omitempty"`
	// Phases: where the steps' time went (phases.go); WorstLag: the
	// shipped group with the largest lag, its lag split.
	Phases   map[string]PhaseTime `json:"phases,omitempty"`
	WorstLag LagSplit             `json:"worst_lag,omitzero"`
}

// Shipper ships one workspace. Round and Stats may not be called
// concurrently with each other from different goroutines except Stats,
// which is safe at any time.
type Shipper struct {
	opts   Options
	lg     *slog.Logger
	logDir string
	ckDir  string

	head   Head
	loaded bool
	// verified: the head's LastDigest was compared with the local log
	// (or could not be: the group is only in a checkpoint here).
	verified bool
	// known: objects known to be in the bucket, with the time of the
	// check (see fresh); written by the uploader's goroutines. Checks
	// older than aheadLimit are dropped from time to time (knownPruned:
	// when last).
	knownMu     sync.Mutex
	known       map[objid.ID]time.Time
	knownPruned time.Time
	merging     *mergeJob // Run's background merge, if one runs
	tails       map[uint64]*seglog.Tail
	buf         []group          // durable groups read but not yet shipped, in order
	failed      error            // sticky: a local sync failed, or another writer changed the head
	needCkpt    bool             // a referenced object is gone locally: ship a newer checkpoint
	ckCache     *localCheckpoint // the last checkpoint read (latestCheckpoint)
	// pulled holds the objects of the workspace's FetchState (read once,
	// when a missing object first needs it); nil: not read yet.
	pulled map[objid.ID]bool
	local  uint64 // last group in the local log (Tail.Last of the newest segment read)

	headETag string // of the head as last read or written ("" if absent)
	// unconfirmed: the ShippedAt of every head this shipper tried to
	// write since its last confirmed one (a PUT whose answer it did not
	// get may have been applied).
	unconfirmed []time.Time
	leaseETag   string
	leaseAt     time.Time

	remoteSnaps  map[uint64]bool   // snapshot entries in the bucket (nil: not listed yet)
	remoteLastID uint64            // the bucket's snapshots/last-id
	pendingSnaps map[uint64]uint64 // local snapshots waiting for the head to reach their group
	prevLocal    []uint64          // the local catalog's IDs when the bucket last matched it
	snapsInSync  bool

	mu    sync.Mutex
	stats Stats
	lags  []float64 // seconds, last maxLags shipped groups
}

const maxLags = 4096

// New returns a Shipper; nothing is read until the first Round.
func New(opts Options) *Shipper {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 8 << 20
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	if opts.CompactBatches <= 0 {
		opts.CompactBatches = 64
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Shipper{opts: opts, lg: opts.Logger.With("workspace", opts.Name, "remote", opts.Store.String()),
		logDir: filepath.Join(opts.Dir, "log"), ckDir: filepath.Join(opts.Dir, "checkpoint"),
		known: map[objid.ID]time.Time{}, tails: map[uint64]*seglog.Tail{}}
}

// HeadKey is the key of workspace name's head.
func HeadKey(name string) string { return remote.WorkspaceKey(name, "head") }

// Stats returns a copy of the current statistics.
func (s *Shipper) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Errors = maps.Clone(s.stats.Errors)
	st.Phases = clonePhases(s.stats.Phases)
	return st
}

// Shipped returns the last group the remote head names.
func (s *Shipper) Shipped() uint64 { return s.Stats().Shipped }

// ReadHead returns workspace name's head in st, or found=false if there is
// none.
func ReadHead(ctx context.Context, st remote.Store, name string) (Head, bool, error) {
	h, _, ok, err := readHead(ctx, st, name)
	return h, ok, err
}

func readHead(ctx context.Context, st remote.Store, name string) (Head, string, bool, error) {
	b, etag, err := st.GetETag(ctx, HeadKey(name))
	if errors.Is(err, remote.ErrNotFound) {
		return Head{}, "", false, nil
	}
	if err != nil {
		return Head{}, "", false, err
	}
	h, err := decodeHead(b)
	if err != nil {
		return Head{}, "", false, fmt.Errorf("remote head %s in %s is not valid: %w", HeadKey(name), st, err)
	}
	if h.Version != HeadVersion {
		return Head{}, "", false, fmt.Errorf("remote head %s in %s has format version %d, this wsfs reads version %d", HeadKey(name), st, h.Version, HeadVersion)
	}
	return h, etag, true, nil
}

// Round ships every group that is durable in the local log now, and
// returns the last shipped group. An error leaves the remote at its
// previous head (see the package doc); the next Round retries.
func (s *Shipper) Round(ctx context.Context) (uint64, error) {
	up := s.newUploader(ctx)
	defer up.close()
	return s.account(s.round(ctx, up, true))
}

// step is one step of Run's pipeline (pipeline.go): it reads the log,
// hands every pending group's objects to up, and ships the prefix whose
// objects are all in the bucket, without waiting for the others.
func (s *Shipper) step(ctx context.Context, up *uploader) (uint64, error) {
	return s.account(s.round(ctx, up, false))
}

// account records a round's outcome in the statistics.
func (s *Shipper) account(shipped uint64, err error) (uint64, error) {
	s.mu.Lock()
	s.stats.Rounds++
	if s.stats.ConsecutiveFails > 0 {
		s.stats.Retries++
	}
	if err != nil {
		if s.stats.Errors == nil {
			s.stats.Errors = map[string]int64{}
		}
		s.stats.Errors[ErrorKind(err)]++
		s.stats.LastError = err.Error()
		s.stats.ConsecutiveFails++
	} else {
		s.stats.LastError = ""
		s.stats.ConsecutiveFails = 0
	}
	s.stats.LagSeconds = 0
	if len(s.buf) > 0 {
		s.stats.LagSeconds = s.opts.Now().Sub(s.buf[0].seenAt).Seconds()
	}
	s.mu.Unlock()
	return shipped, err
}

// round ships the durable groups: with all, every one (waiting for their
// objects); else the prefix whose objects are in the bucket already (the
// others' objects are submitted to up).
func (s *Shipper) round(ctx context.Context, up *uploader, all bool) (uint64, error) {
	if s.failed != nil {
		return s.head.Group, s.failed
	}
	// The local log first: its progress (and so the lag) is known even
	// while the remote cannot be reached.
	if err := s.timed(PhaseRead, s.read); err != nil {
		return s.head.Group, err
	}
	if s.opts.HostID != "" {
		if Pushed(s.opts.FS, s.opts.Dir) {
			return s.head.Group, fmt.Errorf("ship %s: %w (%s exists): it is no longer shipped from here; remove it (wsfs rm) and pull it to serve it here again", s.opts.Name, ErrPushed, PushedName)
		}
		if err := s.holdLease(ctx); err != nil {
			return s.head.Group, err
		}
	}
	if !s.loaded {
		h, etag, ok, err := readHead(ctx, s.opts.Store, s.opts.Name)
		if err != nil {
			return 0, err
		}
		if !ok {
			h = Head{Version: HeadVersion, Workspace: s.opts.Name}
		}
		s.head, s.headETag, s.loaded = h, etag, true
		s.mu.Lock()
		s.stats.Shipped = h.Group
		s.mu.Unlock()
	}
	if s.head.Group > s.local {
		return s.head.Group, fmt.Errorf("ship %s: the remote has group %d but the local log ends at group %d: this host's copy is older than the remote's (another host wrote the workspace); remove it (wsfs rm) and pull it again", s.opts.Name, s.head.Group, s.local)
	}
	if !s.verified {
		if err := s.verifyHead(); err != nil {
			s.failed = err
			return s.head.Group, err
		}
		if !s.verified {
			return s.head.Group, nil // the head's group is not read yet
		}
	}
	if !all {
		if err := s.finishMerge(ctx, false); err != nil {
			return s.head.Group, err
		}
	}
	next := s.head.Group + 1
	// Drop what is already shipped (a restart reads the log from its
	// first segment).
	i := 0
	for i < len(s.buf) && s.buf[i].n < next {
		i++
	}
	s.buf = s.buf[i:]

	var ck *localCheckpoint
	gap := len(s.buf) > 0 && s.buf[0].n > next
	// (Run merges the head's batches in the background: no checkpoint
	// while that merge may still shorten the head.)
	compact := (len(s.head.Batches) >= s.opts.CompactBatches && s.merging == nil || s.needCkpt) && len(s.buf) > 0
	// ahead: the local log is past the head with no group to ship; the
	// groups in between are only in a checkpoint (a workspace pulled with
	// --at starts from a checkpoint one group past the remote head).
	ahead := len(s.buf) == 0 && s.local > s.head.Group
	if gap || compact || ahead {
		c, err := s.latestCheckpoint()
		if err != nil {
			return s.head.Group, err
		}
		// A usable checkpoint does not go back behind the head and leaves
		// no hole before the groups read.
		usable := c != nil && c.group+1 >= next && (len(s.buf) == 0 || c.group+1 >= s.buf[0].n)
		newer := c != nil && (s.head.Checkpoint == nil || c.group > s.head.Checkpoint.Group)
		switch {
		case usable && (gap || newer):
			ck = c
		case gap:
			// The segments holding the next groups are gone and no
			// checkpoint covers them yet (the daemon publishes it before
			// deleting): read the directory again next round.
			s.tails = map[uint64]*seglog.Tail{}
			s.buf = nil
			return s.head.Group, fmt.Errorf("ship %s: the local log starts after group %d and no checkpoint covers the gap yet; retrying", s.opts.Name, next)
		}
	}
	if ck == nil && len(s.buf) == 0 {
		return s.head.Group, s.shipSnapshots(ctx)
	}

	// 1. Objects: every pending group's (and the checkpoint's) go to the
	// uploader, lowest group first; ship is the prefix of groups whose
	// objects are all fresh in the bucket (all: wait for every group).
	var ckIDs []objid.ID
	if ck != nil {
		ckIDs = ck.objects()
	}
	for i := range s.buf {
		if err := s.groupObjects(&s.buf[i]); err != nil {
			return s.head.Group, err
		}
	}
	// groups: the pending groups after the checkpoint (a part of s.buf,
	// whose scan state they keep across steps).
	k := 0
	for k < len(s.buf) && ck != nil && s.buf[k].n <= ck.group {
		k++
	}
	groups := s.buf[k:]
	// The failures the previous step reported are forgotten; what the
	// pending groups still need is submitted again.
	gen := up.forgetTaken()
	now := s.opts.Now()
	up.submitStale(ckIDs, 0, now)
	for i := range groups {
		if g := &groups[i]; g.submitted != up || g.submittedGen != gen {
			up.submitStale(g.ids, g.n, now)
			g.submitted, g.submittedGen = up, gen
		}
	}
	var ship []group
	var objErr error
	ckAt, r := 0, 0
	for {
		objErr = up.takeErr()
		now = s.opts.Now()
		ckAt = up.scanFresh(ckIDs, ckAt, 0, now)
		for r < len(groups) {
			g := &groups[r]
			if g.freshTo = up.scanFresh(g.ids, g.freshTo, g.n, now); g.freshTo < len(g.ids) {
				break
			}
			r++
		}
		ready := r
		if ckAt < len(ckIDs) {
			ready = 0
		}
		for j := 0; j < ready; j++ {
			if groups[j].readyAt.IsZero() {
				groups[j].readyAt = now
			}
		}
		done := ckAt == len(ckIDs) && ready == len(groups)
		if done || !all || objErr != nil {
			// What the head will name must be fresh now (the scans may
			// be older than aheadLimit in a long round).
			now = s.opts.Now()
			if i := up.firstStale(ckIDs, 0, now); i >= 0 {
				ckAt, ready, done = i, 0, false
			}
			for j := 0; j < ready; j++ {
				if i := up.firstStale(groups[j].ids, groups[j].n, now); i >= 0 {
					groups[j].freshTo, r, ready, done = i, j, j, false
					break
				}
			}
			ship = groups[:ready]
			if done || !all || objErr != nil {
				break
			}
		}
		t0 := time.Now()
		err := up.wait(ctx)
		s.phase(PhaseWait, time.Since(t0))
		if err != nil {
			return s.head.Group, err
		}
	}
	ckReady := ckAt == len(ckIDs)
	if objErr != nil {
		var me *pool.MissingObjectError
		if errors.As(objErr, &me) {
			// Local GC removed an object these groups reference (the
			// shipper lagged by more than its grace): only a newer
			// checkpoint, which no longer references it, can move on.
			s.needCkpt = true
		}
		if all {
			return s.head.Group, objErr
		}
	} else {
		s.needCkpt = false
	}
	if ck != nil && !ckReady || ck == nil && len(ship) == 0 {
		return s.head.Group, objErr // nothing to ship yet
	}

	nh := Head{Version: HeadVersion, Workspace: s.opts.Name, Checkpoint: s.head.Checkpoint, Batches: s.head.Batches}
	// 2. Checkpoint.
	if ck != nil {
		key := remote.WorkspaceKey(s.opts.Name, "checkpoint/"+seglog.CheckpointName(ck.group))
		if err := s.timed(PhaseCheckpoint, func() error { return s.opts.Store.Put(ctx, key, ck.file) }); err != nil {
			return s.head.Group, err
		}
		nh.Checkpoint = &CheckpointRef{Group: ck.group, Key: key, Size: int64(len(ck.file)), ShippedAt: s.opts.Now().UTC()}
		nh.Batches = nil
		nh.Group = ck.group
		for _, b := range s.head.Batches {
			if b.Last > ck.group {
				nh.Batches = append(nh.Batches, b)
				nh.Group = b.Last
			}
		}
		if nh.Group < s.head.Group {
			nh.Group = s.head.Group
		}
		s.mu.Lock()
		s.stats.Checkpoints++
		s.stats.BytesUploaded += int64(len(ck.file))
		s.mu.Unlock()
	} else {
		nh.Group = s.head.Group
	}
	// 3. Batches.
	var bs []Batch
	err := s.timed(PhaseBatches, func() (err error) { bs, err = s.uploadBatches(ctx, ship); return err })
	if err != nil {
		return s.head.Group, err
	}
	shippedAt := s.opts.Now().UTC()
	for _, b := range bs {
		b.ShippedAt = shippedAt
		nh.Batches = append(nh.Batches, b)
		nh.Group = b.Last
	}
	switch {
	case len(ship) > 0 && nh.Group == ship[len(ship)-1].n:
		nh.LastDigest = groupDigest(ship[len(ship)-1].records)
	case nh.Group == s.head.Group:
		nh.LastDigest = s.head.LastDigest
	}
	// 4. Head.
	if err := s.putHead(ctx, &nh); err != nil {
		return s.head.Group, err
	}
	s.head = nh
	if c := s.ckCache; c != nil && nh.Checkpoint != nil && nh.Checkpoint.Group >= c.group {
		s.ckCache = nil // shipped: its bytes need not stay in memory
	}
	now = s.opts.Now()
	i = 0
	var lastSeen time.Time
	s.mu.Lock()
	for i < len(s.buf) && s.buf[i].n <= nh.Group {
		g := &s.buf[i]
		lastSeen = g.seenAt
		lag := now.Sub(lastSeen).Seconds()
		s.lags = append(s.lags, lag)
		if lag > s.stats.WorstLag.Seconds {
			w := LagSplit{Group: g.n, Seconds: lag}
			if !g.readyAt.IsZero() {
				w.ObjectsSeconds = g.readyAt.Sub(g.seenAt).Seconds()
				w.StepSeconds = now.Sub(g.readyAt).Seconds()
			}
			s.stats.WorstLag = w
		}
		i++
	}
	if len(s.lags) > maxLags {
		s.lags = append(s.lags[:0], s.lags[len(s.lags)-maxLags:]...)
	}
	s.buf = s.buf[i:]
	s.stats.Shipped = nh.Group
	s.stats.LastShippedAt = now
	if !lastSeen.IsZero() {
		s.stats.LastLagSeconds = now.Sub(lastSeen).Seconds()
	}
	s.mu.Unlock()
	s.lg.Debug("shipped", "group", nh.Group, "checkpoint", ck != nil)
	if len(s.head.Batches) >= s.opts.CompactBatches {
		// No newer checkpoint to restart from (else it would have been
		// shipped above): merge the head's batches instead, so the head
		// and a restore stay bounded. A failure only leaves the longer
		// (valid) head in place. Run merges in the background.
		if !all {
			s.startMerge(up.ctx, up.changed)
		} else if err := s.mergeBatches(ctx); err != nil {
			s.lg.Warn("ship: merging the head's log batches failed; will retry", "err", err)
		}
	}
	if objErr != nil {
		return s.head.Group, objErr
	}
	return s.head.Group, s.timed(PhaseSnapshots, func() error { return s.shipSnapshots(ctx) })
}

// uploadBatches uploads groups (contiguous, ascending) as segment-format
// batches of at most BatchBytes each (a larger group makes one larger
// batch) and returns them in order.
func (s *Shipper) uploadBatches(ctx context.Context, groups []group) ([]Batch, error) {
	var out []Batch
	for len(groups) > 0 {
		n, size := 0, 0
		for n < len(groups) && (n == 0 || size+groups[n].size <= s.opts.BatchBytes) {
			size += groups[n].size
			n++
		}
		b := groups[:n]
		groups = groups[n:]
		recs := make([][][]byte, len(b))
		for i, g := range b {
			recs[i] = g.records
		}
		first, last := b[0].n, b[len(b)-1].n
		data := seglog.EncodeSegment(first, first, recs)
		key := remote.WorkspaceKey(s.opts.Name, fmt.Sprintf("log/%020d-%020d.seg", first, last))
		if err := s.opts.Store.Put(ctx, key, data); err != nil {
			return nil, err
		}
		out = append(out, Batch{First: first, Last: last, Key: key, Size: int64(len(data))})
		s.mu.Lock()
		s.stats.BytesUploaded += int64(len(data))
		s.mu.Unlock()
	}
	return out, nil
}

// holdLease renews the workspace's lease (Options.HostID) if TTL/3 has
// passed since it was last taken or renewed, so that it is held for at
// least 2/3 of the TTL after the call. Without HostID it does nothing.
func (s *Shipper) holdLease(ctx context.Context) error {
	if s.opts.HostID == "" {
		return nil
	}
	now := s.opts.Now()
	ttl := s.opts.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	if s.leaseETag != "" && now.Sub(s.leaseAt) < ttl/3 {
		return nil
	}
	t0 := time.Now()
	etag, err := AcquireLease(ctx, s.opts.Store, s.opts.Name, s.opts.HostID, ttl, false, now)
	s.phase(PhaseLease, time.Since(t0))
	if err != nil {
		s.leaseETag = ""
		return err
	}
	s.leaseETag, s.leaseAt = etag, now
	return nil
}

// putHead writes nh as the head; nothing it names may be uploaded after.
// The PUT is conditional on the head this shipper last read or wrote, so
// a head written by anyone else (another host that took the workspace
// over) is never overwritten: that fails the shipper for good.
//
// A PUT whose answer was lost may have been applied: if the bucket holds
// a head this shipper tried to write since its last confirmed one, that
// head is adopted as s.head and putHead fails (the caller builds the
// next head on it). nh, built on the older s.head, may name what the
// adopted head dropped (the batches a merge or a checkpoint replaced),
// which remote GC may have removed since: it is never written.
//
// The lease is renewed first if it is due (holdLease): a round that
// waited for its objects longer than the lease's TTL may have lost it to
// a host that took the workspace over and has not written a head yet
// (so the If-Match would not catch it).
func (s *Shipper) putHead(ctx context.Context, nh *Head) error {
	if err := s.holdLease(ctx); err != nil {
		return err
	}
	nh.ShippedAt = s.opts.Now().UTC()
	hb, err := json.MarshalIndent(nh, "", " ")
	if err != nil {
		return err
	}
	s.unconfirmed = append(s.unconfirmed, nh.ShippedAt) // before the PUT: its answer may be lost
	t0 := time.Now()
	etag, err := s.opts.Store.PutIf(ctx, HeadKey(s.opts.Name), hb, s.headETag)
	s.phase(PhaseHead, time.Since(t0))
	if errors.Is(err, remote.ErrPrecondition) {
		cur, cetag, ok, rerr := readHead(ctx, s.opts.Store, s.opts.Name)
		if rerr != nil {
			return rerr
		}
		switch {
		case ok && cur.ShippedAt.Equal(nh.ShippedAt):
			// This very PUT was applied (a retry inside the store
			// client found its own write).
			etag, err = cetag, nil
		case ok && slices.ContainsFunc(s.unconfirmed, cur.ShippedAt.Equal):
			s.unconfirmed = nil
			s.headETag = cetag
			s.head = cur
			s.mu.Lock()
			s.stats.Shipped = cur.Group
			s.mu.Unlock()
			return fmt.Errorf("ship %s: an earlier head write of this shipper was applied although its answer was lost (the head names group %d); the next head is built on it", s.opts.Name, cur.Group)
		default:
			s.failed = fmt.Errorf("ship %s: another writer changed the remote head %s (now at group %d): this host no longer owns the workspace; stop its daemon, and pull it again to serve it here: %w", s.opts.Name, HeadKey(s.opts.Name), cur.Group, err)
			return s.failed
		}
	}
	if err != nil {
		return err
	}
	s.unconfirmed = nil
	s.headETag = etag
	s.mu.Lock()
	s.stats.BytesUploaded += int64(len(hb))
	s.mu.Unlock()
	return nil
}

// mergeBatches merges the head's trailing run of small batches (those
// under half of BatchBytes: one per round of a trickle of commits) into
// full ones: it re-reads their groups from the local log (durable and
// shipped already), uploads them, and writes a head naming the merged
// batches instead. Earlier, full batches are kept as they are, so a merge
// uploads only the recent small batches again. If the local log no longer
// holds those groups, a newer local checkpoint exists and the next round
// ships it instead. Run merges in the background instead (startMerge).
func (s *Shipper) mergeBatches(ctx context.Context) error {
	plan, ok := s.planMerge()
	if !ok {
		return nil
	}
	bs, err := s.uploadMerge(ctx, plan)
	if err != nil || bs == nil {
		return err
	}
	return s.applyMerge(ctx, plan.from, len(plan.old), bs)
}

// mergePlan is a merge of head batches old (from index from on) holding
// groups after through last.
type mergePlan struct {
	from        int
	old         []Batch
	after, last uint64
}

// planMerge picks the head's trailing run of small batches, if it is long
// enough to be worth merging.
func (s *Shipper) planMerge() (mergePlan, bool) {
	i := len(s.head.Batches)
	for i > 0 && s.head.Batches[i-1].Size < int64(s.opts.BatchBytes/2) {
		i--
	}
	if len(s.head.Batches)-i < max(2, s.opts.CompactBatches/2) {
		return mergePlan{}, false // not enough small batches to be worth it
	}
	from := s.head.Batches[i].First - 1
	if s.head.Checkpoint != nil && s.head.Checkpoint.Group > from {
		from = s.head.Checkpoint.Group
	}
	return mergePlan{from: i, old: slices.Clone(s.head.Batches[i:]), after: from, last: s.head.Group}, true
}

// uploadMerge reads the plan's groups from the local log and uploads them
// as full batches, each with the ShippedAt of the old batch that held its
// last group (so pull --at TIME stays exact). Nil batches: the local log
// no longer holds them, or merging would not halve the batches. It reads
// only the plan and the options (safe beside a step of Run).
func (s *Shipper) uploadMerge(ctx context.Context, p mergePlan) ([]Batch, error) {
	seqs, err := seglog.ListSegments(s.opts.FS, s.logDir)
	if err != nil {
		return nil, err
	}
	var groups []group
	for _, q := range seqs {
		_, err := seglog.NewTail(s.opts.FS, s.logDir, q).Next(func(g uint64, recs [][]byte) error {
			if g <= p.after || g > p.last {
				return nil
			}
			if len(groups) > 0 && g != groups[len(groups)-1].n+1 {
				return fmt.Errorf("group %d follows %d", g, groups[len(groups)-1].n)
			}
			size := 25
			for _, r := range recs {
				size += len(r) + 9
			}
			groups = append(groups, group{n: g, records: recs, size: size})
			return nil
		})
		if errors.Is(err, seglog.ErrSegmentGone) {
			return nil, nil // a checkpoint replaced it; the next round handles it
		}
		if err != nil {
			return nil, fmt.Errorf("merge batches: read %s: %w", seglog.SegmentName(q), err)
		}
	}
	if len(groups) == 0 || groups[0].n != p.after+1 || groups[len(groups)-1].n != p.last {
		return nil, nil // the local log moved on (a checkpoint); the next round handles it
	}
	total := 0
	for _, g := range groups {
		total += g.size
	}
	if total/s.opts.BatchBytes+1 > len(p.old)/2 {
		return nil, nil // merging would not halve the small batches
	}
	bs, err := s.uploadBatches(ctx, groups)
	if err != nil {
		return nil, err
	}
	for j := range bs {
		for _, ob := range p.old {
			if ob.First <= bs[j].Last && bs[j].Last <= ob.Last {
				bs[j].ShippedAt = ob.ShippedAt
			}
		}
	}
	return bs, nil
}

// applyMerge writes a head whose batches n from index from on are
// replaced by bs (the same groups).
func (s *Shipper) applyMerge(ctx context.Context, from, n int, bs []Batch) error {
	nb := append(append(slices.Clone(s.head.Batches[:from]), bs...), s.head.Batches[from+n:]...)
	nh := Head{Version: HeadVersion, Workspace: s.opts.Name, Group: s.head.Group, Checkpoint: s.head.Checkpoint, Batches: nb, LastDigest: s.head.LastDigest}
	if err := s.putHead(ctx, &nh); err != nil {
		return err
	}
	s.lg.Debug("ship: merged log batches", "from", n, "to", len(bs))
	s.head = nh
	s.mu.Lock()
	s.stats.Merges++
	s.mu.Unlock()
	return nil
}

// read appends the durable groups appended to the log since the last call
// to s.buf.
func (s *Shipper) read() error {
	seqs, err := seglog.ListSegments(s.opts.FS, s.logDir)
	if err != nil {
		return err
	}
	live := map[uint64]bool{}
	for _, q := range seqs {
		live[q] = true
		if s.tails[q] == nil {
			s.tails[q] = seglog.NewTail(s.opts.FS, s.logDir, q)
		}
	}
	for q := range s.tails {
		if !live[q] {
			delete(s.tails, q)
		}
	}
	order := make([]uint64, 0, len(s.tails))
	for q := range s.tails {
		order = append(order, q)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	var fresh []group
	var readFrom []*seglog.Tail
	now := s.opts.Now()
	for _, q := range order {
		t := s.tails[q]
		n, err := t.Next(func(g uint64, recs [][]byte) error {
			size := 0
			for _, r := range recs {
				size += len(r) + 9
			}
			fresh = append(fresh, group{n: g, records: recs, size: size + 25, seenAt: now})
			return nil
		})
		if errors.Is(err, seglog.ErrSegmentGone) {
			delete(s.tails, q)
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 {
			readFrom = append(readFrom, t)
		}
		if t.First() != 0 && t.Last() > s.local {
			s.local = t.Last()
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	// What was read may not be durable yet: sync the segments it came
	// from (sealed ones were synced before they were sealed, so this is
	// cheap for them; the active one is usually already synced by the
	// daemon's commit).
	for _, t := range readFrom {
		if err := s.syncSegment(t.Path()); err != nil {
			if errors.Is(err, seglog.ErrSegmentGone) {
				continue // deleted: its groups are in a synced checkpoint
			}
			s.failed = fmt.Errorf("ship %s: make the log durable before shipping it: %w (the shipper stops; the daemon sees the same failure)", s.opts.Name, err)
			return s.failed
		}
	}
	// Keep s.buf ordered and contiguous: a gap means segments vanished
	// between listing and reading; the checkpoint logic handles that.
	for _, g := range fresh {
		if len(s.buf) > 0 && g.n != s.buf[len(s.buf)-1].n+1 {
			if g.n <= s.buf[len(s.buf)-1].n {
				continue
			}
			s.buf = nil // a hole: only what follows it can ship (after a checkpoint)
		}
		s.buf = append(s.buf, g)
	}
	s.mu.Lock()
	s.stats.Local = s.buf[len(s.buf)-1].n
	s.mu.Unlock()
	return nil
}

func (s *Shipper) syncSegment(path string) error {
	f, err := s.opts.FS.Open(path)
	if err != nil {
		if isNotExist(err) {
			return seglog.ErrSegmentGone
		}
		return err
	}
	defer f.Close()
	return f.SyncData()
}

// localCheckpoint is a verified local checkpoint file.
type localCheckpoint struct {
	group uint64
	file  []byte
	tree  *namespace.Tree
	ids   []objid.ID // objects(): the content objects its tree references, once
}

// objects returns the distinct content objects the checkpoint's tree
// references, computed once.
func (c *localCheckpoint) objects() []objid.ID {
	if c.ids != nil {
		return c.ids
	}
	seen := map[objid.ID]bool{}
	c.ids = []objid.ID{}
	for _, n := range c.tree.Inodes() {
		if n.IsReg() {
			n.Content.Objects(func(id objid.ID) {
				if !seen[id] {
					seen[id] = true
					c.ids = append(c.ids, id)
				}
			})
		}
	}
	return c.ids
}

// latestCheckpoint returns the newest local checkpoint that verifies, or
// nil. A checkpoint file never changes once published (a newer group's
// is a new file), so the last one read is kept (ckCache) and not read,
// verified and decoded again by every step while it waits to be shipped;
// the cache is dropped once a head holds a checkpoint at least as new.
func (s *Shipper) latestCheckpoint() (*localCheckpoint, error) {
	gs, err := seglog.CheckpointGroups(s.opts.FS, s.ckDir)
	if err != nil {
		return nil, err
	}
	for i := len(gs) - 1; i >= 0; i-- {
		if c := s.ckCache; c != nil && c.group == gs[i] {
			return c, nil
		}
		path := filepath.Join(s.ckDir, seglog.CheckpointName(gs[i]))
		b, err := vfs.ReadFile(s.opts.FS, path)
		if isNotExist(err) {
			continue // replaced by a newer one meanwhile
		}
		if err != nil {
			return nil, err
		}
		p, err := seglog.DecodeCheckpointFile(path, gs[i], b)
		if err != nil {
			continue
		}
		t, err := namespace.DecodeCheckpoint(p)
		if err != nil {
			return nil, fmt.Errorf("ship %s: checkpoint %s: %w", s.opts.Name, path, err)
		}
		s.ckCache = &localCheckpoint{group: gs[i], file: b, tree: t}
		return s.ckCache, nil
	}
	return nil, nil
}

// uploadObject makes object id present in the bucket (HEAD, then PUT if
// absent or older than RefreshAfter) and returns the time of the check:
// the object was modified at most RefreshAfter before it (see fresh).
func (s *Shipper) uploadObject(ctx context.Context, id objid.ID) (time.Time, error) {
	key := remote.ObjectKey(id.String())
	at := s.opts.Now()
	info, ok, err := s.opts.Store.Stat(ctx, key)
	if err != nil {
		return at, err
	}
	// An object present from long ago may be what remote GC is about to
	// sweep (nothing referenced it until now): upload it again, which
	// makes it young, before a head references it (see GC).
	if ok && at.Sub(info.Modified) < s.refreshAfter() {
		s.mu.Lock()
		s.stats.ObjectsPresent++
		s.mu.Unlock()
		return at, nil
	}
	data, err := s.opts.Pool.ReadAll(id) // verified against its hash
	if ok && errors.As(err, new(*pool.MissingObjectError)) && s.notFetched(id) {
		// A lazily pulled workspace's object that this host has not
		// fetched yet: the bucket has it and this host has nothing to
		// upload. Skipping the refresh is safe: the object has been in
		// the workspace's tree since the pull without ever being local,
		// so every head since the pull's references it (remote GC keeps
		// it); content that leaves the tree can only come back through a
		// local Put or a snapshot, both of which make it local first.
		s.mu.Lock()
		s.stats.ObjectsRemoteOnly++
		s.mu.Unlock()
		return at, nil
	}
	if err != nil {
		return at, fmt.Errorf("ship %s: read pool object %s to upload it: %w", s.opts.Name, id, err)
	}
	if err := s.opts.Store.Put(ctx, key, data); err != nil {
		return at, err
	}
	s.mu.Lock()
	s.stats.ObjectsUploaded++
	s.stats.BytesUploaded += int64(len(data))
	s.mu.Unlock()
	return at, nil
}

// notFetched reports whether id is listed in the workspace's FetchState
// (a lazy pull's objects, not necessarily local). Safe for concurrent use.
func (s *Shipper) notFetched(id objid.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pulled == nil {
		s.pulled = map[objid.ID]bool{}
		st, ok, err := ReadFetchState(s.opts.FS, s.opts.Dir)
		if err != nil {
			s.lg.Warn("ship: cannot read the lazy pull's object list", "err", err)
		}
		if ok {
			ids, err := st.IDs()
			if err != nil {
				s.lg.Warn("ship: cannot read the lazy pull's object list", "err", err)
			}
			for _, id := range ids {
				s.pulled[id] = true
			}
		}
	}
	return s.pulled[id]
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// groupDigest is Head.LastDigest of a group's records: SHA-256 over each
// record's length (8 bytes, little-endian) and bytes, in hex.
func groupDigest(records [][]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, r := range records {
		binary.LittleEndian.PutUint64(n[:], uint64(len(r)))
		h.Write(n[:])
		h.Write(r)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// verifyHead compares the remote head's LastDigest with the local log's
// group of the same number (see Head.LastDigest). It runs once per
// loaded head, before anything after that group is shipped; a mismatch
// is permanent.
func (s *Shipper) verifyHead() error {
	if s.head.LastDigest == "" {
		s.verified = true
		return nil
	}
	for _, g := range s.buf {
		if g.n != s.head.Group {
			continue
		}
		if groupDigest(g.records) != s.head.LastDigest {
			return fmt.Errorf("ship %s: the local log's group %d differs from the group %d the remote holds: this copy and the remote's are two different histories (a state directory restored from a backup, or log segments removed or repaired by hand?); nothing more is shipped from it. Keep the remote's: remove this copy (wsfs rm --force %s) and pull it again; keep this one: pull the remote's under another name first to save what only it has",
				s.opts.Name, g.n, s.head.Group, s.opts.Name)
		}
		s.verified = true
		return nil
	}
	if len(s.buf) == 0 || s.buf[0].n > s.head.Group {
		// Only in a checkpoint here: nothing to compare.
		s.verified = true
	}
	return nil
}
