package pool

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
)

// injectFunc wraps fsys so that fn sees every operation before it runs.
func injectFunc(fsys vfs.FS, fn func(op vfs.Op, path string)) vfs.FS {
	return errorfs.Wrap(fsys, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
		fn(op, path)
		return nil
	}))
}

// opCounter counts operations by kind.
type opCounter struct{ n [32]atomic.Int64 }

func (c *opCounter) wrap(fsys vfs.FS) vfs.FS {
	return injectFunc(fsys, func(op vfs.Op, _ string) { c.n[op].Add(1) })
}
func (c *opCounter) get(op vfs.Op) int64 { return c.n[op].Load() }
func (c *opCounter) reset() {
	for i := range c.n {
		c.n[i].Store(0)
	}
}

// putAll puts n distinct objects and returns their IDs and contents.
func putAll(t *testing.T, p *Pool, seed uint64, n, size int) ([]ID, map[ID][]byte) {
	t.Helper()
	ids := make([]ID, n)
	data := make(map[ID][]byte, n)
	for i := range n {
		b := content(seed+uint64(i), size)
		id, _, err := p.Put(b)
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		ids[i] = id
		data[id] = b
	}
	return ids, data
}

// checkSurvivors opens the crashed image and checks every object: synced
// ones must be present with their content; the others may be missing or
// damaged but must never read back as wrong bytes. It returns how many of
// the unsynced objects were lost.
func checkSurvivors(t *testing.T, crashed vfs.FS, dir string, synced map[ID]bool, data map[ID][]byte) (lost int) {
	t.Helper()
	p := openPool(t, crashed, dir, Options{})
	for id, want := range data {
		got, err := p.ReadAll(id)
		switch {
		case err == nil && !bytes.Equal(got, want):
			t.Errorf("object %s read back wrong bytes after the crash", id)
		case err == nil:
		case synced[id]:
			t.Errorf("object %s was synced (SyncObjects returned nil) but after the crash: %v", id, err)
		default:
			var me *MissingObjectError
			var ce *CorruptObjectError
			if !errors.As(err, &me) && !errors.As(err, &ce) {
				t.Errorf("unsynced object %s after the crash: %v; want missing or corrupt", id, err)
			}
			lost++
		}
	}
	return lost
}

// TestSyncObjectsCrash: on the crashable MemFS, objects whose SyncObjects
// returned nil survive a power loss with their content, whichever pool
// instance (process) published them; objects nobody synced do not.
func TestSyncObjectsCrash(t *testing.T) {
	tests := []struct {
		name string
		// openSecondEarly opens the syncing pool before the publisher creates
		// its fan-out directories, so its Open cannot have synced them: the
		// drain must sync objects/ itself.
		openSecondEarly bool
		// syncer: "self" syncs from the publishing pool, "other" from a
		// second pool that deduplicated the objects (the cross-process case).
		syncer   string
		parallel int
	}{
		{"self", false, "self", 1},
		{"self parallel", false, "self", 8},
		{"dedup in another process, opened before", true, "other", 4},
		{"dedup in another process, opened after", false, "other", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			const dir = "/pool"
			pub := openPool(t, mem, dir, Options{})
			var other *Pool
			if tt.openSecondEarly {
				other = openPool(t, mem, dir, Options{})
			}
			ids, data := putAll(t, pub, 1, 40, 3000)
			if !tt.openSecondEarly {
				other = openPool(t, mem, dir, Options{})
			}

			// Nothing is synced yet: a crash now loses every object
			// (Open synced objects/ before any fan-out directory existed).
			if lost := checkSurvivors(t, mem.CrashClone(), dir, nil, data); lost != len(ids) {
				t.Fatalf("crash before any drain lost %d of %d objects; the test needs all lost", lost, len(ids))
			}

			syncer := pub
			if tt.syncer == "other" {
				syncer = other
				for _, id := range ids[:20] {
					if gotID, dedup, err := other.Put(data[id]); err != nil || !dedup || gotID != id {
						t.Fatalf("dedup Put in the second pool: %s %v %v", gotID, dedup, err)
					}
				}
			}
			if err := syncer.SyncObjects(ids[:20], tt.parallel); err != nil {
				t.Fatalf("SyncObjects: %v", err)
			}
			synced := make(map[ID]bool)
			for _, id := range ids[:20] {
				synced[id] = true
			}
			lost := checkSurvivors(t, mem.CrashClone(), dir, synced, data)
			if lost == 0 {
				t.Errorf("no unsynced object was lost in the crash; the model should drop at least some")
			}
			t.Logf("crash after draining 20 of %d objects: %d unsynced objects lost", len(ids), lost)
		})
	}
}

