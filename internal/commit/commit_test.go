package commit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// enqueue reserves a Slot and enqueues recs in it: the one way records
// enter the queue.
func enqueue(c *Committer, recs ...Record) (Ticket, error) {
	s, err := c.Reserve()
	if err != nil {
		return 0, err
	}
	return s.Enqueue(recs...)
}

func mustEnqueue(t *testing.T, c *Committer, recs ...Record) Ticket {
	t.Helper()
	tk, err := enqueue(c, recs...)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return tk
}

func mustWait(t *testing.T, c *Committer, tk Ticket) {
	t.Helper()
	if err := c.Wait(ctxT(t), tk); err != nil {
		t.Fatalf("Wait(%d): %v", tk, err)
	}
}

func mustBarrier(t *testing.T, c *Committer) {
	t.Helper()
	if err := c.Barrier(ctxT(t)); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %v\n want %v", what, got, want)
	}
}

// started runs f in a goroutine and returns a channel closed when it returns.
func started(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

// waitWaiters waits until n Wait calls are registered with c.
func waitWaiters(t *testing.T, c *Committer, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		c.mu.Lock()
		got := len(c.mu.waiters)
		c.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters registered after %v; want %d", got, testTimeout, n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("%s did not finish within %v", what, testTimeout)
	}
}

func TestParseDrain(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Drain
		wantErr bool
	}{
		{"entry", DrainEntry, false},
		{"syncfs", DrainSyncFS, false},
		{"", 0, true},
		{"Entry", 0, true},
		{"fsync", 0, true},
	} {
		got, err := ParseDrain(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseDrain(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("ParseDrain(%q).String() = %q", tc.in, got.String())
		}
		if err != nil && !strings.Contains(err.Error(), `"entry"`) {
			t.Errorf("ParseDrain(%q) error does not name the valid modes: %v", tc.in, err)
		}
	}
}

// TestGroupBoundaries checks where groups close: at MaxRecords, never inside
// one Enqueue call, and (for what is left) at a Barrier. The window is an
// hour on a clock that never moves, so only MaxRecords and the Barrier close
// groups.
func TestGroupBoundaries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int
		calls   []int // records per Enqueue call
		full    [][]string
		barrier [][]string // groups the final Barrier adds
	}{
		{"closes at MaxRecords", 4, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
			[][]string{{"r1", "r2", "r3", "r4"}, {"r5", "r6", "r7", "r8"}},
			[][]string{{"r9", "r10"}}},
		{"a call is never split", 4, []int{3, 3},
			[][]string{{"r1", "r2", "r3"}},
			[][]string{{"r4", "r5", "r6"}}},
		{"a call larger than MaxRecords is one group", 4, []int{6},
			[][]string{{"r1", "r2", "r3", "r4", "r5", "r6"}},
			nil},
		{"Barrier closes a partial group", 512, []int{1, 2},
			nil,
			[][]string{{"r1", "r2", "r3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{MaxRecords: tc.max, Window: time.Hour})
			n := 0
			var tickets []Ticket
			for _, k := range tc.calls {
				var recs []Record
				for range k {
					n++
					recs = append(recs, rec(fmt.Sprintf("r%d", n)))
				}
				tickets = append(tickets, mustEnqueue(t, h.c, recs...))
			}
			equal(t, "last ticket", tickets[len(tickets)-1], Ticket(n))
			if len(tc.full) > 0 {
				last := tc.full[len(tc.full)-1][len(tc.full[len(tc.full)-1])-1]
				var tk Ticket
				fmt.Sscanf(last, "r%d", &tk)
				mustWait(t, h.c, tk)
			}
			equal(t, "groups closed by size", h.log.durable(), tc.full)
			mustBarrier(t, h.c)
			equal(t, "groups after Barrier", h.log.durable(), append(tc.full, tc.barrier...))
			equal(t, "pending", h.c.Stats().Pending, 0)
		})
	}
}

