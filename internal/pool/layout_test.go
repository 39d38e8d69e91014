package pool

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"wsfs/internal/vfs"
)

// TestLayout checks the on-disk layout: objects/<first hex digit>/<ID>,
// and a format file naming the layout, written durably at creation.
func TestLayout(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			p := openPool(t, fsys, dir, Options{})
			ids, _ := putAll(t, p, 300, 40, 10)
			for _, id := range ids {
				s := id.String()
				if want := filepath.Join(dir, "objects", s[:1], s); p.Path(id) != want {
					t.Fatalf("Path = %s, want %s", p.Path(id), want)
				}
				if _, err := fsys.Stat(p.Path(id)); err != nil {
					t.Fatal(err)
				}
			}
			fans, err := fsys.List(filepath.Join(dir, "objects"))
			if err != nil {
				t.Fatal(err)
			}
			for _, fan := range fans {
				if _, ok := parseFanout(fan); !ok {
					t.Errorf("objects/%s is not a one-digit fan-out directory", fan)
				}
			}
			if got := readFile(t, fsys, filepath.Join(dir, formatName)); string(got) != formatContent {
				t.Errorf("format file holds %q, want %q", got, formatContent)
			}
			openPool(t, fsys, dir, Options{}) // the same layout opens again
		})
	}
}

// TestFormatSurvivesCrash: the format file written by Open is durable
// when Open returns.
func TestFormatSurvivesCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	openPool(t, mem, "/pool", Options{}) // Open syncs / and /pool
	crashed := mem.CrashClone()
	f, err := crashed.Open("/pool/" + formatName)
	if err != nil {
		t.Fatalf("format file lost in a crash after Open: %v", err)
	}
	defer f.Close()
	if b, err := io.ReadAll(f); err != nil || string(b) != formatContent {
		t.Fatalf("format file after a crash: %q, %v", b, err)
	}
}