// TestSyncObjectsCrashPoints crashes at every durability-relevant operation
// inside SyncObjects: before it returns, anything may be lost; the objects
// are all intact in every image taken after it returned.
func TestSyncObjectsCrashPoints(t *testing.T) {
	mem := vfs.NewCrashableMem()
	const dir = "/pool"
	p := openPool(t, mem, dir, Options{})
	ids, data := putAll(t, p, 50, 12, 2000)
	var images []*vfs.MemFS
	mem.SetHook(func(op vfs.Op, path string) { images = append(images, mem.CrashClone()) })
	if err := p.SyncObjects(ids, 1); err != nil {
		t.Fatal(err)
	}
	mem.SetHook(nil)
	all := make(map[ID]bool)
	for _, id := range ids {
		all[id] = true
	}
	if len(images) < len(ids) {
		t.Fatalf("only %d crash points during the drain of %d objects", len(images), len(ids))
	}
	// Every intermediate image: no wrong bytes (checked inside).
	for _, img := range images {
		checkSurvivors(t, img, dir, nil, data)
	}
	// The image at the last durability op inside SyncObjects is the state
	// at return: everything is there.
	checkSurvivors(t, images[len(images)-1], dir, all, data)
}

func TestRepublishCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	const dir = "/pool"
	p := openPool(t, mem, dir, Options{})
	ids, data := putAll(t, p, 70, 3, 5000)
	if err := p.Republish(ids[1]); err != nil {
		t.Fatalf("Republish: %v", err)
	}
	lost := checkSurvivors(t, mem.CrashClone(), dir, map[ID]bool{ids[1]: true}, data)
	if lost != 2 {
		t.Errorf("lost %d objects, want the 2 that were not republished", lost)
	}
}

// TestSyncObjectsSkipsDurable: objects this process already made durable
// are not synced again within durableWindow of their mtime; after that, or
// after this process's GC removed them, they are.
func TestSyncObjectsSkipsDurable(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			var c opCounter
			base, dir := fc.new(t)
			fsys := c.wrap(base)
			start := time.Now()
			clock := &fakeClock{t: start}
			p := openPool(t, fsys, dir, Options{Clock: clock.now})
			ids, data := putAll(t, p, 200, 10, 100)

			drain := func(wantSyncData int64) {
				t.Helper()
				c.reset()
				if err := p.SyncObjects(append(slices.Clone(ids), ids...), 4); err != nil {
					t.Fatal(err)
				}
				if got := c.get(vfs.OpSyncData); got != wantSyncData {
					t.Errorf("drain: %d SyncData calls, want %d", got, wantSyncData)
				}
			}
			drain(int64(len(ids))) // duplicates in the set are synced once
			drain(0)
			if got := c.get(vfs.OpSync); got != 0 {
				t.Errorf("drain of durable objects synced %d directories, want 0", got)
			}
			// Trust expires durableWindow after the mtime seen at the sync.
			clock.t = start.Add(durableWindow + time.Minute)
			drain(int64(len(ids)))
			drain(int64(len(ids))) // mtime still old: no trust
			protectAll := func() {
				for _, id := range ids {
					if err := p.Protect(id); err != nil {
						t.Fatal(err)
					}
				}
			}
			protectAll() // as dedup Puts do: a new mtime
			drain(int64(len(ids)))
			drain(0)
			// A Protect while trusted extends the trust.
			clock.t = clock.t.Add(durableWindow / 2)
			protectAll()
			clock.t = clock.t.Add(durableWindow * 3 / 4)
			drain(0)

			// GC in this process removes one object; another process
			// publishes it again (new, unsynced inode).
			clock.t = start.Add(3 * time.Hour)
			if err := base.Chtimes(p.Path(ids[3]), start, start); err != nil {
				t.Fatal(err)
			}
			if _, err := p.GC(func(id ID) bool { return id != ids[3] }, MinGrace); err != nil {
				t.Fatal(err)
			}
			if _, dedup, err := openPool(t, base, dir, Options{}).Put(data[ids[3]]); err != nil || dedup {
				t.Fatal(dedup, err)
			}
			c.reset()
			if err := p.SyncObjects(ids[3:4], 4); err != nil {
				t.Fatal(err)
			}
			if got := c.get(vfs.OpSyncData); got != 1 {
				t.Errorf("drain of an object republished after GC: %d SyncData calls, want 1", got)
			}
		})
	}
}

