package ship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/manifest"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// snap takes a snapshot of e's workspace (committed state) at now.
func (e *env) snap(label string, now time.Time) snapshot.Info {
	e.t.Helper()
	in, _, err := snapshot.CreateServing(e.ws, vfs.Default, e.dir(), e.pool, label, now)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

func sameInfo(a, b snapshot.Info) bool {
	return a.ID == b.ID && a.Label == b.Label && a.Group == b.Group && a.Root == b.Root && a.Time.Equal(b.Time)
}

// pullAt pulls workspace ws from st into a fresh host with at, and
// returns the result and the pulled workspace directory and pool.
func pullAt(t *testing.T, st remote.Store, at At) (PullResult, string, *pool.Pool, error) {
	t.Helper()
	root := t.TempDir()
	p, err := pool.Open(vfs.Default, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "state", "workspaces", "ws")
	res, err := Pull(context.Background(), PullOptions{Store: st, Name: "ws", Dir: dir, Pool: p, At: at})
	return res, dir, p, err
}

// checkFiles opens the workspace in dir and checks that its root holds
// exactly files, byte for byte.
func checkFiles(t *testing.T, dir string, p *pool.Pool, files map[string][]byte) {
	t.Helper()
	ws, err := workspace.Open(workspace.Options{Dir: dir, Pool: p})
	if err != nil {
		t.Fatalf("open pulled workspace: %v", err)
	}
	defer ws.Close()
	n := 0
	for _, d := range ws.Dump() {
		if d.Path != "/" && !strings.Contains(strings.TrimPrefix(d.Path, "/"), "/") {
			n++
		}
	}
	if n != len(files) {
		t.Fatalf("pulled workspace has %d entries in its root, want %d", n, len(files))
	}
	for name, data := range files {
		a, err := ws.Lookup(workspace.RootIno, name)
		if err != nil {
			t.Fatalf("pulled: lookup %s: %v", name, err)
		}
		h, err := ws.OpenFile(a.Ino, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data)+1)
		k, _ := h.ReadAt(got, 0)
		h.Release()
		if !bytes.Equal(got[:k], data) {
			t.Fatalf("pulled: %s differs (%d bytes, want %d)", name, k, len(data))
		}
	}
}

