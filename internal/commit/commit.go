// Package commit is the group committer of a workspace: one flusher goroutine
// that turns enqueued log records into durable groups.
//
// Operations reserve room (Reserve) and then enqueue their records
// (Slot.Enqueue; neither does I/O); the flusher
// closes a group when it holds MaxRecords records, when Window has passed
// since its first record, or at once for a Barrier or Close. A group becomes
// durable in three steps, always in this order:
//
//  1. drain: the pool objects its records reference are made durable
//     (DrainEntry: fdatasync of each object and fsync of each publication
//     directory; DrainSyncFS: syncfs of the pool and state filesystems);
//  2. append: the group's records are appended to the log as one group;
//  3. log sync: the log is synced.
//
// Only then does OnCommit see the group and are its waiters released.
// With Options.EarlyDrain, step 1 mostly happens ahead of time: a second
// goroutine syncs the objects of records as they are enqueued, and the
// group's drain finds them durable (a failed early sync taints its
// objects, and the group referencing one fails its drain).
// While one group drains and syncs, new records accumulate for the next one:
// that pipelining is the group commit.
//
// Failures follow fsyncgate (after a failed fsync the kernel may have dropped
// the dirty pages, so a retried fsync that succeeds proves nothing):
//
//   - a failed drain does not commit the group; its waiters get a *DrainError
//     (errors.Is syscall.EIO); its records go back to the front of the queue
//     with their Tickets, and every object of the group is republished
//     (re-read, verified, rewritten, synced) before the group is tried again;
//   - an append that finds the log's filesystem full (the log reports
//     ENOSPC or EDQUOT and has kept nothing of the group) does not commit
//     the group either: its waiters get a *LogFullError (errors.Is
//     syscall.ENOSPC), its records go back to the front of the queue, and
//     the flusher tries again every logFullRetry until there is space (or
//     fails for good if it is closing); every waiter, not only the group's,
//     gets the *LogFullError of each failed attempt;
//   - any other failed log append or sync, a failed republish, or
//     maxDrainAttempts drain failures in a row fail the committer for good
//     (*FailedError): the workspace must be remounted, and recovery reads
//     what is durable.
package commit

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"wsfs/internal/pool"
)

// Log is the part of the segment log (internal/seglog) the committer uses.
type Log interface {
	// Append writes records as one group and returns its number; it does
	// not sync. An error wrapping syscall.ENOSPC or syscall.EDQUOT must
	// mean that nothing of the group was kept and the log is still usable
	// (the same records may be appended again); any other error is final.
	Append(records [][]byte) (group uint64, err error)
	// Sync makes every appended group durable. A failure is final.
	Sync() error
	// LastGroup returns the number of the last appended group.
	LastGroup() uint64
}

// Objects is the part of the content pool (internal/pool) the committer uses.
type Objects interface {
	// SyncObjects makes the objects durable: fdatasync each, fsync each
	// publication directory once, at most parallel syncs in flight.
	SyncObjects(ids []pool.ID, parallel int) error
	// SyncFS is syncfs(2) of the pool's filesystem (DrainSyncFS only).
	SyncFS() error
	// Republish re-reads the object, verifies its hash, rewrites and syncs
	// it: after a failed sync, only a fresh write proves durability.
	Republish(id pool.ID) error
}

// Record is one log record and the pool objects it references.
type Record struct {
	// Data is the encoded record, appended to the log as it is. The
	// committer keeps it until the group is durable; the caller must not
	// modify it after Enqueue.
	Data []byte
	// Objects are the pool objects the record references that must be
	// durable before it commits: those it published and those it
	// deduplicated against.
	Objects []pool.ID
}

// Ticket is the position of an enqueued record. Tickets are strictly
// increasing in Enqueue order, start at 1, and are never reused; 0 means "no
// record".
type Ticket uint64

// Observer receives metrics. Its methods are called from the flusher, after
// a group is durable and before its waiters are released, so they must be
// quick and must not block.
type Observer interface {
	GroupCommitted(GroupStats)
}

// GroupStats describes one committed group.
type GroupStats struct {
	Group   uint64        // the log's group number
	Records int           // records in the group
	Bytes   int           // total length of the records' Data
	Objects int           // distinct pool objects drained
	Drain   time.Duration // the drain (object syncs or syncfs)
	LogSync time.Duration // the log append and sync
}

