package ship

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/workspace"
)

// newObjects returns the objects the workspace references now that it did
// not reference in before.
func (e *env) newObjects(before map[objid.ID]bool) []objid.ID {
	var out []objid.ID
	e.ws.ForEachObject(func(id objid.ID) {
		if !before[id] {
			out = append(out, id)
		}
	})
	return out
}

func (e *env) objects() map[objid.ID]bool {
	m := map[objid.ID]bool{}
	e.ws.ForEachObject(func(id objid.ID) { m[id] = true })
	return m
}

func randData(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// waitFresh waits (bounded) until the uploader has made every object of
// ids fresh in the bucket.
func waitFresh(t *testing.T, sh *Shipper, up *uploader, ids ...objid.ID) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		all := true
		for _, id := range ids {
			if !sh.fresh(id, sh.opts.Now()) {
				all = false
			}
		}
		if all {
			return
		}
		select {
		case <-up.Changed():
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("objects %v not uploaded within a minute", ids)
		}
	}
}

// TestPipelineSmallAfterLarge: a small group committed after a large one
// does not wait for the large group's round. The remote holds the upload
// of one object of the large group: meanwhile the pipeline uploads the
// small group's object, and the head stays before the large group (it
// never names a group whose objects are not all in the bucket). Once the
// held upload completes, the next step ships both groups at once.
func TestPipelineSmallAfterLarge(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnvSeg(t, 21, 64<<20)
	defer e.ws.Close()
	rng := rand.New(rand.NewPCG(21, 1))
	hold := newHolder("put")
	f := &remote.Faulty{Store: srv.Store(t, "pipeline"), Hook: hold.hook}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f, Parallel: 2})
	base, err := sh.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	up := sh.newUploader(ctx)
	defer up.close()

	// The large group: 1 MiB in 4 chunk objects; the upload of one is held.
	before := e.objects()
	e.write("large", randData(rng, 1<<20))
	large := e.commit()
	largeIDs := e.newObjects(before)
	if len(largeIDs) < 2 {
		t.Fatalf("the large file has %d objects, want several", len(largeIDs))
	}
	hold.arm(remote.ObjectKey(largeIDs[0].String()))
	if g, err := sh.step(ctx, up); err != nil || g != base {
		t.Fatalf("step after the large group: group %d, %v; want %d (its objects are not up yet)", g, err, base)
	}
	hold.waitHeld(t)

	// The small group, committed while the large one's upload is held.
	before = e.objects()
	e.write("small", randData(rng, 70<<10))
	small := e.commit()
	smallIDs := e.newObjects(before)
	if len(smallIDs) != 1 || small != large+1 {
		t.Fatalf("small group %d (large %d) with %d objects, want the next group with one", small, large, len(smallIDs))
	}
	if _, err := sh.step(ctx, up); err != nil {
		t.Fatal(err)
	}
	// The pipeline uploads the small group's object (and the large
	// group's other ones) while the held one is still under way...
	waitFresh(t, sh, up, append(largeIDs[1:], smallIDs...)...)
	if ok, err := f.Store.Exists(ctx, remote.ObjectKey(smallIDs[0].String())); err != nil || !ok {
		t.Fatalf("the small group's object is not in the bucket while the large one's upload is held: %v, %v", ok, err)
	}
	// ...but the head cannot pass the large group.
	if g, err := sh.step(ctx, up); err != nil || g != base {
		t.Fatalf("step with the large object held: group %d, %v; want %d", g, err, base)
	}
	if h, _, err := ReadHead(ctx, f.Store, "ws"); err != nil || h.Group != base {
		t.Fatalf("remote head at group %d (%v) while an object of group %d is not uploaded; want %d", h.Group, err, large, base)
	}
	e.verifyPull(f.Store, base)

	// The held upload completes: one step ships both groups.
	hold.release()
	waitFresh(t, sh, up, largeIDs[0])
	if g, err := sh.step(ctx, up); err != nil || g != small {
		t.Fatalf("step after the release: group %d, %v; want %d (both groups)", g, err, small)
	}
	e.verifyPull(f.Store, small)
}