// TestGroupClosesAtWindow moves a fake clock: the group closes when Window
// has passed since its first record, not before.
func TestGroupClosesAtWindow(t *testing.T) {
	const window = 50 * time.Millisecond
	h := newHarness(t, Options{Window: window})
	start := h.clock.Now()
	t1 := mustEnqueue(t, h.c, rec("a"))
	h.clock.waitArmed(t, start.Add(window), 0)

	// A wake-up before the deadline (here a second record) does not close
	// the group: the window runs from the group's first record, so the
	// flusher waits again for the same deadline.
	h.clock.Advance(window - time.Nanosecond)
	made := h.clock.timersMade()
	t2 := mustEnqueue(t, h.c, rec("b"))
	h.c.wake()
	h.clock.waitArmed(t, start.Add(window), made)
	equal(t, "log 1ns before the window", h.log.durable(), [][]string(nil))

	h.clock.Advance(time.Nanosecond)
	mustWait(t, h.c, t1)
	mustWait(t, h.c, t2)
	equal(t, "log after the window", h.log.durable(), [][]string{{"a", "b"}})
	equal(t, "LastCommit", h.c.Stats().LastCommit, start.Add(window))

	// The next group's window starts at its own first record.
	h.clock.Advance(time.Hour)
	start = h.clock.Now()
	made = h.clock.timersMade()
	t3 := mustEnqueue(t, h.c, rec("c"))
	h.clock.waitArmed(t, start.Add(window), made)
	h.clock.Advance(window)
	mustWait(t, h.c, t3)
	equal(t, "second group", h.log.durable(), [][]string{{"a", "b"}, {"c"}})
}

// TestCommitOrder checks drain before append before log sync before
// OnCommit before the waiter's release, for both drain modes.
func TestCommitOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		recs  []Record
		order []string
	}{
		{"entry", Options{}, []Record{rec("r1", "A", "B"), rec("r2", "B", "C"), rec("r3")},
			[]string{"sync-objects [A B C]", "append [r1 r2 r3]", "log-sync", "on-commit 1 [r1 r2 r3]", "released"}},
		{"entry without objects", Options{}, []Record{rec("r1"), rec("r2")},
			[]string{"append [r1 r2]", "log-sync", "on-commit 1 [r1 r2]", "released"}},
		{"syncfs", Options{Drain: DrainSyncFS}, []Record{rec("r1", "A"), rec("r2")},
			[]string{"pool-syncfs", "state-syncfs", "append [r1 r2]", "log-sync", "on-commit 1 [r1 r2]", "released"}},
		{"syncfs without objects", Options{Drain: DrainSyncFS}, []Record{rec("r1")},
			[]string{"pool-syncfs", "state-syncfs", "append [r1]", "log-sync", "on-commit 1 [r1]", "released"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h *harness
			opts := tc.opts
			opts.Window = time.Hour
			opts.StateSyncFS = func() error { h.rec.add("state-syncfs"); return nil }
			opts.OnCommit = func(group uint64, recs []Record) {
				var s []string
				for _, r := range recs {
					s = append(s, string(r.Data))
				}
				h.rec.add("on-commit %d %v", group, s)
			}
			h = newHarness(t, opts)
			mustEnqueue(t, h.c, tc.recs...)
			mustBarrier(t, h.c)
			h.rec.add("released")
			equal(t, "calls", h.rec.list(), tc.order)
			if tc.opts.Drain == DrainEntry && len(h.objs.parallel) > 0 {
				equal(t, "parallelism", h.objs.parallel[0], 0) // the pool chooses
			}
		})
	}
}

// TestPipelining holds group 1 in its log sync and checks that Enqueue does
// not block, that records enqueued meanwhile form group 2, and that waiters
// are released group by group.
func TestPipelining(t *testing.T) {
	h := newHarness(t, Options{Window: time.Hour})
	entered := make(chan uint64)
	release := make(chan struct{})
	h.log.set(func(l *fakeLog) {
		l.beforeSync = func(g uint64) {
			if g == 1 {
				entered <- g
				<-release
			}
		}
	})
	t1 := mustEnqueue(t, h.c, rec("a"))
	barrier1 := started(func() { mustBarrier(t, h.c) })
	select {
	case <-entered:
	case <-time.After(testTimeout):
		t.Fatal("group 1 never reached its log sync")
	}
	// Group 1 is appended but not synced.
	t2 := mustEnqueue(t, h.c, rec("b"))
	t3 := mustEnqueue(t, h.c, rec("c"))
	wait1 := started(func() { mustWait(t, h.c, t1) })
	select {
	case <-wait1:
		t.Fatal("Wait for group 1 returned before its log sync")
	case <-barrier1:
		t.Fatal("Barrier returned before its log sync")
	default:
	}
	equal(t, "pending while group 1 syncs", h.c.Stats().Pending, 3)

	close(release)
	waitDone(t, wait1, "Wait for group 1")
	waitDone(t, barrier1, "Barrier 1")
	equal(t, "after group 1", h.log.durable(), [][]string{{"a"}})
	if err := h.c.Wait(ctxT(t), 0); err != nil {
		t.Fatalf("Wait(0): %v", err)
	}
	mustBarrier(t, h.c)
	mustWait(t, h.c, t2)
	mustWait(t, h.c, t3)
	equal(t, "after group 2", h.log.durable(), [][]string{{"a"}, {"b", "c"}})
}