// Stats is a snapshot of the committer's state.
type Stats struct {
	LastGroup  uint64    // the last committed group (the log's LastGroup at New before the first commit)
	LastCommit time.Time // when it was committed; zero before the first commit
	Pending    int       // records enqueued and not yet durable (queued or in flight; after a failure, those never committed)
	Failed     error     // the *FailedError if the committer has failed for good, else nil
	// Stalled is the *LogFullError of the last append while the log's
	// filesystem is full (commits are stalled, retried every second); nil
	// once a group commits again.
	Stalled error
}

// Options configure a Committer. The zero value is valid.
type Options struct {
	// MaxRecords closes a group once it holds this many records (default
	// 512). The records of one Enqueue call are never split across groups,
	// so a group can be larger when one call enqueues more.
	MaxRecords int
	// Window closes a group this long after its first record was enqueued
	// (default 50ms): the longest a completed operation waits to become
	// durable, not counting the drain and sync of the group before it.
	Window time.Duration
	// Drain selects what is synced before the log (default DrainEntry).
	// DrainSyncFS exists to reproduce the legacy pathology; do not use it
	// in production: its cost grows with every dirty page of both
	// filesystems, whoever wrote them.
	Drain Drain
	// EarlyDrain (DrainEntry only) syncs the objects of enqueued records
	// in the background as they arrive, before their group closes, so the
	// group's drain (and a Barrier waiting for it) mostly finds them
	// durable already (the pool skips objects it knows durable). An early
	// sync that fails taints its objects: the group referencing one of
	// them fails its drain and republishes them, exactly as if its own
	// drain had failed (fsyncgate: after a failed fdatasync, a later one
	// may succeed without the data having reached the disk).
	EarlyDrain bool
	// SyncParallelism bounds the object syncs in flight during a DrainEntry
	// drain (default pool.DefaultSyncParallel, chosen by the pool's benchmark).
	SyncParallelism int
	// StateSyncFS is syncfs(2) of the filesystem holding the log, called by
	// DrainSyncFS after the pool's SyncFS (nil: skipped).
	StateSyncFS func() error
	// Clock is the source of time (default SystemClock{}).
	Clock Clock
	// Logger receives failures (Error) and drains or log syncs slower than
	// one second (Warn). Default slog.Default().
	Logger *slog.Logger
	// Observer receives metrics; may be nil.
	Observer Observer
	// OnCommit, if set, is called by the flusher for each group after it is
	// durable and before its waiters are released, in group order. It
	// runs on the flusher, so it must not call Reserve, Wait, Barrier or
	// Close (they wait for the flusher); Stats is fine. records is a
	// fresh slice that may be kept; the records' Data must not be
	// modified.
	OnCommit func(group uint64, records []Record)
}

const (
	defaultMaxRecords      = 512
	defaultWindow          = 50 * time.Millisecond
	defaultSyncParallelism = pool.DefaultSyncParallel
	// backpressureGroups: Reserve waits while this many full groups of
	// records are queued behind the one in flight.
	backpressureGroups = 8
	// maxDrainAttempts drain failures in a row (each followed by a
	// successful republish) fail the committer: the device is not
	// getting better, and retrying forever would hide it.
	maxDrainAttempts = 3
	// slowIO is the drain or log sync duration above which a warning is
	// logged.
	slowIO = time.Second
	// logFullRetry is how long the flusher waits after an append found
	// the log's filesystem full before it tries again.
	logFullRetry = time.Second
)

// entry is an enqueued record.
type entry struct {
	t   Ticket
	rec Record
	at  time.Time // when it was enqueued (the window starts at a group's first entry)
	end bool      // last record of its Enqueue call: groups end only here
}

