package pool

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/vfs"
)

// fsCase is a file system the pool tests run on.
type fsCase struct {
	name string
	new  func(t *testing.T) (vfs.FS, string) // the FS and a pool directory on it
}

var fsCases = []fsCase{
	{"os", func(t *testing.T) (vfs.FS, string) { return vfs.Default, filepath.Join(t.TempDir(), "pool") }},
	{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewCrashableMem(), "/home/pool" }},
}

// content returns deterministic pseudo-random bytes.
func content(seed uint64, size int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func openPool(t *testing.T, fsys vfs.FS, dir string, opts Options) *Pool {
	t.Helper()
	p, err := Open(fsys, dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return p
}

// fsck checks the pool's invariants: every file under objects/ sits in the
// fan-out directory of its name, its content hashes to its name, and no
// temp is left in tmp/ (except those in allowTemps).
func fsck(t *testing.T, fsys vfs.FS, dir string, allowTemps int) {
	t.Helper()
	fans, err := fsys.List(filepath.Join(dir, objectsDir))
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	for _, fan := range fans {
		names, err := fsys.List(filepath.Join(dir, objectsDir, fan))
		if err != nil {
			t.Fatalf("fsck: %v", err)
		}
		for _, name := range names {
			id, err := objid.Parse(name)
			if err != nil || name[:fanoutDigits] != fan {
				t.Errorf("fsck: stray file %s/%s", fan, name)
				continue
			}
			data := readFile(t, fsys, filepath.Join(dir, objectsDir, fan, name))
			if objid.Sum(data) != id {
				t.Errorf("fsck: object %s does not hash to its name", name)
			}
		}
	}
	temps, err := fsys.List(filepath.Join(dir, tmpDir))
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if len(temps) > allowTemps {
		t.Errorf("fsck: %d temps left in tmp/ (%v), want at most %d", len(temps), temps, allowTemps)
	}
}

func readFile(t *testing.T, fsys vfs.FS, name string) []byte {
	t.Helper()
	f, err := fsys.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return data
}

// overwrite replaces the bytes of name (objects are 0444; the test is the
// disk going bad, so it bypasses the pool).
func overwrite(t *testing.T, fsys vfs.FS, name string, mutate func([]byte) []byte) {
	t.Helper()
	data := mutate(readFile(t, fsys, name))
	f, err := fsys.OpenReadWrite(name)
	if err != nil {
		t.Fatalf("open %s for writing: %v", name, err)
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
}

func TestPutDedupOpen(t *testing.T) {
	sizes := []int{0, 1, 4 << 10, 100_000}
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			p := openPool(t, fsys, dir, Options{})
			t.Cleanup(func() { fsck(t, fsys, dir, 0) })
			for i, size := range sizes {
				data := content(uint64(i), size)
				id, dedup, err := p.Put(data)
				if err != nil {
					t.Fatalf("Put(%d bytes): %v", size, err)
				}
				if dedup {
					t.Errorf("first Put(%d bytes): dedup = true", size)
				}
				if id != objid.Sum(data) {
					t.Errorf("Put returned %s, want Sum %s", id, objid.Sum(data))
				}
				s := id.String()
				if want := filepath.Join(dir, "objects", s[:1], s); p.Path(id) != want {
					t.Errorf("Path = %s, want %s", p.Path(id), want)
				}
				id2, dedup, err := p.Put(bytes.Clone(data))
				if err != nil || !dedup || id2 != id {
					t.Errorf("second Put = %s, %v, %v; want %s, true, nil", id2, dedup, err, id)
				}
				// A second process (pool instance) dedups too.
				q := openPool(t, fsys, dir, Options{})
				if _, dedup, err := q.Put(data); err != nil || !dedup {
					t.Errorf("Put from another pool instance: dedup=%v err=%v; want dedup", dedup, err)
				}
				for _, r := range []*Pool{p, q} {
					f, err := r.Open(id)
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					got, err := io.ReadAll(f)
					f.Close()
					if err != nil || !bytes.Equal(got, data) {
						t.Errorf("Open+ReadAll: %d bytes, err %v; want the %d bytes put", len(got), err, len(data))
					}
					got, err = r.ReadAll(id)
					if err != nil || !bytes.Equal(got, data) {
						t.Errorf("ReadAll: %d bytes, err %v; want the %d bytes put", len(got), err, len(data))
					}
				}
			}
		})
	}
}

