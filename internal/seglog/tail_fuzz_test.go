package seglog

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"wsfs/internal/vfs"
)

// FuzzTailAgrees checks the windowed reader of the shipper against a scan
// of the whole file. data follows a valid header of segment 1 and is
// followed by runway zeros; the file is written in two appends (cut at a
// point the input chooses) with Tail.Next called after each. Tail must
// hand out exactly the groups a scan of the whole file finds before its
// first invalid frame, in order, each once, each call handing out every
// group complete when it is made, whatever the windows cut (the first
// window is made small: 16 to 271 bytes).
func FuzzTailAgrees(f *testing.F) {
	if b, err := os.ReadFile(goldenSeg); err == nil {
		frames := b[segHeaderLen:]
		f.Add(frames, uint16(0), uint16(4096), uint8(0))
		f.Add(frames, uint16(len(frames)/2), uint16(300), uint8(37))
		f.Add(frames[:len(frames)-3], uint16(7), uint16(0), uint8(200))
	}
	big := EncodeSegment(1, 1, [][][]byte{{make([]byte, 70<<10)}, {[]byte("after")}}) // records of zeros, larger than a window
	f.Add(big[segHeaderLen:], uint16(20000), uint16(9), uint8(255))
	f.Fuzz(func(t *testing.T, data []byte, cut, runway uint16, window uint8) {
		// Small first windows, so that the inputs span several.
		defer func(w int64) { tailWindow = w }(tailWindow)
		tailWindow = 16 + int64(window)
		seg := append(segHeader{seq: 1, firstGroup: 1}.encode(), data...)
		seg = append(seg, make([]byte, runway)...)

		type group struct {
			g    uint64
			recs [][]byte
		}
		var want []group
		if _, err := scanFrames("seg", seg, segHeader{seq: 1, firstGroup: 1}, func(g uint64, recs [][]byte) error {
			want = append(want, group{g, slices.Clone(recs)})
			return nil
		}); err != nil {
			return // a marker that contradicts its group: Tail reports it too; not this test's subject
		}

		fsys, dir := vfs.NewCrashableMem(), "/log"
		if err := fsys.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, segName(1))
		fl, err := fsys.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fl.Close()
		tail := NewTail(fsys, dir, 1)
		var got []group
		// One call hands out every group complete when it is made (what
		// wsfs sync's wait for the local last group relies on).
		next := func() {
			t.Helper()
			_, err := tail.Next(func(g uint64, recs [][]byte) error {
				got = append(got, group{g, slices.Clone(recs)})
				return nil
			})
			var ce *CorruptError
			if err != nil && !errors.As(err, &ce) {
				t.Fatal(err)
			}
		}
		c := segHeaderLen + int(cut)%(len(seg)-segHeaderLen+1)
		if _, err := fl.WriteAt(seg[:c], 0); err != nil {
			t.Fatal(err)
		}
		next()
		if _, err := fl.WriteAt(seg[c:], int64(c)); err != nil {
			t.Fatal(err)
		}
		next()
		if len(got) != len(want) {
			t.Fatalf("Tail handed out %d groups, a scan of the whole file finds %d", len(got), len(want))
		}
		for i := range want {
			if got[i].g != want[i].g || !equalGroups([][][]byte{got[i].recs}, [][][]byte{want[i].recs}) {
				t.Fatalf("group %d: Tail handed out group %d with other records", want[i].g, got[i].g)
			}
		}
	})
}