// Committer is a workspace's group committer. Its methods are safe for
// concurrent use.
type Committer struct {
	log   Log
	objs  Objects
	opts  Options // defaults applied
	clock Clock
	lg    *slog.Logger

	kick chan struct{} // wakes the flusher; capacity 1, sends never block
	// closingCh is closed by the first Close (it ends a wait for space).
	closingCh chan struct{}
	closeOnce sync.Once
	done      chan struct{} // closed when the flusher has exited

	// With EarlyDrain: earlyKick wakes the early drainer (capacity 1),
	// earlyStop stops it, earlyDone is closed when it has exited.
	// drainMu is held around every SyncObjects call (early or a group's)
	// and the taint check before a group's drain, so a group never drains
	// while an early sync of its objects is still running: it sees that
	// sync's taint, if any.
	earlyKick, earlyStop, earlyDone chan struct{}
	drainMu                         sync.Mutex
	stopEarly                       sync.Once

	mu struct {
		sync.Mutex
		// space is signalled when pending shrinks, and broadcast when
		// the committer fails, stalls or closes (Reserve backpressure).
		space sync.Cond
		// next is the Ticket the next enqueued record gets.
		next Ticket
		// pending holds the enqueued records not in flight, in Ticket
		// order. The records in flight, if any, have lower Tickets.
		pending []entry
		// durable: every record with a Ticket <= durable is committed.
		durable Ticket
		// urgent: while pending holds a Ticket <= urgent (a Barrier's
		// or Close's), groups close without waiting for the window.
		urgent Ticket
		// waiters of records not yet committed, by Ticket.
		waiters waiterHeap
		// early: objects enqueued and not yet taken by the early drainer.
		early []pool.ID
		// tainted: objects whose early sync failed, until republished.
		tainted map[pool.ID]error
		closing bool
		failed  *FailedError
		stalled *LogFullError // set while appends find the log's filesystem full
		// admitted: Slots reserved and not yet enqueued or cancelled.
		admitted int
		// lastGroup and lastCommit describe the last committed group.
		lastGroup  uint64
		lastCommit time.Time
	}
}

// New returns a Committer appending to log and draining objs, and starts its
// flusher goroutine. Close stops it.
func New(log Log, objs Objects, opts Options) *Committer {
	if opts.MaxRecords <= 0 {
		opts.MaxRecords = defaultMaxRecords
	}
	if opts.Window <= 0 {
		opts.Window = defaultWindow
	}
	if opts.SyncParallelism <= 0 {
		opts.SyncParallelism = defaultSyncParallelism
	}
	if err := opts.Drain.Valid(); err != nil {
		panic(err) // a caller's bug: workspace.Open checks Valid first
	}
	if opts.Clock == nil {
		opts.Clock = SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Committer{
		log:       log,
		objs:      objs,
		opts:      opts,
		clock:     opts.Clock,
		lg:        opts.Logger.With("component", "commit"),
		kick:      make(chan struct{}, 1),
		closingCh: make(chan struct{}),
		done:      make(chan struct{}),
	}
	c.mu.space.L = &c.mu.Mutex
	c.mu.next = 1
	c.mu.lastGroup = log.LastGroup()
	c.mu.tainted = make(map[pool.ID]error)
	if opts.EarlyDrain && opts.Drain == DrainEntry {
		c.earlyKick = make(chan struct{}, 1)
		c.earlyStop = make(chan struct{})
		c.earlyDone = make(chan struct{})
		go c.earlyDrainer()
	}
	go c.flusher()
	return c
}

// Slot is room in the queue for one Enqueue call, reserved by Reserve. A
// caller reserves before it changes anything, so that an operation the queue
// cannot take is refused whole; then it calls exactly one of Enqueue or
// Cancel, once (a second call panics: the room would be counted twice).
type Slot struct {
	c    *Committer
	used bool
}

// Reserve reserves room in the queue for one Slot.Enqueue. It does no I/O.
// It waits while the queue is at its backpressure limit (backpressureGroups
// full groups queued behind the one in flight); but when the log's
// filesystem is full, so that the queue cannot drain until space is freed,
// it returns the stall's *LogFullError instead, also to calls already
// waiting, so that the caller can refuse its operation with ENOSPC before
// changing anything. It returns the *FailedError once the committer has
// failed, and ErrClosed after Close.
func (c *Committer) Reserve() (*Slot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.mu.failed != nil:
			return nil, c.mu.failed
		case c.mu.closing:
			return nil, ErrClosed
		case c.roomLocked():
			c.mu.admitted++
			return &Slot{c: c}, nil
		case c.mu.stalled != nil:
			return nil, c.mu.stalled
		}
		c.mu.space.Wait()
	}
}

// release marks s used, or panics if it already was.
func (s *Slot) release() {
	if s.used {
		panic("commit: a Slot was used twice")
	}
	s.used = true
}