func TestCorruptObject(t *testing.T) {
	tests := []struct {
		name   string
		mutate func([]byte) []byte
	}{
		{"flip a byte", func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }},
		{"truncate", func(b []byte) []byte { return b[:len(b)-1] }},
		{"zero-filled", func(b []byte) []byte { return make([]byte, len(b)) }},
		{"empty", func(b []byte) []byte { return nil }},
	}
	for _, fc := range fsCases {
		for _, tt := range tests {
			t.Run(fc.name+"/"+tt.name, func(t *testing.T) {
				fsys, dir := fc.new(t)
				p := openPool(t, fsys, dir, Options{})
				data := content(7, 50_000)
				id, _, err := p.Put(data)
				if err != nil {
					t.Fatal(err)
				}
				overwrite(t, fsys, p.Path(id), tt.mutate)

				// A process that has not verified the object yet.
				q := openPool(t, fsys, dir, Options{})
				f, err := q.Open(id)
				var ce *CorruptObjectError
				if !errors.As(err, &ce) {
					if f != nil {
						f.Close()
					}
					t.Fatalf("Open of a damaged object: err = %v, want *CorruptObjectError", err)
				}
				if ce.ID != id || ce.Path != p.Path(id) || !strings.Contains(err.Error(), "Put the original content again") {
					t.Errorf("CorruptObjectError = %+v / %q: want ID, Path and advice", ce, err)
				}
				// ReadAll always verifies, even in the process that wrote it.
				if got, err := p.ReadAll(id); !errors.As(err, &ce) {
					t.Fatalf("ReadAll of a damaged object = %d bytes, %v; want *CorruptObjectError", len(got), err)
				}
				// Republish cannot help: the bytes are lost.
				if err := q.Republish(id); !errors.As(err, &ce) {
					t.Fatalf("Republish of a damaged object: %v; want *CorruptObjectError", err)
				}
				// Putting the content again repairs it.
				if _, dedup, err := q.Put(data); err != nil || dedup {
					t.Fatalf("Put to repair: dedup=%v err=%v; want a fresh publication", dedup, err)
				}
				if got, err := openPool(t, fsys, dir, Options{}).ReadAll(id); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("after repair: ReadAll = %d bytes, %v", len(got), err)
				}
				fsck(t, fsys, dir, 0)
			})
		}
	}
}

// TestPutRepairsWrongSize: a Put that finds an object of another size (a
// crash left it short) replaces it without having read it first.
func TestPutRepairsWrongSize(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			p := openPool(t, fsys, dir, Options{})
			data := content(8, 30_000)
			id, _, err := p.Put(data)
			if err != nil {
				t.Fatal(err)
			}
			overwrite(t, fsys, p.Path(id), func(b []byte) []byte { return b[:100] })
			q := openPool(t, fsys, dir, Options{})
			if _, dedup, err := q.Put(data); err != nil || dedup {
				t.Fatalf("Put over a short object: dedup=%v err=%v; want repaired (dedup=false)", dedup, err)
			}
			fsck(t, fsys, dir, 0)
		})
	}
}

func TestMissingObject(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			p := openPool(t, fsys, dir, Options{})
			id := objid.Sum([]byte("never stored"))
			calls := map[string]func() error{
				"Open":        func() error { _, err := p.Open(id); return err },
				"ReadAll":     func() error { _, err := p.ReadAll(id); return err },
				"Protect":     func() error { return p.Protect(id) },
				"Republish":   func() error { return p.Republish(id) },
				"SyncObjects": func() error { return p.SyncObjects([]ID{id}, 1) },
			}
			for name, call := range calls {
				err := call()
				var me *MissingObjectError
				if !errors.As(err, &me) || me.ID != id || !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s of a missing object: %v; want *MissingObjectError for %s wrapping fs.ErrNotExist", name, err, id)
				}
			}
			var se *SyncError
			if err := p.SyncObjects([]ID{id}, 1); !errors.As(err, &se) || len(se.Republish) != 0 || len(se.Missing) != 1 || se.Missing[0] != id {
				t.Errorf("SyncObjects of a missing object: %v; want a SyncError listing it as missing, with nothing to republish", err)
			}
		})
	}
}