// TestPipelineFaults is TestShipperFaults for Run's pipelined steps: an
// error injected before any one remote operation (an object upload in the
// background, a batch, the head, a merge), with the shipper either
// stepping on or abandoned mid-pipeline and restarted (a killed process:
// its uploads under way are cancelled), never leaves a remote that
// restores to anything but a committed group, nor one that misses an
// object; and the pipeline then ships everything. The uploads run
// concurrently, so which operation the fault hits varies between runs;
// the property holds for every one.
func TestPipelineFaults(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	run := func(prefix string, failAt int, restart bool) (ops int) {
		e := newEnv(t, 4)
		defer func() { e.ws.Close() }()
		f := &remote.Faulty{Store: srv.Store(t, prefix)}
		injected := false
		f.Hook = func(op, key string, n int) error {
			if n == failAt {
				injected = true
				return errors.New("injected fault")
			}
			return nil
		}
		var sh *Shipper
		var up *uploader
		start := func() {
			sh = New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f, CompactBatches: 3})
			up = sh.newUploader(ctx)
		}
		stop := func() {
			up.close()
			sh.waitMerge()
		}
		start()
		for i := 0; i < 8; i++ {
			e.step()
			e.commit()
			if i == 2 {
				// Enough log for a checkpoint and deleted segments.
				for range 6 {
					e.step()
					e.commit()
				}
			}
			if i%2 == 1 {
				// Let some uploads finish, so that heads, merges and
				// faults interleave with uploads still under way.
				select {
				case <-up.Changed():
				case <-time.After(time.Second):
				}
			}
			_, err := sh.step(ctx, up)
			if err != nil && (!injected || !strings.Contains(err.Error(), "injected fault")) {
				t.Fatalf("fail at %d: step %d: %v", failAt, i, err)
			}
			// Whatever the pipeline did so far, the remote restores to a
			// committed group with every object present.
			e.verifyPull(f.Store, 0)
			if err != nil && restart {
				stop()
				start()
			}
		}
		// The fault is over: the pipeline ships everything.
		want := e.ws.Stats().CommittedGroup
		deadline := time.Now().Add(time.Minute)
		for {
			g, err := sh.step(ctx, up)
			if err == nil && g == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fail at %d: the pipeline reached group %d (last error %v), want %d", failAt, g, err, want)
			}
			select {
			case <-up.Changed():
			case <-time.After(20 * time.Millisecond):
			}
		}
		stop()
		e.verifyPull(f.Store, want)
		return f.Ops()
	}
	total := run("pipe-clean", -1, false)
	t.Logf("a clean pipelined history makes %d remote operations", total)
	// Every twelfth operation, alternately stepping on and restarting
	// (TestShipperFaults covers every operation of the round order; this
	// one the pipeline's interleavings, in a few seconds).
	for k, n := 0, 0; n < total; k, n = k+1, n+12 {
		run(fmt.Sprintf("pipe-fault-%d", n), n, k%2 == 1)
	}
}

// idle waits (bounded) until up has no upload queued or running.
func idle(t *testing.T, up *uploader) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		up.mu.Lock()
		n := up.running + len(up.queue)
		up.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-up.Changed():
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatal("the uploader did not go idle within a minute")
		}
	}
}

