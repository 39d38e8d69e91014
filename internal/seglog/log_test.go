package seglog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"wsfs/internal/vfs"
)

// fsCase names a file system to run a test on.
type fsCase struct {
	name string
	new  func(t testing.TB) (vfs.FS, string) // the FS and a fresh log dir
}

var fsCases = []fsCase{
	{"os", func(t testing.TB) (vfs.FS, string) { return vfs.Default, filepath.Join(t.TempDir(), "log") }},
	{"mem", func(t testing.TB) (vfs.FS, string) { return vfs.NewCrashableMem(), "/ws/log" }},
}

// genGroups returns n deterministic groups with record sizes in
// [0, maxRec] and 0..maxRecs records each.
func genGroups(seed uint64, n, maxRecs, maxRec int) [][][]byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	gs := make([][][]byte, n)
	for i := range gs {
		recs := make([][]byte, r.IntN(maxRecs+1))
		for j := range recs {
			b := make([]byte, r.IntN(maxRec+1))
			for k := range b {
				b[k] = byte(r.Uint32())
			}
			recs[j] = b
		}
		gs[i] = recs
	}
	return gs
}

func mustOpen(t testing.TB, fsys vfs.FS, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(fsys, dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// appendAll appends groups, expecting numbers first, first+1, ...
func appendAll(t testing.TB, l *Log, first uint64, groups [][][]byte, sync bool) {
	t.Helper()
	for i, g := range groups {
		n, err := l.Append(g)
		if err != nil {
			t.Fatalf("Append group %d: %v", first+uint64(i), err)
		}
		if n != first+uint64(i) {
			t.Fatalf("Append returned group %d, want %d", n, first+uint64(i))
		}
		if sync {
			if err := l.Sync(); err != nil {
				t.Fatalf("Sync: %v", err)
			}
		}
	}
}

// replayAll returns the groups after `after`, checking their numbering.
func replayAll(t testing.TB, l *Log, after uint64) [][][]byte {
	t.Helper()
	var got [][][]byte
	next := after + 1
	err := l.Replay(after, func(g uint64, recs [][]byte) error {
		if g != next {
			return fmt.Errorf("replayed group %d, want %d", g, next)
		}
		next++
		got = append(got, slices.Clone(recs))
		return nil
	})
	if err != nil {
		t.Fatalf("Replay(%d): %v", after, err)
	}
	return got
}

func equalGroups(a, b [][][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if !bytes.Equal(a[i][j], b[i][j]) {
				return false
			}
		}
	}
	return true
}

func segFiles(t testing.TB, fsys vfs.FS, dir string) []string {
	t.Helper()
	names, err := fsys.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, n := range names {
		if _, ok := parseSegName(n); ok {
			segs = append(segs, filepath.Join(dir, n))
		}
	}
	return segs
}

func TestRoundTrip(t *testing.T) {
	for _, fc := range fsCases {
		for _, tc := range []struct {
			name            string
			segSize         int64
			groups          int
			maxRecs, maxRec int
			wantMinSegs     int
		}{
			{"one-segment", 0, 50, 8, 300, 1},
			{"rollover-small", 256, 60, 4, 100, 5},
			{"rollover-every-group", 1, 20, 3, 50, 20},
			{"empty-groups-and-records", 64, 30, 2, 0, 3},
			{"large-records", 64 << 10, 12, 3, 40 << 10, 3},
		} {
			t.Run(fc.name+"/"+tc.name, func(t *testing.T) {
				fsys, dir := fc.new(t)
				opts := Options{SegmentSize: tc.segSize}
				want := genGroups(uint64(tc.groups), tc.groups, tc.maxRecs, tc.maxRec)
				l := mustOpen(t, fsys, dir, opts)
				if l.Repaired() != nil {
					t.Fatalf("fresh log reports repair %+v", l.Repaired())
				}
				half := len(want) / 2
				appendAll(t, l, 1, want[:half], true)
				if got := replayAll(t, l, 0); !equalGroups(got, want[:half]) {
					t.Fatalf("replay before reopen differs")
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}

				// Reopen: numbering continues, nothing repaired.
				l = mustOpen(t, fsys, dir, opts)
				if l.Repaired() != nil {
					t.Fatalf("clean reopen reports repair %+v", l.Repaired())
				}
				if l.LastGroup() != uint64(half) {
					t.Fatalf("LastGroup after reopen = %d, want %d", l.LastGroup(), half)
				}
				appendAll(t, l, uint64(half)+1, want[half:], false)
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				l.Close()

				l = mustOpen(t, fsys, dir, opts)
				if got := replayAll(t, l, 0); !equalGroups(got, want) {
					t.Fatalf("replay after reopen differs (%d groups, want %d)", len(got), len(want))
				}
				if got := replayAll(t, l, 7); !equalGroups(got, want[7:]) {
					t.Fatalf("Replay(7) differs")
				}
				if got := replayAll(t, l, uint64(len(want))); len(got) != 0 {
					t.Fatalf("Replay(last) returned %d groups", len(got))
				}
				if n := len(segFiles(t, fsys, dir)); n < tc.wantMinSegs {
					t.Fatalf("%d segments, want at least %d", n, tc.wantMinSegs)
				}
			})
		}
	}
}

func TestReplayCoverage(t *testing.T) {
	fsys, dir := vfs.NewCrashableMem(), "/log"
	l := mustOpen(t, fsys, dir, Options{SegmentSize: 100})
	appendAll(t, l, 1, genGroups(1, 10, 2, 60), true)
	var ce *CorruptError
	if err := l.Replay(11, func(uint64, [][]byte) error { return nil }); !errors.As(err, &ce) {
		t.Fatalf("Replay after the end of the log: got %v, want *CorruptError", err)
	}
	if err := l.DeleteThrough(5); err != nil {
		t.Fatal(err)
	}
	if l.FirstGroup() <= 1 {
		t.Fatalf("FirstGroup = %d after DeleteThrough(5)", l.FirstGroup())
	}
	if err := l.Replay(0, func(uint64, [][]byte) error { return nil }); !errors.As(err, &ce) {
		t.Fatalf("Replay of deleted groups: got %v, want *CorruptError", err)
	}
	stop := errors.New("stop")
	if err := l.Replay(l.FirstGroup()-1, func(uint64, [][]byte) error { return stop }); err != stop {
		t.Fatalf("Replay did not return the callback's error: %v", err)
	}
}

func TestDeleteThrough(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			opts := Options{SegmentSize: 200}
			want := genGroups(3, 40, 3, 80)
			l := mustOpen(t, fsys, dir, opts)
			appendAll(t, l, 1, want, true)
			before := segFiles(t, fsys, dir)
			if len(before) < 4 {
				t.Fatalf("only %d segments", len(before))
			}
			if err := l.DeleteThrough(0); err != nil {
				t.Fatal(err)
			}
			if got := segFiles(t, fsys, dir); len(got) != len(before) {
				t.Fatalf("DeleteThrough(0) deleted segments")
			}
			if err := l.DeleteThrough(20); err != nil {
				t.Fatal(err)
			}
			first := l.FirstGroup()
			if first > 21 || first <= 1 {
				t.Fatalf("FirstGroup after DeleteThrough(20) = %d, want in (1, 21]", first)
			}
			if got := replayAll(t, l, 20); !equalGroups(got, want[20:]) {
				t.Fatal("replay after DeleteThrough differs")
			}
			// Never the active segment, even when everything is covered.
			if err := l.DeleteThrough(1000); err != nil {
				t.Fatal(err)
			}
			segs := segFiles(t, fsys, dir)
			if len(segs) != 1 || segs[0] != before[len(before)-1] {
				t.Fatalf("after DeleteThrough(all): %v, want only the active %s", segs, before[len(before)-1])
			}
			l.Close()
			l = mustOpen(t, fsys, dir, opts)
			if l.LastGroup() != 40 {
				t.Fatalf("LastGroup after reopen = %d", l.LastGroup())
			}
			appendAll(t, l, 41, want[:3], true)
			got := replayAll(t, l, l.FirstGroup()-1)
			if len(got) == 0 || !equalGroups(got[len(got)-3:], want[:3]) {
				t.Fatal("append after deleting through the end lost groups")
			}
		})
	}
}