// fakeClock is a settable clock for GC tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestGC(t *testing.T) {
	const grace = time.Hour
	type object struct {
		name       string
		referenced bool
		touch      time.Duration // Protect at (start + touch) before GC; 0 = never
		wantKept   bool
	}
	objects := []object{
		{"referenced, old", true, 0, true},
		{"unreferenced, old", false, 0, false},
		{"unreferenced, protected recently", false, 2*time.Hour - time.Minute, true},
		{"unreferenced, protected before the grace period", false, 30 * time.Minute, false},
		{"referenced, protected recently", true, 2 * time.Hour, true},
	}
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			start := time.Now()
			clock := &fakeClock{t: start}
			p := openPool(t, fsys, dir, Options{Clock: clock.now})
			ids := make([]ID, len(objects))
			refs := make(map[ID]bool)
			for i, o := range objects {
				id, _, err := p.Put(content(uint64(100+i), 1000+i))
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = id
				refs[id] = o.referenced
				if o.touch != 0 {
					clock.t = start.Add(o.touch)
					if err := p.Protect(id); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Temps: one stale (left by a Put that crashed mid-write), one
			// fresh (a Put in progress).
			f, stale, err := p.createTemp(putPrefix)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("half a file")); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			f, fresh, err := p.createTemp(putPrefix)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			clock.t = start.Add(2 * time.Hour)
			if err := fsys.Chtimes(fresh, clock.t, clock.t); err != nil {
				t.Fatal(err)
			}

			st, err := p.GC(func(id ID) bool { return refs[id] }, grace)
			if err != nil {
				t.Fatalf("GC: %v", err)
			}
			wantRemoved := 0
			var wantBytes int64
			for i, o := range objects {
				_, err := fsys.Stat(p.Path(ids[i]))
				kept := err == nil
				if kept != o.wantKept {
					t.Errorf("%s: kept = %v, want %v", o.name, kept, o.wantKept)
				}
				if !o.wantKept {
					wantRemoved++
					wantBytes += int64(1000 + i)
				}
			}
			want := GCStats{Scanned: len(objects), Removed: wantRemoved, Bytes: wantBytes, TempsRemoved: 1, TempBytes: int64(len("half a file"))}
			if st != want {
				t.Errorf("GCStats = %+v, want %+v", st, want)
			}
			if _, err := fsys.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("stale temp survived GC (stat: %v)", err)
			}
			if _, err := fsys.Stat(fresh); err != nil {
				t.Errorf("fresh temp was removed by GC: %v", err)
			}
			fsys.Remove(fresh)
			fsck(t, fsys, dir, 0)

			// A removed object can be put again.
			for i, o := range objects {
				if !o.wantKept {
					if _, dedup, err := p.Put(content(uint64(100+i), 1000+i)); err != nil || dedup {
						t.Errorf("Put after GC: dedup=%v err=%v", dedup, err)
					}
				}
			}
		})
	}
}

