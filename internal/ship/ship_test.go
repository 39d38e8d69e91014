package ship

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/namespace"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// env is one workspace on a host directory, plus the oracle: the tree
// (and file contents) after every committed group.
type env struct {
	t       *testing.T
	root    string
	pool    *pool.Pool
	ws      *workspace.Workspace
	dumps   map[uint64][]namespace.DumpEntry // group -> Dump
	files   map[uint64]map[string][]byte     // group -> path -> content
	live    map[string][]byte
	ino     map[string]workspace.Ino
	rng     *rand.Rand
	n       int
	segSize int64
}

func newEnv(t *testing.T, seed uint64) *env { return newEnvSeg(t, seed, 16<<10) }

// newEnvSeg is newEnv with segments of segSize bytes.
func newEnvSeg(t *testing.T, seed uint64, segSize int64) *env {
	t.Helper()
	root := t.TempDir()
	p, err := pool.Open(vfs.Default, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, root: root, pool: p, dumps: map[uint64][]namespace.DumpEntry{}, files: map[uint64]map[string][]byte{},
		live: map[string][]byte{}, ino: map[string]workspace.Ino{}, rng: rand.New(rand.NewPCG(seed, 7)), segSize: segSize}
	e.open()
	e.commit()
	return e
}

func (e *env) dir() string { return filepath.Join(e.root, "state", "workspaces", "ws") }

func (e *env) open() {
	ws, err := workspace.Open(workspace.Options{Dir: e.dir(), Pool: e.pool,
		GroupWindow: time.Hour, GroupRecords: 100000,
		// Small segments and checkpoints: the shipper meets rollover,
		// checkpoints and deleted segments in a short test.
		SegmentSize: e.segSize, CheckpointBytes: 48 << 10, ChunkSize: 256 << 10})
	if err != nil {
		e.t.Fatal(err)
	}
	e.ws = ws
}

// commit makes everything durable (one group) and records the oracle.
func (e *env) commit() uint64 {
	if err := e.ws.Sync(); err != nil {
		e.t.Fatal(err)
	}
	g := e.ws.Stats().CommittedGroup
	e.dumps[g] = e.ws.Dump()
	snap := map[string][]byte{}
	for k, v := range e.live {
		snap[k] = v
	}
	e.files[g] = snap
	return g
}

// step changes a few files: new ones of mixed sizes (inline, one object,
// chunked), overwrites, deletes.
func (e *env) step() {
	for range 1 + e.rng.IntN(4) {
		e.n++
		switch {
		case len(e.live) > 3 && e.rng.IntN(4) == 0:
			for name := range e.live {
				if err := e.ws.Unlink(workspace.RootIno, name); err != nil {
					e.t.Fatal(err)
				}
				delete(e.live, name)
				delete(e.ino, name)
				break
			}
		default:
			name := fmt.Sprintf("f%03d", e.rng.IntN(40))
			sizes := []int{100, 3000, 70 << 10, 300 << 10, 600 << 10}
			data := make([]byte, sizes[e.rng.IntN(len(sizes))])
			for i := 0; i < len(data); i += 8 {
				v := e.rng.Uint64()
				for j := i; j < i+8 && j < len(data); j++ {
					data[j] = byte(v >> (8 * (j - i)))
				}
			}
			e.write(name, data)
		}
	}
}