// writeSegments builds a log in a MemFS and returns the bytes of its
// segments, in order, plus the offsets at which each group's frames start
// in its segment (ends[i] = end offset of group i+1).
func buildLog(t testing.TB, segSize int64, groups [][][]byte) (segs [][]byte, groupSeg []int, groupStart, groupEnd []int64) {
	t.Helper()
	fsys, dir := vfs.NewCrashableMem(), "/log"
	l := mustOpen(t, fsys, dir, Options{SegmentSize: segSize})
	for _, g := range groups {
		before := len(l.segs)
		start := l.segs[len(l.segs)-1].size
		if _, err := l.Append(g); err != nil {
			t.Fatal(err)
		}
		if len(l.segs) != before {
			start = segHeaderLen
		}
		groupSeg = append(groupSeg, len(l.segs)-1)
		groupStart = append(groupStart, start)
		groupEnd = append(groupEnd, l.segs[len(l.segs)-1].size)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, p := range segFiles(t, fsys, dir) {
		b, err := vfs.ReadFile(fsys, p)
		if err != nil {
			t.Fatal(err)
		}
		segs = append(segs, withoutRunway(t, b))
	}
	return segs, groupSeg, groupStart, groupEnd
}

// withoutRunway returns segment file b up to the end of its last complete
// group, checking that only zeros (the runway) follow.
func withoutRunway(t testing.TB, b []byte) []byte {
	t.Helper()
	h, status, reason := decodeHeader(b)
	if status != headerOK {
		t.Fatalf("segment header: %s", reason)
	}
	res, err := scanFrames("seg", b, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !isZero(b[res.validEnd:]) {
		t.Fatalf("segment has %d bytes after its last group that are not all zeros", int64(len(b))-res.validEnd)
	}
	return b[:res.validEnd]
}

// memLog writes segment contents into a fresh MemFS as segments 1..n.
func memLog(t testing.TB, segs [][]byte) (vfs.FS, string) {
	t.Helper()
	fsys, dir := vfs.NewCrashableMem(), "/log"
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, b := range segs {
		f, err := fsys.Create(filepath.Join(dir, segName(uint64(i+1))))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return fsys, dir
}

// TestTornTailEveryOffset cuts the last segment at every byte of its last
// group (and of the header of a fresh last segment): Open must repair to
// exactly the complete groups.
func TestTornTailEveryOffset(t *testing.T) {
	for _, tc := range []struct {
		name    string
		segSize int64
		groups  [][][]byte
	}{
		{"single-segment", 0, genGroups(5, 6, 4, 40)},
		{"last-group-alone-in-new-segment", 150, genGroups(6, 8, 3, 50)},
		{"empty-last-group", 0, append(genGroups(7, 3, 2, 20), nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			segs, gseg, gstart, gend := buildLog(t, tc.segSize, tc.groups)
			last := len(tc.groups) - 1
			if gseg[last] != len(segs)-1 {
				t.Fatal("last group not in last segment")
			}
			marker := gend[last] - (frameHeaderLen + commitPayloadLen)
			for cut := gstart[last]; cut < gend[last]; cut++ {
				// The append stopped at cut at the end of the file, or in
				// the runway (zeros follow). In the runway, past the
				// marker's type byte, only at a sector boundary: zeros
				// inside a written sector make a changed marker
				// (TestRunwayZeroedMarkerEnd).
				for _, runway := range []int64{0, 4096} {
					if runway > 0 && cut > marker+frameHeaderLen-1 && cut%sectorSize != 0 {
						continue
					}
					checkTornAt(t, tc.segSize, tc.groups, segs, gstart[last], cut, runway)
				}
			}
		})
	}
}

// checkTornAt cuts the last group of the log segs (starting at gstart in
// the last segment) at cut, followed by runway zeros, and checks that Open
// keeps exactly the complete groups: it reports the repair (or a clean
// end, when the bytes written of the last group are all zero: nothing of
// it is there) and the repaired log takes the lost group's number again.
func checkTornAt(t *testing.T, segSize int64, groups [][][]byte, segs [][]byte, gstart, cut, runway int64) {
	t.Helper()
	last := len(groups) - 1
	torn := slices.Clone(segs)
	torn[len(torn)-1] = append(slices.Clone(torn[len(torn)-1][:cut]), make([]byte, runway)...)
	size := cut + runway
	fsys, dir := memLog(t, torn)
	l, err := Open(fsys, dir, Options{SegmentSize: segSize})
	if err != nil {
		t.Fatalf("cut at %d, runway %d: Open: %v", cut, runway, err)
	}
	rep := l.Repaired()
	wantSize := gstart
	if gend := int64(len(segs[len(segs)-1])); isZero(segs[len(segs)-1][cut:]) && size >= gend {
		// The bytes not written are zeros in the group too (an empty
		// group's commit marker ends in zeros): it is all there.
		if got := replayAll(t, l, 0); rep != nil || !equalGroups(got, groups) {
			t.Fatalf("cut at %d, runway %d: the group is complete, yet Repaired = %+v and %d groups", cut, runway, rep, len(got))
		}
		l.Close()
		return
	}
	if isZero(torn[len(torn)-1][gstart:]) {
		if rep != nil {
			t.Fatalf("cut at %d, runway %d: only zeros after the last group, reported repair %+v", cut, runway, rep)
		}
		wantSize = size
	} else if rep == nil || rep.Offset != gstart || rep.DroppedBytes != size-gstart {
		t.Fatalf("cut at %d, runway %d: Repaired = %+v, want Offset %d DroppedBytes %d", cut, runway, rep, gstart, size-gstart)
	}
	if got := replayAll(t, l, 0); !equalGroups(got, groups[:last]) {
		t.Fatalf("cut at %d, runway %d: replayed %d groups, want the %d complete ones", cut, runway, len(got), last)
	}
	st, err := fsys.Stat(filepath.Join(dir, segName(uint64(len(segs)))))
	if err != nil || st.Size() != wantSize {
		t.Fatalf("cut at %d, runway %d: segment is %v bytes, want %d: %v", cut, runway, st.Size(), wantSize, err)
	}
	if g, err := l.Append(groups[last]); err != nil || g != uint64(last+1) {
		t.Fatalf("cut at %d, runway %d: Append after repair = %d, %v", cut, runway, g, err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l2 := mustOpen(t, fsys, dir, Options{SegmentSize: segSize})
	if got := replayAll(t, l2, 0); !equalGroups(got, groups) || l2.Repaired() != nil {
		t.Fatalf("cut at %d, runway %d: reopen after repair and append differs", cut, runway)
	}
	l2.Close()
}

// TestTornHeader: a crash while creating a segment leaves a last segment
// with a short or garbage header; Open rewrites it.
func TestTornHeader(t *testing.T) {
	groups := genGroups(8, 5, 3, 60)
	segs, _, _, _ := buildLog(t, 120, groups)
	fresh := segHeader{seq: uint64(len(segs) + 1), firstGroup: uint64(len(groups) + 1)}.encode()
	for cut := 0; cut < segHeaderLen; cut++ {
		for _, variant := range []string{"short", "zeros"} {
			last := fresh[:cut]
			if variant == "zeros" {
				last = make([]byte, segHeaderLen+cut)
			}
			fsys, dir := memLog(t, append(slices.Clone(segs), last))
			l, err := Open(fsys, dir, Options{SegmentSize: 120})
			if err != nil {
				t.Fatalf("%s header of %d bytes: %v", variant, cut, err)
			}
			if rep := l.Repaired(); rep == nil || rep.DroppedBytes != int64(len(last)) {
				t.Fatalf("%s header of %d bytes: Repaired = %+v", variant, cut, rep)
			}
			if got := replayAll(t, l, 0); !equalGroups(got, groups) {
				t.Fatalf("%s header of %d bytes: replay differs", variant, cut)
			}
			if g, err := l.Append(groups[0]); err != nil || g != uint64(len(groups)+1) {
				t.Fatalf("Append after header repair: %d %v", g, err)
			}
			l.Close()
		}
	}
	// The very first segment, empty: the log starts over at group 1.
	fsys, dir := memLog(t, [][]byte{nil})
	l := mustOpen(t, fsys, dir, Options{})
	if l.Repaired() == nil || l.LastGroup() != 0 {
		t.Fatalf("empty first segment: Repaired %+v LastGroup %d", l.Repaired(), l.LastGroup())
	}
	if g, err := l.Append(nil); err != nil || g != 1 {
		t.Fatalf("Append: %d %v", g, err)
	}
}

// frameStarts returns the offset of every frame in a well-formed segment.
func frameStarts(t testing.TB, b []byte) []int64 {
	var offs []int64
	for off := segHeaderLen; off < len(b); {
		f, ok, reason := parseFrame(b[off:])
		if !ok {
			t.Fatalf("frameStarts: %s at %d", reason, off)
		}
		offs = append(offs, int64(off))
		off += f.size
	}
	return offs
}

// damageOffset is where Open must report a change at byte i: the header
// for a byte of the header, else the start of the frame holding it.
func damageOffset(starts []int64, i int64) int64 {
	if i < segHeaderLen {
		return 0
	}
	at := int64(0)
	for _, s := range starts {
		if s <= i {
			at = s
		}
	}
	return at
}

// TestBitFlipSealedSegment flips one bit in every byte of a sealed segment:
// always a CorruptError naming that segment and the damaged frame.
func TestBitFlipSealedSegment(t *testing.T) {
	groups := genGroups(9, 12, 3, 20)
	segs, _, _, _ := buildLog(t, 150, groups)
	if len(segs) < 3 {
		t.Fatalf("want at least 3 segments, got %d", len(segs))
	}
	for si := 0; si < len(segs)-1; si++ {
		starts := frameStarts(t, segs[si])
		for i := range int64(len(segs[si])) {
			bit := byte(1) << (i % 8)
			bad := slices.Clone(segs)
			bad[si] = slices.Clone(bad[si])
			bad[si][i] ^= bit
			fsys, dir := memLog(t, bad)
			_, err := Open(fsys, dir, Options{SegmentSize: 150})
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("segment %d byte %d flipped: Open = %v, want *CorruptError", si+1, i, err)
			}
			wantSeg := filepath.Join(dir, segName(uint64(si+1)))
			if ce.Segment != wantSeg || ce.Offset != damageOffset(starts, i) {
				t.Fatalf("segment %d byte %d flipped: error names %s offset %d, want %s offset %d (%v)",
					si+1, i, ce.Segment, ce.Offset, wantSeg, damageOffset(starts, i), err)
			}
			// Nothing was modified.
			after, _ := vfs.ReadFile(fsys, wantSeg)
			if !bytes.Equal(after, bad[si]) {
				t.Fatalf("Open modified a corrupt sealed segment")
			}
		}
	}
}

// TestBitFlipLastSegment: a flipped bit anywhere in the last segment,
// the last group's commit marker included, is corruption at the damaged
// frame: a crash cuts an append short or leaves sectors unwritten (zeros),
// it never changes a written byte, so a marker that is all there but does
// not verify belongs to a group that was written and may have been
// acknowledged (issue 11 item 16: it used to be dropped as a torn tail).
func TestBitFlipLastSegment(t *testing.T) {
	groups := genGroups(10, 6, 3, 30)
	segs, _, _, _ := buildLog(t, 0, groups)
	seg := segs[0]
	starts := frameStarts(t, seg)
	for _, runway := range []int{0, 4096} { // the file ends there, or zeros follow
		for i := int64(0); i < int64(len(seg)); i++ {
			bad := append(slices.Clone(seg), make([]byte, runway)...)
			bad[i] ^= 0x10
			fsys, dir := memLog(t, [][]byte{bad})
			_, err := Open(fsys, dir, Options{})
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("runway %d, byte %d flipped: Open = %v, want *CorruptError", runway, i, err)
			}
			if ce.Offset != damageOffset(starts, i) {
				t.Fatalf("runway %d, byte %d flipped: offset %d, want %d", runway, i, ce.Offset, damageOffset(starts, i))
			}
			if after, _ := vfs.ReadFile(fsys, filepath.Join(dir, segName(1))); !bytes.Equal(after, bad) {
				t.Fatalf("runway %d, byte %d flipped: Open modified the segment", runway, i)
			}
		}
	}
}

// TestTailClassification pins what the format lets Open tell apart at the
// end of the last segment: cut short or zeroed (torn: repaired) against
// complete but changed (corrupt: refused, naming segment and offset).
func TestTailClassification(t *testing.T) {
	rec := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7) | 1 // no zero byte: zeros only where a test puts them
		}
		return b
	}
	groups := [][][]byte{{rec(300)}, {rec(200), rec(100)}, {}, {rec(1500), rec(40), rec(700)}}
	segs, _, gstart, gend := buildLog(t, 0, groups)
	seg := segs[0]
	last := len(groups) - 1
	marker := gend[last] - (frameHeaderLen + commitPayloadLen)
	zero := func(b []byte, from, to int64) []byte {
		b = slices.Clone(b)
		clear(b[from:to])
		return b
	}
	flip := func(b []byte, at int64) []byte {
		b = slices.Clone(b)
		b[at] ^= 0x01
		return b
	}
	sectorAfter := (gstart[last]/sectorSize + 1) * sectorSize // a sector inside the last group
	if sectorAfter+sectorSize > marker {
		t.Fatalf("last group too short for the test: %d..%d", gstart[last], gend[last])
	}
	for _, tc := range []struct {
		name    string
		seg     []byte
		torn    bool
		corrupt int64 // offset, when not torn
		says    string
		// A marker cut inside a sector (not at its end) is torn at the
		// end of the file only: in the runway, its zeros were written.
		corruptInRunway bool
	}{
		{"marker-cut-short", seg[:marker+10], true, 0, "", true},
		{"marker-absent", seg[:marker], true, 0, "", false},
		{"marker-zeroed", zero(seg, marker, gend[last]), true, 0, "", false},
		// A sector of the group unwritten and the marker not yet written.
		{"unwritten-sector-in-group", zero(seg, sectorAfter, sectorAfter+sectorSize)[:marker], true, 0, "", false},

		{"marker-crc-flipped", flip(seg, marker+5), false, marker, "commit marker of group 4", false},
		{"marker-group-flipped", flip(seg, marker+frameHeaderLen), false, marker, "may have been acknowledged", false},
		{"marker-count-flipped", flip(seg, marker+frameHeaderLen+8), false, marker, "fails verification", false},
		{"marker-length-flipped-long", flip(seg, marker+2), false, marker, "length field", false},
		{"marker-length-flipped-short", flip(seg, marker), false, marker, "commit marker", false},
		// A complete frame of nonzero bytes that does not verify.
		{"garbage-frame-after-last-group", append(append(slices.Clone(seg), 31, 0, 0, 0), bytes.Repeat([]byte{0xa5}, 36)...), false, gend[last], "changed since", false},
		{"record-flipped", flip(seg, gstart[last]+frameHeaderLen+3), false, gstart[last], "not a torn tail", false},
	} {
		// Each case as the end of the file, and followed by zeros: in the
		// runway, a tear looks the same with the file going on.
		for _, runway := range []int{0, 100, 4096} {
			t.Run(fmt.Sprintf("%s/runway-%d", tc.name, runway), func(t *testing.T) {
				torn, corrupt, says := tc.torn, tc.corrupt, tc.says
				if runway > 0 && tc.corruptInRunway {
					torn, corrupt, says = false, marker, "may have been acknowledged"
				}
				checkTail(t, append(slices.Clone(tc.seg), make([]byte, runway)...), torn, corrupt, says, gstart[last], gend[last], last)
			})
		}
	}
	// Zeros after the last complete group are a runway: a clean end.
	for _, runway := range []int{1, 100, 4096} {
		fsys, dir := memLog(t, [][]byte{append(slices.Clone(seg), make([]byte, runway)...)})
		l := mustOpen(t, fsys, dir, Options{})
		if rep := l.Repaired(); rep != nil || l.LastGroup() != uint64(last+1) {
			t.Fatalf("runway of %d zeros: Repaired = %+v, last group %d, want a clean end at group %d", runway, rep, l.LastGroup(), last+1)
		}
		if g, err := l.Append(groups[0]); err != nil || g != uint64(last+2) {
			t.Fatalf("runway of %d zeros: Append = %d, %v", runway, g, err)
		}
		l.Close()
	}
}