// TestPipelineLocalObjectGone is TestShipperLocalObjectGone for Run's
// pipelined steps, whose uploader lives across steps: the upload of the
// object local GC removed fails and is reported, a newer checkpoint is
// shipped instead, and from then on the failed upload is not retried for
// ever: an object no pending group needs any more is dropped, and the
// steps succeed (a shipper stuck reporting it would back off to
// MaxBackoff on every step, and every --remote-fsync with it).
func TestPipelineLocalObjectGone(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "pipe-gone")
	ctx := context.Background()
	e, gone := goneObjectEnv(t)
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st})
	up := sh.newUploader(ctx)
	defer up.close()
	want := e.ws.Stats().CommittedGroup
	reported := false
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatalf("100 steps did not ship group %d (shipped %d, reported the gone object: %v)", want, sh.Shipped(), reported)
		}
		idle(t, up)
		g, err := sh.step(ctx, up)
		if err != nil {
			if !strings.Contains(err.Error(), gone.String()) {
				t.Fatalf("step %d: %v, want only errors naming %s", i, err, gone)
			}
			reported = true
		}
		if g == want && reported {
			break
		}
	}
	if sh.Stats().Checkpoints == 0 {
		t.Fatal("no checkpoint shipped")
	}
	e.verifyPull(st, want)
	// Shipped: the steps that follow (and the groups committed after)
	// report nothing.
	for i := range 3 {
		e.step()
		want = e.commit()
		idle(t, up)
		if _, err := sh.step(ctx, up); err != nil {
			t.Fatalf("step %d after the checkpoint: %v", i, err)
		}
		idle(t, up)
		if g, err := sh.step(ctx, up); err != nil || g != want {
			t.Fatalf("second step %d after the checkpoint: group %d, %v; want %d", i, g, err, want)
		}
	}
	if s := sh.Stats(); s.ConsecutiveFails != 0 {
		t.Errorf("stats after the checkpoint: %+v, want no failure", s)
	}
	e.verifyPull(st, want)
}

// lostAnswer is a store whose conditional PUTs of the head succeed but,
// when lose says so, report a failure (the answer was lost on the way
// back: a reset connection, a timeout); when fail says so, one fails
// without reaching the store.
type lostAnswer struct {
	remote.Store
	lose func(h Head) bool
	fail func() bool
}

func (l *lostAnswer) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if l.fail() {
		return "", errors.New("connection refused (injected: the PUT was not sent)")
	}
	etag, err := l.Store.PutIf(ctx, key, data, ifMatch)
	if h, derr := decodeHead(data); err == nil && derr == nil && l.lose(h) {
		return "", errors.New("connection reset by peer (injected: the PUT was applied)")
	}
	return etag, err
}

