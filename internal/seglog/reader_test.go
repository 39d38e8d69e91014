package seglog

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"wsfs/internal/vfs"
)

// TestTailFollowsOwner: a Tail of each segment hands out every group the
// owner appends, exactly once and in order, across rollover; a half-written
// group is not handed out; a deleted segment is ErrSegmentGone.
func TestTailFollowsOwner(t *testing.T) {
	fsys, dir := vfs.Default, filepath.Join(t.TempDir(), "log")
	l, err := Open(fsys, dir, Options{SegmentSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tails := map[uint64]*Tail{}
	var got []uint64
	gotRecs := map[uint64][]byte{}
	poll := func() {
		seqs, err := ListSegments(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range seqs {
			if tails[q] == nil {
				tails[q] = NewTail(fsys, dir, q)
			}
			if _, err := tails[q].Next(func(g uint64, recs [][]byte) error {
				got = append(got, g)
				gotRecs[g] = bytes.Join(recs, nil)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 1; i <= 40; i++ {
		rec := []byte(fmt.Sprintf("record of group %d %s", i, bytes.Repeat([]byte("x"), i*7)))
		if _, err := l.Append([][]byte{rec}); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			poll()
		}
	}
	poll()
	if len(got) != 40 {
		t.Fatalf("tails handed out %d groups, want 40: %v", len(got), got)
	}
	for i, g := range got {
		if g != uint64(i+1) || !bytes.HasPrefix(gotRecs[g], []byte(fmt.Sprintf("record of group %d ", g))) {
			t.Fatalf("group %d at position %d: %q", g, i, gotRecs[g])
		}
	}
	// A half-written group (its commit marker missing) is not handed out.
	seqs, _ := ListSegments(fsys, dir)
	last := seqs[len(seqs)-1]
	f, err := fsys.OpenReadWrite(filepath.Join(dir, SegmentName(last)))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	frame, _ := appendFrame(nil, typeData, []byte("no marker"))
	if _, err := f.WriteAt(frame, st.Size()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n, err := tails[last].Next(func(uint64, [][]byte) error { return nil }); n != 0 || err != nil {
		t.Fatalf("half-written group: %d groups, %v", n, err)
	}
	// Deleted segments.
	if err := l.DeleteThrough(20); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTail(fsys, dir, 1).Next(func(uint64, [][]byte) error { return nil }); !errors.Is(err, ErrSegmentGone) {
		t.Fatalf("deleted segment: %v, want ErrSegmentGone", err)
	}
}

// TestEncodeDecodeSegment: EncodeSegment writes what Open and
// DecodeSegment read; any flipped byte is a CorruptError.
func TestEncodeDecodeSegment(t *testing.T) {
	groups := [][][]byte{{[]byte("a"), []byte("bb")}, {}, {[]byte("ccc")}}
	b := EncodeSegment(2, 10, groups)
	var seen []uint64
	first, last, err := DecodeSegment("x", b, func(g uint64, recs [][]byte) error {
		seen = append(seen, g)
		return nil
	})
	if err != nil || first != 10 || last != 12 || len(seen) != 3 {
		t.Fatalf("decode: %d-%d %v %v", first, last, seen, err)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		var ce *CorruptError
		if _, _, err := DecodeSegment("x", c, nil); !errors.As(err, &ce) {
			t.Fatalf("byte %d flipped: %v, want a CorruptError", i, err)
		}
	}
	// Open reads an encoded segment as a log continuing at group 10.
	fsys, dir := vfs.NewCrashableMem(), "/log"
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vfs.Publish(fsys, filepath.Join(dir, SegmentName(2)), true, func(f vfs.File) error { _, err := f.Write(b); return err }); err != nil {
		t.Fatal(err)
	}
	l, err := Open(fsys, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.LastGroup() != 12 {
		t.Fatalf("last group %d, want 12", l.LastGroup())
	}
	if err := l.Replay(9, func(uint64, [][]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestTailWindowEndsAtGroup: Tail.Next hands out every complete group in
// one call, also when its first read (tailWindow) ends exactly at the end
// of a group, or a few bytes into the next group's first frame header
// that happen to be zeros (the low bytes of a record length that is a
// multiple of 256). It stopped there, as if only zeros followed, so that
// LocalLast (the target of wsfs sync) fell short of groups already
// acknowledged.
func TestTailWindowEndsAtGroup(t *testing.T) {
	for _, into := range []int{0, 1, 2} { // bytes of the next frame in the window
		fsys, dir := vfs.NewCrashableMem(), "/log"
		l := mustOpen(t, fsys, dir, Options{})
		first := make([]byte, int(tailWindow)-frameHeaderLen-(frameHeaderLen+commitPayloadLen)-into)
		groups := [][][]byte{{first}, {make([]byte, 1<<16)}, {[]byte("third")}}
		appendAll(t, l, 1, groups, true)
		n, err := NewTail(fsys, dir, 1).Next(func(uint64, [][]byte) error { return nil })
		if err != nil || n != len(groups) {
			t.Fatalf("window ends %d bytes into group 2: Tail.Next handed out %d groups, %v; want %d", into, n, err, len(groups))
		}
		l.Close()
	}
}
