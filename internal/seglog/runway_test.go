package seglog

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
)

// fileSize returns the length of the file at path.
func fileSize(t *testing.T, fsys vfs.FS, path string) int64 {
	t.Helper()
	st, err := fsys.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestRunway: the active segment is kept written with zeros past its last
// group; every reader of the log takes them for the clean end they are:
// Open (no repair), OpenReadOnly (no torn tail, no damage), ReadCommitted,
// Tail (also for a group larger than its first read) and Replay. A
// rollover cuts the runway off the segment it seals.
func TestRunway(t *testing.T) {
	fsys, dir := vfs.NewCrashableMem(), "/log"
	groups := genGroups(31, 5, 3, 100)
	big := [][]byte{bytes.Repeat([]byte{7}, 3*int(tailWindow)+5)} // larger than Tail's first read
	groups = append(groups, big)
	seg1 := filepath.Join(dir, segName(1))

	l := mustOpen(t, fsys, dir, Options{})
	appendAll(t, l, 1, groups[:1], true)
	end := l.segs[0].size
	if got := fileSize(t, fsys, seg1); got != end+runwayLen {
		t.Fatalf("segment is %d bytes after a group ending at %d, want a runway of %d", got, end, runwayLen)
	}
	appendAll(t, l, 2, groups[1:3], true) // into the runway
	if got := fileSize(t, fsys, seg1); got != end+runwayLen {
		t.Fatalf("segment is %d bytes after appends into the runway, want %d as before", got, end+runwayLen)
	}
	tail := NewTail(fsys, dir, 1)
	var tailed [][][]byte
	follow := func() {
		t.Helper()
		if _, err := tail.Next(func(g uint64, recs [][]byte) error {
			if g != uint64(len(tailed)+1) {
				t.Fatalf("Tail handed out group %d after %d", g, len(tailed))
			}
			tailed = append(tailed, recs)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	follow()
	if len(tailed) != 3 {
		t.Fatalf("Tail: %d groups, want 3", len(tailed))
	}
	appendAll(t, l, 4, groups[3:], true) // the big group goes past the runway: it is extended
	follow()
	if !equalGroups(tailed, groups) {
		t.Fatalf("Tail: %d groups (or contents differ), want %d", len(tailed), len(groups))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := OpenReadOnly(fsys, dir)
	if err != nil || ro.Damage() != nil || ro.Repaired() != nil || ro.LastGroup() != uint64(len(groups)) {
		t.Fatalf("OpenReadOnly: %v, damage %v, torn %+v, last %d", err, ro.Damage(), ro.Repaired(), ro.LastGroup())
	}
	var read [][][]byte
	if last, err := ReadCommitted(fsys, dir, 0, func(g uint64, recs [][]byte) error {
		read = append(read, recs)
		return nil
	}); err != nil || last != uint64(len(groups)) || !equalGroups(read, groups) {
		t.Fatalf("ReadCommitted: last %d, %v, %d groups", last, err, len(read))
	}

	// Reopen: a clean end, the runway kept; then a rollover seals the
	// segment at its last group.
	l = mustOpen(t, fsys, dir, Options{SegmentSize: 1})
	if l.Repaired() != nil {
		t.Fatalf("reopen repaired %+v: the runway is not a torn tail", *l.Repaired())
	}
	sealedEnd := l.segs[0].size
	if got := fileSize(t, fsys, seg1); got <= sealedEnd {
		t.Fatalf("reopen: segment is %d bytes, want its runway after %d kept", got, sealedEnd)
	}
	appendAll(t, l, uint64(len(groups)+1), groups[:1], true)
	if len(l.segs) != 2 {
		t.Fatalf("no rollover: %d segments", len(l.segs))
	}
	b, err := vfs.ReadFile(fsys, seg1)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != sealedEnd {
		t.Fatalf("sealed segment is %d bytes, want %d (its runway cut off)", len(b), sealedEnd)
	}
	if _, last, err := DecodeSegment(seg1, b, nil); err != nil || last != uint64(len(groups)) {
		t.Fatalf("DecodeSegment of the sealed segment: last %d, %v", last, err)
	}
	l.Close()
	l = mustOpen(t, fsys, dir, Options{})
	if got := replayAll(t, l, 0); !equalGroups(got, append(groups, groups[0])) || l.Repaired() != nil {
		t.Fatalf("replay after rollover: %d groups, repaired %+v", len(got), l.Repaired())
	}
	l.Close()
}

// TestRunwayNoSpace: a full filesystem while the runway is extended leaves
// the group appended and the log usable, without a runway (the zeros
// written are cut off); the next append past the end extends it again.
func TestRunwayNoSpace(t *testing.T) {
	for _, errno := range []error{syscall.ENOSPC, errorfs.Short(syscall.ENOSPC), syscall.EDQUOT} {
		mem := vfs.NewCrashableMem()
		fsys, arm := armable(mem)
		dir := "/log"
		seg := filepath.Join(dir, segName(1))
		groups := genGroups(32, 3, 2, 60)
		l := mustOpen(t, fsys, dir, Options{})
		armed := arm(errorfs.OnNth(errorfs.OpWrite, "*.seg", 2, errno)) // the zeros after the group
		appendAll(t, l, 1, groups[:1], true)
		if armed.Injected() != 1 {
			t.Fatalf("%v: fault injected %d times, want 1", errno, armed.Injected())
		}
		arm(nil)
		if got, want := fileSize(t, mem, seg), l.segs[0].size; got != want {
			t.Fatalf("%v: segment is %d bytes after a failed runway, want %d (the group only)", errno, got, want)
		}
		appendAll(t, l, 2, groups[1:2], true)
		if got, want := fileSize(t, mem, seg), l.segs[0].size+runwayLen; got != want {
			t.Fatalf("%v: segment is %d bytes, want %d (runway extended again)", errno, got, want)
		}
		appendAll(t, l, 3, groups[2:], true)
		l.Close()
		l = mustOpen(t, mem, dir, Options{})
		if got := replayAll(t, l, 0); !equalGroups(got, groups) || l.Repaired() != nil {
			t.Fatalf("%v: replay %d groups, repaired %+v", errno, len(got), l.Repaired())
		}
		l.Close()
	}

	// Any other failure of the runway's write fails the log.
	mem := vfs.NewCrashableMem()
	rule := errorfs.OnNth(errorfs.OpWrite, "*.seg", 3, syscall.EIO) // 1: header, 2: group, 3: zeros
	l := mustOpen(t, errorfs.Wrap(mem, rule), "/log", Options{})
	if _, err := l.Append(genGroups(33, 1, 1, 10)[0]); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append with the runway's write failing: %v, want ErrFailed wrapping EIO", err)
	}
}

// TestRunwayLargeGroup: a group of runwayMaxGroup bytes or more that ends
// past the runway does not extend it (the zeros would cost more than they
// save); the next small group does.
func TestRunwayLargeGroup(t *testing.T) {
	fsys, dir := vfs.NewCrashableMem(), "/log"
	seg := filepath.Join(dir, segName(1))
	l := mustOpen(t, fsys, dir, Options{})
	defer l.Close()
	large := [][][]byte{{make([]byte, runwayMaxGroup)}}
	appendAll(t, l, 1, large, true)
	if got, want := fileSize(t, fsys, seg), l.segs[0].size; got != want {
		t.Fatalf("after a large group the segment is %d bytes, want %d (no runway)", got, want)
	}
	appendAll(t, l, 2, [][][]byte{{[]byte("small")}}, true)
	if got, want := fileSize(t, fsys, seg), l.segs[0].size+runwayLen; got != want {
		t.Fatalf("after a small group the segment is %d bytes, want %d (a runway)", got, want)
	}
}

// TestRunwayTornAfterZeroRecordEnd: a power cut during an append into the
// runway kept the group's first record, which ends in zeros, and none of
// the sectors after it. The zeros of the record and those of the runway
// run together, past the start of the next frame: a torn tail (this
// panicked, slicing the frame's bytes up to the last nonzero byte, which
// lies before the frame).
func TestRunwayTornAfterZeroRecordEnd(t *testing.T) {
	groups := genGroups(42, 4, 3, 200)
	rec := bytes.Repeat([]byte{0x5a}, 700)
	clear(rec[100:]) // 600 trailing zeros: a sector boundary lies among them
	groups = append(groups, [][]byte{rec, bytes.Repeat([]byte{1}, 300)})
	segs, _, gstart, _ := buildLog(t, 0, groups)
	last := len(groups) - 1
	cut := gstart[last] + frameHeaderLen + int64(len(rec)) // the second record's frame
	bad := append(slices.Clone(segs[0][:cut]), make([]byte, 4096)...)
	for _, open := range []func(fsys vfs.FS, dir string) (*Log, error){
		func(fsys vfs.FS, dir string) (*Log, error) { return OpenReadOnly(fsys, dir) },
		func(fsys vfs.FS, dir string) (*Log, error) { return Open(fsys, dir, Options{}) },
	} {
		fsys, dir := memLog(t, [][]byte{bad})
		l, err := open(fsys, dir)
		if err != nil {
			t.Fatalf("Open = %v, want a torn tail", err)
		}
		if rep := l.Repaired(); rep == nil || rep.Offset != gstart[last] || l.LastGroup() != uint64(last) {
			t.Fatalf("Repaired = %+v, last group %d; want the tail from %d, group %d last", rep, l.LastGroup(), gstart[last], last)
		}
		l.Close()
	}
}

// TestRunwayZeroedMarkerEnd: the last group was written whole (and may
// have been acknowledged), with the runway's zeros after it; then bytes at
// the end of its commit marker changed to zeros, inside one sector. A
// crash leaves an append into the runway cut short only at a sector
// boundary (the sectors after it unwritten), never inside a sector: this
// is corruption, not a torn tail to drop (it was taken for an append cut
// short, the marker's remaining bytes being a prefix of the one its group
// needs). The same bytes zeroed from a sector boundary on are a torn tail.
func TestRunwayZeroedMarkerEnd(t *testing.T) {
	for seed := uint64(50); ; seed++ {
		groups := genGroups(seed, 4, 3, 300)
		segs, _, gstart, gend := buildLog(t, 0, groups)
		seg, last := segs[0], len(groups)-1
		marker := gend[last] - (frameHeaderLen + commitPayloadLen)
		if gend[last]%sectorSize == 0 || seg[gend[last]-1] == 0 ||
			gend[last]/sectorSize != (marker+frameHeaderLen)/sectorSize {
			continue // want the marker's payload in one sector, its last byte nonzero
		}
		// Zero the marker's last byte, and its last 3 bytes.
		for _, n := range []int64{1, 3} {
			bad := append(slices.Clone(seg), make([]byte, 4096)...)
			clear(bad[gend[last]-n : gend[last]])
			checkTail(t, bad, false, marker, "commit marker of group", gstart[last], gend[last], last)
		}
		// Cut at a sector boundary inside the marker (when it has one):
		// an append into the runway that stopped there.
		if b := (marker/sectorSize + 1) * sectorSize; b < gend[last] {
			bad := append(slices.Clone(seg), make([]byte, 4096)...)
			clear(bad[b:gend[last]])
			checkTail(t, bad, true, 0, "", gstart[last], gend[last], last)
		}
		return
	}
}