// TestDrainFailure injects a failed object sync: the waiters get EIO naming
// the cause, nothing is appended, the objects are republished, and the
// records are retried first, with their Tickets, before later records.
func TestDrainFailure(t *testing.T) {
	for _, drain := range []Drain{DrainEntry, DrainSyncFS} {
		t.Run(drain.String(), func(t *testing.T) {
			injected := errors.New("injected: fdatasync failed")
			h := newHarness(t, Options{MaxRecords: 2, Window: time.Hour, Drain: drain})
			entered := make(chan struct{})
			release := make(chan struct{})
			h.objs.set(func(o *fakeObjects) {
				o.syncErrs = []error{injected}
				var once sync.Once // only the first drain blocks
				o.beforeSync = func() {
					once.Do(func() {
						close(entered)
						<-release
					})
				}
			})
			t1 := mustEnqueue(t, h.c, rec("r1", "A"))
			t2 := mustEnqueue(t, h.c, rec("r2", "B", "A"))
			<-entered
			first := make(chan error, 1)
			go func() { first <- h.c.Wait(ctxT(t), t2) }()
			waitWaiters(t, h.c, 1)
			if drain == DrainSyncFS {
				close(release)
			}
			if drain == DrainEntry {
				// Enqueued while the failing drain runs: they must
				// commit after r1, r2.
				mustEnqueue(t, h.c, rec("r3", "C"))
				mustEnqueue(t, h.c, rec("r4", "D"))
				close(release)
			}

			var err error
			select {
			case err = <-first:
			case <-time.After(testTimeout):
				t.Fatal("waiter of the failed group was not released")
			}
			var derr *DrainError
			if !errors.As(err, &derr) || !errors.Is(err, syscall.EIO) || !errors.Is(err, injected) {
				t.Fatalf("waiter got %v; want a *DrainError matching EIO and the cause", err)
			}
			equal(t, "failed records", [2]Ticket{derr.First, derr.Last}, [2]Ticket{t1, t2})
			if !strings.Contains(err.Error(), injected.Error()) {
				t.Fatalf("error does not name the cause: %v", err)
			}

			// The retry commits: wait again.
			mustWait(t, h.c, t2)
			mustBarrier(t, h.c)
			var want []string
			wantLog := [][]string{{"r1", "r2"}}
			switch drain {
			case DrainEntry:
				want = []string{
					"sync-objects [A B]: error",
					"republish A", "republish B",
					"sync-objects [A B]", "append [r1 r2]", "log-sync",
					"sync-objects [C D]", "append [r3 r4]", "log-sync",
				}
				wantLog = append(wantLog, []string{"r3", "r4"})
			case DrainSyncFS:
				want = []string{
					"pool-syncfs: error",
					"republish A", "republish B",
					"pool-syncfs", "append [r1 r2]", "log-sync",
				}
			}
			equal(t, "calls", h.rec.list(), want)
			equal(t, "log", h.log.durable(), wantLog)
			if s := h.c.Stats(); s.Failed != nil || s.Pending != 0 {
				t.Fatalf("Stats after the retry: %+v", s)
			}
			if !strings.Contains(h.out.String(), "level=ERROR") {
				t.Fatalf("drain failure was not logged as an error; log:\n%s", h.out)
			}
		})
	}
}