// checkTail opens the single segment seg and checks the verdict on its
// tail: torn (repaired to gstart, the last group's start) or a
// *CorruptError at offset corrupt whose message contains says.
func checkTail(t *testing.T, seg []byte, torn bool, corrupt int64, says string, gstart, gend int64, last int) {
	t.Helper()
	fsys, dir := memLog(t, [][]byte{seg})
	l, err := Open(fsys, dir, Options{})
	if torn {
		if err != nil {
			t.Fatalf("Open = %v, want a torn-tail repair", err)
		}
		defer l.Close()
		if rep := l.Repaired(); rep == nil || rep.Offset != gstart {
			t.Fatalf("Repaired = %+v, want truncation to %d", rep, gstart)
		}
		return
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != corrupt || !strings.Contains(err.Error(), says) {
		t.Fatalf("Open = %v, want *CorruptError at %d saying %q", err, corrupt, says)
	}
	if !strings.Contains(err.Error(), "wsfs fsck --repair") {
		t.Fatalf("message does not name the repair command: %v", err)
	}
	wantEnd, wantGood := gstart, uint64(last)
	if corrupt >= gend {
		wantEnd, wantGood = gend, uint64(last+1)
	}
	if ce.GroupEnd != wantEnd || ce.LastGood != wantGood {
		t.Fatalf("GroupEnd %d LastGood %d, want %d and %d", ce.GroupEnd, ce.LastGood, wantEnd, wantGood)
	}
}

func TestStructuralCorruption(t *testing.T) {
	groups := genGroups(11, 10, 2, 40)
	segs, _, _, _ := buildLog(t, 100, groups)
	if len(segs) < 4 {
		t.Fatalf("want at least 4 segments, got %d", len(segs))
	}
	var ce *CorruptError
	t.Run("missing-middle-segment", func(t *testing.T) {
		fsys, dir := memLog(t, segs)
		if err := fsys.Remove(filepath.Join(dir, segName(2))); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(fsys, dir, Options{}); !errors.As(err, &ce) || ce.Segment != filepath.Join(dir, segName(2)) {
			t.Fatalf("Open = %v, want *CorruptError naming segment 2", err)
		}
	})
	t.Run("group-gap", func(t *testing.T) {
		// Segment 2 rewritten to start one group later than segment 1 ends.
		bad := slices.Clone(segs)
		s2 := slices.Clone(bad[1])
		h, _, _ := decodeHeader(s2)
		h.firstGroup++
		copy(s2, h.encode())
		bad[1] = s2
		fsys, dir := memLog(t, bad)
		if _, err := Open(fsys, dir, Options{}); !errors.As(err, &ce) || ce.Segment != filepath.Join(dir, segName(2)) || ce.Offset != 0 {
			t.Fatalf("Open = %v, want *CorruptError at segment 2 offset 0", err)
		}
	})
	t.Run("wrong-seq-in-header", func(t *testing.T) {
		bad := slices.Clone(segs)
		bad[0], bad[1] = bad[1], bad[0]
		fsys, dir := memLog(t, bad)
		if _, err := Open(fsys, dir, Options{}); !errors.As(err, &ce) {
			t.Fatalf("Open = %v, want *CorruptError", err)
		}
	})
	t.Run("unknown-version", func(t *testing.T) {
		bad := slices.Clone(segs)
		s := slices.Clone(bad[len(bad)-1])
		s[8] = 2
		binaryPutHeaderCRC(s)
		bad[len(bad)-1] = s
		fsys, dir := memLog(t, bad)
		if _, err := Open(fsys, dir, Options{}); !errors.As(err, &ce) || ce.Offset != 0 {
			t.Fatalf("Open = %v, want *CorruptError (unknown version is never a torn tail)", err)
		}
	})
	t.Run("first-segment-deleted-torn-header", func(t *testing.T) {
		// Segment 1 gone (DeleteThrough), segment 2 has a bad header: the
		// first group number cannot be known.
		fsys, dir := memLog(t, [][]byte{nil, {1, 2, 3}})
		if err := fsys.Remove(filepath.Join(dir, segName(1))); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(fsys, dir, Options{}); !errors.As(err, &ce) {
			t.Fatalf("Open = %v, want *CorruptError", err)
		}
	})
	t.Run("message-says-what-to-do", func(t *testing.T) {
		msg := (&CorruptError{Segment: "x.seg", Offset: 7, Reason: "r"}).Error()
		for _, s := range []string{"x.seg", "offset 7", "will not guess", "wsfs fsck --repair"} {
			if !bytes.Contains([]byte(msg), []byte(s)) {
				t.Errorf("CorruptError message %q lacks %q", msg, s)
			}
		}
	})
}

// binaryPutHeaderCRC recomputes a segment header's CRC after an edit.
func binaryPutHeaderCRC(s []byte) {
	binary.LittleEndian.PutUint32(s[28:], crc32.Checksum(s[:28], castagnoli))
}

// TestLastGroupConcurrent reads LastGroup and Repaired from another
// goroutine while the owner appends (run with -race).
func TestLastGroupConcurrent(t *testing.T) {
	fsys, dir := vfs.NewCrashableMem(), "/log"
	l := mustOpen(t, fsys, dir, Options{SegmentSize: 300})
	groups := genGroups(30, 200, 2, 30)
	done := make(chan struct{})
	seen := make(chan uint64, 1)
	go func() {
		var max uint64
		for {
			g := l.LastGroup()
			if g < max {
				t.Errorf("LastGroup went back from %d to %d", max, g)
			}
			max = g
			_ = l.Repaired()
			select {
			case <-done:
				seen <- max
				return
			default:
			}
		}
	}()
	appendAll(t, l, 1, groups, false)
	close(done)
	select {
	case <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("reader goroutine did not stop")
	}
	if l.LastGroup() != uint64(len(groups)) {
		t.Fatalf("LastGroup = %d", l.LastGroup())
	}
}

// TestRepairIsLogged: a repaired torn tail is logged once at Warn with the
// segment and the dropped bytes; a clean open logs no warning.
func TestRepairIsLogged(t *testing.T) {
	groups := genGroups(31, 3, 2, 40)
	segs, _, gstart, _ := buildLog(t, 0, groups)
	clean := segs[0]
	wantDropped := fmt.Sprintf("dropped_bytes=%d", int64(len(clean)-5)-gstart[2])
	for _, tc := range []struct {
		name  string
		seg   []byte
		warns int
	}{{"clean", clean, 0}, {"torn", clean[:len(clean)-5], 1}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
			fsys, dir := memLog(t, [][]byte{tc.seg})
			mustOpen(t, fsys, dir, Options{Logger: logger})
			out := buf.String()
			if n := strings.Count(out, "level=WARN"); n != tc.warns {
				t.Fatalf("%d warnings, want %d: %s", n, tc.warns, out)
			}
			if tc.warns > 0 && (!strings.Contains(out, segName(1)) || !strings.Contains(out, wantDropped)) {
				t.Fatalf("warning lacks segment or dropped bytes: %s", out)
			}
		})
	}
}