// Cancel gives back the room Reserve reserved.
func (s *Slot) Cancel() {
	s.release()
	c := s.c
	c.mu.Lock()
	c.mu.admitted--
	c.mu.space.Broadcast()
	c.mu.Unlock()
}

// Enqueue adds records to the current group in the reserved room, and
// returns the Ticket of the last one (Wait on it covers them all). It never
// blocks and does no I/O. The records of one call commit in the same group,
// in order, after every record enqueued before the call. With no records it
// returns the Ticket of the last record enqueued so far. It returns the
// *FailedError if the committer failed since Reserve, and ErrClosed if it
// closed.
func (s *Slot) Enqueue(recs ...Record) (Ticket, error) {
	s.release()
	c := s.c
	var now time.Time
	if len(recs) > 0 {
		now = c.clock.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.admitted--
	if c.mu.failed != nil {
		return 0, c.mu.failed
	}
	if c.mu.closing {
		return 0, ErrClosed
	}
	return c.enqueueLocked(recs, now), nil
}

// roomLocked reports whether the queue, with the reserved slots, is below
// its backpressure limit.
func (c *Committer) roomLocked() bool {
	return len(c.mu.pending)+c.mu.admitted < backpressureGroups*c.opts.MaxRecords
}

// enqueueLocked appends recs to the queue and returns the last Ticket.
func (c *Committer) enqueueLocked(recs []Record, now time.Time) Ticket {
	if len(recs) == 0 {
		return c.mu.next - 1
	}
	wasEmpty := len(c.mu.pending) == 0
	early := false
	for i, r := range recs {
		c.mu.pending = append(c.mu.pending, entry{t: c.mu.next, rec: r, at: now, end: i == len(recs)-1})
		c.mu.next++
		if c.earlyKick != nil && len(r.Objects) > 0 {
			c.mu.early = append(c.mu.early, r.Objects...)
			early = true
		}
	}
	if early {
		select {
		case c.earlyKick <- struct{}{}:
		default:
		}
	}
	if wasEmpty || len(c.mu.pending) >= c.opts.MaxRecords {
		c.wake()
	}
	return c.mu.next - 1
}

// Wait returns nil once the record with Ticket t, and so every record before
// it, is durable. If the group holding t fails its drain, Wait returns that
// *DrainError, and if the log's filesystem is full, a *LogFullError (in
// both cases the record stays queued and is retried; waiting again may
// succeed). If the committer fails, Wait returns the *FailedError. It
// returns ctx.Err() if ctx ends first.
func (c *Committer) Wait(ctx context.Context, t Ticket) error {
	c.mu.Lock()
	w, err := c.waiterLocked(t)
	c.mu.Unlock()
	if w == nil {
		return err
	}
	return w.await(ctx)
}

// waiterLocked registers a waiter for Ticket t, or returns t's outcome at
// once (nil waiter): nil if t is durable, the *FailedError, or an error for
// a Ticket never issued.
func (c *Committer) waiterLocked(t Ticket) (*waiter, error) {
	if t <= c.mu.durable {
		return nil, nil
	}
	if t >= c.mu.next {
		return nil, fmt.Errorf("commit: Wait for ticket %d, which was never issued (the last is %d)", t, c.mu.next-1)
	}
	if ferr := c.mu.failed; ferr != nil {
		return nil, ferr
	}
	w := &waiter{t: t, ch: make(chan error, 1)}
	heap.Push(&c.mu.waiters, w)
	return w, nil
}

// await returns w's outcome, or ctx.Err() if ctx ends first.
func (w *waiter) await(ctx context.Context) error {
	select {
	case err := <-w.ch:
		return err
	case <-ctx.Done():
		// w stays in the heap until its group completes; the
		// flusher's send on its buffered channel never blocks.
		return ctx.Err()
	}
}

// Barrier gives fsync semantics: on a nil return every record enqueued
// before the call is durable. It closes the current group at once instead of
// waiting for the window (if a group is in flight, the next one is closed
// as soon as it completes). Errors are those of Wait. The waiter is
// registered before the flusher is woken, so it always hears the outcome
// of the group it made urgent.
func (c *Committer) Barrier(ctx context.Context) error {
	c.mu.Lock()
	t := c.mu.next - 1
	c.mu.urgent = max(c.mu.urgent, t)
	w, err := c.waiterLocked(t)
	c.mu.Unlock()
	if w == nil {
		return err
	}
	c.wake()
	return w.await(ctx)
}

// Stats returns a snapshot of the committer's state.
func (c *Committer) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{
		LastGroup:  c.mu.lastGroup,
		LastCommit: c.mu.lastCommit,
		Pending:    int(c.mu.next - 1 - c.mu.durable),
	}
	if c.mu.failed != nil {
		s.Failed = c.mu.failed
	}
	if c.mu.stalled != nil {
		s.Stalled = c.mu.stalled
	}
	return s
}