// TestPermanentFailures: a failed republish, a failed log append or sync,
// or drains that keep failing fail the committer for good.
func TestPermanentFailures(t *testing.T) {
	injected := errors.New("injected: EIO")
	for _, tc := range []struct {
		name   string
		setup  func(h *harness)
		op     string
		calls  []string
		waiter string // which error a waiter of the first attempt sees
	}{
		{"log append", func(h *harness) { h.log.set(func(l *fakeLog) { l.appendErr = injected }) },
			"log append", []string{"sync-objects [A]", "append [r1]: error"}, "failed"},
		{"log sync", func(h *harness) { h.log.set(func(l *fakeLog) { l.syncErr = injected }) },
			"log sync", []string{"sync-objects [A]", "append [r1]", "log-sync: error"}, "failed"},
		{"republish", func(h *harness) {
			h.objs.set(func(o *fakeObjects) { o.syncErrs = []error{injected}; o.republishErr = injected })
		}, "republish", []string{"sync-objects [A]: error", "republish A: error"}, "drain"},
		{"drains keep failing", func(h *harness) {
			h.objs.set(func(o *fakeObjects) { o.syncErrs = []error{injected, injected, injected} })
		}, "drain", []string{
			"sync-objects [A]: error", "republish A",
			"sync-objects [A]: error", "republish A",
			"sync-objects [A]: error",
		}, "drain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{Window: time.Hour})
			tc.setup(h)
			t1 := mustEnqueue(t, h.c, rec("r1", "A"))
			first := make(chan error, 1)
			go func() { first <- h.c.Wait(ctxT(t), t1) }()
			waitWaiters(t, h.c, 1) // registered before the first attempt
			if err := h.c.Barrier(ctxT(t)); !errors.Is(err, syscall.EIO) {
				t.Fatalf("Barrier = %v; want an error matching EIO", err)
			}
			err := <-first
			switch tc.waiter {
			case "failed":
				var ferr *FailedError
				if !errors.As(err, &ferr) {
					t.Fatalf("first waiter got %v; want *FailedError", err)
				}
			case "drain":
				var derr *DrainError
				if !errors.As(err, &derr) {
					t.Fatalf("first waiter got %v; want *DrainError", err)
				}
			}
			// Waiting again ends with the permanent failure (each retry
			// that fails its drain releases its waiters with EIO).
			var derr *DrainError
			for range maxDrainAttempts {
				if err = h.c.Wait(ctxT(t), t1); !errors.As(err, &derr) {
					break
				}
			}
			var ferr *FailedError
			if !errors.As(err, &ferr) || ferr.Op != tc.op {
				t.Fatalf("Wait = %v; want *FailedError of %q", err, tc.op)
			}
			if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "remount") {
				t.Fatalf("failure does not match EIO or does not say to remount: %v", err)
			}
			if tc.op != "drain" && !errors.Is(err, injected) {
				t.Fatalf("failure does not wrap its cause: %v", err)
			}
			if _, err := enqueue(h.c, rec("r2", "B")); !errors.Is(err, ferr) {
				t.Fatalf("Enqueue after failure = %v; want the failure", err)
			}
			if err := h.c.Barrier(ctxT(t)); !errors.Is(err, ferr) {
				t.Fatalf("Barrier after failure = %v; want the failure", err)
			}
			if s := h.c.Stats(); s.Failed != ferr {
				t.Fatalf("Stats().Failed = %v", s.Failed)
			}
			if err := h.c.Close(); !errors.Is(err, ferr) {
				t.Fatalf("Close = %v; want the failure", err)
			}
			// Nothing was retried after the failure: no second log sync.
			equal(t, "calls", h.rec.list(), tc.calls)
			if d := h.log.durable(); len(d) != 0 {
				t.Fatalf("durable log after the failure: %v", d)
			}
			if !strings.Contains(h.out.String(), "level=ERROR") {
				t.Fatalf("failure was not logged as an error; log:\n%s", h.out)
			}
		})
	}
}

// TestFailureReleasesQueuedWaiters: waiters of records queued behind a group
// whose log sync fails get the failure too.
func TestFailureReleasesQueuedWaiters(t *testing.T) {
	injected := errors.New("injected: EIO")
	h := newHarness(t, Options{Window: time.Hour})
	entered := make(chan struct{})
	release := make(chan struct{})
	h.log.set(func(l *fakeLog) {
		l.syncErr = injected
		l.beforeSync = func(uint64) { close(entered); <-release }
	})
	mustEnqueue(t, h.c, rec("r1"))
	b := make(chan error, 1)
	go func() { b <- h.c.Barrier(ctxT(t)) }()
	<-entered
	t2 := mustEnqueue(t, h.c, rec("r2"))
	w := make(chan error, 1)
	go func() { w <- h.c.Wait(ctxT(t), t2) }()
	close(release)
	for _, ch := range []chan error{b, w} {
		select {
		case err := <-ch:
			var ferr *FailedError
			if !errors.As(err, &ferr) || ferr.Op != "log sync" {
				t.Fatalf("waiter got %v; want the log sync failure", err)
			}
		case <-time.After(testTimeout):
			t.Fatal("waiter not released after the failure")
		}
	}
}

func TestCloseCommitsPending(t *testing.T) {
	h := newHarness(t, Options{Window: time.Hour})
	t1 := mustEnqueue(t, h.c, rec("a"), rec("b"))
	mustEnqueue(t, h.c, rec("c"))
	if err := h.c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	equal(t, "log", h.log.durable(), [][]string{{"a", "b", "c"}})
	if err := h.c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := enqueue(h.c, rec("d")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close = %v; want ErrClosed", err)
	}
	mustWait(t, h.c, t1)
	mustBarrier(t, h.c)
}