func TestClosedAndChangedUnderneath(t *testing.T) {
	fsys, dir := vfs.NewCrashableMem(), "/log"
	l := mustOpen(t, fsys, dir, Options{SegmentSize: 100})
	appendAll(t, l, 1, genGroups(40, 8, 2, 50), true)

	// A sealed segment damaged after Open: Replay notices, never hands out
	// wrong records.
	p := filepath.Join(dir, segName(1))
	f, err := fsys.OpenReadWrite(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, segHeaderLen+frameHeaderLen); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var ce *CorruptError
	if err := l.Replay(0, func(uint64, [][]byte) error { return nil }); !errors.As(err, &ce) || ce.Segment != p {
		t.Fatalf("Replay over a segment damaged after Open = %v, want *CorruptError for %s", err, p)
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Append(nil); err == nil {
		t.Fatal("Append on a closed log succeeded")
	}
	if err := l.Sync(); err == nil {
		t.Fatal("Sync on a closed log succeeded")
	}
}

// TestOpenReadOnly: inspection writes nothing, reports a torn tail without
// repairing it, and after damage still replays the complete groups before
// it (what fsck needs to name what is affected).
func TestOpenReadOnly(t *testing.T) {
	groups := genGroups(13, 12, 3, 20)
	segs, gseg, gstart, _ := buildLog(t, 150, groups)
	if len(segs) < 3 {
		t.Fatalf("want 3 segments, got %d", len(segs))
	}
	t.Run("torn", func(t *testing.T) {
		torn := slices.Clone(segs)
		torn[len(torn)-1] = torn[len(torn)-1][:len(torn[len(torn)-1])-3]
		fsys, dir := memLog(t, torn)
		l, err := OpenReadOnly(fsys, dir)
		if err != nil || l.Damage() != nil || l.Repaired() == nil {
			t.Fatalf("OpenReadOnly = %v, damage %v, repaired %+v", err, l.Damage(), l.Repaired())
		}
		if got := replayAll(t, l, 0); !equalGroups(got, groups[:len(groups)-1]) {
			t.Fatalf("replayed %d groups", len(got))
		}
		if b, _ := vfs.ReadFile(fsys, filepath.Join(dir, segName(uint64(len(segs))))); !bytes.Equal(b, torn[len(torn)-1]) {
			t.Fatal("OpenReadOnly changed the torn segment")
		}
		if _, err := l.Append(nil); err == nil {
			t.Fatal("Append on a read-only log succeeded")
		}
	})
	t.Run("damage-in-sealed-segment", func(t *testing.T) {
		// Flip a byte of the second group of segment 2.
		g := -1
		for i := range groups {
			if gseg[i] == 1 && i > 0 && gseg[i-1] == 1 {
				g = i
				break
			}
		}
		if g < 0 {
			t.Fatal("the test log has no segment with two groups: adjust its SegmentSize or genGroups so this case is exercised")
		}
		bad := slices.Clone(segs)
		bad[1] = slices.Clone(bad[1])
		bad[1][gstart[g]+4] ^= 0x80 // its first frame's CRC
		fsys, dir := memLog(t, bad)
		l, err := OpenReadOnly(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		d := l.Damage()
		if d == nil || d.Segment != filepath.Join(dir, segName(2)) || d.Offset != gstart[g] || d.GroupEnd != gstart[g] || d.LastGood != uint64(g) {
			t.Fatalf("Damage = %+v, want segment 2 offset %d, good through group %d", d, gstart[g], g)
		}
		if l.LastGroup() != uint64(g) {
			t.Fatalf("LastGroup %d, want %d", l.LastGroup(), g)
		}
		if got := replayAll(t, l, 0); !equalGroups(got, groups[:g]) {
			t.Fatalf("replayed %d groups, want %d", len(got), g)
		}
		// The records of the groups after the damage that still verify:
		// every one but the damaged frame (group g's first record).
		lost := l.LostRecords()
		var want [][]byte
		for i := g; i < len(groups); i++ {
			for j, r := range groups[i] {
				if i == g && j == 0 {
					continue
				}
				want = append(want, r)
			}
		}
		if len(lost) < len(want) {
			t.Fatalf("LostRecords found %d records, want at least %d", len(lost), len(want))
		}
		for _, w := range want {
			if !slices.ContainsFunc(lost, func(b []byte) bool { return bytes.Equal(b, w) }) {
				t.Fatalf("LostRecords lacks a record of %d bytes", len(w))
			}
		}
	})
	t.Run("missing-dir", func(t *testing.T) {
		l, err := OpenReadOnly(vfs.NewCrashableMem(), "/nothing")
		if err != nil || l.LastGroup() != 0 || l.Damage() != nil {
			t.Fatalf("%v %v", err, l)
		}
		if err := l.Replay(0, func(uint64, [][]byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
}

// TestOpenWritesNothingIntoALogBehindItsCheckpoint: with Options.Checkpoint
// > 0, a log directory that holds no segment, or whose segment 1 was
// emptied, is refused with a *CorruptError and left as it was: Open
// neither creates a fresh segment 1 nor rewrites the emptied header (which
// would make the log look complete to a lock-free reader such as gc).
// Without a checkpoint the same directories are a new log, as before.
func TestOpenWritesNothingIntoALogBehindItsCheckpoint(t *testing.T) {
	for _, fc := range fsCases {
		for _, emptied := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/emptied=%v", fc.name, emptied), func(t *testing.T) {
				fsys, dir := fc.new(t)
				l := mustOpen(t, fsys, dir, Options{})
				if _, err := l.Append(genGroups(3, 1, 2, 50)[0]); err != nil {
					t.Fatal(err)
				}
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				seg := filepath.Join(dir, segName(1))
				if emptied {
					f, err := fsys.OpenReadWrite(seg)
					if err != nil {
						t.Fatal(err)
					}
					err = f.Truncate(0)
					f.Close()
					if err != nil {
						t.Fatal(err)
					}
				} else if err := fsys.Remove(seg); err != nil {
					t.Fatal(err)
				}
				state := func() string {
					names, _ := fsys.List(dir)
					out := fmt.Sprint(names)
					if fi, err := fsys.Stat(seg); err == nil {
						out += fmt.Sprintf(" %d bytes", fi.Size())
					}
					return out
				}
				before := state()
				_, err := Open(fsys, dir, Options{Checkpoint: 1})
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Segment != seg {
					t.Fatalf("Open = %v, want a *CorruptError naming %s", err, seg)
				}
				if got := state(); got != before {
					t.Fatalf("Open of a refused log wrote into it: %s, was %s", got, before)
				}
				l = mustOpen(t, fsys, dir, Options{}) // no checkpoint: a new log
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
