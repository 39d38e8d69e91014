package ship

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"wsfs/internal/objid"
)

// The pipeline: objects ahead of the head
//
// A round of Round waits for every object of the groups it ships before it
// writes their batches and the head. Run does not wait: each of its steps
// (a round with all=false) hands the objects of every group read so far to
// an uploader that works in the background, Parallel at a time, lowest
// group first, and then ships the longest prefix of the pending groups
// whose objects are all in the bucket — the batches of that prefix, then
// the head. So a group's lag no longer includes the upload of objects of
// groups committed after it, nor the rest of a round that was under way
// when it was committed: a small group committed after a large one is
// shipped as soon as the large group's objects and its own are up.
//
// Order is unchanged where it matters: the head names a group only when
// every object of it and of every earlier group is in the bucket, and
// batches are uploaded before the head that names them, so the remote is
// still always a committed prefix and never references a missing object.
// Objects uploaded ahead of the head are immutable and content-addressed:
// uploading one early only makes it present before anything names it.
//
// Remote GC (gc.go) may remove an object that no head names once it is
// older than the grace. An object is usable for a head (fresh) only while
// less than aheadLimit has passed since this shipper last checked it (a
// HEAD that found it at most RefreshAfter old, or the start of its PUT);
// an older check is redone before a head names the object (a step checks
// the prefix it ships once more just before uploading its batches). So
// every object a head newly names was modified at most
// aheadLimit+RefreshAfter before that head was written (plus the step's
// batch upload) — the bound gc.go's argument needs.
//
// A failed upload is kept as failed until a step takes its error: the
// step reports it (Stats.Errors, LastError; Run backs off), and the next
// step forgets it and submits again the objects its pending groups (and
// checkpoint) still need. Nothing a head will name is skipped; an object
// no pending group needs any more (its group was shipped through a
// checkpoint that no longer references it: local GC removed it) is not
// retried for ever.
//
// Merging the head's small batches (mergeBatches) re-uploads megabytes of
// log; Run does it in the background too (startMerge), and the step after
// it finished writes a head naming the merged batches if the head still
// lists the batches they replace.

// aheadLimit is how long a check of an object stays usable for a head
// (see above): half of RefreshAfter, and at least a minute (RefreshAfter
// is tiny only in tests; GC's grace is at least an hour).
func (s *Shipper) aheadLimit() time.Duration {
	return max(s.refreshAfter()/2, time.Minute)
}

// fresh reports whether object id is known to be in the bucket, checked
// recently enough for a head written at now to name it.
func (s *Shipper) fresh(id objid.ID, now time.Time) bool {
	s.knownMu.Lock()
	at, ok := s.known[id]
	s.knownMu.Unlock()
	return ok && now.Sub(at) < s.aheadLimit()
}

// setKnown records a check of object id at time at. Checks older than
// aheadLimit are useless (fresh refuses them): about once per aheadLimit
// they are dropped, so that a long-lived shipper's map holds only the
// objects checked recently, not every object it ever shipped.
func (s *Shipper) setKnown(id objid.ID, at time.Time) {
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	s.known[id] = at
	if limit := s.aheadLimit(); at.Sub(s.knownPruned) >= limit {
		for k, t := range s.known {
			if at.Sub(t) >= limit {
				delete(s.known, k)
			}
		}
		s.knownPruned = at
	}
}

// uploader uploads pool objects in the background (uploadObject), at most
// Parallel at a time, the one submitted with the lowest priority (group
// number) first. Its jobs run with its context; close cancels them and
// waits for them.
type uploader struct {
	s       *Shipper
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	changed chan struct{} // one token after any job finished

	mu      sync.Mutex
	queue   upQueue           // a heap: the lowest priority first
	busy    map[objid.ID]bool // queued or running
	failed  map[objid.ID]upFailure
	running int
	// gen counts forgetTaken calls that forgot a failure: a group whose
	// objects were submitted at an older gen is submitted again.
	gen uint64
}