// Close commits every record enqueued before it, then stops the flusher.
// Reserve and Slot.Enqueue fail with ErrClosed from the moment Close is
// called. Close
// returns the *FailedError if the committer failed (before or while
// committing the rest), else nil. It is idempotent.
func (c *Committer) Close() error {
	c.mu.Lock()
	c.mu.closing = true
	c.mu.space.Broadcast()
	c.mu.Unlock()
	c.closeOnce.Do(func() { close(c.closingCh) })
	c.wake()
	<-c.done
	if c.earlyStop != nil {
		c.stopEarly.Do(func() { close(c.earlyStop) })
		<-c.earlyDone
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.failed != nil {
		return c.mu.failed
	}
	return nil
}

// earlyDrainer syncs the objects of enqueued records in batches (whatever
// accumulated while the previous batch synced) until Close. A failed batch
// taints every object in it; nothing else happens until a group needs one
// of them (see commitGroup).
func (c *Committer) earlyDrainer() {
	defer close(c.earlyDone)
	for {
		select {
		case <-c.earlyKick:
		case <-c.earlyStop:
			return
		}
		c.mu.Lock()
		ids := c.mu.early
		c.mu.early = nil
		c.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		c.drainMu.Lock()
		if err := c.objs.SyncObjects(ids, c.opts.SyncParallelism); err != nil {
			c.lg.Warn("early object sync failed; the group referencing these objects will fail its drain and republish them",
				"objects", len(ids), "err", err)
			c.mu.Lock()
			for _, id := range ids {
				c.mu.tainted[id] = err
			}
			c.mu.Unlock()
		}
		c.drainMu.Unlock()
	}
}

// taintErr returns an error if an early sync of one of ids failed and the
// object has not been republished since.
func (c *Committer) taintErr(ids []pool.ID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if err, ok := c.mu.tainted[id]; ok {
			return fmt.Errorf("the early sync of object %s failed: %w", id, err)
		}
	}
	return nil
}