// TestPipelineMergeAnswerLost: the head naming a background merge's
// batches is written but its PUT's answer is lost, so the shipper still
// believes in the head that lists the small batches. Remote GC runs
// (its clock past the grace): the small batches are named by no head and
// old, so it removes them. The shipper's next head must not name them
// again (it is built on the head actually in the bucket): the remote
// restores after every step. The first head PUT after the lost answer
// fails before reaching the bucket: the head in the bucket is then the
// one before last the shipper tried, still its own (not another
// writer's).
func TestPipelineMergeAnswerLost(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnvSeg(t, 41, 64<<20)
	defer e.ws.Close()
	var mu sync.Mutex
	lost, failed, most := false, false, 0
	st := &lostAnswer{Store: srv.Store(t, "merge-lost"), lose: func(h Head) bool {
		mu.Lock()
		defer mu.Unlock()
		merge := len(h.Batches) < most
		most = max(most, len(h.Batches))
		if merge && !lost {
			lost = true
			return true
		}
		return false
	}, fail: func() bool {
		mu.Lock()
		defer mu.Unlock()
		if lost && !failed {
			failed = true
			return true
		}
		return false
	}}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st, CompactBatches: 8})
	up := sh.newUploader(ctx)
	defer func() { up.close(); sh.waitMerge() }()
	// One empty file (no object) per group and step: one small batch each.
	create := func(i int) uint64 {
		if _, err := e.ws.Create(workspace.RootIno, fmt.Sprintf("n%03d", i), namespace.S_IFREG|0o644, workspace.Caller{}); err != nil {
			t.Fatal(err)
		}
		return e.commit()
	}
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatal("no merge head was written in 40 steps")
		}
		create(i)
		if sh.merging != nil {
			<-sh.merging.done // the next step applies it
		}
		_, err := sh.step(ctx, up)
		mu.Lock()
		done := lost
		mu.Unlock()
		if done {
			if err == nil {
				t.Fatal("the step whose head PUT reported a failure succeeded")
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := GC(ctx, st.Store, 24*time.Hour, time.Now().Add(48*time.Hour), false)
	if err != nil {
		t.Fatal(err)
	}
	if s.LogFilesDeleted == 0 {
		t.Fatalf("gc removed no superseded batch: %+v", s)
	}
	e.verifyPull(st.Store, 0)
	for i := 100; i < 103; i++ {
		want := create(i)
		var g uint64
		for range 4 {
			if g, err = sh.step(ctx, up); err == nil {
				break
			}
		}
		if err != nil || g != want {
			t.Fatalf("step after the lost answer: group %d, %v; want %d", g, err, want)
		}
		e.verifyPull(st.Store, want)
	}
}

// TestPipelineOutage: the remote fails every operation while the
// workspace commits group after group and the pipeline keeps stepping
// (holding the lease): every step fails, nothing is shipped and the
// remote still restores. Once the remote is back, the backlog of failed
// uploads is submitted again and the steps ship everything, with no
// failure left to report.
func TestPipelineOutage(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnv(t, 47)
	defer e.ws.Close()
	var mu sync.Mutex
	down := false
	f := &remote.Faulty{Store: srv.Store(t, "outage"), Hook: func(op, key string, n int) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return errors.New("connection refused (injected outage)")
		}
		return nil
	}}
	setDown := func(v bool) {
		mu.Lock()
		down = v
		mu.Unlock()
	}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f, HostID: "host-a", CompactBatches: 3, Parallel: 3})
	up := sh.newUploader(ctx)
	defer func() { up.close(); sh.waitMerge() }()
	e.step()
	base := e.commit()
	if g, err := sh.step(ctx, up); err != nil || g != base {
		// The first step may only submit: the objects are not up yet.
		idle(t, up)
		if g, err = sh.step(ctx, up); err != nil || g != base {
			t.Fatalf("step before the outage: group %d, %v; want %d", g, err, base)
		}
	}
	before := base
	for i := range 12 {
		e.step()
		e.commit()
		if i == 4 {
			before = sh.Shipped()
			// Lease renewal falls due during the outage too.
			sh.leaseAt = time.Time{}
			setDown(true)
		}
		idle(t, up)
		g, err := sh.step(ctx, up)
		if i >= 4 && (err == nil || g != before) {
			t.Fatalf("step %d during the outage: group %d, %v; want %d and an error", i, g, err, before)
		}
	}
	e.verifyPull(f.Store, 0)
	setDown(false)
	want := e.ws.Stats().CommittedGroup
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatalf("50 steps after the outage shipped group %d, want %d (stats %+v)", sh.Shipped(), want, sh.Stats())
		}
		idle(t, up)
		if g, err := sh.step(ctx, up); err == nil && g == want {
			break
		}
	}
	idle(t, up)
	if g, err := sh.step(ctx, up); err != nil || g != want {
		t.Fatalf("step after shipping everything: group %d, %v", g, err)
	}
	e.verifyPull(f.Store, want)
}