func TestWaitErrors(t *testing.T) {
	h := newHarness(t, Options{Window: time.Hour})
	tk := mustEnqueue(t, h.c, rec("a"))
	if err := h.c.Wait(ctxT(t), tk+1); err == nil || !strings.Contains(err.Error(), "never issued") {
		t.Fatalf("Wait for an unissued ticket = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.c.Wait(ctx, tk); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v", err)
	}
	// The record still commits.
	mustBarrier(t, h.c)
	mustWait(t, h.c, tk)
}

// TestBackpressure: Enqueue blocks while 8*MaxRecords records are queued
// behind the group in flight, and resumes when the group completes.
func TestBackpressure(t *testing.T) {
	h := newHarness(t, Options{MaxRecords: 1, Window: time.Hour})
	entered := make(chan struct{})
	release := make(chan struct{})
	h.log.set(func(l *fakeLog) {
		l.beforeSync = func(g uint64) {
			if g == 1 {
				close(entered)
				<-release
			}
		}
	})
	mustEnqueue(t, h.c, rec("r0"))
	<-entered
	for i := range backpressureGroups {
		mustEnqueue(t, h.c, rec(fmt.Sprintf("q%d", i)))
	}
	var blockedTicket Ticket
	blocked := started(func() { blockedTicket = mustEnqueue(t, h.c, rec("last")) })
	select {
	case <-blocked:
		t.Fatal("Enqueue did not block with 8*MaxRecords records queued")
	default:
	}
	close(release)
	waitDone(t, blocked, "blocked Enqueue")
	mustWait(t, h.c, blockedTicket)
	equal(t, "groups", len(h.log.durable()), backpressureGroups+2)
}

type statsObserver struct {
	mu    sync.Mutex
	stats []GroupStats
}

func (o *statsObserver) GroupCommitted(s GroupStats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stats = append(o.stats, s)
}

// TestObserverAndSlowIO checks GroupStats and the warnings for a drain and a
// log sync slower than a second (time moved by the fakes themselves).
func TestObserverAndSlowIO(t *testing.T) {
	obs := &statsObserver{}
	h := newHarness(t, Options{Window: time.Hour, Observer: obs})
	h.objs.set(func(o *fakeObjects) { o.beforeSync = func() { h.clock.Advance(2 * time.Second) } })
	h.log.set(func(l *fakeLog) { l.beforeSync = func(uint64) { h.clock.Advance(3 * time.Second) } })
	mustEnqueue(t, h.c, rec("abc", "A", "B"), rec("de", "A"))
	mustBarrier(t, h.c)
	obs.mu.Lock()
	got := obs.stats
	obs.mu.Unlock()
	equal(t, "group stats", got, []GroupStats{{Group: 1, Records: 2, Bytes: 5, Objects: 2, Drain: 2 * time.Second, LogSync: 3 * time.Second}})
	for _, want := range []string{`msg="slow drain"`, "duration=2s", `msg="slow log sync"`, "duration=3s"} {
		if !strings.Contains(h.out.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, h.out)
		}
	}
	s := h.c.Stats()
	equal(t, "Stats", [2]any{s.LastGroup, s.Pending}, [2]any{uint64(1), 0})
}

