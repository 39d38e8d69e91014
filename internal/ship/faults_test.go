package ship

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// shipped returns an env whose state is shipped to prefix of srv.
func shipped(t *testing.T, srv *s3test.Server, prefix string) (*env, *remote.S3, uint64) {
	t.Helper()
	st := srv.Store(t, prefix)
	e := newEnv(t, 5)
	t.Cleanup(func() { e.ws.Close() })
	for range 5 {
		e.step()
		e.commit()
	}
	g, err := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st}).Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return e, st, g
}

func pullErr(t *testing.T, st remote.Store) error {
	root := t.TempDir()
	p, err := pool.Open(vfs.Default, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Pull(context.Background(), PullOptions{Store: st, Name: "ws", Dir: filepath.Join(root, "ws"), Pool: p})
	return err
}

// TestPullCorruptOrMissingObject: an object corrupted or deleted in the
// bucket makes Pull fail with an error naming it; nothing wrong is
// restored.
func TestPullCorruptOrMissingObject(t *testing.T) {
	srv := s3test.Start(t)
	_, st, _ := shipped(t, srv, "corrupt")
	ctx := context.Background()
	// The objects the shipped tree references (a live tree also holds
	// unlinked inodes still looked up): from a pulled copy.
	root := t.TempDir()
	p, err := pool.Open(vfs.Default, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(ctx, PullOptions{Store: st, Name: "ws", Dir: filepath.Join(root, "ws"), Pool: p}); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(workspace.Options{Dir: filepath.Join(root, "ws"), Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	ws.ForEachObject(func(id objid.ID) { keys = append(keys, remote.ObjectKey(id.String())) })
	ws.Close()
	if len(keys) < 2 {
		t.Fatalf("the tree references %d objects, want at least 2", len(keys))
	}
	// Corrupt one object behind wsfs's back (rewritten through the S3 API,
	// which works on every engine), and delete another.
	b, err := st.Get(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := st.Put(ctx, keys[0], b); err != nil {
		t.Fatal(err)
	}
	err = pullErr(t, st)
	var ce *CorruptRemoteError
	if !errors.As(err, &ce) || ce.Key != keys[0] {
		t.Fatalf("pull with corrupt %s: %v, want a CorruptRemoteError naming it", keys[0], err)
	}
	b[len(b)/2] ^= 0xff
	if err := st.Put(ctx, keys[0], b); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, keys[1]); err != nil {
		t.Fatal(err)
	}
	if err := pullErr(t, st); err == nil || !strings.Contains(err.Error(), keys[1]) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("pull with %s deleted: %v, want an error naming it missing", keys[1], err)
	}
	// A corrupt head or log batch is refused as well.
	if err := st.Put(ctx, HeadKey("ws"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if err := pullErr(t, st); err == nil || !strings.Contains(err.Error(), HeadKey("ws")) {
		t.Fatalf("pull with a corrupt head: %v", err)
	}
}

// TestRemoteMisconfigured: a missing bucket and wrong credentials are
// reported at start-up (Check) with what to do; the shipper's rounds fail
// without losing anything and succeed once the remote is right.
func TestRemoteMisconfigured(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	cfg := srv.Config("x")
	cfg.Bucket = "no-such-bucket"
	st, err := remote.OpenS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing bucket: %v, want an error saying the bucket does not exist", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	st, err = remote.OpenS3(ctx, srv.Config("x"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("wrong secret: %v, want an error about credentials", err)
	}
	if err != nil && strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the secret: %v", err)
	}
	e := newEnv(t, 6)
	defer e.ws.Close()
	e.step()
	want := e.commit()
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st})
	if _, err := sh.Round(ctx); err == nil {
		t.Fatal("round with wrong credentials succeeded")
	}
	if s := sh.Stats(); s.LastError == "" || s.Local != want {
		t.Errorf("stats after a failed round: %+v (want the error and local group %d)", s, want)
	}
}

// TestShipperRemoteDown: with the server gone, rounds fail and the lag
// grows; the workspace keeps committing; when a server is back (a new one
// here, holding nothing), a fresh shipper ships everything.
func TestShipperRemoteDown(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnv(t, 7)
	defer e.ws.Close()
	st := srv.Store(t, "down")
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st})
	e.step()
	e.commit()
	if _, err := sh.Round(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	e.step()
	want := e.commit()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err := sh.Round(rctx)
	cancel()
	if err == nil {
		t.Fatal("round with the server down succeeded")
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := sh.Round(rctx); err == nil {
		t.Fatal("second round with the server down succeeded")
	}
	if s := sh.Stats(); s.LagSeconds <= 0 || s.Shipped >= want {
		t.Errorf("stats with the server down: %+v, want a positive lag and shipped < %d", s, want)
	}
	srv2 := s3test.Start(t)
	sh2 := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: srv2.Store(t, "down")})
	if g, err := sh2.Round(ctx); err != nil || g != want {
		t.Fatalf("round on the new server: group %d, %v; want %d", g, err, want)
	}
	e.verifyPull(srv2.Store(t, "down"), want)
}

// TestShipperLocalObjectGone: a group references an object local GC has
// removed since (the shipper lagged past GC's grace); the round fails
// naming it, and the next one ships a newer checkpoint instead, which no
// longer references it.
func TestShipperLocalObjectGone(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "gone")
	ctx := context.Background()
	e, gone := goneObjectEnv(t)
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st})
	_, err := sh.Round(ctx)
	if err == nil {
		t.Fatal("the first round shipped groups whose object is gone")
	}
	if !strings.Contains(err.Error(), gone.String()) {
		t.Fatalf("round: %v, want an error naming %s", err, gone)
	}
	g, err := sh.Round(ctx)
	if err != nil {
		t.Fatalf("second round: %v", err)
	}
	if sh.Stats().Checkpoints == 0 {
		t.Fatal("no checkpoint shipped")
	}
	e.verifyPull(st, g)
}

// goneObjectEnv returns a workspace (in one segment, never deleted) whose
// log references object gone in an early group, removed from the pool
// since as local GC would (it was overwritten), and whose newest local
// checkpoint no longer references it.
func goneObjectEnv(t *testing.T) (*env, objid.ID) {
	t.Helper()
	e := newEnvSeg(t, 13, 64<<20) // one segment: never deleted
	t.Cleanup(func() { e.ws.Close() })
	// A pooled file, then overwritten: its first object is unreferenced.
	e.write("big", bytes.Repeat([]byte("first version "), 10000))
	e.commit()
	var first []objid.ID
	e.ws.ForEachObject(func(id objid.ID) { first = append(first, id) })
	e.write("big", bytes.Repeat([]byte("second version "), 10000))
	e.commit()
	// Until a checkpoint after the overwrite exists (the one segment, and
	// so the first version's group, stays).
	for range 200 {
		e.step()
		g := e.commit()
		if ck := e.ws.Stats().CheckpointGroup; ck > 3 && ck+2 < g {
			break
		}
	}
	still := map[objid.ID]bool{}
	e.ws.ForEachObject(func(id objid.ID) { still[id] = true })
	var gone objid.ID
	found := false
	for _, id := range first {
		if !still[id] {
			gone, found = id, true
		}
	}
	if !found {
		t.Fatal("the overwritten object is still referenced")
	}
	if err := os.Remove(e.pool.Path(gone)); err != nil {
		t.Fatal(err)
	}
	return e, gone
}
