package seglog

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// TestUnwrittenSectorInLastGroup is the regression case of a power cut
// found by the e2e power-cut tests (crashfs keeping a random subset of the
// unsynced writes): the last group's append reached the disk out of order,
// its commit marker but not an earlier sector of its frames, which reads
// back as zeros. That group was never acknowledged (its fdatasync had not
// returned; the committer appends the next group only after it has), so
// this is a torn tail, not corruption: Open must drop the group, not refuse
// the workspace. A bit flip in the same place stays corruption
// (TestBitFlipLastSegment), and so does a zeroed sector in an earlier
// group, which a later group's marker proves was synced.
func TestUnwrittenSectorInLastGroup(t *testing.T) {
	groups := genGroups(12, 8, 3, 3000)
	segs, _, gstart, gend := buildLog(t, 0, groups)
	seg := segs[0]
	last := len(groups) - 1
	zeroSector := func(b []byte, from, to int64) (int64, bool) {
		for s := (from + 511) / 512 * 512; s+512 <= to; s += 512 {
			clear(b[s : s+512])
			return s, true
		}
		return 0, false
	}
	starts := frameStarts(t, seg)
	lastCommit := starts[len(starts)-1]

	bad := slices.Clone(seg)
	s, ok := zeroSector(bad, gstart[last], lastCommit)
	if !ok {
		t.Fatalf("the last group (%d..%d) spans no whole sector before its marker", gstart[last], lastCommit)
	}
	fsys, dir := memLog(t, [][]byte{bad})
	l, err := Open(fsys, dir, Options{})
	if err != nil {
		t.Fatalf("sector at %d of the unacknowledged last group unwritten: Open = %v, want a torn tail", s, err)
	}
	if rep := l.Repaired(); rep == nil || rep.Offset != gstart[last] {
		t.Fatalf("Repaired = %+v, want the tail from %d", rep, gstart[last])
	}
	if got := replayAll(t, l, 0); !equalGroups(got, groups[:last]) {
		t.Fatalf("replay differs from the groups before the last")
	}
	l.Close()

	// The same in an earlier group: the last group's marker follows, so
	// the damaged group was synced: corruption.
	bad = slices.Clone(seg)
	g := last - 1
	for ; g >= 0; g-- {
		if _, ok := zeroSector(bad, gstart[g], gend[g]-64); ok {
			break
		}
	}
	if g < 0 {
		t.Fatal("no earlier group spans a whole sector")
	}
	fsys, dir = memLog(t, [][]byte{bad})
	var ce *CorruptError
	if _, err := Open(fsys, dir, Options{}); !errors.As(err, &ce) {
		t.Fatalf("zeroed sector in a group followed by another group's marker: Open = %v, want *CorruptError", err)
	}
}

// TestUnwrittenFirstSectorOfLastGroup: a power cut during the last
// group's append kept every sector of it but the first, which it shares
// with the end of the previous group: that sector reads back as it was
// (the previous group, then zeros) and the group's frames verify from the
// next sector on, its commit marker included. It was never acknowledged:
// a torn tail, not corruption (found by TestPowerCutSectors).
func TestUnwrittenFirstSectorOfLastGroup(t *testing.T) {
	groups := genGroups(41, 6, 3, 900)
	groups = append(groups, [][]byte{bytes.Repeat([]byte{0xa5}, 1500)})
	segs, _, gstart, _ := buildLog(t, 0, groups)
	last := len(groups) - 1
	if gstart[last]%sectorSize == 0 {
		t.Fatalf("the last group starts on a sector boundary (%d)", gstart[last])
	}
	bad := append(slices.Clone(segs[0]), make([]byte, 4096)...) // in the runway
	clear(bad[gstart[last] : (gstart[last]/sectorSize+1)*sectorSize])
	fsys, dir := memLog(t, [][]byte{bad})
	l, err := Open(fsys, dir, Options{})
	if err != nil {
		t.Fatalf("first sector of the unacknowledged last group unwritten: Open = %v, want a torn tail", err)
	}
	if rep := l.Repaired(); rep == nil || rep.Offset != gstart[last] {
		t.Fatalf("Repaired = %+v, want the tail from %d", rep, gstart[last])
	}
	if got := replayAll(t, l, 0); !equalGroups(got, groups[:last]) {
		t.Fatalf("replay differs from the groups before the last")
	}
	l.Close()
}