// TestSyncFaults injects EIO and ENOSPC at each step of publication and of
// the drain: every failure is returned, names its object, and marks nothing
// durable (the next drain syncs everything again).
func TestSyncFaults(t *testing.T) {
	eio, enospc := syscall.EIO, syscall.ENOSPC
	const n = 6
	tests := []struct {
		name string
		rule func() *errorfs.Rule
		// wantRepub is how many objects the SyncError must list for
		// Republish (-1: do not check).
		wantRepub int
		// objectStep: the fault hits an object (not a directory), so the
		// error must name each object to republish.
		objectStep bool
	}{
		{"EIO on first object SyncData", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSyncData, "pool/objects/", 1, eio) }, 1, true},
		{"EIO on third object SyncData", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSyncData, "pool/objects/", 3, eio) }, 1, true},
		{"EIO on every object SyncData", func() *errorfs.Rule { return errorfs.Always(errorfs.OpSyncData, "pool/objects/", eio) }, n, true},
		{"ENOSPC on object SyncData", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSyncData, "pool/objects/", 2, enospc) }, 1, true},
		{"EIO opening an object", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpOpen, "pool/objects/", 1, eio) }, 1, true},
		{"EIO on fan-out directory sync", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSync, "pool/objects/", 1, eio) }, -1, false},
		{"EIO on objects/ sync", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSync, "object[s]", 1, eio) }, n, false},
		{"EIO closing an object", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpClose, "pool/objects/", 2, eio) }, 1, true},
	}
	for _, tt := range tests {
		for _, fc := range fsCases {
			t.Run(fc.name+"/"+tt.name, func(t *testing.T) {
				base, dir := fc.new(t)
				rule := tt.rule()
				armed := atomic.Bool{}
				var c opCounter
				fsys := c.wrap(errorfs.Wrap(base, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
					if !armed.Load() {
						return nil
					}
					return rule.MaybeError(op, path)
				})))
				p := openPool(t, fsys, dir, Options{})
				ids, _ := putAll(t, p, 300, n, 4096)
				armed.Store(true)
				err := p.SyncObjects(ids, 2)
				armed.Store(false)
				if rule.Injected() == 0 {
					t.Fatalf("the fault was never injected (rule matched %d calls)", rule.Matched())
				}
				var se *SyncError
				if !errors.As(err, &se) {
					t.Fatalf("SyncObjects with a fault: %v; want *SyncError", err)
				}
				if !errors.As(err, new(*errorfs.InjectedError)) {
					t.Errorf("SyncError does not wrap the injected fault: %v", err)
				}
				if tt.wantRepub >= 0 && len(se.Republish) != tt.wantRepub {
					t.Errorf("Republish lists %d objects, want %d: %v", len(se.Republish), tt.wantRepub, err)
				}
				if len(se.Republish) == 0 {
					t.Errorf("SyncError lists nothing to republish: %v", err)
				}
				if tt.objectStep {
					for _, id := range se.Republish {
						if !strings.Contains(err.Error(), id.String()) {
							t.Errorf("error does not name object %s: %v", id, err)
						}
					}
				}

				// Nothing was marked durable: a retry syncs every object. (First
				// republish what the error lists, as the committer does.)
				for _, id := range se.Republish {
					if err := p.Republish(id); err != nil {
						t.Fatalf("Republish(%s): %v", id, err)
					}
				}
				c.reset()
				if err := p.SyncObjects(ids, 2); err != nil {
					t.Fatalf("retry after republish: %v", err)
				}
				want := int64(n - len(se.Republish)) // republished ones are durable now
				if got := c.get(vfs.OpSyncData); got != want {
					t.Errorf("retry: %d SyncData calls, want %d (nothing marked durable by the failed drain)", got, want)
				}
				fsck(t, base, dir, 0)
			})
		}
	}
}

// TestRepublishFaults: a fault at any step of Republish is an error and the
// object is not marked durable.
func TestRepublishFaults(t *testing.T) {
	eio := syscall.EIO
	tests := []struct {
		name string
		rule func() *errorfs.Rule
	}{
		{"EIO reading the object", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpRead, "pool/objects/", 1, eio) }},
		{"ENOSPC writing the copy", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpWrite, "pool/tmp/", 1, syscall.ENOSPC) }},
		{"short write of the copy", func() *errorfs.Rule { return errorfs.ShortWriteOnNth("repair-*", 1) }},
		{"EIO on SyncData of the copy", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSyncData, "pool/tmp/", 1, eio) }},
		{"EIO on rename", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpRename, "pool/objects/", 1, eio) }},
		{"EIO on fan-out directory sync", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSync, "pool/objects/", 1, eio) }},
	}
	for _, tt := range tests {
		for _, fc := range fsCases {
			t.Run(fc.name+"/"+tt.name, func(t *testing.T) {
				base, dir := fc.new(t)
				rule := tt.rule()
				armed := atomic.Bool{}
				var c opCounter
				fsys := c.wrap(errorfs.Wrap(base, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
					if !armed.Load() {
						return nil
					}
					return rule.MaybeError(op, path)
				})))
				p := openPool(t, fsys, dir, Options{})
				ids, data := putAll(t, p, 400, 1, 10_000)
				armed.Store(true)
				err := p.Republish(ids[0])
				armed.Store(false)
				if rule.Injected() == 0 {
					t.Fatalf("the fault was never injected")
				}
				if err == nil || !errors.As(err, new(*errorfs.InjectedError)) {
					t.Fatalf("Republish with a fault: %v; want the injected error", err)
				}
				c.reset()
				if err := p.SyncObjects(ids, 1); err != nil {
					t.Fatal(err)
				}
				if c.get(vfs.OpSyncData) != 1 {
					t.Errorf("after a failed Republish the object was treated as durable")
				}
				if got, err := p.ReadAll(ids[0]); err != nil || !bytes.Equal(got, data[ids[0]]) {
					t.Errorf("object after a failed Republish: %v", err)
				}
				fsck(t, base, dir, 0)
			})
		}
	}
}

