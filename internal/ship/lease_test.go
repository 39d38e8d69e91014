package ship

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
)

// TestLease: one holder at a time; a live lease of another host is
// refused naming it; an expired one only with steal; renew and release by
// the holder only; a shipper that lost its lease stops shipping.
func TestLease(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "lease")
	ctx := context.Background()
	t0 := time.Now()
	ttl := 10 * time.Second
	if _, err := AcquireLease(ctx, st, "ws", "host-a", ttl, false, t0); err != nil {
		t.Fatal(err)
	}
	var le *LeaseError
	_, err := AcquireLease(ctx, st, "ws", "host-b", ttl, true, t0.Add(time.Second))
	if !errors.As(err, &le) || le.Lease.Holder != "host-a" || !strings.Contains(err.Error(), "served by host host-a") {
		t.Fatalf("B while A's lease is live (even with steal): %v", err)
	}
	if _, err := AcquireLease(ctx, st, "ws", "host-a", ttl, false, t0.Add(2*time.Second)); err != nil {
		t.Fatalf("A renews: %v", err)
	}
	late := t0.Add(2*time.Second + ttl + time.Second)
	if _, err := AcquireLease(ctx, st, "ws", "host-b", ttl, false, late); !errors.As(err, &le) || !strings.Contains(err.Error(), "--steal") {
		t.Fatalf("B after expiry without steal: %v", err)
	}
	if _, err := AcquireLease(ctx, st, "ws", "host-b", ttl, true, late); err != nil {
		t.Fatalf("B steals the expired lease: %v", err)
	}
	if err := ReleaseLease(ctx, st, "ws", "host-a", late); !errors.As(err, &le) {
		t.Fatalf("A releases B's lease: %v", err)
	}
	// A's shipper now refuses to ship.
	e := newEnv(t, 8)
	defer e.ws.Close()
	e.step()
	e.commit()
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st, HostID: "host-a", LeaseTTL: ttl})
	if _, err := sh.Round(ctx); !errors.As(err, &le) {
		t.Fatalf("A's shipper with B holding the lease: %v", err)
	}
	if _, ok, _ := ReadHead(ctx, st, "ws"); ok {
		t.Fatal("A's shipper wrote a head without the lease")
	}
	// B releases; A may take it without steal.
	if err := ReleaseLease(ctx, st, "ws", "host-b", late); err != nil {
		t.Fatal(err)
	}
	if g, err := sh.Round(ctx); err != nil || g != e.ws.Stats().CommittedGroup {
		t.Fatalf("A's shipper after B released: group %d, %v", g, err)
	}
}

// TestHeadConditional: a head written by another writer is never
// overwritten: the shipper that finds it changed fails for good. A host
// whose local copy is older than the remote head refuses to ship.
func TestHeadConditional(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "cond")
	ctx := context.Background()
	e := newEnv(t, 9)
	defer e.ws.Close()
	e.step()
	e.commit()
	a := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st})
	if _, err := a.Round(ctx); err != nil {
		t.Fatal(err)
	}
	// Another writer (a second shipper of the same log, standing in for
	// a host that took over) moves the head on.
	e.step()
	e.commit()
	b := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st})
	gb, err := b.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.step()
	e.commit()
	if _, err := a.Round(ctx); err == nil || !strings.Contains(err.Error(), "another writer changed the remote head") {
		t.Fatalf("a's round after b wrote the head: %v", err)
	}
	if h, _, _ := ReadHead(ctx, st, "ws"); h.Group != gb {
		t.Fatalf("head at group %d after the refused round, want b's %d", h.Group, gb)
	}
	if _, err := a.Round(ctx); err == nil {
		t.Fatal("the failure is not sticky")
	}

	// A fresh local workspace (older than the remote) refuses to ship.
	f := newEnv(t, 10)
	defer f.ws.Close()
	c := New(Options{Dir: f.dir(), Name: "ws", Pool: f.pool, Store: st})
	if _, err := c.Round(ctx); err == nil || !strings.Contains(err.Error(), "older than the remote") {
		t.Fatalf("stale local copy: %v", err)
	}
}

// TestLeaseRenewedTwiceByOneHost: the daemon and the shipper of one host
// both renew its lease; a renewal whose conditional PUT loses to the
// other's still holds the lease (it is this host's), while one that loses
// to another host's write fails.
func TestLeaseRenewedTwiceByOneHost(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "lease-twice")
	ctx := context.Background()
	now := time.Now()
	ttl := 10 * time.Second
	if _, err := AcquireLease(ctx, st, "ws", "host-a", ttl, false, now); err != nil {
		t.Fatal(err)
	}
	// Between the renewal's read and its PUT, the other process renews.
	f := &remote.Faulty{Store: st}
	interleave := func(holder string, at time.Time) {
		done := false
		f.Hook = func(op, key string, n int) error {
			if op == "put" && !done {
				done = true
				if _, err := AcquireLease(ctx, st, "ws", holder, ttl, true, at); err != nil {
					t.Fatal(err)
				}
			}
			return nil
		}
	}
	interleave("host-a", now.Add(time.Hour))
	if _, err := AcquireLease(ctx, f, "ws", "host-a", ttl, false, now.Add(time.Second)); err != nil {
		t.Fatalf("renewal that lost the race to this host's other renewal: %v", err)
	}
	// Another host steals in between (a lease far in the future for the
	// test's clock): the renewal fails.
	interleave("host-b", now.Add(2*time.Hour)) // after host-a's lease of the hour expired
	if _, err := AcquireLease(ctx, f, "ws", "host-a", ttl, false, now.Add(2*time.Second)); err == nil {
		t.Fatal("a renewal that lost the race to another host succeeded")
	}
}