// write replaces the content of file name (created if new) with data.
func (e *env) write(name string, data []byte) {
	e.t.Helper()
	ino, ok := e.ino[name]
	if !ok {
		a, err := e.ws.Create(workspace.RootIno, name, namespace.S_IFREG|0o644, workspace.Caller{})
		if err != nil {
			e.t.Fatal(err)
		}
		ino = a.Ino
		e.ino[name] = ino
	}
	h, err := e.ws.OpenFile(ino, syscall.O_RDWR)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.ws.SetAttr(ino, workspace.SetAttrIn{Size: ptr(uint64(0))}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := h.WriteAt(data, 0); err != nil {
		e.t.Fatal(err)
	}
	if err := h.Flush(); err != nil {
		e.t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		e.t.Fatal(err)
	}
	e.live[name] = data
}

func ptr[T any](v T) *T { return &v }

// verifyPull pulls into a fresh host and checks that the restored
// workspace is the oracle's state at the pulled group, file by file.
func (e *env) verifyPull(st remote.Store, want uint64) uint64 {
	e.t.Helper()
	root := e.t.TempDir()
	p, err := pool.Open(vfs.Default, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	dir := filepath.Join(root, "state", "workspaces", "ws")
	res, err := Pull(context.Background(), PullOptions{Store: st, Name: "ws", Dir: dir, Pool: p})
	if want == 0 && errors.Is(err, ErrNotShipped) {
		return 0 // nothing shipped yet: the empty prefix
	}
	if err != nil {
		e.t.Fatalf("pull: %v", err)
	}
	if want != 0 && res.Group != want {
		e.t.Fatalf("pulled group %d, want %d", res.Group, want)
	}
	dump, ok := e.dumps[res.Group]
	if !ok {
		e.t.Fatalf("pulled group %d, which is not a committed group the oracle knows", res.Group)
	}
	ws, err := workspace.Open(workspace.Options{Dir: dir, Pool: p})
	if err != nil {
		e.t.Fatalf("open pulled workspace: %v", err)
	}
	defer ws.Close()
	if got := ws.Dump(); namespace.DumpString(got) != namespace.DumpString(dump) {
		e.t.Fatalf("pulled tree at group %d differs:\n%s", res.Group, namespace.DiffDumps(dump, got))
	}
	for name, data := range e.files[res.Group] {
		a, err := ws.Lookup(workspace.RootIno, name)
		if err != nil {
			e.t.Fatalf("pulled: lookup %s: %v", name, err)
		}
		h, err := ws.OpenFile(a.Ino, 0)
		if err != nil {
			e.t.Fatal(err)
		}
		got := make([]byte, len(data)+1)
		n, _ := h.ReadAt(got, 0)
		h.Release()
		if !bytes.Equal(got[:n], data) {
			e.t.Fatalf("pulled group %d: %s differs (%d bytes, want %d)", res.Group, name, n, len(data))
		}
	}
	return res.Group
}

// TestShipAndPull ships a workload (rollover, checkpoints and deleted
// segments included) round by round and pulls it on a fresh host after
// each round: the remote is always exactly the last shipped group.
func TestShipAndPull(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "host-a")
	e := newEnv(t, 1)
	defer func() { e.ws.Close() }()
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st, CompactBatches: 4})
	ctx := context.Background()
	for i := 0; i < 12; i++ {
		for range 3 {
			e.step()
			e.commit()
		}
		if i < 3 {
			continue
		}
		if i == 3 {
			// The first round must find segments deleted after a
			// checkpoint (the daemon checkpoints in the background).
			for j := 0; ; j++ {
				seqs, err := seglog.ListSegments(vfs.Default, filepath.Join(e.dir(), "log"))
				if err != nil {
					t.Fatal(err)
				}
				if seqs[0] > 1 {
					break
				}
				if j == 500 {
					t.Fatal("no segment was deleted after 500 more steps")
				}
				e.step()
				e.commit()
				time.Sleep(time.Millisecond)
			}
		}
		g, err := sh.Round(ctx)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if want := e.ws.Stats().CommittedGroup; g != want {
			t.Fatalf("round %d shipped group %d, committed %d", i, g, want)
		}
		if i%4 == 3 {
			e.verifyPull(st, g)
		}
	}
	stats := sh.Stats()
	if stats.Merges == 0 {
		t.Errorf("no batch merge happened (stats %+v)", stats)
	}
	if stats.Checkpoints == 0 {
		t.Errorf("no checkpoint was shipped (stats %+v): the test should reach deleted segments", stats)
	}
	// A second host's shipper of the same bytes finds the objects present.
	sh2 := New(Options{Dir: e.dir(), Name: "ws2", Pool: e.pool, Store: st})
	if _, err := sh2.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if s2 := sh2.Stats(); s2.ObjectsUploaded != 0 || s2.ObjectsPresent == 0 {
		t.Errorf("second workspace of the same content uploaded %d objects, found %d present; want 0 and >0 (dedup by hash)", s2.ObjectsUploaded, s2.ObjectsPresent)
	}
	t.Logf("stats: %+v", stats)
}