// TestPutFaults: a fault while publishing is returned and leaves no object
// and no temp behind.
func TestPutFaults(t *testing.T) {
	tests := []struct {
		name string
		rule func() *errorfs.Rule
	}{
		{"ENOSPC creating the temp", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpCreate, "pool/tmp/", 1, syscall.ENOSPC) }},
		{"ENOSPC writing", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpWrite, "pool/tmp/", 1, syscall.ENOSPC) }},
		{"short write", func() *errorfs.Rule { return errorfs.ShortWriteOnNth("put-*", 1) }},
		{"EIO on close", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpClose, "pool/tmp/", 1, syscall.EIO) }},
		{"EIO on link", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpLink, "pool/objects/", 1, syscall.EIO) }},
		{"EIO on mkdir", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpMkdir, "pool/objects/", 1, syscall.EIO) }},
		{"EIO starting writeback", func() *errorfs.Rule {
			return errorfs.OnNth(errorfs.OpStartWriteback, "put-*", 1, syscall.EIO)
		}},
	}
	for _, tt := range tests {
		for _, fc := range fsCases {
			t.Run(fc.name+"/"+tt.name, func(t *testing.T) {
				base, dir := fc.new(t)
				p := openPool(t, base, dir, Options{})
				rule := tt.rule()
				fsys := errorfs.Wrap(base, rule)
				q := openPool(t, fsys, dir, Options{})
				data := content(9, writebackMin) // large enough to start writeback
				_, _, err := q.Put(data)
				if rule.Injected() != 1 {
					t.Fatalf("fault injected %d times, want 1", rule.Injected())
				}
				if err == nil || !errors.As(err, new(*errorfs.InjectedError)) {
					t.Fatalf("Put with a fault: %v; want the injected error", err)
				}
				if _, err := p.ReadAll(objid.Sum(data)); !errors.As(err, new(*MissingObjectError)) {
					t.Errorf("after a failed Put the object exists (ReadAll: %v)", err)
				}
				fsck(t, base, dir, 0)
				// And the next Put works.
				if _, _, err := q.Put(data); err != nil {
					t.Errorf("Put after the fault: %v", err)
				}
			})
		}
	}
}

func TestSyncFS(t *testing.T) {
	mem := vfs.NewCrashableMem()
	p := openPool(t, mem, "/pool", Options{})
	ids, data := putAll(t, p, 500, 5, 1000)
	if err := p.SyncFS(); err != nil {
		t.Fatal(err)
	}
	all := make(map[ID]bool)
	for _, id := range ids {
		all[id] = true
	}
	checkSurvivors(t, mem.CrashClone(), "/pool", all, data)
}

// TestPublishRaceKeepsSyncedInode: another process publishes and drains the
// same content between this Put's existence check and its link. The link
// must not replace the other process's synced inode with this process's
// unsynced one (a rename would): after a crash the object is intact.
func TestPublishRaceKeepsSyncedInode(t *testing.T) {
	mem := vfs.NewCrashableMem()
	const dir = "/pool"
	other := openPool(t, mem, dir, Options{})
	data := content(13, 9000)
	raced := 0
	fsys := injectFunc(mem, func(op vfs.Op, path string) {
		if op != vfs.OpLink || raced > 0 {
			return
		}
		raced++
		id, dedup, err := other.Put(data)
		if err != nil || dedup {
			t.Errorf("racing Put: dedup=%v err=%v", dedup, err)
		}
		if err := other.SyncObjects([]ID{id}, 1); err != nil {
			t.Errorf("racing drain: %v", err)
		}
	})
	p := openPool(t, fsys, dir, Options{})
	id, dedup, err := p.Put(data)
	if err != nil || !dedup || raced != 1 {
		t.Fatalf("Put racing another publisher: dedup=%v err=%v raced=%d; want dedup after one race", dedup, err, raced)
	}
	// This process drains nothing (say it crashed at once): the other
	// process's drain must be what survives.
	checkSurvivors(t, mem.CrashClone(), dir, map[ID]bool{id: true}, map[ID][]byte{id: data})
	fsck(t, mem, dir, 0)
}
