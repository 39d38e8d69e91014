package ship

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"wsfs/internal/namespace"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// lazyHost is a fresh host that pulled workspace ws lazily from st: its
// pool fetches from st through the returned Faulty (whose Hook a test sets
// to fail the remote).
type lazyHost struct {
	root   string
	dir    string
	pool   *pool.Pool
	faulty *remote.Faulty
}

func pullLazy(t *testing.T, st remote.Store) *lazyHost {
	t.Helper()
	root := t.TempDir()
	f := &remote.Faulty{Store: st}
	p, err := pool.Open(vfs.Default, filepath.Join(root, "pool"), pool.Options{Fetcher: &RemoteFetcher{Store: f, Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "state", "workspaces", "ws")
	res, err := Pull(context.Background(), PullOptions{Store: st, Name: "ws", Dir: dir, Pool: p, Lazy: true, RemoteURL: "s3://test"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 0 {
		t.Fatalf("a lazy pull fetched %d objects", res.Fetched)
	}
	return &lazyHost{root: root, dir: dir, pool: p, faulty: f}
}

// readAll reads every file of want from ws: nil, or the first error, and
// the names that failed.
func readFiles(t *testing.T, ws *workspace.Workspace, want map[string][]byte) (failed map[string]error) {
	t.Helper()
	failed = map[string]error{}
	for name, data := range want {
		a, err := ws.Lookup(workspace.RootIno, name)
		if err != nil {
			t.Fatalf("lookup %s: %v", name, err)
		}
		h, err := ws.OpenFile(a.Ino, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data)+1)
		n, err := h.ReadAt(got, 0)
		h.Release()
		if n > len(data) || string(got[:n]) != string(data[:n]) {
			t.Fatalf("%s: the %d bytes read differ from those written: wrong bytes", name, n)
		}
		if err != nil && (n < len(data) || err != io.EOF) {
			failed[name] = err // a short read up to the chunk that failed
			continue
		}
		if n != len(data) {
			t.Fatalf("%s: %d bytes differ from the %d written: wrong bytes", name, n, len(data))
		}
	}
	return failed
}

// TestLazyPull against a real S3 server: a lazy pull fetches no object;
// the workspace opens and each first read fetches and verifies its objects;
// Prefetch makes the rest local, syncs them and removes the FetchState.
func TestLazyPull(t *testing.T) {
	srv := s3test.Start(t)
	e, st, g := shipped(t, srv, "lazy")
	h := pullLazy(t, st)
	fst, ok, err := ReadFetchState(vfs.Default, h.dir)
	if err != nil || !ok || fst.Group != g || len(fst.Objects) == 0 {
		t.Fatalf("FetchState after a lazy pull: %+v, %v, %v", fst, ok, err)
	}
	ids, _ := fst.IDs()
	for _, id := range ids {
		if ok, _ := h.pool.Has(id); ok {
			t.Fatalf("object %s is local after a lazy pull", id)
		}
	}
	ws, err := workspace.Open(workspace.Options{Dir: h.dir, Pool: h.pool})
	if err != nil {
		t.Fatal(err)
	}
	if failed := readFiles(t, ws, e.files[g]); len(failed) > 0 {
		t.Fatalf("reads failed: %v", failed)
	}
	ws.Close()
	if s := h.pool.FetchStats(); s.Fetched == 0 || s.Failed != 0 {
		t.Fatalf("fetch stats after the reads: %+v", s)
	}
	var prog PrefetchProgress
	if err := Prefetch(context.Background(), PrefetchOptions{Dir: h.dir, Pool: h.pool}, &prog); err != nil {
		t.Fatal(err)
	}
	if s := prog.Status(); !s.Done || s.Local != int64(len(ids)) || s.Objects != int64(len(ids)) {
		t.Fatalf("prefetch status %+v, want done with %d local", s, len(ids))
	}
	if _, ok, _ := ReadFetchState(vfs.Default, h.dir); ok {
		t.Fatal("the FetchState is still there after a complete prefetch")
	}
	for _, id := range ids {
		if ok, _ := h.pool.Has(id); !ok {
			t.Fatalf("object %s is not local after the prefetch", id)
		}
	}
}

// TestLazyPullFaults: an object corrupted in the bucket makes the reads of
// the files that reference it fail (a corrupt *pool.FetchError, never wrong
// bytes) while the rest of the tree reads; with the remote down, first
// reads fail with a *pool.FetchError and succeed once it is back; the
// prefetch retries what failed and finishes once it can.
func TestLazyPullFaults(t *testing.T) {
	srv := s3test.Start(t)
	e, st, g := shipped(t, srv, "lazyfaults")
	h := pullLazy(t, st)
	fst, _, _ := ReadFetchState(vfs.Default, h.dir)
	ids, _ := fst.IDs()
	ctx := context.Background()

	// Corrupt one object in the bucket (rewritten through the S3 API, so
	// that the test runs on every engine).
	bad := ids[0]
	key := remote.ObjectKey(bad.String())
	orig, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte(nil), orig...)
	b[len(b)/2] ^= 0xff
	if err := st.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(workspace.Options{Dir: h.dir, Pool: h.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	failed := readFiles(t, ws, e.files[g])
	if len(failed) == 0 {
		t.Fatal("no read failed with a corrupt object in the bucket")
	}
	for name, err := range failed {
		var fe *pool.FetchError
		if !errors.As(err, &fe) || !fe.Corrupt || fe.ID != bad {
			t.Errorf("read of %s: %v, want a corrupt *pool.FetchError naming %s", name, err, bad)
		}
	}
	if len(failed) == len(e.files[g]) && len(ids) > 1 {
		t.Error("every read failed, not only those of the corrupt object")
	}
	if ok, _ := h.pool.Has(bad); ok {
		t.Error("the corrupt copy was published in the local pool")
	}
	if err := st.Put(ctx, key, orig); err != nil {
		t.Fatal(err)
	}

	// The remote down: a fresh host's first reads fail, then succeed.
	h2 := pullLazy(t, st)
	down := errors.New("dial tcp: connection refused (injected)")
	var isDown atomic.Bool
	isDown.Store(true)
	h2.faulty.Hook = func(op, key string, n int) error {
		if isDown.Load() {
			return down
		}
		return nil
	}
	ws2, err := workspace.Open(workspace.Options{Dir: h2.dir, Pool: h2.pool})
	if err != nil {
		t.Fatalf("open with the remote down: %v", err)
	}
	defer ws2.Close()
	failed = readFiles(t, ws2, e.files[g])
	if len(failed) == 0 {
		t.Fatal("no read failed with the remote down")
	}
	for name, err := range failed {
		var fe *pool.FetchError
		if !errors.As(err, &fe) || fe.Corrupt || !errors.Is(err, down) {
			t.Errorf("read of %s with the remote down: %v, want a *pool.FetchError wrapping the remote's error", name, err)
		}
	}
	// The prefetch meanwhile retries until the remote is back.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var prog PrefetchProgress
	done := make(chan error, 1)
	go func() {
		done <- Prefetch(pctx, PrefetchOptions{Dir: h2.dir, Pool: h2.pool, Retry: 50 * time.Millisecond}, &prog)
	}()
	deadline := time.Now().Add(time.Minute)
	for prog.Status().Failed == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	isDown.Store(false)
	if failed := readFiles(t, ws2, e.files[g]); len(failed) > 0 {
		t.Fatalf("reads after the remote is back: %v", failed)
	}
	if err := <-done; err != nil {
		t.Fatalf("prefetch: %v", err)
	}
	if s := prog.Status(); !s.Done || s.Local != int64(len(ids)) {
		t.Fatalf("prefetch status %+v", s)
	}
}

// TestShipperRemoteOnly: the shipper of a lazily pulled workspace does not
// try to upload objects the host has not fetched (it has none of them):
// with a refresh age of zero, every object counts as old, and a round
// still succeeds, counting them remote-only.
func TestShipperRemoteOnly(t *testing.T) {
	srv := s3test.Start(t)
	_, st, g := shipped(t, srv, "remoteonly")
	h := pullLazy(t, st)
	// The shipper's own pool: no Fetcher (as in `wsfs ship`).
	p, err := pool.Open(vfs.Default, filepath.Join(h.root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(workspace.Options{Dir: h.dir, Pool: h.pool, CheckpointBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A new group on host B (its checkpoint references every pulled object).
	if _, err := ws.Create(workspace.RootIno, "on-b", namespace.S_IFREG|0o644, workspace.Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := ws.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	// CompactBatches 1: the round ships the local checkpoint (the pulled
	// tree's), which references every pulled object.
	sh := New(Options{Dir: h.dir, Name: "ws", Pool: p, Store: st, RefreshAfter: time.Nanosecond, CompactBatches: 1})
	got, err := sh.Round(context.Background())
	if err != nil {
		t.Fatalf("round of a lazily pulled workspace: %v", err)
	}
	if got <= g {
		t.Fatalf("shipped group %d, want past the pulled %d", got, g)
	}
	if s := sh.Stats(); s.ObjectsRemoteOnly == 0 || s.ObjectsUploaded != 0 || s.Checkpoints != 1 {
		t.Fatalf("stats %+v: want remote-only objects counted and none uploaded", s)
	}
	// And the remote still restores, with every object there.
	verify := pullLazy(t, st)
	fst, _, _ := ReadFetchState(vfs.Default, verify.dir)
	ids, _ := fst.IDs()
	for _, id := range ids {
		if ok, err := st.Exists(context.Background(), remote.ObjectKey(id.String())); err != nil || !ok {
			t.Fatalf("object %s: exists %v, %v", id, ok, err)
		}
	}
}

// TestFetchStateGolden: the version 1 encoding stays readable.
func TestFetchStateGolden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "fetchstate-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeFetchState(b)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := st.IDs()
	if st.Group != 7 || len(ids) != 2 || ids[1].String() != strings.Repeat("0", 63)+"1" || !strings.HasPrefix(st.Remote, "s3://wsfs-test/lazy?") {
		t.Fatalf("decoded %+v", st)
	}
	if _, err := remote.ParseURL(st.Remote); err != nil {
		t.Fatal(err)
	}
}

// FuzzFetchState: any bytes decode to an error or to a state whose
// objects all parse; nothing panics.
func FuzzFetchState(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "fetchstate-v1.json")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"objects":["zz"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeFetchState(b)
		if err != nil {
			return
		}
		if _, err := st.IDs(); err != nil {
			t.Fatalf("decoded state with bad objects: %v", err)
		}
	})
}

// TestPrefetchHealsTorn: an object fetched on read but torn by a crash
// before anything synced it (same size, wrong bytes) is fetched again by
// the next process's prefetch, which then finishes.
func TestPrefetchHealsTorn(t *testing.T) {
	srv := s3test.Start(t)
	_, st, _ := shipped(t, srv, "torn")
	h := pullLazy(t, st)
	fst, _, _ := ReadFetchState(vfs.Default, h.dir)
	ids, _ := fst.IDs()
	id := ids[0]
	want, err := h.pool.ReadAll(id) // fetched on read, not synced
	if err != nil {
		t.Fatal(err)
	}
	path := h.pool.Path(id)
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, len(want)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The next process.
	p2, err := pool.Open(vfs.Default, filepath.Join(h.root, "pool"), pool.Options{Fetcher: &RemoteFetcher{Store: st}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Prefetch(context.Background(), PrefetchOptions{Dir: h.dir, Pool: p2}, nil); err != nil {
		t.Fatalf("prefetch over a torn object: %v", err)
	}
	p3, err := pool.Open(vfs.Default, filepath.Join(h.root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p3.ReadAll(id); err != nil || string(got) != string(want) {
		t.Fatalf("the torn object after the prefetch: %v", err)
	}
}