// TestConcurrentEnqueue: many goroutines enqueue, wait and barrier at once
// (run it under -race); the log must hold every record exactly once, in
// Ticket order, and the records of each Enqueue call in one group.
func TestConcurrentEnqueue(t *testing.T) {
	const (
		writers   = 8
		perWriter = 300
	)
	log := &fakeLog{rec: &recorder{}}
	objs := &fakeObjects{rec: &recorder{}}
	c := New(log, objs, Options{MaxRecords: 16, Window: time.Millisecond})
	defer c.Close()

	var mu sync.Mutex
	ticketOf := make(map[string]Ticket) // record data -> ticket
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; {
				// Calls of 1 or 2 records; a pair must share a group.
				// Data is "w<writer>-c<call>-<k>": call c of k records.
				k := min(1+(i+w)%2, perWriter-i)
				var recs []Record
				for j := range k {
					recs = append(recs, rec(fmt.Sprintf("w%d-c%d-%d/%d", w, i, j, k), fmt.Sprintf("o%d", (i+j)%5)))
				}
				tk, err := enqueue(c, recs...)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for j, r := range recs {
					ticketOf[string(r.Data)] = tk - Ticket(k-1-j)
				}
				mu.Unlock()
				switch i % 7 {
				case 0:
					err = c.Barrier(ctxT(t))
				case 3:
					err = c.Wait(ctxT(t), tk)
				}
				if err != nil {
					errs <- err
					return
				}
				i += k
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var want Ticket = 1
	for gi, g := range log.durable() {
		calls := make(map[string]int) // call -> its records in this group
		size := make(map[string]int)  // call -> its records in all
		for ri, data := range g {
			if tk, ok := ticketOf[data]; !ok || tk != want {
				t.Fatalf("group %d record %d is %s with ticket %d; want ticket %d", gi+1, ri, data, tk, want)
			}
			want++
			head, k, _ := strings.Cut(data, "/")
			call := head[:strings.LastIndex(head, "-")]
			calls[call]++
			size[call], _ = strconv.Atoi(k)
		}
		for call, n := range calls {
			if n != size[call] {
				t.Fatalf("group %d holds %d of the %d records of call %s", gi+1, n, size[call], call)
			}
		}
	}
	if want-1 != writers*perWriter {
		t.Fatalf("log holds %d records; want %d", want-1, writers*perWriter)
	}
}

// TestStateSyncFSFailure: in the syncfs drain, a failed syncfs of the state
// filesystem is a drain failure like the pool's: EIO to the waiters, the
// objects republished, the records retried.
func TestStateSyncFSFailure(t *testing.T) {
	injected := errors.New("injected: syncfs of the state filesystem failed")
	var h *harness
	var fails atomic.Int32
	fails.Store(1)
	h = newHarness(t, Options{Window: time.Hour, Drain: DrainSyncFS, StateSyncFS: func() error {
		if fails.Add(-1) >= 0 {
			h.rec.add("state-syncfs: error")
			return injected
		}
		h.rec.add("state-syncfs")
		return nil
	}})
	tk := mustEnqueue(t, h.c, rec("r1", "A"))
	first := make(chan error, 1)
	go func() { first <- h.c.Wait(ctxT(t), tk) }()
	waitWaiters(t, h.c, 1)
	mustEnqueue(t, h.c) // no records: no group
	if err := h.c.Barrier(ctxT(t)); err != nil && !errors.Is(err, injected) {
		t.Fatalf("Barrier = %v", err)
	}
	if err := <-first; !errors.Is(err, injected) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("waiter got %v; want the state syncfs failure as EIO", err)
	}
	mustWait(t, h.c, tk)
	equal(t, "calls", h.rec.list(), []string{
		"pool-syncfs", "state-syncfs: error", "republish A",
		"pool-syncfs", "state-syncfs", "append [r1]", "log-sync",
	})
}

func TestEnqueueNothing(t *testing.T) {
	h := newHarness(t, Options{Window: time.Hour})
	if tk, err := enqueue(h.c); tk != 0 || err != nil {
		t.Fatalf("Enqueue() on an empty committer = %d, %v; want 0, nil", tk, err)
	}
	mustBarrier(t, h.c) // nothing to commit: returns at once
	tk := mustEnqueue(t, h.c, rec("a"), rec("b"))
	if got := mustEnqueue(t, h.c); got != tk {
		t.Fatalf("Enqueue() = %d; want the last ticket %d", got, tk)
	}
	mustBarrier(t, h.c)
	equal(t, "calls", h.rec.list(), []string{"append [a b]", "log-sync"})
}