// TestShipSnapshots: snapshots reach the bucket after their objects, a
// removal propagates, remote GC keeps exactly what shipped snapshots
// reference, pull imports the catalog, and pull --at restores a snapshot
// (by ID or label) or the latest shipped state at or before a time; a
// workspace pulled --at ships its state as the new head.
func TestShipSnapshots(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "snaps")
	ctx := context.Background()
	e := newEnv(t, 11)
	defer func() { e.ws.Close() }()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := t0
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st, Now: func() time.Time { return clock }})
	round := func() uint64 {
		t.Helper()
		g, err := sh.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for range 4 {
		e.step()
	}
	g1 := e.commit()
	s1 := e.snap("one", t0.Add(30*time.Second))
	clock = t0.Add(time.Minute)
	gA := round()
	if gA != g1 {
		t.Fatalf("shipped %d, committed %d", gA, g1)
	}
	for range 4 {
		e.step()
	}
	// Overwrite every file: snapshot one alone references the old bytes.
	for name := range e.live {
		e.write(name, []byte("new "+name))
	}
	g2 := e.commit()
	s2 := e.snap("two", t0.Add(150*time.Second))
	clock = t0.Add(3 * time.Minute)
	if g := round(); g != g2 {
		t.Fatalf("shipped %d, committed %d", g, g2)
	}
	e.step()
	g3 := e.commit()
	clock = t0.Add(4 * time.Minute)
	round()

	snaps, last, err := RemoteSnapshots(ctx, st, "ws")
	if err != nil || len(snaps) != 2 || !sameInfo(snaps[0], s1) || !sameInfo(snaps[1], s2) || last != 2 {
		t.Fatalf("remote snapshots %+v (last id %d, %v), want %+v %+v", snaps, last, err, s1, s2)
	}
	if s := sh.Stats(); s.SnapshotsShipped != 2 {
		t.Errorf("stats say %d snapshots shipped", s.SnapshotsShipped)
	}

	cases := []struct {
		at    string
		group uint64 // the state restored
	}{
		{"1", g1},
		{"two", g2},
		{t0.Add(90 * time.Second).Format(time.RFC3339), g1},  // the prefix shipped at 1m (snapshot one is older)
		{t0.Add(170 * time.Second).Format(time.RFC3339), g2}, // snapshot two at 150s, after the prefix at 60s
		{t0.Add(time.Hour).Format(time.RFC3339), g3},         // the head itself
	}
	for _, c := range cases {
		at, err := ParseAt(c.at, clock)
		if err != nil {
			t.Fatal(err)
		}
		res, dir, p, err := pullAt(t, st, at)
		if err != nil {
			t.Fatalf("pull --at %s: %v", c.at, err)
		}
		if res.AsOf != c.group || res.Snapshots != 2 {
			t.Fatalf("pull --at %s: restored group %d (%s) with %d snapshots, want group %d and 2", c.at, res.AsOf, res.Selected, res.Snapshots, c.group)
		}
		if wantGroup := map[bool]uint64{true: g3, false: g3 + 1}[c.group == g3]; res.Group != wantGroup {
			t.Fatalf("pull --at %s: the pulled workspace is at group %d, want %d (one past the head)", c.at, res.Group, wantGroup)
		}
		checkFiles(t, dir, p, e.files[c.group])
		// The imported catalog is whole: every snapshot's objects are local.
		if rep, err := snapshot.Check(vfs.Default, dir, p, true, nil); err != nil || len(rep.Damage) != 0 || rep.Snapshots != 2 {
			t.Fatalf("pull --at %s: local catalog check: %+v %v", c.at, rep, err)
		}
		t.Logf("pull --at %s: %s -> group %d", c.at, res.Selected, res.Group)
	}
	for _, bad := range []string{"3", "nolabel", t0.Add(10 * time.Second).Format(time.RFC3339)} {
		at, _ := ParseAt(bad, clock)
		_, _, _, err := pullAt(t, st, at)
		if !errors.Is(err, ErrNoSuchState) || !strings.Contains(err.Error(), `1 "one"`) {
			t.Errorf("pull --at %s: %v; want ErrNoSuchState naming the shipped snapshots", bad, err)
		}
	}

	// A workspace pulled --at 1 and shipped becomes the remote head.
	{
		at, _ := ParseAt("1", clock)
		_, dir, p, err := pullAt(t, st, at)
		if err != nil {
			t.Fatal(err)
		}
		shB := New(Options{Dir: dir, Name: "ws", Pool: p, Store: st})
		g, err := shB.Round(ctx)
		if err != nil || g != g3+1 {
			t.Fatalf("shipping the workspace pulled --at 1: group %d, %v; want %d", g, err, g3+1)
		}
		res, dirC, pC, err := pullAt(t, st, At{})
		if err != nil || res.Group != g3+1 {
			t.Fatalf("pull after the rewind: %+v %v", res, err)
		}
		checkFiles(t, dirC, pC, e.files[g1])
		// Back to the head the test's shipper knows of, for what follows:
		// host A's shipper would now fail (another writer), so restart it
		// on a fresh prefix copy instead.
	}

	// Removal propagates, and GC then sweeps what only snapshot one held.
	st2 := srv.Store(t, "snaps-rm")
	sh2 := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st2, Now: func() time.Time { return clock }})
	if _, err := sh2.Round(ctx); err != nil {
		t.Fatal(err)
	}
	gcAt := time.Now().Add(48 * time.Hour)
	before, err := GC(ctx, st2, 24*time.Hour, gcAt, true)
	if err != nil || before.Snapshots != 2 {
		t.Fatalf("gc (dry run) with both snapshots: %+v %v", before, err)
	}
	if err := snapshot.Remove(vfs.Default, e.dir(), s1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sh2.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if snaps, last, err := RemoteSnapshots(ctx, st2, "ws"); err != nil || len(snaps) != 1 || snaps[0].ID != s2.ID || last != 2 {
		t.Fatalf("after removing snapshot 1: remote %+v last %d %v", snaps, last, err)
	}
	after, err := GC(ctx, st2, 24*time.Hour, gcAt, false)
	if err != nil || after.Snapshots != 1 || after.ObjectsDeleted <= before.ObjectsDeleted || after.Referenced >= before.Referenced {
		t.Fatalf("gc after removing snapshot 1: %+v %v; before: %+v (want the objects only snapshot one held swept)", after, err, before)
	}
	at, _ := ParseAt("two", clock)
	if _, dir, p, err := pullAt(t, st2, at); err != nil {
		t.Fatalf("pull --at two after gc: %v", err)
	} else {
		checkFiles(t, dir, p, e.files[g2])
	}
	if _, _, _, err := pullAt(t, st2, At{Snapshot: "1"}); !errors.Is(err, ErrNoSuchState) {
		t.Fatalf("pull --at 1 after its removal: %v", err)
	}
}

