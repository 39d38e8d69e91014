package commit

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"wsfs/internal/objid"
)

// The fakes below stand in for the log and the pool at the unit level so
// that tests can record the order of calls and inject failures at exact
// points; the real seglog and pool are tested in their own packages and
// together with the committer in integration_test.go.

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// recorder is the shared, ordered list of calls made on the fakes.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// fakeLog records appended groups. Hooks run before the named call, outside
// the fake's lock, so they may block.
type fakeLog struct {
	rec *recorder

	mu         sync.Mutex
	groups     [][]string // data of each appended group, as strings
	synced     int        // groups durable (appended before the last good Sync)
	appendErr  error
	syncErr    error
	beforeSync func(group uint64)
}

func (l *fakeLog) Append(records [][]byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, len(records))
	for i, r := range records {
		names[i] = string(r)
	}
	if l.appendErr != nil {
		l.rec.add("append %v: error", names)
		return 0, l.appendErr
	}
	l.groups = append(l.groups, names)
	l.rec.add("append %v", names)
	return uint64(len(l.groups)), nil
}

func (l *fakeLog) Sync() error {
	l.mu.Lock()
	hook, g := l.beforeSync, uint64(len(l.groups))
	l.mu.Unlock()
	if hook != nil {
		hook(g)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.syncErr != nil {
		l.rec.add("log-sync: error")
		return l.syncErr
	}
	l.synced = len(l.groups)
	l.rec.add("log-sync")
	return nil
}

func (l *fakeLog) LastGroup() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.groups))
}

// durable returns the groups made durable by a successful Sync.
func (l *fakeLog) durable() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]string(nil), l.groups[:l.synced]...)
}

func (l *fakeLog) set(f func(l *fakeLog)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// fakeObjects records object syncs and republications. syncErrs are
// returned by successive SyncObjects/SyncFS calls (nil once exhausted).
type fakeObjects struct {
	rec *recorder

	mu           sync.Mutex
	syncErrs     []error
	republishErr error
	beforeSync   func()
	parallel     []int
}

func (o *fakeObjects) nextErr() error {
	if len(o.syncErrs) == 0 {
		return nil
	}
	err := o.syncErrs[0]
	o.syncErrs = o.syncErrs[1:]
	return err
}

func (o *fakeObjects) SyncObjects(ids []objid.ID, parallel int) error {
	o.mu.Lock()
	hook := o.beforeSync
	o.mu.Unlock()
	if hook != nil {
		hook()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.parallel = append(o.parallel, parallel)
	err := o.nextErr()
	o.rec.add("sync-objects %s%s", names(ids), errSuffix(err))
	return err
}

func (o *fakeObjects) SyncFS() error {
	o.mu.Lock()
	hook := o.beforeSync
	o.mu.Unlock()
	if hook != nil {
		hook()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	err := o.nextErr()
	o.rec.add("pool-syncfs%s", errSuffix(err))
	return err
}

func (o *fakeObjects) Republish(id objid.ID) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rec.add("republish %s%s", name(id), errSuffix(o.republishErr))
	return o.republishErr
}

func (o *fakeObjects) set(f func(o *fakeObjects)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o)
}

func errSuffix(err error) string {
	if err != nil {
		return ": error"
	}
	return ""
}

// obj returns a pool ID whose name (see name) is s.
func obj(s string) objid.ID {
	var id objid.ID
	copy(id[:], s)
	return id
}

func name(id objid.ID) string { return string(bytes.TrimRight(id[:], "\x00")) }

func names(ids []objid.ID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = name(id)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// rec returns a record with data s referencing the named objects.
func rec(s string, objects ...string) Record {
	r := Record{Data: []byte(s)}
	for _, o := range objects {
		r.Objects = append(r.Objects, obj(o))
	}
	return r
}

// fakeClock is a Clock that moves only when told to.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	made    int           // timers made so far
	changed chan struct{} // closed and replaced whenever timers change
}

type fakeTimer struct {
	c        *fakeClock
	seq      int // 1 for the first timer made, and so on
	deadline time.Time
	ch       chan time.Time
	armed    bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.made++
	t := &fakeTimer{c: c, seq: c.made, deadline: c.now.Add(d), ch: make(chan time.Time, 1), armed: true}
	if d <= 0 {
		t.armed = false
		t.ch <- c.now
	} else {
		c.timers = append(c.timers, t)
	}
	c.notifyLocked()
	return t, t.ch
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	t.c.notifyLocked()
	return was
}

func (c *fakeClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Advance moves time forward by d and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	live := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case !t.armed:
		case !t.deadline.After(c.now):
			t.armed = false
			t.ch <- c.now
		default:
			live = append(live, t)
		}
	}
	c.timers = live
	c.notifyLocked()
}

// timersMade returns how many timers were made so far.
func (c *fakeClock) timersMade() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.made
}

// waitArmed waits until an armed timer made after the first `after` timers
// is due exactly at deadline.
func (c *fakeClock) waitArmed(t *testing.T, deadline time.Time, after int) {
	t.Helper()
	timeout := time.After(testTimeout)
	for {
		c.mu.Lock()
		for _, tm := range c.timers {
			if tm.armed && tm.seq > after && tm.deadline.Equal(deadline) {
				c.mu.Unlock()
				return
			}
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("no timer armed for %v within %v", deadline, testTimeout)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use (log output).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// harness is a Committer over the fakes.
type harness struct {
	rec   *recorder
	log   *fakeLog
	objs  *fakeObjects
	clock *fakeClock
	out   *lockedBuffer
	c     *Committer
}

// newHarness starts a committer on fakes with a fake clock; opts.Clock and
// opts.Logger are set by it. The committer is closed at cleanup.
func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{rec: &recorder{}, clock: newFakeClock(), out: &lockedBuffer{}}
	h.log = &fakeLog{rec: h.rec}
	h.objs = &fakeObjects{rec: h.rec}
	opts.Clock = h.clock
	opts.Logger = slog.New(slog.NewTextHandler(h.out, nil))
	h.c = New(h.log, h.objs, opts)
	t.Cleanup(func() { h.c.Close() })
	return h
}
