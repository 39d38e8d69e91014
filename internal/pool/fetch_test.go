package pool

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/vfs"
)

// mapFetcher serves objects from a map; gate, if set, blocks every Fetch
// until it is closed; err, if set, fails every Fetch.
type mapFetcher struct {
	mu    sync.Mutex
	objs  map[ID][]byte
	calls atomic.Int64
	gate  chan struct{}
	err   error
}

func (f *mapFetcher) Fetch(id ID) ([]byte, error) {
	f.calls.Add(1)
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	b, ok := f.objs[id]
	if !ok {
		return nil, errors.New("no such object in the test source")
	}
	return bytes.Clone(b), nil
}

func (f *mapFetcher) String() string { return "test source" }

func readObject(t *testing.T, p *Pool, id ID) ([]byte, error) {
	t.Helper()
	f, err := p.Open(id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
}

// TestFetch: an object that is not local is fetched on first read by
// every read path, verified and published (then local); a corrupt source
// copy, a failing source and a missing source object are a *FetchError and
// publish nothing; a corrupt local object is replaced from the source.
func TestFetch(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			good := content(1, 300<<10)
			id := objid.Sum(good)
			src := &mapFetcher{objs: map[ID][]byte{id: good}}
			p := openPool(t, fsys, dir, Options{Fetcher: src})

			for _, read := range []struct {
				name string
				fn   func() ([]byte, error)
			}{
				{"Open", func() ([]byte, error) { return readObject(t, p, id) }},
				{"ReadAll", func() ([]byte, error) { return p.ReadAll(id) }},
				{"Protect", func() ([]byte, error) {
					if err := p.Protect(id); err != nil {
						return nil, err
					}
					return p.ReadAll(id)
				}},
				{"SyncObjects", func() ([]byte, error) {
					if err := p.SyncObjects([]ID{id}, 1); err != nil {
						return nil, err
					}
					return p.ReadAll(id)
				}},
			} {
				if err := fsys.Remove(p.Path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
				before := src.calls.Load()
				got, err := read.fn()
				if err != nil || !bytes.Equal(got, good) {
					t.Fatalf("%s of a remote-only object: %d bytes, %v", read.name, len(got), err)
				}
				if n := src.calls.Load() - before; n != 1 {
					t.Errorf("%s: %d fetches, want 1", read.name, n)
				}
				if ok, _ := p.Has(id); !ok {
					t.Errorf("%s: the fetched object is not local", read.name)
				}
				// Local now: no second fetch.
				if _, err := p.ReadAll(id); err != nil || src.calls.Load()-before != 1 {
					t.Errorf("%s: second read: %v, %d fetches", read.name, err, src.calls.Load()-before)
				}
			}

			// A corrupt copy at the source: EIO-worthy error, nothing published.
			bad := content(2, 1000)
			badID := objid.Sum(bad)
			src.objs[badID] = append(bytes.Clone(bad[:999]), bad[999]^1)
			_, err := readObject(t, p, badID)
			var fe *FetchError
			if !errors.As(err, &fe) || !fe.Corrupt || fe.ID != badID {
				t.Fatalf("read of an object whose source copy is corrupt: %v, want a corrupt *FetchError", err)
			}
			if ok, _ := p.Has(badID); ok {
				t.Error("the corrupt source copy was published")
			}
			// The source repaired: the next read succeeds.
			src.objs[badID] = bad
			if got, err := p.ReadAll(badID); err != nil || !bytes.Equal(got, bad) {
				t.Fatalf("read after the source was repaired: %v", err)
			}

			// A failing source, then the source is back.
			other := content(3, 5000)
			otherID := objid.Sum(other)
			src.objs[otherID] = other
			src.err = errors.New("connection refused")
			if _, err := p.ReadAll(otherID); !errors.As(err, &fe) || fe.Corrupt || !errors.Is(err, src.err) {
				t.Fatalf("read with the source down: %v, want a *FetchError wrapping its error", err)
			}
			src.err = nil
			if got, err := p.ReadAll(otherID); err != nil || !bytes.Equal(got, other) {
				t.Fatalf("read with the source back: %v", err)
			}

			// A corrupt local object is replaced from the source.
			path := p.Path(otherID)
			p2 := openPool(t, fsys, dir, Options{Fetcher: src}) // a fresh process: nothing verified
			if err := fsys.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := vfs.Publish(fsys, path, false, func(f vfs.File) error {
				_, err := f.Write(bytes.Repeat([]byte{'x'}, len(other)))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if got, err := readObject(t, p2, otherID); err != nil || !bytes.Equal(got, other) {
				t.Fatalf("read of a corrupt local object with a source: %v", err)
			}
			fsck(t, fsys, dir, 0)
		})
	}
}

// TestFetchShared: concurrent readers of one missing object share one
// fetch, and all get the bytes.
func TestFetchShared(t *testing.T) {
	fsys, dir := fsCases[1].new(t)
	data := content(4, 200<<10)
	id := objid.Sum(data)
	src := &mapFetcher{objs: map[ID][]byte{id: data}, gate: make(chan struct{})}
	p := openPool(t, fsys, dir, Options{Fetcher: src})
	const readers = 8
	errs := make(chan error, readers)
	for range readers {
		go func() {
			got, err := p.ReadAll(id)
			if err == nil && !bytes.Equal(got, data) {
				err = errors.New("wrong bytes")
			}
			errs <- err
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.FetchStats().Shared < readers-1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(src.gate)
	for range readers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d fetches for %d concurrent readers, want 1", n, readers)
	}
	if st := p.FetchStats(); st.Fetched != 1 || st.Shared != readers-1 || st.InFlight != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestFetchPutMakesLocal: a Put of identical bytes makes a remote-only
// object local without a fetch; a pool without a Fetcher reports a missing
// object as before.
func TestFetchPutMakesLocal(t *testing.T) {
	fsys, dir := fsCases[1].new(t)
	data := content(5, 70<<10)
	id := objid.Sum(data)
	src := &mapFetcher{objs: map[ID][]byte{}}
	p := openPool(t, fsys, dir, Options{Fetcher: src})
	if _, dedup, err := p.Put(data); err != nil || dedup {
		t.Fatalf("Put: dedup %v, %v", dedup, err)
	}
	if got, err := p.ReadAll(id); err != nil || !bytes.Equal(got, data) || src.calls.Load() != 0 {
		t.Fatalf("read after Put: %v, %d fetches", err, src.calls.Load())
	}
	plain := openPool(t, fsys, dir, Options{})
	missing := objid.Sum([]byte("never stored"))
	var me *MissingObjectError
	if _, err := plain.ReadAll(missing); !errors.As(err, &me) {
		t.Fatalf("ReadAll of a missing object without a Fetcher: %v", err)
	}
	if err := plain.Fetch(missing); !errors.As(err, &me) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Fetch without a Fetcher: %v", err)
	}
}