// TestPipelineStaleCheck: an object the pipeline uploaded ahead of the
// head, whose check is older than aheadLimit by the time a head could
// name it (the shipper's clock jumps past it: a long wait for an earlier
// group), is checked again in the bucket before any head names it; and
// one a restarted remote GC removed meanwhile is uploaded again.
func TestPipelineStaleCheck(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnv(t, 53)
	defer e.ws.Close()
	var mu sync.Mutex
	clk := newTestClock()
	now := clk.now
	checks := map[string]int{}
	gate := make(chan struct{}) // object checks wait until the first step returned
	f := &remote.Faulty{Store: srv.Store(t, "stale"), Hook: func(op, key string, n int) error {
		if op == "head" && strings.HasPrefix(key, "objects/") {
			select {
			case <-gate:
			case <-time.After(time.Minute):
				return errors.New("the gate was never opened")
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if op == "head" || op == "put" {
			checks[key]++
		}
		return nil
	}}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f, Now: now, RefreshAfter: time.Hour})
	up := sh.newUploader(ctx)
	defer func() { up.close(); sh.waitMerge() }()
	before := e.objects()
	e.write("x", randData(rand.New(rand.NewPCG(53, 1)), 100<<10))
	want := e.commit()
	ids := e.newObjects(before)
	if len(ids) != 1 {
		t.Fatalf("%d new objects, want 1", len(ids))
	}
	key := remote.ObjectKey(ids[0].String())
	if g, err := sh.step(ctx, up); err != nil || g == want {
		t.Fatalf("first step: group %d, %v; want the object only submitted", g, err)
	}
	close(gate)
	idle(t, up)
	// Uploaded ahead of the head; then GC removes it (nothing named it)
	// and the clock passes aheadLimit.
	if err := f.Store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	sh.setKnown(objid.Sum([]byte("an object no group names any more")), now())
	mu.Lock()
	clk.add(sh.aheadLimit())
	n := checks[key]
	mu.Unlock()
	// Whenever a step ships the group, the object is in the bucket again.
	for i := 0; ; i++ {
		g, err := sh.step(ctx, up)
		if err != nil {
			t.Fatal(err)
		}
		e.verifyPull(f.Store, 0)
		if g == want {
			break
		}
		if i == 10 {
			t.Fatalf("10 steps after the check went stale shipped group %d, want %d", g, want)
		}
		idle(t, up)
	}
	mu.Lock()
	again := checks[key] - n
	mu.Unlock()
	if again < 2 {
		t.Fatalf("%d operations on %s after its check went stale, want a HEAD and a PUT", again, key)
	}
	e.verifyPull(f.Store, want)
	// The checks older than aheadLimit were dropped (a long-lived
	// shipper's map does not keep every object it ever shipped).
	sh.knownMu.Lock()
	for id, at := range sh.known {
		if now().Sub(at) >= sh.aheadLimit() {
			t.Errorf("object %s checked %v ago is still in the known map", id, now().Sub(at))
		}
	}
	sh.knownMu.Unlock()
}

// TestPipelineStaleCheckBeforeHead: the check just before a head. A
// group's first object is uploaded and scanned fresh by one step while
// its second is still uploading; then the shipper's clock passes
// aheadLimit and remote GC removes the first (nothing named it). When the
// second is up, no step may name the group on the first one's old scan:
// it is checked (and uploaded) again first.
func TestPipelineStaleCheckBeforeHead(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnv(t, 59)
	defer e.ws.Close()
	var mu sync.Mutex
	clk := newTestClock()
	now := clk.now
	hold := newHolder("head")
	f := &remote.Faulty{Store: srv.Store(t, "stale-head"), Hook: hold.hook}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f, Now: now, RefreshAfter: time.Hour})
	up := sh.newUploader(ctx)
	defer func() { up.close(); sh.waitMerge() }()
	if _, err := sh.Round(ctx); err != nil {
		t.Fatal(err)
	}
	e.write("x", randData(rand.New(rand.NewPCG(59, 1)), 600<<10)) // 3 chunks
	want := e.commit()
	if err := sh.read(); err != nil {
		t.Fatal(err)
	}
	g := &sh.buf[len(sh.buf)-1]
	if err := sh.groupObjects(g); err != nil || g.n != want || len(g.ids) < 2 {
		t.Fatalf("group %d with %d objects (%v), want group %d with several", g.n, len(g.ids), err, want)
	}
	first, last := g.ids[0], g.ids[len(g.ids)-1]
	hold.arm(remote.ObjectKey(last.String()))
	if g, err := sh.step(ctx, up); err != nil || g == want {
		t.Fatalf("first step: group %d, %v; want the objects only submitted", g, err)
	}
	hold.waitHeld(t)
	waitFresh(t, sh, up, g.ids[:len(g.ids)-1]...)
	if g, err := sh.step(ctx, up); err != nil || g == want {
		t.Fatalf("step with the last object held: group %d, %v", g, err)
	}
	if err := f.Store.Delete(ctx, remote.ObjectKey(first.String())); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clk.add(sh.aheadLimit())
	mu.Unlock()
	hold.release()
	idle(t, up)
	for i := 0; ; i++ {
		g, err := sh.step(ctx, up)
		if err != nil {
			t.Fatal(err)
		}
		e.verifyPull(f.Store, 0)
		if g == want {
			break
		}
		if i == 10 {
			t.Fatalf("10 steps after the release shipped group %d, want %d", g, want)
		}
		idle(t, up)
	}
	e.verifyPull(f.Store, want)
}

