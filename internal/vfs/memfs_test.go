package vfs

import (
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// snapshot returns every regular file in fsys as path -> contents.
func snapshot(t *testing.T, fsys FS) map[string]string {
	t.Helper()
	out := make(map[string]string)
	var walk func(dir string)
	walk = func(dir string) {
		names, err := fsys.List(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			p := dir + "/" + n
			if dir == "/" {
				p = "/" + n
			}
			fi, err := fsys.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.IsDir() {
				out[p+"/"] = ""
				walk(p)
				continue
			}
			f, err := fsys.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[p] = string(b)
		}
	}
	walk("/")
	return out
}

// steps is a tiny script language for crash tests; each step fails the test
// on error.
type step func(t *testing.T, m *MemFS)

func mkdir(p string) step {
	return func(t *testing.T, m *MemFS) {
		if err := m.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func create(p, data string, syncData bool) step {
	return func(t *testing.T, m *MemFS) {
		f, err := m.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		if syncData {
			if err := f.SyncData(); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func appendTo(p, data string, sync bool) step {
	return func(t *testing.T, m *MemFS) {
		f, err := m.OpenReadWrite(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Seek(0, io.SeekEnd); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func syncDir(p string) step {
	return func(t *testing.T, m *MemFS) {
		if err := SyncDir(m, p); err != nil {
			t.Fatal(err)
		}
	}
}

func rename(a, b string) step {
	return func(t *testing.T, m *MemFS) {
		if err := m.Rename(a, b); err != nil {
			t.Fatal(err)
		}
	}
}

func link(a, b string) step {
	return func(t *testing.T, m *MemFS) {
		if err := m.Link(a, b); err != nil {
			t.Fatal(err)
		}
	}
}

func remove(p string) step {
	return func(t *testing.T, m *MemFS) {
		if err := m.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMemFSCrash(t *testing.T) {
	// Every case starts from a durable /d holding nothing.
	cases := []struct {
		name  string
		steps []step
		want  map[string]string // durable files after the crash (dirs end in /)
	}{
		{"nothing synced", []step{create("/d/a", "x", false)},
			map[string]string{"/d/": ""}},
		{"unsynced data lost, entry synced", []step{create("/d/a", "x", false), syncDir("/d")},
			map[string]string{"/d/": "", "/d/a": ""}},
		{"synced data, entry not synced", []step{create("/d/a", "x", true)},
			map[string]string{"/d/": ""}},
		{"synced data and entry", []step{create("/d/a", "x", true), syncDir("/d")},
			map[string]string{"/d/": "", "/d/a": "x"}},
		{"append after sync lost", []step{create("/d/a", "x", true), syncDir("/d"), appendTo("/d/a", "yz", false)},
			map[string]string{"/d/": "", "/d/a": "x"}},
		{"append synced", []step{create("/d/a", "x", true), syncDir("/d"), appendTo("/d/a", "yz", true)},
			map[string]string{"/d/": "", "/d/a": "xyz"}},
		{"rename without dir sync reverts", []step{
			create("/d/a", "A", true), create("/d/b", "B", true), syncDir("/d"), rename("/d/a", "/d/b")},
			map[string]string{"/d/": "", "/d/a": "A", "/d/b": "B"}},
		{"rename with dir sync persists", []step{
			create("/d/a", "A", true), create("/d/b", "B", true), syncDir("/d"), rename("/d/a", "/d/b"), syncDir("/d")},
			map[string]string{"/d/": "", "/d/b": "A"}},
		{"cross-dir rename, only target synced", []step{
			mkdir("/d/e"), syncDir("/d"), create("/d/a", "A", true), syncDir("/d"),
			rename("/d/a", "/d/e/a"), syncDir("/d/e")},
			map[string]string{"/d/": "", "/d/e/": "", "/d/a": "A", "/d/e/a": "A"}},
		{"cross-dir rename, only source synced", []step{
			mkdir("/d/e"), syncDir("/d"), create("/d/a", "A", true), syncDir("/d"),
			rename("/d/a", "/d/e/a"), syncDir("/d")},
			map[string]string{"/d/": "", "/d/e/": ""}},
		{"cross-dir rename, both synced", []step{
			mkdir("/d/e"), syncDir("/d"), create("/d/a", "A", true), syncDir("/d"),
			rename("/d/a", "/d/e/a"), syncDir("/d"), syncDir("/d/e")},
			map[string]string{"/d/": "", "/d/e/": "", "/d/e/a": "A"}},
		{"link without dir sync lost", []step{
			create("/d/a", "A", true), syncDir("/d"), link("/d/a", "/d/b")},
			map[string]string{"/d/": "", "/d/a": "A"}},
		{"link with dir sync, shared inode", []step{
			create("/d/a", "A", true), syncDir("/d"), link("/d/a", "/d/b"), syncDir("/d"), appendTo("/d/b", "+", true)},
			map[string]string{"/d/": "", "/d/a": "A+", "/d/b": "A+"}},
		{"remove without dir sync reverts", []step{
			create("/d/a", "A", true), syncDir("/d"), remove("/d/a")},
			map[string]string{"/d/": "", "/d/a": "A"}},
		{"remove with dir sync persists", []step{
			create("/d/a", "A", true), syncDir("/d"), remove("/d/a"), syncDir("/d")},
			map[string]string{"/d/": ""}},
		{"nested new dirs, only leaf synced", []step{
			mkdir("/d/x/y"), create("/d/x/y/f", "F", true), syncDir("/d/x/y")},
			map[string]string{"/d/": ""}},
		{"nested new dirs, leaf and middle synced", []step{
			mkdir("/d/x/y"), create("/d/x/y/f", "F", true), syncDir("/d/x/y"), syncDir("/d/x")},
			map[string]string{"/d/": ""}},
		{"nested new dirs, every parent synced", []step{
			mkdir("/d/x/y"), create("/d/x/y/f", "F", true), syncDir("/d/x/y"), syncDir("/d/x"), syncDir("/d")},
			map[string]string{"/d/": "", "/d/x/": "", "/d/x/y/": "", "/d/x/y/f": "F"}},
		{"publish with sync", []step{func(t *testing.T, m *MemFS) {
			if err := Publish(m, "/d/p", true, func(f File) error { _, err := f.Write([]byte("P")); return err }); err != nil {
				t.Fatal(err)
			}
		}}, map[string]string{"/d/": "", "/d/p": "P"}},
		{"publish without sync", []step{func(t *testing.T, m *MemFS) {
			if err := Publish(m, "/d/p", false, func(f File) error { _, err := f.Write([]byte("P")); return err }); err != nil {
				t.Fatal(err)
			}
		}}, map[string]string{"/d/": ""}},
		{"started writeback is not a sync", []step{
			create("/d/a", "A", true), syncDir("/d"), func(t *testing.T, m *MemFS) {
				f, err := m.OpenReadWrite("/d/a")
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if _, err := f.WriteAt([]byte("B"), 1); err != nil {
					t.Fatal(err)
				}
				if err := f.StartWriteback(); err != nil {
					t.Fatal(err)
				}
			}},
			map[string]string{"/d/": "", "/d/a": "A"}},
		{"syncfs makes everything durable", []step{
			mkdir("/d/x"), create("/d/x/f", "F", false), func(t *testing.T, m *MemFS) {
				if err := m.SyncFS("/"); err != nil {
					t.Fatal(err)
				}
			}},
			map[string]string{"/d/": "", "/d/x/": "", "/d/x/f": "F"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewCrashableMem()
			mkdir("/d")(t, m)
			syncDir("/")(t, m)
			for _, s := range c.steps {
				s(t, m)
			}
			before := snapshot(t, m)
			crashed := m.CrashClone()
			if got := snapshot(t, crashed); !maps.Equal(got, c.want) {
				t.Fatalf("after crash:\n got  %v\n want %v\ntree before crash:\n%s", got, c.want, m)
			}
			// The original keeps running, unchanged.
			if got := snapshot(t, m); !maps.Equal(got, before) {
				t.Fatalf("CrashClone changed the original: %v, was %v", got, before)
			}
			// A clone is fully durable: crashing it again changes nothing.
			if got := snapshot(t, crashed.CrashClone()); !maps.Equal(got, c.want) {
				t.Fatalf("second crash: %v, want %v", got, c.want)
			}
		})
	}
}

func TestMemFSCloneIndependent(t *testing.T) {
	m := NewCrashableMem()
	create("/a", "A", true)(t, m)
	syncDir("/")(t, m)
	c := m.CrashClone()
	appendTo("/a", "1", true)(t, m)
	appendTo("/a", "2", true)(t, c)
	if got := snapshot(t, m)["/a"]; got != "A1" {
		t.Fatalf("original /a = %q", got)
	}
	if got := snapshot(t, c)["/a"]; got != "A2" {
		t.Fatalf("clone /a = %q", got)
	}
}

func TestMemFSCrashDropsDirectoryCycle(t *testing.T) {
	// Stale durable snapshots can name a directory from two places; the
	// clone must still be a tree.
	m := NewCrashableMem()
	mkdir("/a/b")(t, m)
	m.SyncFS("/")
	rename("/a/b", "/b")(t, m)
	rename("/a", "/b/a")(t, m)
	syncDir("/b")(t, m) // durable: / -> a -> b -> a
	c := m.CrashClone()
	got := snapshot(t, c)
	want := map[string]string{"/a/": "", "/a/b/": ""}
	if !maps.Equal(got, want) {
		t.Fatalf("clone = %v, want %v", got, want)
	}
	if err := c.RemoveAll("/a"); err != nil {
		t.Fatal(err)
	}
}

func TestMemFSHook(t *testing.T) {
	m := NewCrashableMem()
	type call struct {
		op   Op
		path string
	}
	var mu sync.Mutex
	var calls []call
	var clones []*MemFS
	m.SetHook(func(op Op, path string) {
		clone := m.CrashClone() // the hook may call back into the FS
		mu.Lock()
		calls = append(calls, call{op, path})
		clones = append(clones, clone)
		mu.Unlock()
	})
	if err := Publish(m, "/x", true, func(f File) error {
		_, err := f.Write([]byte("X"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ops := make([]Op, len(calls))
	for i, c := range calls {
		ops[i] = c.op
	}
	want := []Op{OpCreate, OpWrite, OpSyncData, OpRename, OpSync}
	if !slices.Equal(ops, want) {
		t.Fatalf("hook ops %v, want %v", ops, want)
	}
	if calls[3].path != "/x" || calls[4].path != "/" {
		t.Fatalf("hook paths %v", calls)
	}
	// Only the clone after the final directory sync holds /x.
	for i, c := range clones {
		_, err := c.Stat("/x")
		if has := err == nil; has != (i == len(clones)-1) {
			t.Fatalf("clone after %v: /x present = %v", ops[i], has)
		}
	}
	m.SetHook(nil)
	create("/y", "", false)(t, m)
	if len(calls) != len(want) {
		t.Fatal("hook called after SetHook(nil)")
	}
}

func TestMemFSErrors(t *testing.T) {
	m := NewCrashableMem()
	create("/f", "x", false)(t, m)
	if _, err := m.Create("/f/g"); err == nil {
		t.Fatalf("create below a file: %v", err)
	}
	if err := m.Remove("/"); err == nil {
		t.Fatal("Remove of the root succeeded")
	}
	if err := m.Link("/", "/r"); err == nil {
		t.Fatal("Link of a directory succeeded")
	}
	d, err := m.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Write([]byte("x")); err == nil {
		t.Fatal("Write to a directory succeeded")
	}
}

func TestMemFSConcurrent(t *testing.T) {
	m := NewCrashableMem()
	mkdir("/d")(t, m)
	f, err := m.Create("/d/shared")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				if _, err := f.WriteAt([]byte{byte(i)}, int64(i*50+j)); err != nil {
					t.Error(err)
					return
				}
				if j%10 == 0 {
					if err := f.SyncData(); err != nil {
						t.Error(err)
					}
					_ = m.CrashClone()
					_, _ = m.List("/d")
				}
			}
		}()
	}
	wg.Wait()
	if fi, err := f.Stat(); err != nil || fi.Size() != 200 {
		t.Fatalf("size %v %v, want 200", fi, err)
	}
}

// TestMemFSSyncRandom checks the incremental sync (only bytes changed since
// the last sync are copied) against the obvious model: after a sync the
// durable bytes equal the current bytes.
func TestMemFSSyncRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := NewCrashableMem()
	create("/f", "", false)(t, m)
	syncDir("/")(t, m)
	f, err := m.OpenReadWrite("/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var current, durable []byte
	for i := range 2000 {
		switch rng.IntN(4) {
		case 0, 1:
			off := rng.IntN(len(current) + 10)
			p := make([]byte, rng.IntN(20))
			for j := range p {
				p[j] = byte(rng.IntN(255) + 1)
			}
			if _, err := f.WriteAt(p, int64(off)); err != nil {
				t.Fatal(err)
			}
			if end := off + len(p); end > len(current) {
				current = append(current, make([]byte, end-len(current))...)
			}
			copy(current[off:], p)
		case 2:
			size := rng.IntN(len(current) + 10)
			if err := f.Truncate(int64(size)); err != nil {
				t.Fatal(err)
			}
			if size < len(current) {
				current = current[:size:size]
			} else {
				current = append(current, make([]byte, size-len(current))...)
			}
		case 3:
			if err := f.SyncData(); err != nil {
				t.Fatal(err)
			}
			durable = slices.Clone(current)
		}
		if i%50 == 0 {
			if got := snapshot(t, m.CrashClone())["/f"]; got != string(durable) {
				t.Fatalf("step %d: durable %q, want %q", i, got, durable)
			}
			if got := snapshot(t, m)["/f"]; got != string(current) {
				t.Fatalf("step %d: current %q, want %q", i, got, current)
			}
		}
	}
}