// TestGCRacesProtect: a Protect that lands between GC's decision and its
// removal keeps the object (GC checks again after moving it aside, and puts
// it back).
func TestGCRacesProtect(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			base, dir := fc.new(t)
			start := time.Now()
			clock := &fakeClock{t: start}
			var p *Pool
			var raced int
			// Before GC moves the object aside, another process protects it.
			fsys := injectFunc(base, func(op vfs.Op, path string) {
				if op == vfs.OpRename && strings.Contains(filepath.Base(path), gravePrefix) {
					raced++
					later := start.Add(3 * time.Hour)
					if err := base.Chtimes(p.Path(objid.Sum([]byte("contested"))), later, later); err != nil {
						t.Errorf("racing Protect: %v", err)
					}
				}
			})
			p = openPool(t, fsys, dir, Options{Clock: clock.now})
			id, _, err := p.Put([]byte("contested"))
			if err != nil {
				t.Fatal(err)
			}
			clock.t = start.Add(2 * time.Hour)
			st, err := p.GC(func(ID) bool { return false }, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if raced != 1 {
				t.Fatalf("the race was staged %d times, want 1", raced)
			}
			if st.Removed != 0 {
				t.Errorf("GC removed %d objects; want 0 (the object was protected)", st.Removed)
			}
			if got, err := p.ReadAll(id); err != nil || string(got) != "contested" {
				t.Errorf("object after racing GC: %q, %v", got, err)
			}
			fsck(t, base, dir, 0)
		})
	}
}

// TestOpenVerifiesOnce: the first Open of an object in a process reads it
// through to verify it; later Opens do not, until the size changes.
func TestOpenVerifiesOnce(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			var c opCounter
			base, dir := fc.new(t)
			id, _, err := openPool(t, base, dir, Options{}).Put(content(11, 300_000))
			if err != nil {
				t.Fatal(err)
			}
			p := openPool(t, c.wrap(base), dir, Options{})
			for i, wantReads := range []bool{true, false, false} {
				c.reset()
				f, err := p.Open(id)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
				if got := c.get(vfs.OpRead) > 0; got != wantReads {
					t.Errorf("Open #%d read the object: %v, want %v", i+1, got, wantReads)
				}
			}
			overwrite(t, base, p.Path(id), func(b []byte) []byte { return b[:len(b)-1] })
			if _, err := p.Open(id); !errors.As(err, new(*CorruptObjectError)) {
				t.Errorf("Open after the object shrank: %v; want *CorruptObjectError", err)
			}
		})
	}
}

// TestPutCountsAsVerified: the process that published an object with Put
// (and hashed its bytes) does not read it back on its first Open; another
// process does.
func TestPutCountsAsVerified(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			var c opCounter
			base, dir := fc.new(t)
			p := openPool(t, c.wrap(base), dir, Options{})
			id, dedup, err := p.Put(content(12, 300_000))
			if err != nil || dedup {
				t.Fatalf("Put: dedup=%v err=%v; want a new object", dedup, err)
			}
			other := openPool(t, c.wrap(base), dir, Options{})
			for _, tc := range []struct {
				who       string
				pool      *Pool
				wantReads bool
			}{{"publisher", p, false}, {"other process", other, true}} {
				c.reset()
				f, err := tc.pool.Open(id)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
				if got := c.get(vfs.OpRead) > 0; got != tc.wantReads {
					t.Errorf("%s: first Open read the object: %v, want %v", tc.who, got, tc.wantReads)
				}
			}
		})
	}
}

// TestConcurrentPut: many goroutines in two pool instances (standing in for
// processes) publish overlapping content at once; every content ends up as
// exactly one intact object and no temp is left.
func TestConcurrentPut(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			pools := []*Pool{openPool(t, fsys, dir, Options{}), openPool(t, fsys, dir, Options{})}
			const items, workers, rounds = 16, 8, 40
			var newCount atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				p := pools[w%2]
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), 3))
					for range rounds {
						i := r.IntN(items)
						id, dedup, err := p.Put(content(uint64(i), 5000+i))
						if err != nil {
							t.Error(err)
							return
						}
						if !dedup {
							newCount.Add(1)
						}
						if err := p.SyncObjects([]ID{id}, 2); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			var objects int
			fans, _ := fsys.List(filepath.Join(dir, "objects"))
			for _, fan := range fans {
				names, _ := fsys.List(filepath.Join(dir, "objects", fan))
				objects += len(names)
			}
			if objects > items || int64(objects) != newCount.Load() {
				t.Errorf("%d objects on disk, %d Puts reported a new object; want equal and at most %d", objects, newCount.Load(), items)
			}
			fsck(t, fsys, dir, 0)
		})
	}
}