// TestOpenRefusesOtherLayouts: a pool of another layout version, or of the
// first layout (objects/<2 hex digits>/ and no format file), is refused
// with an error saying what to do, and left untouched. A format file that
// names no layout at all (emptied, a flipped byte) is damage
// (ErrFormatDamaged), and the error says how to write it back, never to
// remove the pool.
func TestOpenRefusesOtherLayouts(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, fsys vfs.FS, dir string)
		want  string
	}{
		{"newer version", func(t *testing.T, fsys vfs.FS, dir string) {
			writeFile(t, fsys, filepath.Join(dir, formatName), "wsfs-pool-layout 3\n")
		}, `says "wsfs-pool-layout 3"`},
		{"empty format file", func(t *testing.T, fsys vfs.FS, dir string) {
			writeFile(t, fsys, filepath.Join(dir, formatName), "")
		}, `holds "" instead of a layout name`},
		{"flipped byte in the format file", func(t *testing.T, fsys vfs.FS, dir string) {
			writeFile(t, fsys, filepath.Join(dir, formatName), "wsfs-pool-lbyout 2\n")
		}, `holds "wsfs-pool-lbyout 2" instead of a layout name`},
		{"first layout", func(t *testing.T, fsys vfs.FS, dir string) {
			if err := fsys.MkdirAll(filepath.Join(dir, "objects", "ab"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "objects/ab is a fan-out directory of the first pool layout"},
	}
	for _, fc := range fsCases {
		for _, tc := range cases {
			t.Run(fc.name+"/"+tc.name, func(t *testing.T) {
				fsys, dir := fc.new(t)
				if err := fsys.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				tc.setup(t, fsys, dir)
				_, err := Open(fsys, dir, Options{})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Open = %v, want an error containing %q", err, tc.want)
				}
				// A damaged format file is damage, not another layout: the
				// advice to remove the pool would lose every object.
				if damaged := strings.Contains(tc.name, "format file"); errors.Is(err, ErrFormatDamaged) != damaged ||
					(damaged && strings.Contains(err.Error(), "let wsfs create a new one")) {
					t.Errorf("Open = %v; want ErrFormatDamaged %v, and no advice to remove a damaged pool", err, damaged)
				}
				if tc.name == "first layout" {
					if _, err := fsys.Stat(filepath.Join(dir, formatName)); err == nil {
						t.Error("Open wrote a format file into a pool it refused")
					}
				}
			})
		}
	}
}

// TestDrainDirectorySyncs: a drain syncs each fan-out directory holding
// its objects once, so at most 16 of them plus objects/ (for fan-out
// directories this process has not seen durable), however many objects.
func TestDrainDirectorySyncs(t *testing.T) {
	var c opCounter
	fsys := c.wrap(vfs.NewCrashableMem())
	p := openPool(t, fsys, "/home/pool", Options{})
	ids, _ := putAll(t, p, 400, 300, 10)
	c.reset()
	if err := p.SyncObjects(ids, 0); err != nil {
		t.Fatal(err)
	}
	// 300 random IDs hit all 16 fan-outs (miss probability ~16*(15/16)^300).
	if got := c.get(vfs.OpSync); got != fanouts+1 {
		t.Errorf("first drain: %d directory syncs, want %d (every fan-out directory and objects/)", got, fanouts+1)
	}
	more, _ := putAll(t, p, 800, 300, 10)
	c.reset()
	if err := p.SyncObjects(more, 0); err != nil {
		t.Fatal(err)
	}
	if got := c.get(vfs.OpSync); got != fanouts {
		t.Errorf("second drain: %d directory syncs, want %d (every fan-out directory, objects/ already durable)", got, fanouts)
	}
}

func writeFile(t *testing.T, fsys vfs.FS, name, data string) {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPutStartsWriteback: Put starts writeback (File.StartWriteback, on the
// OS sync_file_range) of exactly the new objects of writebackMin bytes or
// more, on the temp it wrote; a dedup hit starts nothing. The objects then
// drain and read back intact.
func TestPutStartsWriteback(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			base, dir := fc.new(t)
			var started []string
			var mu sync.Mutex
			fsys := injectFunc(base, func(op vfs.Op, path string) {
				if op == vfs.OpStartWriteback {
					mu.Lock()
					started = append(started, path)
					mu.Unlock()
				}
			})
			p := openPool(t, fsys, dir, Options{})
			sizes := []int{writebackMin - 1, writebackMin, 3*writebackMin + 5}
			var ids []ID
			for i, size := range sizes {
				data := content(uint64(900+i), size)
				id, dedup, err := p.Put(data)
				if err != nil || dedup {
					t.Fatalf("Put of %d bytes: dedup=%v err=%v; want a new object", size, dedup, err)
				}
				ids = append(ids, id)
				if _, dedup, err := p.Put(data); err != nil || !dedup {
					t.Fatalf("second Put of %d bytes: dedup=%v err=%v; want dedup", size, dedup, err)
				}
			}
			mu.Lock()
			got := slices.Clone(started)
			mu.Unlock()
			if len(got) != 2 {
				t.Fatalf("writeback started on %q; want 2 calls (the objects of %d and %d bytes)", got, sizes[1], sizes[2])
			}
			for _, path := range got {
				if filepath.Dir(path) != filepath.Join(dir, tmpDir) || !strings.HasPrefix(filepath.Base(path), putPrefix) {
					t.Errorf("writeback started on %s; want a Put temp in %s", path, filepath.Join(dir, tmpDir))
				}
			}
			if err := p.SyncObjects(ids, 0); err != nil {
				t.Fatal(err)
			}
			for i, id := range ids {
				got, err := openPool(t, base, dir, Options{}).ReadAll(id)
				if err != nil || !bytes.Equal(got, content(uint64(900+i), sizes[i])) {
					t.Fatalf("ReadAll(%s): %d bytes, %v; want %d bytes", id, len(got), err, sizes[i])
				}
			}
			fsck(t, base, dir, 0)
		})
	}
}