// wake makes the flusher re-examine the queue. It never blocks.
func (c *Committer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// flusher is the committer's only goroutine that does I/O. It loops: wait
// until a group should close, take it from the front of the queue, drain
// it, append it, sync the log, release its waiters.
//
// Ordering invariants:
//
//  1. Records commit in Ticket order: a group is always a prefix of the
//     queue, and only one group is in flight at a time; records enqueued
//     while a group is in flight accumulate for the next group.
//  2. The records of one Enqueue call are in one group (a group ends only at
//     the end of a call), so an operation is never half committed.
//  3. A group is appended to the log only after its drain returned nil:
//     the log never references an object that is not durable.
//  4. Waiters are released, and OnCommit called, only after the log's Sync
//     returned nil for the group. OnCommit sees groups in order, before
//     their waiters are released.
//  5. A group whose drain failed is not appended; its records return to the
//     front of the queue (order and Tickets unchanged) and every object it
//     references is republished before it is tried again.
//  6. A failed log Sync, or a failed Append other than a full filesystem,
//     is never retried: the committer fails for good, and every waiter of
//     an uncommitted record gets the error. An Append that found the
//     filesystem full kept nothing of the group (the log cut it back and
//     nothing of it was synced, so fsyncgate does not apply): the group
//     returns to the front of the queue like a failed drain's and is
//     retried every logFullRetry, its waiters told (*LogFullError).
//
// The flusher exits when the committer fails, or when it is closing and the
// queue is empty.
func (c *Committer) flusher() {
	defer close(c.done)
	drainFailures := 0
	for {
		c.mu.Lock()
		if c.mu.failed != nil {
			c.mu.Unlock()
			return
		}
		n := len(c.mu.pending)
		if n == 0 && c.mu.closing {
			c.mu.Unlock()
			return
		}
		var wait time.Duration
		ready := false
		if n > 0 {
			first := c.mu.pending[0]
			wait = first.at.Add(c.opts.Window).Sub(c.clock.Now())
			ready = c.mu.closing || n >= c.opts.MaxRecords || first.t <= c.mu.urgent || wait <= 0
		}
		var g []entry
		if ready {
			g = c.takeGroupLocked()
		}
		c.mu.Unlock()

		switch {
		case ready:
			switch c.commitGroup(g) {
			case committed:
				drainFailures = 0
				continue
			case logFull:
				c.mu.Lock()
				closing := c.mu.closing
				c.mu.Unlock()
				if closing {
					c.fail("log append", fmt.Errorf("closing while the log's filesystem is full: the queued records were never reported durable and are dropped"))
					return
				}
				timer, fire := c.clock.NewTimer(logFullRetry)
				select {
				case <-fire:
				case <-c.closingCh: // one last attempt, then fail if still full
				}
				timer.Stop()
				continue
			}
			drainFailures++
			if drainFailures >= maxDrainAttempts {
				c.fail("drain", fmt.Errorf("%d drains in a row failed, each after the objects were republished", drainFailures))
				return
			}
			if !c.republish(g) {
				return
			}
		case n == 0:
			<-c.kick
		default:
			timer, fire := c.clock.NewTimer(wait)
			select {
			case <-c.kick:
			case <-fire:
			}
			timer.Stop()
		}
	}
}

// takeGroupLocked removes the next group from the front of the queue: whole
// Enqueue calls, up to MaxRecords records (more if the first call alone has
// more).
func (c *Committer) takeGroupLocked() []entry {
	p := c.mu.pending
	n := 0
	for n < len(p) && n < c.opts.MaxRecords {
		end := n
		for !p[end].end {
			end++
		}
		if n > 0 && end+1 > c.opts.MaxRecords {
			break
		}
		n = end + 1
	}
	g := make([]entry, n)
	copy(g, p[:n])
	clear(p[:n]) // drop references to the records' data
	c.mu.pending = p[n:]
	c.mu.space.Broadcast()
	return g
}

// groupObjects returns the distinct objects of g, in first-reference order.
func groupObjects(g []entry) []pool.ID {
	var ids []pool.ID
	seen := make(map[pool.ID]struct{})
	for _, e := range g {
		for _, id := range e.rec.Objects {
			if _, ok := seen[id]; !ok {
				seen[id] = struct{}{}
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// outcome is what became of a group commitGroup tried.
type outcome int

const (
	committed   outcome = iota // durable, waiters released (or the committer failed for good)
	drainFailed                // the records are back in the queue; waiters have the *DrainError
	logFull                    // the records are back in the queue; waiters have the *LogFullError
)

// commitGroup drains g, appends it to the log and syncs the log, then
// releases its waiters. A log failure other than a full filesystem fails
// the committer and reports committed (the flusher loop then exits).
func (c *Committer) commitGroup(g []entry) outcome {
	ids := groupObjects(g)
	start := c.clock.Now()
	var err error
	switch c.opts.Drain {
	case DrainEntry:
		if len(ids) > 0 {
			c.drainMu.Lock()
			err = c.taintErr(ids)
			if err == nil {
				err = c.objs.SyncObjects(ids, c.opts.SyncParallelism)
			}
			c.drainMu.Unlock()
		}
	case DrainSyncFS:
		err = c.objs.SyncFS()
		if err == nil && c.opts.StateSyncFS != nil {
			err = c.opts.StateSyncFS()
		}
	}
	drained := c.clock.Now()
	drainDur := drained.Sub(start)
	if drainDur > slowIO {
		c.lg.Warn("slow drain", "drain", c.opts.Drain.String(), "duration", drainDur,
			"records", len(g), "objects", len(ids))
	}
	if err != nil {
		c.drainFailed(g, ids, err)
		return drainFailed
	}

	data := make([][]byte, len(g))
	bytes := 0
	for i, e := range g {
		data[i] = e.rec.Data
		bytes += len(e.rec.Data)
	}
	group, err := c.log.Append(data)
	if err != nil && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		lerr := &LogFullError{First: g[0].t, Last: g[len(g)-1].t, Err: err}
		c.lg.Error("the log's filesystem is full; the group is not committed, its waiters get ENOSPC, and it is retried until there is space",
			"first", lerr.First, "last", lerr.Last, "retry_every", logFullRetry, "err", err)
		c.mu.Lock()
		c.mu.stalled = lerr
		c.mu.space.Broadcast() // waiting Reserves now refuse
		c.mu.Unlock()
		// Groups commit in order, so no waiter can succeed before this
		// group: every waiter hears of the full log now, not only this
		// group's (a later fsync must not wait for space in silence).
		c.requeue(g, ^Ticket(0), lerr)
		return logFull
	}
	if err != nil {
		c.fail("log append", err)
		return committed
	}
	if err := c.log.Sync(); err != nil {
		c.fail("log sync", err)
		return committed
	}
	synced := c.clock.Now()
	syncDur := synced.Sub(drained)
	if syncDur > slowIO {
		c.lg.Warn("slow log sync", "duration", syncDur, "group", group, "records", len(g), "bytes", bytes)
	}

	if c.opts.OnCommit != nil {
		recs := make([]Record, len(g))
		for i, e := range g {
			recs[i] = e.rec
		}
		c.opts.OnCommit(group, recs)
	}
	if c.opts.Observer != nil {
		c.opts.Observer.GroupCommitted(GroupStats{
			Group: group, Records: len(g), Bytes: bytes, Objects: len(ids),
			Drain: drainDur, LogSync: syncDur,
		})
	}

	c.mu.Lock()
	c.mu.durable = g[len(g)-1].t
	c.mu.lastGroup = group
	c.mu.lastCommit = synced
	c.mu.stalled = nil
	c.releaseLocked(c.mu.durable, nil)
	c.mu.Unlock()

	return committed
}

// drainFailed puts g back at the front of the queue and fails its waiters.
func (c *Committer) drainFailed(g []entry, ids []pool.ID, cause error) {
	derr := &DrainError{Drain: c.opts.Drain, First: g[0].t, Last: g[len(g)-1].t, Objects: len(ids), Err: cause}
	c.lg.Error("group drain failed; the group is not committed, its waiters get EIO, its objects are republished before a retry",
		"drain", c.opts.Drain.String(), "first", derr.First, "last", derr.Last, "objects", len(ids), "err", cause)
	c.requeue(g, derr.Last, derr)
}

// requeue puts g back at the front of the queue and sends err to the
// waiters of its records (Tickets up to last).
func (c *Committer) requeue(g []entry, last Ticket, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := make([]entry, 0, len(g)+len(c.mu.pending))
	p = append(p, g...)
	c.mu.pending = append(p, c.mu.pending...)
	c.releaseLocked(last, err)
}

// republish rewrites every object of g after a failed drain. A failure fails
// the committer; it reports whether all succeeded.
func (c *Committer) republish(g []entry) bool {
	for _, id := range groupObjects(g) {
		if err := c.objs.Republish(id); err != nil {
			c.fail("republish", fmt.Errorf("object %s, after a failed drain: %w", id, err))
			return false
		}
		c.mu.Lock()
		delete(c.mu.tainted, id) // rewritten and synced afresh
		c.mu.Unlock()
	}
	return true
}

// fail makes the committer fail for good with op's err and releases every
// waiter with the *FailedError.
func (c *Committer) fail(op string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ferr := &FailedError{Op: op, LastGroup: c.mu.lastGroup, Err: err}
	c.lg.Error("committer failed for good; remount the workspace", "op", op, "last_group", ferr.LastGroup, "err", err)
	c.mu.failed = ferr
	c.mu.pending = nil
	c.releaseLocked(^Ticket(0), ferr)
	c.mu.space.Broadcast()
}

// releaseLocked sends err to every waiter of a Ticket <= t.
func (c *Committer) releaseLocked(t Ticket, err error) {
	for len(c.mu.waiters) > 0 && c.mu.waiters[0].t <= t {
		w := heap.Pop(&c.mu.waiters).(*waiter)
		w.ch <- err
	}
}

// waiter is a Wait call in progress.
type waiter struct {
	t  Ticket
	ch chan error // capacity 1: receives the outcome exactly once
}

// waiterHeap is a min-heap of waiters by Ticket.
type waiterHeap []*waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].t < h[j].t }
func (h waiterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waiterHeap) Push(x any)        { *h = append(*h, x.(*waiter)) }
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}
