package commit

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
)

// These tests run the committer over the real segment log and content pool
// on the crashable in-memory FS, and check what a crash would leave.

// Under a root directory: the log and the pool (MemFS tests use "/").
const (
	itLogDir  = "state/log"
	itPoolDir = "pool"
)

// workload is a sequence of records, a third of them referencing a pool
// object (some objects shared, to exercise deduplication). Record data is
// "rec-<i>" or "rec-<i> obj=<id>".
type workload struct {
	records []string
	content map[objid.ID][]byte
}

func objectContent(i int) []byte {
	// 1 to 3 KiB, distinct for i%10 (so every tenth object deduplicates).
	return bytes.Repeat([]byte(fmt.Sprintf("object %d;", i%10)), 100+(i%3)*100)
}

// put publishes content for record i (if it has an object) and returns its
// Record.
func (w *workload) put(t *testing.T, p *pool.Pool, i int) Record {
	t.Helper()
	data := fmt.Sprintf("rec-%d", i)
	if i%3 != 0 {
		w.records = append(w.records, data)
		return Record{Data: []byte(data)}
	}
	content := objectContent(i)
	id, _, err := p.Put(content)
	if err != nil {
		t.Fatalf("pool Put: %v", err)
	}
	w.content[id] = content
	data += " obj=" + id.String()
	w.records = append(w.records, data)
	return Record{Data: []byte(data), Objects: []objid.ID{id}}
}

// recovered is what a crash left: the records of the log in order.
type recovered struct {
	records []string
}

// recoverState opens the log and the pool of a crash clone, replays the log,
// and checks that every object a recovered record references reads back
// verified with the content that was written.
func recoverState(fsys vfs.FS, root string, content map[objid.ID][]byte) (recovered, error) {
	var r recovered
	l, err := seglog.Open(fsys, filepath.Join(root, itLogDir), seglog.Options{})
	if err != nil {
		return r, fmt.Errorf("open log: %w", err)
	}
	defer l.Close()
	if err := l.Replay(0, func(_ uint64, records [][]byte) error {
		for _, rec := range records {
			r.records = append(r.records, string(rec))
		}
		return nil
	}); err != nil {
		return r, fmt.Errorf("replay: %w", err)
	}
	p, err := pool.Open(fsys, filepath.Join(root, itPoolDir), pool.Options{})
	if err != nil {
		return r, fmt.Errorf("open pool: %w", err)
	}
	for _, rec := range r.records {
		_, hexID, ok := strings.Cut(rec, " obj=")
		if !ok {
			continue
		}
		id, err := objid.Parse(hexID)
		if err != nil {
			return r, fmt.Errorf("record %q: %w", rec, err)
		}
		got, err := p.ReadAll(id)
		if err != nil {
			return r, fmt.Errorf("record %q is in the log but its object is not durable: %w", rec, err)
		}
		if !bytes.Equal(got, content[id]) {
			return r, fmt.Errorf("record %q: object content differs", rec)
		}
	}
	return r, nil
}

// checkPrefix checks that got is a prefix of want at least acked long.
func checkPrefix(got, want []string, acked int) error {
	if len(got) > len(want) {
		return fmt.Errorf("recovered %d records, only %d were enqueued", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("recovered record %d is %q; want %q (not a prefix)", i, got[i], want[i])
		}
	}
	if len(got) < acked {
		return fmt.Errorf("recovered %d records, but %d were acknowledged durable", len(got), acked)
	}
	return nil
}

