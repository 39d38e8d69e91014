package ship

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
)

// TestRemoveRemote: RemoveRemote deletes one workspace's head, log,
// checkpoints, snapshot entries, agent replica and lease, and nothing of
// a workspace whose name extends it, nor any object; it refuses while
// another host holds the lease (an expired one only with steal); stopped
// by an error part-way, it leaves a workspace that no longer restores,
// and a second run finishes.
func TestRemoveRemote(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "remove")
	ctx := context.Background()
	ttl := 10 * time.Second
	t0 := time.Now()
	for _, name := range []string{"ws", "ws-b"} {
		e := newEnv(t, 11)
		for range 8 {
			e.step()
			e.commit()
		}
		sh := New(Options{Dir: e.dir(), Name: name, Pool: e.pool, Store: st, HostID: "host-a", LeaseTTL: ttl})
		if _, err := sh.Round(ctx); err != nil {
			t.Fatal(err)
		}
		e.ws.Close()
		// What else a workspace has in the bucket: a snapshot entry and
		// Litestream's files (opaque here).
		for _, k := range []string{remote.WorkspaceKey(name, "snapshots/last-id"), remote.AgentKey(name) + "/ltx/0/0000000000000001-0000000000000001.ltx"} {
			if err := st.Put(ctx, k, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	list := func(prefix string) []string {
		t.Helper()
		keys, err := st.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	objects := list("objects/")
	wsKeys, agentKeys := list("workspaces/ws/"), list("agent/ws/")
	if len(objects) == 0 || len(wsKeys) < 4 || len(agentKeys) != 1 {
		t.Fatalf("setup: %d objects, workspace keys %v, agent keys %v", len(objects), wsKeys, agentKeys)
	}
	unchanged := func(what string) {
		t.Helper()
		if got := list("workspaces/ws/"); !slices.Equal(got, wsKeys) {
			t.Fatalf("%s: workspace keys %v, want %v", what, got, wsKeys)
		}
		if got := list("agent/ws/"); !slices.Equal(got, agentKeys) {
			t.Fatalf("%s: agent keys %v, want %v", what, got, agentKeys)
		}
	}

	var le *LeaseError
	if _, err := RemoveRemote(ctx, st, "ws", "host-b", ttl, true, t0.Add(time.Second)); !errors.As(err, &le) {
		t.Fatalf("host B while A's lease is live: %v, want a LeaseError", err)
	}
	unchanged("refused while A serves")
	late := t0.Add(ttl + time.Minute)
	if _, err := RemoveRemote(ctx, st, "ws", "host-b", ttl, false, late); !errors.As(err, &le) {
		t.Fatalf("host B after A's lease expired, without steal: %v, want a LeaseError", err)
	}
	unchanged("refused without steal")

	// The third delete fails: the head is already gone.
	deletes := 0
	faulty := &remote.Faulty{Store: st, Hook: func(op, key string, n int) error {
		if op == "delete" {
			deletes++
			if deletes == 3 {
				return errors.New("injected")
			}
		}
		return nil
	}}
	if _, err := RemoveRemote(ctx, faulty, "ws", "host-b", ttl, true, late); err == nil {
		t.Fatal("a failed delete was not reported")
	}
	if _, found, err := ReadHead(ctx, st, "ws"); err != nil || found {
		t.Fatalf("after a removal stopped part-way, head found %v (%v): want it gone first", found, err)
	}
	if len(list("workspaces/ws/")) < 2 {
		t.Fatal("the stopped removal deleted more than two keys")
	}
	// Another host (a pull, say) is told of the removal, not of a host
	// serving the workspace: live, then expired.
	for _, at := range []time.Time{late.Add(time.Second), late.Add(ttl + time.Minute)} {
		_, err := AcquireLease(ctx, st, "ws", "host-c", ttl, false, at)
		if !errors.As(err, &le) || !le.Lease.Removing || !strings.Contains(err.Error(), "rm --remote") || strings.Contains(err.Error(), "push it") {
			t.Fatalf("host C after B's removal stopped: %v, want a LeaseError about the removal", err)
		}
	}
	rs, err := RemoveRemote(ctx, st, "ws", "host-b", ttl, false, late)
	if err != nil {
		t.Fatalf("second run, lease already B's: %v", err)
	}
	if rs.Head || rs.AgentFiles != 1 || rs.Files == 0 {
		t.Fatalf("second run removed %+v: want the rest without the head", rs)
	}
	if got := list("workspaces/ws/"); len(got) != 0 {
		t.Fatalf("left under workspaces/ws/: %v", got)
	}
	if got := list("agent/ws/"); len(got) != 0 {
		t.Fatalf("left under agent/ws/: %v", got)
	}
	if _, found, err := ReadHead(ctx, st, "ws-b"); err != nil || !found {
		t.Fatalf("ws-b's head: found %v, %v", found, err)
	}
	if got := list("agent/ws-b/"); len(got) != 1 {
		t.Fatalf("ws-b's agent replica: %v", got)
	}
	if got := list("objects/"); !slices.Equal(got, objects) {
		t.Fatalf("objects changed: %d, want the %d shared ones kept for remote GC", len(got), len(objects))
	}
	// Gone: a new host can take the name afresh.
	if _, err := AcquireLease(ctx, st, "ws", "host-c", ttl, false, late); err != nil {
		t.Fatalf("host C takes the removed workspace's name: %v", err)
	}

	// A removal that outlives its lease stops: host C steals ws-b's
	// lease (expired on C's clock) during B's second delete, and B's
	// next renewal finds it.
	short := 60 * time.Millisecond
	deletes = 0
	faulty.Hook = func(op, key string, n int) error {
		if op == "delete" {
			deletes++
			if deletes == 2 {
				if _, err := AcquireLease(ctx, st, "ws-b", "host-c", time.Minute, true, late.Add(time.Second)); err != nil {
					t.Errorf("host C steals ws-b's expired lease: %v", err)
				}
				time.Sleep(short) // B's next delete renews first
			}
		}
		return nil
	}
	if _, err := RemoveRemote(ctx, faulty, "ws-b", "host-b", short, true, late); !errors.As(err, &le) || le.Lease.Holder != "host-c" {
		t.Fatalf("removal after its lease was taken over: %v, want a LeaseError naming host-c", err)
	}
	if deletes != 2 {
		t.Fatalf("the removal went on for %d deletes after it lost its lease", deletes-2)
	}
}