// TestShipperFaults: an error injected before any one remote operation of
// a shipping history, with the shipper either retrying or restarted (a
// killed process), never leaves a remote that restores to anything but a
// committed group of the workspace, and never one that misses an object.
func TestShipperFaults(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	// Count the operations of a clean history.
	run := func(prefix string, failAt int, restart bool) (ops int) {
		e := newEnv(t, 2)
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
		newShipper := func() *Shipper {
			// CompactBatches 3: checkpoints and batch merges happen
			// under faults too.
			return New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f, CompactBatches: 3})
		}
		sh := newShipper()
		for i := 0; i < 6; i++ {
			e.step()
			e.commit()
			if i == 2 {
				// Enough log for a checkpoint and deleted segments.
				for range 6 {
					e.step()
					e.commit()
				}
			}
			_, err := sh.Round(ctx)
			if err != nil {
				if !injected || !strings.Contains(err.Error(), "injected fault") {
					t.Fatalf("fail at %d: round %d: %v", failAt, i, err)
				}
				// The remote now holds some earlier state: it must restore.
				e.verifyPull(f.Store, 0)
				if restart {
					sh = newShipper()
				}
			}
		}
		// The fault is over: a last round ships everything.
		g, err := sh.Round(ctx)
		if err != nil {
			t.Fatalf("fail at %d: final round: %v", failAt, err)
		}
		e.verifyPull(f.Store, g)
		return f.Ops()
	}
	total := run("clean", -1, false)
	t.Logf("a clean history makes %d remote operations", total)
	stride := 1
	if testing.Short() {
		stride = 5 // -short: every fifth operation
	}
	for n := 0; n < total; n += stride {
		run(fmt.Sprintf("fault-%d", n), n, n%2 == 1)
	}
}

// TestHeadBounded: a trickle of small commits, one round each, keeps the
// head's batch list bounded (trailing small batches are merged), and the
// remote still restores exactly.
func TestHeadBounded(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "bounded")
	root := t.TempDir()
	p, err := pool.Open(vfs.Default, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, root: root, pool: p, dumps: map[uint64][]namespace.DumpEntry{}, files: map[uint64]map[string][]byte{},
		live: map[string][]byte{}, ino: map[string]workspace.Ino{}, rng: rand.New(rand.NewPCG(12, 7))}
	ws, err := workspace.Open(workspace.Options{Dir: e.dir(), Pool: p, GroupWindow: time.Hour, GroupRecords: 100000})
	if err != nil {
		t.Fatal(err)
	}
	e.ws = ws
	defer ws.Close()
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: p, Store: st, CompactBatches: 16})
	ctx := context.Background()
	most := 0
	for i := 0; i < 120; i++ {
		if _, err := ws.Create(workspace.RootIno, fmt.Sprintf("n%03d", i), namespace.S_IFREG|0o644, workspace.Caller{}); err != nil {
			t.Fatal(err)
		}
		e.commit()
		if _, err := sh.Round(ctx); err != nil {
			t.Fatal(err)
		}
		h, _, _ := ReadHead(ctx, st, "ws")
		most = max(most, len(h.Batches))
	}
	if most > 16 {
		t.Errorf("the head listed up to %d batches, want at most 16", most)
	}
	if sh.Stats().Merges == 0 {
		t.Error("no merge")
	}
	e.verifyPull(st, ws.Stats().CommittedGroup)
}

// TestShipRefusesDivergedLog: a log whose group at the remote head's
// number holds other records than the group shipped (another history with
// the same group numbers) ships nothing and fails for good, naming the
// divergence; the log that was shipped, read by a new shipper, verifies
// and ships on.
func TestShipRefusesDivergedLog(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "diverged")
	ctx := context.Background()
	a := newEnvSeg(t, 1, 64<<20)
	defer func() { a.ws.Close() }()
	for range 4 {
		a.step()
		a.commit()
	}
	shipped, err := New(Options{Dir: a.dir(), Name: "ws", Pool: a.pool, Store: st}).Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, _, ok, err := readHead(ctx, st, "ws")
	if err != nil || !ok || h.Group != shipped || h.LastDigest == "" {
		t.Fatalf("head after the round: %+v %v %v", h, ok, err)
	}

	b := newEnvSeg(t, 2, 64<<20) // same group numbers, other records
	defer func() { b.ws.Close() }()
	for b.ws.Stats().CommittedGroup < shipped+2 {
		b.step()
		b.commit()
	}
	sb := New(Options{Dir: b.dir(), Name: "ws", Pool: b.pool, Store: st})
	for range 2 { // and it stays failed
		if _, err := sb.Round(ctx); err == nil || !strings.Contains(err.Error(), "two different histories") {
			t.Fatalf("round of a diverged log: %v; want a refusal naming the divergence", err)
		}
	}
	if h2, _, _, err := readHead(ctx, st, "ws"); err != nil || h2.Group != shipped || h2.LastDigest != h.LastDigest {
		t.Fatalf("head after the refused rounds: %+v, %v; want it unchanged at group %d", h2, err, shipped)
	}

	// The shipped log itself, by a restarted shipper, ships on.
	a.step()
	want := a.commit()
	g, err := New(Options{Dir: a.dir(), Name: "ws", Pool: a.pool, Store: st}).Round(ctx)
	if err != nil || g != want {
		t.Fatalf("restarted shipper of the shipped log: group %d, %v; want %d", g, err, want)
	}
	a.verifyPull(st, want)
}
