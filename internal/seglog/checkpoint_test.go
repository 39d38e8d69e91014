package seglog

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"wsfs/internal/vfs"
)

func ckptFiles(t *testing.T, fsys vfs.FS, dir string) []uint64 {
	t.Helper()
	gs, err := listCheckpoints(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

func TestCheckpointRoundTrip(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, logDir := fc.new(t)
			dir := filepath.Join(filepath.Dir(logDir), "checkpoint")
			if g, p, err := ReadLatestCheckpoint(fsys, dir); g != 0 || p != nil || err != nil {
				t.Fatalf("no checkpoint dir: %d %q %v, want 0 nil nil", g, p, err)
			}
			for _, c := range []struct {
				group   uint64
				payload []byte
			}{{5, []byte("five")}, {9, nil}, {12, bytes.Repeat([]byte{0xab}, 100_000)}} {
				if err := WriteCheckpoint(fsys, dir, c.group, c.payload); err != nil {
					t.Fatal(err)
				}
				g, p, err := ReadLatestCheckpoint(fsys, dir)
				if err != nil || g != c.group || !bytes.Equal(p, c.payload) {
					t.Fatalf("read back %d (%d bytes) %v, want %d (%d bytes)", g, len(p), err, c.group, len(c.payload))
				}
				if gs := ckptFiles(t, fsys, dir); len(gs) != 1 || gs[0] != c.group {
					t.Fatalf("checkpoint files %v, want only %d", gs, c.group)
				}
			}
			// Leftover publish temps and unrelated names are ignored.
			f, err := fsys.Create(filepath.Join(dir, vfs.TempPrefix+"junk"))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if g, _, err := ReadLatestCheckpoint(fsys, dir); g != 12 || err != nil {
				t.Fatalf("with a leftover temp: %d %v", g, err)
			}
		})
	}
}

// TestCheckpointCorrupt flips every byte of the newest checkpoint: with an
// older valid checkpoint present, ReadLatestCheckpoint falls back to it;
// alone, it is a *CorruptError naming the file.
func TestCheckpointCorrupt(t *testing.T) {
	const dir = "/ckpt"
	payload := []byte("the namespace at group 20")
	base := vfs.NewCrashableMem()
	if err := WriteCheckpoint(base, dir, 20, payload); err != nil {
		t.Fatal(err)
	}
	good, err := vfs.ReadFile(base, filepath.Join(dir, ckptName(20)))
	if err != nil {
		t.Fatal(err)
	}
	older := append(encodeCkptHeader(10, []byte("ten")), "ten"...)
	put := func(fsys vfs.FS, group uint64, b []byte) {
		f, err := fsys.Create(filepath.Join(dir, ckptName(group)))
		if err != nil {
			t.Fatal(err)
		}
		f.Write(b)
		f.Close()
	}
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x01
		for _, withOlder := range []bool{false, true} {
			fsys := vfs.NewCrashableMem()
			fsys.MkdirAll(dir, 0o755)
			put(fsys, 20, bad)
			if withOlder {
				put(fsys, 10, older)
			}
			g, p, err := ReadLatestCheckpoint(fsys, dir)
			if withOlder {
				if err != nil || g != 10 || string(p) != "ten" {
					t.Fatalf("byte %d flipped, older present: %d %q %v, want the older checkpoint", i, g, p, err)
				}
				continue
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Segment != filepath.Join(dir, ckptName(20)) {
				t.Fatalf("byte %d flipped: %d %q %v, want *CorruptError", i, g, p, err)
			}
			if !strings.Contains(err.Error(), "checkpoint") || !strings.Contains(err.Error(), "backup") {
				t.Fatalf("checkpoint error does not say what to do: %v", err)
			}
		}
	}
	// Truncated and renamed files are corrupt too.
	for name, b := range map[uint64][]byte{20: good[:len(good)-1], 21: good} {
		fsys := vfs.NewCrashableMem()
		fsys.MkdirAll(dir, 0o755)
		put(fsys, name, b)
		var ce *CorruptError
		if _, _, err := ReadLatestCheckpoint(fsys, dir); !errors.As(err, &ce) {
			t.Fatalf("checkpoint %d: %v, want *CorruptError", name, err)
		}
	}
}

// TestCheckpointCrash: a crash at any point of WriteCheckpoint leaves a
// readable checkpoint, the old one or the new one.
func TestCheckpointCrash(t *testing.T) {
	const dir = "/ws/checkpoint"
	mem := vfs.NewCrashableMem()
	if err := WriteCheckpoint(mem, dir, 1, []byte("one")); err != nil {
		t.Fatal(err)
	}
	var images []*vfs.MemFS
	mem.SetHook(func(vfs.Op, string) { images = append(images, mem.CrashClone()) })
	if err := WriteCheckpoint(mem, dir, 2, []byte("two")); err != nil {
		t.Fatal(err)
	}
	mem.SetHook(nil)
	sawNew := false
	for i, img := range images {
		g, p, err := ReadLatestCheckpoint(img, dir)
		switch {
		case err != nil:
			t.Fatalf("image %d: %v", i, err)
		case g == 1 && string(p) == "one":
		case g == 2 && string(p) == "two":
			sawNew = true
		default:
			t.Fatalf("image %d: checkpoint %d %q", i, g, p)
		}
	}
	if !sawNew {
		t.Fatal("no crash image holds the new checkpoint")
	}
}