// TestPipelineSnapshotInFlight: a snapshot taken at a group whose objects
// are still uploading (one held) is not shipped while the head is before
// its group, even as later groups' objects finish; once the head names
// it, its entry is shipped with every object it references, and it
// restores.
func TestPipelineSnapshotInFlight(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnvSeg(t, 67, 64<<20)
	defer e.ws.Close()
	rng := rand.New(rand.NewPCG(67, 1))
	hold := newHolder("put")
	f := &remote.Faulty{Store: srv.Store(t, "snap-flight"), Hook: hold.hook}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f, Parallel: 2})
	base, err := sh.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	up := sh.newUploader(ctx)
	defer func() { up.close(); sh.waitMerge() }()
	before := e.objects()
	e.write("large", randData(rng, 600<<10))
	g := e.commit()
	largeIDs := e.newObjects(before)
	hold.arm(remote.ObjectKey(largeIDs[0].String()))
	if n, err := sh.step(ctx, up); err != nil || n != base {
		t.Fatalf("step: group %d, %v; want %d", n, err, base)
	}
	hold.waitHeld(t)
	in := e.snap("in-flight", time.Now())
	if in.Group != g {
		t.Fatalf("snapshot at group %d, want %d", in.Group, g)
	}
	before = e.objects()
	e.write("small", randData(rng, 70<<10))
	want := e.commit()
	if _, err := sh.step(ctx, up); err != nil {
		t.Fatal(err)
	}
	waitFresh(t, sh, up, append(largeIDs[1:], e.newObjects(before)...)...)
	if n, err := sh.step(ctx, up); err != nil || n != base {
		t.Fatalf("step with the large object held: group %d, %v; want %d", n, err, base)
	}
	if snaps, _, err := RemoteSnapshots(ctx, f.Store, "ws"); err != nil || len(snaps) != 0 {
		t.Fatalf("remote snapshots while the head is before the snapshot's group: %+v, %v; want none", snaps, err)
	}
	hold.release()
	waitFresh(t, sh, up, largeIDs[0])
	if n, err := sh.step(ctx, up); err != nil || n != want {
		t.Fatalf("step after the release: group %d, %v; want %d", n, err, want)
	}
	if snaps, _, err := RemoteSnapshots(ctx, f.Store, "ws"); err != nil || len(snaps) != 1 || !sameInfo(snaps[0], in) {
		t.Fatalf("remote snapshots after the head reached them: %+v, %v; want %+v", snaps, err, in)
	}
	_, dir, p, err := pullAt(t, f.Store, At{Snapshot: strconv.FormatUint(in.ID, 10)})
	if err != nil {
		t.Fatalf("pull the snapshot: %v", err)
	}
	checkFiles(t, dir, p, e.files[g])
	e.verifyPull(f.Store, want)
}

// holder holds one remote operation (op on the armed key, once) until
// released: a Faulty hook for tests that need an upload or check under
// way while they look at the shipper.
type holder struct {
	op       string
	mu       sync.Mutex
	key      string // armed key ("" once held)
	holding  chan struct{}
	released chan struct{}
}

func newHolder(op string) *holder {
	return &holder{op: op, holding: make(chan struct{}, 1), released: make(chan struct{})}
}

func (h *holder) hook(op, key string, n int) error {
	h.mu.Lock()
	hold := op == h.op && key != "" && key == h.key
	if hold {
		h.key = ""
	}
	h.mu.Unlock()
	if !hold {
		return nil
	}
	h.holding <- struct{}{}
	select {
	case <-h.released:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("the held %s of %s was never released", op, key)
	}
}

// arm holds the next operation on key.
func (h *holder) arm(key string) {
	h.mu.Lock()
	h.key = key
	h.mu.Unlock()
}

// waitHeld waits until the armed operation is being held.
func (h *holder) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-h.holding:
	case <-time.After(time.Minute):
		t.Fatalf("the %s to hold did not start", h.op)
	}
}

func (h *holder) release() { close(h.released) }

// testClock is a settable clock for Options.Now, safe for the shipper's
// goroutines.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now()} }

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// add moves the clock on by d and returns the new time.
func (c *testClock) add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}