type upFailure struct {
	err   error
	prio  uint64
	taken bool // reported by a step (takeErr)
}

type upJob struct {
	id   objid.ID
	prio uint64
}

// upQueue is a container/heap of jobs, the lowest prio on top (a backlog
// of many thousand objects after an outage stays cheap to pick from).
type upQueue []upJob

func (q upQueue) Len() int           { return len(q) }
func (q upQueue) Less(i, j int) bool { return q[i].prio < q[j].prio }
func (q upQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *upQueue) Push(x any)        { *q = append(*q, x.(upJob)) }
func (q *upQueue) Pop() any {
	old := *q
	j := old[len(old)-1]
	*q = old[:len(old)-1]
	return j
}

func (s *Shipper) newUploader(ctx context.Context) *uploader {
	ctx, cancel := context.WithCancel(ctx)
	return &uploader{s: s, ctx: ctx, cancel: cancel, changed: make(chan struct{}, 1),
		busy: map[objid.ID]bool{}, failed: map[objid.ID]upFailure{}}
}

// close cancels the uploads under way and waits for them.
func (u *uploader) close() {
	u.cancel()
	u.wg.Wait()
}

// Changed returns a channel that receives after a job finished (at most
// one token waits in it).
func (u *uploader) Changed() <-chan struct{} { return u.changed }

// submit queues id unless it is queued, running, or failed (a failure
// is forgotten by forgetTaken, after a step reported it).
func (u *uploader) submit(id objid.ID, prio uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, failed := u.failed[id]; failed || u.busy[id] {
		return
	}
	u.busy[id] = true
	heap.Push(&u.queue, upJob{id, prio})
	if u.running < u.s.opts.Parallel {
		u.running++
		u.wg.Add(1)
		go u.work()
	}
}

// takeErr returns the error of a failed upload no step has reported yet
// (nil if none), and marks every failure so far reported.
func (u *uploader) takeErr() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	var first error
	for id, f := range u.failed {
		if !f.taken {
			if first == nil {
				first = f.err
			}
			f.taken = true
			u.failed[id] = f
		}
	}
	return first
}

// forgetTaken forgets every failed upload a step has reported, and
// returns the generation the submissions must be at (see gen): the
// caller submits again what it still needs.
func (u *uploader) forgetTaken() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	forgot := false
	for id, f := range u.failed {
		if f.taken {
			delete(u.failed, id)
			forgot = true
		}
	}
	if forgot {
		u.gen++
	}
	return u.gen
}

func (u *uploader) work() {
	defer u.wg.Done()
	for {
		u.mu.Lock()
		if len(u.queue) == 0 || u.ctx.Err() != nil {
			for _, j := range u.queue {
				delete(u.busy, j.id)
			}
			u.queue = nil
			u.running--
			u.mu.Unlock()
			return
		}
		j := heap.Pop(&u.queue).(upJob)
		u.mu.Unlock()

		at, err := u.s.uploadObject(u.ctx, j.id)
		if err == nil {
			u.s.setKnown(j.id, at)
		}
		u.mu.Lock()
		delete(u.busy, j.id)
		if err != nil {
			u.failed[j.id] = upFailure{err: err, prio: j.prio}
		}
		u.mu.Unlock()
		select {
		case u.changed <- struct{}{}:
		default:
		}
	}
}

