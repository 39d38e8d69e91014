package seglog

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"wsfs/internal/vfs"
)

// go test ./internal/seglog -run Golden -update rewrites the golden files
// and the fuzz seed corpus. Only do that for a deliberate format change
// (which also needs a new version number: old files must still open).
var update = flag.Bool("update", false, "rewrite testdata/golden-v1.* and the FuzzOpenSegment seed corpus")

// goldenGroups is the known sequence of Appends behind testdata/golden-v1.seg.
func goldenGroups() [][][]byte {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return [][][]byte{
		{[]byte("hello"), []byte("world")},
		{},         // a group without records
		{[]byte{}}, // one empty record
		{all},      // every byte value
		{[]byte("x"), []byte("yy"), []byte("zzz")},
	}
}

const (
	goldenSeg  = "testdata/golden-v1.seg"
	goldenCkpt = "testdata/golden-v1.ckpt"
)

func writeGolden(t *testing.T) (seg, ckpt []byte) {
	t.Helper()
	mem := vfs.NewCrashableMem()
	l := mustOpen(t, mem, "/log", Options{})
	appendAll(t, l, 1, goldenGroups(), false)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	seg, err := vfs.ReadFile(mem, filepath.Join("/log", segName(1)))
	if err != nil {
		t.Fatal(err)
	}
	seg = withoutRunway(t, seg) // zeros, not format
	if err := WriteCheckpoint(mem, "/ckpt", 5, []byte("checkpoint payload")); err != nil {
		t.Fatal(err)
	}
	ckpt, err = vfs.ReadFile(mem, filepath.Join("/ckpt", ckptName(5)))
	if err != nil {
		t.Fatal(err)
	}
	return seg, ckpt
}

// TestGolden freezes the wire format: the bytes written by a known
// sequence of Appends (and one checkpoint) must not change, and the stored
// files must keep opening.
func TestGolden(t *testing.T) {
	seg, ckpt := writeGolden(t)
	if *update {
		must(t, os.WriteFile(goldenSeg, seg, 0o644))
		must(t, os.WriteFile(goldenCkpt, ckpt, 0o644))
		writeFuzzSeeds(t, seg)
	}
	for _, c := range []struct {
		path string
		got  []byte
	}{{goldenSeg, seg}, {goldenCkpt, ckpt}} {
		want, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(c.got, want) {
			t.Fatalf("%s: the bytes written today differ from the frozen format (%d vs %d bytes). "+
				"A format change needs a new version and must keep reading version 1", c.path, len(c.got), len(want))
		}
	}

	// The stored files open and replay.
	want, _ := os.ReadFile(goldenSeg)
	fsys, dir := memLog(t, [][]byte{want})
	l := mustOpen(t, fsys, dir, Options{})
	if l.Repaired() != nil {
		t.Fatalf("golden segment reported a repair: %+v", l.Repaired())
	}
	if got := replayAll(t, l, 0); !equalGroups(got, goldenGroups()) {
		t.Fatal("golden segment replays differently")
	}
	cb, _ := os.ReadFile(goldenCkpt)
	p, err := decodeCheckpoint(goldenCkpt, 5, cb)
	if err != nil || string(p) != "checkpoint payload" {
		t.Fatalf("golden checkpoint: %q %v", p, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeFuzzSeeds writes the seed corpus: real segments, truncated and
// flipped.
func writeFuzzSeeds(t *testing.T, seg []byte) {
	dir := "testdata/fuzz/FuzzOpenSegment"
	must(t, os.MkdirAll(dir, 0o755))
	flipped := bytes.Clone(seg)
	flipped[segHeaderLen+12] ^= 0x40 // inside the first record
	lastFlip := bytes.Clone(seg)
	lastFlip[len(lastFlip)-3] ^= 0x01 // inside the last commit marker
	multi, _, _, _ := buildLog(t, 0, genGroups(77, 4, 3, 30))
	seeds := map[string][]byte{
		"golden":           seg,
		"truncated-mid":    seg[:len(seg)/2],
		"truncated-header": seg[:segHeaderLen-5],
		"header-only":      seg[:segHeaderLen],
		"flipped-first":    flipped,
		"flipped-last":     lastFlip,
		"random-groups":    multi[0],
		"empty":            {},
		"zero-tail":        append(bytes.Clone(seg), make([]byte, 64)...),
		// Added with the tail classification: a complete last marker with
		// a flipped CRC byte (corrupt), and the marker zeroed (torn).
		"marker-crc-flipped": func() []byte { b := bytes.Clone(seg); b[len(b)-25+5] ^= 0x01; return b }(),
		"marker-zeroed":      func() []byte { b := bytes.Clone(seg); clear(b[len(b)-25:]); return b }(),
	}
	for name, b := range seeds {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
}

// FuzzOpenSegment feeds arbitrary bytes as the only segment of a log. Open
// must never panic; it either fails with a *CorruptError or opens a log
// that replays contiguous groups from 1, whose file is a prefix of the
// input (or, for a bad header, a fresh header), and that keeps working.
func FuzzOpenSegment(f *testing.F) {
	if b, err := os.ReadFile(goldenSeg); err == nil {
		f.Add(b)
		f.Add(append(slices.Clone(b), make([]byte, 4096)...))           // a runway
		f.Add(append(slices.Clone(b[:len(b)-7]), make([]byte, 600)...)) // an append cut short in it
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys, dir := memLog(t, [][]byte{data})
		l, err := Open(fsys, dir, Options{})
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Open failed without a *CorruptError: %v", err)
			}
			return
		}
		defer l.Close()
		groups := replayAll(t, l, 0) // checks numbering 1, 2, ...
		if uint64(len(groups)) != l.LastGroup() {
			t.Fatalf("replayed %d groups, LastGroup %d", len(groups), l.LastGroup())
		}
		path := filepath.Join(dir, segName(1))
		now, err := vfs.ReadFile(fsys, path)
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) > 0 && !bytes.HasPrefix(data, now) {
			t.Fatal("Open kept bytes that are not a prefix of the input")
		}
		if (l.Repaired() == nil) != bytes.Equal(now, data) {
			t.Fatalf("Repaired %+v but the file changed: %v", l.Repaired(), !bytes.Equal(now, data))
		}
		// The opened log accepts a group and reopens cleanly with it.
		if g, err := l.Append([][]byte{[]byte("fuzz")}); err != nil || g != uint64(len(groups))+1 {
			t.Fatalf("Append = %d %v", g, err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		l.Close()
		l2, err := Open(fsys, dir, Options{})
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer l2.Close()
		if l2.Repaired() != nil || l2.LastGroup() != uint64(len(groups))+1 {
			t.Fatalf("reopen: Repaired %+v LastGroup %d", l2.Repaired(), l2.LastGroup())
		}
	})
}