// TestLeaseExpiresMidRound: a round that waits for its objects longer
// than the lease's TTL (a large upload, a slow remote) while another host
// takes the expired lease over (steal) and pulls the head must not write
// its head on the lease it held when it started: it renews before the
// head, and fails with the new holder. (The head's If-Match does not
// catch this: the new owner has not written a head yet.)
func TestLeaseExpiresMidRound(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnv(t, 61)
	defer e.ws.Close()
	var mu sync.Mutex
	clk := newTestClock()
	now := clk.now
	ttl := 30 * time.Second
	steal := ""
	var stealErr error
	f := &remote.Faulty{Store: srv.Store(t, "lease-mid")}
	f.Hook = func(op, key string, n int) error {
		mu.Lock()
		defer mu.Unlock()
		if op == "put" && key == steal {
			// The upload outlasts the lease; host B takes it over.
			steal = ""
			_, stealErr = AcquireLease(ctx, f.Store, "ws", "host-b", ttl, true, clk.add(ttl+time.Second))
		}
		return nil
	}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f, HostID: "host-a", LeaseTTL: ttl, Now: now})
	base, err := sh.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := e.objects()
	e.write("x", randData(rand.New(rand.NewPCG(61, 1)), 100<<10))
	e.commit()
	ids := e.newObjects(before)
	if len(ids) != 1 {
		t.Fatalf("%d new objects, want 1", len(ids))
	}
	mu.Lock()
	steal = remote.ObjectKey(ids[0].String())
	mu.Unlock()
	_, err = sh.Round(ctx)
	mu.Lock()
	serr := stealErr
	mu.Unlock()
	if serr != nil {
		t.Fatalf("host B steals the expired lease: %v", serr)
	}
	var le *LeaseError
	if !errors.As(err, &le) || le.Lease.Holder != "host-b" {
		t.Fatalf("round that outlasted its lease: %v; want a LeaseError naming host-b", err)
	}
	if h, _, err := ReadHead(ctx, f.Store, "ws"); err != nil || h.Group != base {
		t.Fatalf("head at group %d (%v) after A lost its lease mid-round; want A's last head %d", h.Group, err, base)
	}
}

// TestShipThroughPushed: a workspace pushed from this host is never
// shipped from it again, so ShipThrough (push, sync) fails at once with
// ErrPushed instead of retrying that refusal until its context ends (a
// second 'wsfs push' waited out its whole --timeout, then blamed the
// timeout).
func TestShipThroughPushed(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "pushed")
	e := newEnv(t, 12)
	defer e.ws.Close()
	e.step()
	e.commit()
	if err := os.WriteFile(filepath.Join(e.dir(), PushedName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st, HostID: "host-a"})
	if _, err := sh.ShipThrough(ctx, e.ws.Stats().CommittedGroup); !errors.Is(err, ErrPushed) || ctx.Err() != nil {
		t.Fatalf("ShipThrough of a pushed workspace: %v (context: %v); want ErrPushed at once", err, ctx.Err())
	}
}

// TestLeaseErrorSameMachine: a lease held under another ID by a host of
// this machine's name says what that means (another HOME here, or this
// host's lost host-id) instead of naming "another host" that is this one.
func TestLeaseErrorSameMachine(t *testing.T) {
	hn, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	now := time.Now()
	for _, l := range []Lease{
		{Holder: "old-id", Hostname: hn, Renewed: now, Expires: now.Add(time.Minute)},
		{Holder: "old-id", Hostname: hn, Renewed: now.Add(-time.Hour), Expires: now.Add(-time.Minute)},
	} {
		msg := (&LeaseError{Workspace: "ws", Lease: l, Now: now}).Error()
		if !strings.Contains(msg, "host-id") || !strings.Contains(msg, hn+" is this machine") {
			t.Errorf("lease of this machine's name: %q; want it to say so and name host-id", msg)
		}
	}
	l := Lease{Holder: "id", Hostname: hn + "-elsewhere", Renewed: now, Expires: now.Add(time.Minute)}
	if msg := (&LeaseError{Workspace: "ws", Lease: l, Now: now}).Error(); strings.Contains(msg, "host-id") {
		t.Errorf("lease of another machine: %q mentions host-id", msg)
	}
}