func openReal(t *testing.T, fsys vfs.FS, root string) (*seglog.Log, *pool.Pool) {
	t.Helper()
	p, err := pool.Open(fsys, filepath.Join(root, itPoolDir), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := seglog.Open(fsys, filepath.Join(root, itLogDir), seglog.Options{SegmentSize: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, p
}

// TestCrashAfterBarrier commits a workload through the real log and pool on
// MemFS and takes a crash image after every durability-relevant operation. Every
// image must recover to a prefix of the enqueued records that holds every
// record acknowledged by Barrier when the image was taken, and every
// recovered record's object must read back verified (drain before append).
// After the final Barrier, the image must hold every record.
func TestCrashAfterBarrier(t *testing.T) {
	for _, drain := range []Drain{DrainEntry, DrainSyncFS} {
		t.Run(drain.String(), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			l, p := openReal(t, mem, "/")
			w := &workload{content: make(map[objid.ID][]byte)}

			var acked atomic.Int64 // records acknowledged by a Barrier
			type image struct {
				fs    *vfs.MemFS
				acked int
			}
			var mu sync.Mutex
			var images []image
			// An image after every durability-relevant operation of
			// anyone: the committer's syncs, and the writer's
			// publications between Barriers.
			mem.SetHook(func(op vfs.Op, path string) {
				a := int(acked.Load()) // read before the clone: a lower bound
				img := mem.CrashClone()
				mu.Lock()
				images = append(images, image{img, a})
				mu.Unlock()
			})

			c := New(l, p, Options{
				MaxRecords:  7,
				Window:      time.Millisecond,
				Drain:       drain,
				StateSyncFS: func() error { return mem.SyncFS("/" + itLogDir) },
				Logger:      slog.New(slog.DiscardHandler),
			})
			const n = 120
			for i := range n {
				if _, err := enqueue(c, w.put(t, p, i)); err != nil {
					t.Fatal(err)
				}
				if i%10 == 9 {
					mustBarrier(t, c)
					acked.Store(int64(i + 1))
					// The contract itself: a crash right after
					// Barrier returns keeps every record before it.
					img := mem.CrashClone()
					mu.Lock()
					images = append(images, image{img, i + 1})
					mu.Unlock()
				}
			}
			mustBarrier(t, c)
			acked.Store(n)
			mem.SetHook(nil)

			final, err := recoverState(mem.CrashClone(), "/", w.content)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "records after the final Barrier", final.records, w.records)

			mu.Lock()
			defer mu.Unlock()
			if len(images) < n/7 {
				t.Fatalf("only %d crash images taken", len(images))
			}
			for i, img := range images {
				r, err := recoverState(img.fs, "/", w.content)
				if err == nil {
					err = checkPrefix(r.records, w.records, img.acked)
				}
				if err != nil {
					t.Fatalf("crash image %d of %d: %v", i+1, len(images), err)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestObjectSyncFailureRepublishes injects EIO into the first fdatasync of
// a pool object: the Barrier fails with EIO, the committer republishes the
// object, the retry commits, and a crash image then holds the records and
// the verified object.
func TestObjectSyncFailureRepublishes(t *testing.T) {
	mem := vfs.NewCrashableMem()
	rule := errorfs.OnNth(vfs.OpSyncData, "/pool/objects/", 1, syscall.EIO)
	fsys := errorfs.Wrap(mem, rule)
	l, p := openReal(t, fsys, "/")
	w := &workload{content: make(map[objid.ID][]byte)}
	out := &lockedBuffer{}
	c := New(l, p, Options{Window: time.Hour, Logger: slog.New(slog.NewTextHandler(out, nil))})
	defer c.Close()

	var last Ticket
	for i := range 6 {
		last = mustEnqueue(t, c, w.put(t, p, i))
	}
	first := make(chan error, 1)
	go func() { first <- c.Wait(ctxT(t), last) }()
	waitWaiters(t, c, 1) // registered before the first attempt
	if err := c.Barrier(ctxT(t)); err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("Barrier = %v", err) // nil if it came after the retry
	}
	err := <-first
	var derr *DrainError
	if !errors.As(err, &derr) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("waiter of a failing object sync got %v; want a *DrainError matching EIO", err)
	}
	if rule.Injected() != 1 {
		t.Fatalf("fault injected %d times; want 1", rule.Injected())
	}
	mustBarrier(t, c)
	r, err := recoverState(mem.CrashClone(), "/", w.content)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "records", r.records, w.records)
	if !strings.Contains(out.String(), "level=ERROR") {
		t.Fatalf("the failed drain was not logged as an error:\n%s", out)
	}
}

// TestLogSyncFailureIsFinal injects EIO into the log's fdatasync: the
// committer fails for good and never syncs the log again.
func TestLogSyncFailureIsFinal(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var armed atomic.Bool
	var failedSyncs atomic.Int32 // log syncs attempted once armed
	fsys := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
		if armed.Load() && op == vfs.OpSyncData && strings.HasSuffix(path, ".seg") {
			failedSyncs.Add(1)
			return syscall.EIO
		}
		return nil
	}))
	l, p := openReal(t, fsys, "/")
	w := &workload{content: make(map[objid.ID][]byte)}
	c := New(l, p, Options{Window: time.Hour, Logger: slog.New(slog.DiscardHandler)})

	mustEnqueue(t, c, w.put(t, p, 1))
	mustBarrier(t, c)
	armed.Store(true)
	mustEnqueue(t, c, w.put(t, p, 2))
	err := c.Barrier(ctxT(t))
	var ferr *FailedError
	if !errors.As(err, &ferr) || ferr.Op != "log sync" || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Barrier over a failing log sync = %v; want a *FailedError of the log sync", err)
	}
	if _, err := enqueue(c, w.put(t, p, 4)); !errors.Is(err, ferr) {
		t.Fatalf("Enqueue after the failure = %v", err)
	}
	if err := c.Close(); !errors.Is(err, ferr) {
		t.Fatalf("Close = %v", err)
	}
	if n := failedSyncs.Load(); n != 1 {
		t.Fatalf("the log sync was attempted %d times after the fault; want 1 (no retry)", n)
	}
	r, err := recoverState(mem.CrashClone(), "/", w.content)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPrefix(r.records, w.records, 1); err != nil {
		t.Fatal(err)
	}
}

// TestRealDisk runs both drains over the real log and pool on the OS file
// system (vfs.Default) and reads everything back after Close. It cannot
// crash the machine; it checks that the OS paths (fdatasync of objects and
// directories, syncfs) work end to end.
func TestRealDisk(t *testing.T) {
	for _, drain := range []Drain{DrainEntry, DrainSyncFS} {
		t.Run(drain.String(), func(t *testing.T) {
			root := t.TempDir()
			fsys := vfs.Default
			l, p := openReal(t, fsys, root)
			w := &workload{content: make(map[objid.ID][]byte)}
			c := New(l, p, Options{
				MaxRecords:  8,
				Window:      time.Millisecond,
				Drain:       drain,
				StateSyncFS: func() error { return fsys.SyncFS(filepath.Join(root, itLogDir)) },
				Logger:      slog.New(slog.DiscardHandler),
			})
			for i := range 40 {
				mustEnqueue(t, c, w.put(t, p, i))
				if i%16 == 15 {
					mustBarrier(t, c)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := recoverState(fsys, root, w.content)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "records", r.records, w.records)
		})
	}
}