// wait blocks until a job finishes or ctx ends.
func (u *uploader) wait(ctx context.Context) error {
	select {
	case <-u.changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// submitStale submits every object of ids that is not fresh at now.
func (u *uploader) submitStale(ids []objid.ID, prio uint64, now time.Time) {
	for _, id := range ids {
		if !u.s.fresh(id, now) {
			u.submit(id, prio)
		}
	}
}

// scanFresh returns the index of the first object of ids from i on that
// is not fresh at now (len(ids) if none), and submits that one. Callers
// keep the index, so that waiting for a long list costs one pass over it.
func (u *uploader) scanFresh(ids []objid.ID, i int, prio uint64, now time.Time) int {
	for ; i < len(ids); i++ {
		if !u.s.fresh(ids[i], now) {
			u.submit(ids[i], prio)
			return i
		}
	}
	return i
}

// firstStale is scanFresh from the start that submits every object that
// is not fresh, not only the first: the check just before a head (or a
// snapshot entry) names the objects, since the scans may be older than
// aheadLimit in a long round. -1: all fresh.
func (u *uploader) firstStale(ids []objid.ID, prio uint64, now time.Time) int {
	first := -1
	for i, id := range ids {
		if !u.s.fresh(id, now) {
			u.submit(id, prio)
			if first < 0 {
				first = i
			}
		}
	}
	return first
}

// uploadObjects makes every object of ids present (and fresh) in the
// bucket, waiting for them; the first failure is returned.
func (s *Shipper) uploadObjects(ctx context.Context, ids map[objid.ID]struct{}) error {
	list := make([]objid.ID, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	u := s.newUploader(ctx)
	defer u.close()
	u.submitStale(list, 0, s.opts.Now())
	at := 0
	for {
		if err := u.takeErr(); err != nil {
			return err
		}
		if at = u.scanFresh(list, at, 0, s.opts.Now()); at == len(list) {
			if at = u.firstStale(list, 0, s.opts.Now()); at < 0 {
				return nil
			}
		}
		if err := u.wait(ctx); err != nil {
			return err
		}
	}
}

// mergeJob is a merge of the head's small batches running in the
// background (Run): once done, batches holds the merged batches that
// replace old in the head, or err why not (nil batches and nil err: not
// worth it).
type mergeJob struct {
	done    chan struct{}
	old     []Batch
	batches []Batch
	err     error
	started time.Time
}

// startMerge starts merging the head's trailing small batches in the
// background, unless a merge runs already. notify receives after it
// finished.
func (s *Shipper) startMerge(ctx context.Context, notify chan struct{}) {
	if s.merging != nil {
		return
	}
	plan, ok := s.planMerge()
	if !ok {
		return
	}
	j := &mergeJob{done: make(chan struct{}), old: plan.old, started: s.opts.Now()}
	s.merging = j
	go func() {
		defer close(j.done)
		j.batches, j.err = s.uploadMerge(ctx, plan)
		select {
		case notify <- struct{}{}:
		default:
		}
	}()
}

// finishMerge applies a finished background merge: a head naming the
// merged batches instead of the ones they replace, if the head still
// lists those (a checkpoint shipped meanwhile may have dropped them) and
// the merged batches are fresh (see aheadLimit). wait: wait for a merge
// still running.
func (s *Shipper) finishMerge(ctx context.Context, wait bool) error {
	j := s.merging
	if j == nil {
		return nil
	}
	if wait {
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-j.done:
	default:
		return nil
	}
	s.merging = nil
	if j.err != nil {
		s.lg.Warn("ship: merging the head's log batches failed; will retry", "err", j.err)
		return nil
	}
	if j.batches == nil || s.opts.Now().Sub(j.started) >= s.aheadLimit() {
		return nil
	}
	i := -1
	for k, b := range s.head.Batches {
		if b.Key == j.old[0].Key {
			i = k
			break
		}
	}
	if i < 0 || i+len(j.old) > len(s.head.Batches) {
		return nil
	}
	for k, b := range j.old {
		if s.head.Batches[i+k].Key != b.Key {
			return nil
		}
	}
	return s.applyMerge(ctx, i, len(j.old), j.batches)
}

// waitMerge waits for a background merge to end, without applying it
// (Run's exit: its uploads are harmless, and the next shipper merges
// again).
func (s *Shipper) waitMerge() {
	if s.merging != nil {
		<-s.merging.done
		s.merging = nil
	}
}