// TestShipSnapshotsFaults: a fault before any one remote operation of a
// history with snapshots (taken, shipped, removed), the shipper retrying
// or restarted, never leaves a shipped snapshot with a missing object or
// one newer than the head.
func TestShipSnapshotsFaults(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	run := func(prefix string, failAt int, restart bool) int {
		e := newEnv(t, 12)
		defer func() { e.ws.Close() }()
		f := &remote.Faulty{Store: srv.Store(t, prefix)}
		f.Hook = func(op, key string, n int) error {
			if n == failAt {
				return errors.New("injected fault")
			}
			return nil
		}
		newShipper := func() *Shipper { return New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f}) }
		sh := newShipper()
		check := func() {
			h, _, err := ReadHead(ctx, f.Store, "ws")
			if err != nil {
				t.Fatal(err)
			}
			snaps, _, err := RemoteSnapshots(ctx, f.Store, "ws")
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range snaps {
				if in.Group > h.Group {
					t.Fatalf("fail at %d: shipped snapshot %d of group %d, head at %d", failAt, in.ID, in.Group, h.Group)
				}
				err := manifest.ForEachObject(remoteManifests{ctx, f.Store}, in.Root, nil, func(id objid.ID) {
					if ok, err := f.Store.Exists(ctx, remote.ObjectKey(id.String())); err != nil || !ok {
						t.Fatalf("fail at %d: snapshot %d references %s, missing from the bucket (%v)", failAt, in.ID, id, err)
					}
				})
				if err != nil {
					t.Fatalf("fail at %d: snapshot %d: %v", failAt, in.ID, err)
				}
			}
		}
		var ids []uint64
		for i := range 6 {
			for range 3 {
				e.step()
			}
			e.commit()
			ids = append(ids, e.snap(fmt.Sprint("s", i), time.Now()).ID)
			if i == 3 {
				if err := snapshot.Remove(vfs.Default, e.dir(), ids[1]); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := sh.Round(ctx); err != nil {
				if !strings.Contains(err.Error(), "injected fault") {
					t.Fatalf("fail at %d: round %d: %v", failAt, i, err)
				}
				if restart {
					sh = newShipper()
				}
			}
			check()
		}
		if _, err := sh.Round(ctx); err != nil {
			t.Fatalf("fail at %d: final round: %v", failAt, err)
		}
		check()
		local, _ := snapshot.IDs(vfs.Default, e.dir())
		snaps, _, _ := RemoteSnapshots(ctx, f.Store, "ws")
		if len(snaps) != len(local) {
			t.Fatalf("fail at %d: %d snapshots shipped, %d local", failAt, len(snaps), len(local))
		}
		return f.Ops()
	}
	total := run("clean", -1, false)
	t.Logf("a clean history makes %d remote operations", total)
	// Every operation with WSFS_LONG_TESTS set; else every seventh (each
	// run costs a few seconds on a loaded machine).
	stride := 7
	if os.Getenv("WSFS_LONG_TESTS") != "" {
		stride = 1
	}
	for n := 0; n < total; n += stride {
		run(fmt.Sprintf("fault-%d", n), n, n%2 == 1)
	}
}