// waitEvents waits until the recorder holds n calls.
func waitEvents(t *testing.T, r *recorder, n int) []string {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		ev := r.list()
		if len(ev) >= n {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls after %v, want %d: %v", len(ev), testTimeout, n, ev)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestEarlyDrain: with EarlyDrain the objects of enqueued records are
// synced before their group closes (the window here never expires), and
// the group still drains them (the real pool skips those it knows
// durable) before appending.
func TestEarlyDrain(t *testing.T) {
	h := newHarness(t, Options{Window: time.Hour, EarlyDrain: true})
	mustEnqueue(t, h.c, rec("r1", "A"))
	equal(t, "calls before any group closed", waitEvents(t, h.rec, 1), []string{"sync-objects [A]"})
	mustEnqueue(t, h.c, rec("r2"))
	mustBarrier(t, h.c)
	equal(t, "calls", h.rec.list(), []string{
		"sync-objects [A]", "sync-objects [A]", "append [r1 r2]", "log-sync",
	})
}

// TestEarlyDrainFailureTaints: a failed early sync must not be followed by
// a successful sync of the same object taken as proof (fsyncgate): the
// group referencing it fails its drain without syncing, the object is
// republished, and only then does the group commit. An object deduplicated
// by a later record is tainted for that record too.
func TestEarlyDrainFailureTaints(t *testing.T) {
	injected := errors.New("injected: fdatasync failed")
	h := newHarness(t, Options{Window: time.Hour, EarlyDrain: true})
	h.objs.set(func(o *fakeObjects) { o.syncErrs = []error{injected} })
	t1 := mustEnqueue(t, h.c, rec("r1", "A"))
	waitEvents(t, h.rec, 1)
	// The early drainer sets the taint before it releases drainMu.
	h.c.drainMu.Lock()
	h.c.drainMu.Unlock() //nolint:staticcheck // empty critical section: waits for the failed batch to finish
	err := h.c.Barrier(ctxT(t))
	var derr *DrainError
	if !errors.As(err, &derr) || !errors.Is(err, syscall.EIO) || !errors.Is(err, injected) {
		t.Fatalf("Barrier after a failed early sync: %v; want a *DrainError matching EIO and the cause", err)
	}
	equal(t, "failed records", [2]Ticket{derr.First, derr.Last}, [2]Ticket{t1, t1})
	mustWait(t, h.c, t1)
	equal(t, "calls", h.rec.list(), []string{
		"sync-objects [A]: error", // early
		"republish A",             // the group's drain failed on the taint, without a sync
		"sync-objects [A]", "append [r1]", "log-sync",
	})
	// Republished: the taint is gone, later groups with A commit.
	mustEnqueue(t, h.c, rec("r2", "A"))
	mustBarrier(t, h.c)
	equal(t, "log", h.log.durable(), [][]string{{"r1"}, {"r2"}})
}

// TestLogFull: an append that finds the log's filesystem full commits
// nothing, gives the waiters a *LogFullError (ENOSPC), keeps the records
// queued and retries after logFullRetry; once there is space the same
// records commit. Closing while the filesystem is still full fails.
func TestLogFull(t *testing.T) {
	full := fmt.Errorf("injected: %w", syscall.ENOSPC)
	h := newHarness(t, Options{Window: time.Hour})
	h.log.set(func(l *fakeLog) { l.appendErr = full })
	made := h.clock.timersMade()
	t1 := mustEnqueue(t, h.c, rec("r1", "A"))
	err := h.c.Barrier(ctxT(t))
	var lerr *LogFullError
	if !errors.As(err, &lerr) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "free space") {
		t.Fatalf("Barrier with the log full = %v; want a *LogFullError matching ENOSPC that says to free space", err)
	}
	equal(t, "failed records", [2]Ticket{lerr.First, lerr.Last}, [2]Ticket{t1, t1})
	if s := h.c.Stats(); s.Failed != nil || s.Pending != 1 || !errors.As(s.Stalled, &lerr) {
		t.Fatalf("Stats with the log full: failed %v, pending %d, stalled %v; want not failed, 1 pending, stalled", s.Failed, s.Pending, s.Stalled)
	}
	// Space is freed; the retry timer fires and the record commits.
	h.log.set(func(l *fakeLog) { l.appendErr = nil })
	h.clock.waitArmed(t, h.clock.Now().Add(logFullRetry), made)
	h.clock.Advance(logFullRetry)
	mustWait(t, h.c, t1)
	equal(t, "log", h.log.durable(), [][]string{{"r1"}})
	if s := h.c.Stats(); s.Stalled != nil {
		t.Fatalf("Stats after the retry committed: stalled %v", s.Stalled)
	}
	equal(t, "calls", h.rec.list(), []string{
		"sync-objects [A]", "append [r1]: error",
		"sync-objects [A]", "append [r1]", "log-sync",
	})

	h2 := newHarness(t, Options{Window: time.Hour})
	h2.log.set(func(l *fakeLog) { l.appendErr = full })
	mustEnqueue(t, h2.c, rec("r2"))
	var ferr *FailedError
	if err := h2.c.Close(); !errors.As(err, &ferr) {
		t.Fatalf("Close with the log full = %v; want a *FailedError", err)
	}
	if d := h2.log.durable(); len(d) != 0 {
		t.Fatalf("log after a Close with the log full: %v, want nothing", d)
	}
}

// TestReserveRefusesWhenLogFull: Reserve waits while the queue is at its
// limit, but once an append finds the log's filesystem full it refuses
// with the *LogFullError, also an Reserve that was already waiting; once
// space is freed and the queue drains, Reserve succeeds again.
func TestReserveRefusesWhenLogFull(t *testing.T) {
	h := newHarness(t, Options{MaxRecords: 1, Window: time.Hour})
	h.log.set(func(l *fakeLog) { l.appendErr = fmt.Errorf("injected: %w", syscall.ENOSPC) })
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h.objs.set(func(o *fakeObjects) {
		o.beforeSync = func() { once.Do(func() { close(entered); <-release }) }
	})
	made := h.clock.timersMade()
	mustEnqueue(t, h.c, rec("r0", "A"))
	select {
	case <-entered:
	case <-time.After(testTimeout):
		t.Fatal("the first group's drain never started")
	}
	// The first group is in flight; fill the queue to its limit.
	var last Ticket
	for i := 1; i <= backpressureGroups; i++ {
		slot, err := h.c.Reserve()
		if err != nil {
			t.Fatalf("Reserve with %d records queued: %v", i-1, err)
		}
		if last, err = slot.Enqueue(rec(fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	admitted := make(chan error, 1)
	go func() { _, err := h.c.Reserve(); admitted <- err }() // waits: the queue is full
	close(release)                                           // the append now fails: the log is full
	select {
	case err := <-admitted:
		var lerr *LogFullError
		if !errors.As(err, &lerr) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("waiting Reserve = %v, want the *LogFullError (ENOSPC)", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("a waiting Reserve was not refused when the log turned out full")
	}
	if _, err := h.c.Reserve(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Reserve with the queue full and the log full = %v, want ENOSPC", err)
	}
	// Space is freed: the retry commits everything, and Reserve has room.
	h.log.set(func(l *fakeLog) { l.appendErr = nil })
	h.clock.waitArmed(t, h.clock.Now().Add(logFullRetry), made)
	h.clock.Advance(logFullRetry)
	mustWait(t, h.c, last)
	slot, err := h.c.Reserve()
	if err != nil {
		t.Fatalf("Reserve after the queue drained: %v", err)
	}
	slot.Cancel()
}

// TestLogFullReleasesEveryWaiter: when an append finds the log full, the
// waiters of later groups hear it too (they cannot commit before it), and
// Close during the wait for space returns promptly with a failure.
func TestLogFullReleasesEveryWaiter(t *testing.T) {
	h := newHarness(t, Options{MaxRecords: 1, Window: time.Hour})
	h.log.set(func(l *fakeLog) { l.appendErr = fmt.Errorf("injected: %w", syscall.ENOSPC) })
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h.objs.set(func(o *fakeObjects) {
		o.beforeSync = func() { once.Do(func() { close(entered); <-release }) }
	})
	t1 := mustEnqueue(t, h.c, rec("r1", "A"))
	select {
	case <-entered:
	case <-time.After(testTimeout):
		t.Fatal("the first group's drain never started")
	}
	t2 := mustEnqueue(t, h.c, rec("r2")) // a later group
	errs := make(chan error, 2)
	for _, tk := range []Ticket{t1, t2} {
		go func() { errs <- h.c.Wait(ctxT(t), tk) }()
	}
	waitWaiters(t, h.c, 2)
	close(release)
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("a waiter got %v, want ENOSPC", err)
			}
		case <-time.After(testTimeout):
			t.Fatal("a waiter was not told that the log is full")
		}
	}
	closed := started(func() {
		var ferr *FailedError
		if err := h.c.Close(); !errors.As(err, &ferr) {
			t.Errorf("Close while the log is full = %v, want a *FailedError", err)
		}
	})
	waitDone(t, closed, "Close while waiting for space")
}

// TestSlotOnce: a Slot is used exactly once. Cancel gives its room back;
// a second Enqueue or Cancel of the same Slot panics instead of counting
// the room twice.
func TestSlotOnce(t *testing.T) {
	h := newHarness(t, Options{MaxRecords: 1, Window: time.Hour})
	for _, c := range []struct {
		name        string
		first, then func(*Slot)
	}{
		{"enqueue twice", func(s *Slot) { s.Enqueue() }, func(s *Slot) { s.Enqueue() }},
		{"cancel twice", (*Slot).Cancel, (*Slot).Cancel},
		{"enqueue then cancel", func(s *Slot) { s.Enqueue() }, (*Slot).Cancel},
		{"cancel then enqueue", (*Slot).Cancel, func(s *Slot) { s.Enqueue() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := h.c.Reserve()
			if err != nil {
				t.Fatal(err)
			}
			c.first(s)
			defer func() {
				if recover() == nil {
					t.Fatal("second use of a Slot did not panic")
				}
			}()
			c.then(s)
		})
	}
	h.c.mu.Lock()
	admitted := h.c.mu.admitted
	h.c.mu.Unlock()
	if admitted != 0 {
		t.Fatalf("%d reservations outstanding after every Slot was used once", admitted)
	}
}