// TestShipSnapshotAgentCopy: a snapshot's agent state copy travels with
// it. The shipper uploads its chunks with the tree's objects, remote GC
// keeps them, a pull brings them into the pool (the pulled snapshot
// restores its agent state) and a pull --at the snapshot names it
// (PullResult.Snapshot), so that wsfs pull restores that copy. The
// chunks used to stay behind: a pulled snapshot's fork or restore failed
// on a missing object.
func TestShipSnapshotAgentCopy(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "agentcopy")
	ctx := context.Background()
	e := newEnv(t, 41)
	defer func() { e.ws.Close() }()
	db := agentstate.DBIn(e.dir())
	if err := agentstate.Ensure(db, "ws"); err != nil {
		t.Fatal(err)
	}
	want := agentDump(t, db)
	e.step()
	e.commit()
	in := e.snap("agent", time.Now())
	if in.Agent == nil || len(in.Agent.Content.Chunks) == 0 {
		t.Fatalf("snapshot without an agent state copy: %+v", in)
	}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st})
	if _, err := sh.Round(ctx); err != nil {
		t.Fatal(err)
	}
	// Everything unreferenced is past its grace.
	if _, err := GC(ctx, st, 24*time.Hour, time.Now().Add(48*time.Hour), false); err != nil {
		t.Fatal(err)
	}
	res, dir, p, err := pullAt(t, st, At{Snapshot: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Snapshot == nil || res.Snapshot.ID != in.ID || res.Snapshot.Agent == nil {
		t.Fatalf("pull --at the snapshot: PullResult.Snapshot %+v, want snapshot %d with its agent copy", res.Snapshot, in.ID)
	}
	pulled, err := snapshot.Get(vfs.Default, dir, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork := filepath.Join(t.TempDir(), "fork")
	if _, err := snapshot.RestoreAgent(p, fork, pulled); err != nil {
		t.Fatalf("restore the pulled snapshot's agent state: %v", err)
	}
	if got := agentDump(t, agentstate.DBIn(fork)); got != want {
		t.Fatalf("pulled snapshot's agent state %q, want %q", got, want)
	}
	if len(res.AgentMissing) != 0 {
		t.Fatalf("AgentMissing %v with every chunk shipped", res.AgentMissing)
	}
	// A bucket whose entry names a chunk that was never uploaded (an
	// older shipper): the pull goes on and says which snapshot lacks it.
	if err := st.Delete(ctx, remote.ObjectKey(in.Agent.Content.Chunks[0].String())); err != nil {
		t.Fatal(err)
	}
	res, _, _, err = pullAt(t, st, At{})
	if err != nil {
		t.Fatalf("pull with a snapshot's agent chunk missing from the bucket: %v", err)
	}
	if len(res.AgentMissing) != 1 || res.AgentMissing[0] != in.ID {
		t.Fatalf("AgentMissing %v, want [%d]", res.AgentMissing, in.ID)
	}
}

// agentDump returns the wsfs_meta rows of the agent database at path.
func agentDump(t *testing.T, path string) string {
	t.Helper()
	db, err := agentstate.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out string
	if err := db.QueryRow(`SELECT group_concat(key || '=' || value, ',') FROM wsfs_meta`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}
