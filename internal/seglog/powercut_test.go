package seglog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"wsfs/internal/vfs"
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
// a torn tail, not corruption (found by TestPowerCutSectors), and
// ReadCommitted says so too.
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
	// A reader of the log (gc's mark) before the workspace is mounted
	// again sees the same: the groups before, and no change under way.
	var read [][][]byte
	if g, err := ReadCommitted(fsys, dir, 0, func(_ uint64, recs [][]byte) error {
		read = append(read, recs)
		return nil
	}); err != nil || g != uint64(last) || !equalGroups(read, groups[:last]) {
		t.Fatalf("ReadCommitted = %d, %v (%d groups), want the %d groups before the torn one", g, err, len(read), last)
	}
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

// genZeroyGroups returns n deterministic groups like genGroups, but whose
// records hold runs of zeros (leading, trailing, whole sectors) and are up
// to maxRec bytes, so that torn sectors of a group can be told from zeros
// it holds only by where they lie. Some groups and records are empty.
func genZeroyGroups(seed uint64, n, maxRecs, maxRec int) [][][]byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	gs := genGroups(seed, n, maxRecs, maxRec)
	for _, g := range gs {
		for _, rec := range g {
			if len(rec) == 0 || r.IntN(2) == 0 {
				continue
			}
			from := r.IntN(len(rec))
			to := from + r.IntN(len(rec)-from+1)
			if r.IntN(3) == 0 {
				to = len(rec) // a record that ends in zeros
			}
			clear(rec[from:to])
		}
	}
	return gs
}

// powerCut returns what a power loss can leave of the files under dir of
// mem: the durable state (CrashClone), except that each file whose current
// bytes differ from its durable ones takes either length, and each 512-byte
// sector of it either its durable or its current bytes (zeros past the end
// of either), chosen by r. This is the model of the package documentation:
// an unsynced write reaches the disk as any subset of its sectors, in any
// order; the file's size is the old or the new one.
func powerCut(t *testing.T, mem *vfs.MemFS, dir string, r *rand.Rand) *vfs.MemFS {
	t.Helper()
	img := mem.CrashClone()
	names, err := img.List(dir)
	if err != nil {
		return img // the directory itself is not durable yet
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		old, err := vfs.ReadFile(img, path)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := vfs.ReadFile(mem, path)
		if err != nil {
			continue // removed since: the durable bytes stay
		}
		if bytes.Equal(old, cur) {
			continue
		}
		size := len(old)
		if r.IntN(2) == 0 {
			size = len(cur)
		}
		b := make([]byte, size)
		keep := r.IntN(4) // 0: durable bytes only, 1: current only, else a random mix
		for s := 0; s < size; s += sectorSize {
			e := min(s+sectorSize, size)
			src := old
			if keep == 1 || (keep > 1 && r.IntN(2) == 0) {
				src = cur
			}
			if s < len(src) {
				copy(b[s:e], src[s:min(e, len(src))])
			}
		}
		f, err := img.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return img
}

// TestPowerCutSectors runs random workloads as the workspace's flusher
// does (append one group, sync it, then the next; rollovers, reopens,
// DeleteThrough) with groups that go into the runway, fill it, overrun it
// and roll over, and cuts the power after every durability-relevant
// operation, several times with different subsets of the unsynced sectors
// reaching the disk (powerCut). Every crash image must open without
// corruption, keep every acknowledged group and hold exactly a prefix of
// the appended groups; OpenReadOnly and ReadCommitted must agree (no
// damage, no change under way: nothing else runs).
func TestPowerCutSectors(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 512))
			groups := genZeroyGroups(seed+300, 40, 4, 1500)
			opts := Options{SegmentSize: int64(2048 + r.IntN(8192))}
			cuts := 2 // crash images per operation
			if seed == 4 {
				// The whole runway, not capped by a small segment
				// size (fewer groups and images: every image holds it).
				opts.SegmentSize, groups, cuts = 0, groups[:6], 1
			}
			mem := vfs.NewCrashableMem()
			const dir = "/ws/log"
			var acked, appended uint64
			images := 0
			check := func(desc string) {
				for range cuts {
					img := powerCut(t, mem, dir, r)
					images++
					checkPowerCut(t, img, dir, opts, groups, acked, appended, desc)
				}
			}
			mem.SetHook(func(op vfs.Op, path string) { check(fmt.Sprintf("after %v %s", op, path)) })
			l, err := Open(mem, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			for appended < uint64(len(groups)) {
				switch x := r.IntN(20); {
				case x < 17:
					appended++ // a crash during Append may keep it
					g, err := l.Append(groups[appended-1])
					if err != nil || g != appended {
						t.Fatalf("Append = %d, %v; want %d", g, err, appended)
					}
					if err := l.Sync(); err != nil {
						t.Fatal(err)
					}
					acked = g
				case x < 18:
					if err := l.DeleteThrough(uint64(r.IntN(int(acked) + 1))); err != nil {
						t.Fatal(err)
					}
				default:
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					if l, err = Open(mem, dir, opts); err != nil {
						t.Fatal(err)
					}
				}
			}
			mem.SetHook(nil)
			l.Close()
			t.Logf("%d crash images checked", images)
		})
	}
}

// checkPowerCut checks one crash image against the oracle of
// TestPowerCutSectors.
func checkPowerCut(t *testing.T, img *vfs.MemFS, dir string, opts Options, groups [][][]byte, acked, appended uint64, desc string) {
	t.Helper()
	ro, err := OpenReadOnly(img, dir)
	if err != nil || ro.Damage() != nil {
		t.Fatalf("crash %s: OpenReadOnly: %v, damage %v", desc, err, ro.Damage())
	}
	roFirst, roLast := ro.FirstGroup(), ro.LastGroup()
	ro.Close()
	var read [][][]byte
	readLast, err := ReadCommitted(img, dir, roFirst-1, func(g uint64, recs [][]byte) error {
		read = append(read, slices.Clone(recs))
		return nil
	})
	if err != nil || readLast != roLast || !equalGroups(read, groups[roFirst-1:readLast]) {
		t.Fatalf("crash %s: ReadCommitted through group %d, %v; want the groups %d..%d", desc, readLast, err, roFirst, roLast)
	}
	l, err := Open(img, dir, opts)
	if err != nil {
		t.Fatalf("crash %s (acked %d, appended %d): Open: %v", desc, acked, appended, err)
	}
	defer l.Close()
	last := l.LastGroup()
	if last < acked || last > appended || last != roLast {
		t.Fatalf("crash %s: recovered through group %d (read-only: %d), acked %d, appended %d", desc, last, roLast, acked, appended)
	}
	first := l.FirstGroup()
	if got := replayAll(t, l, first-1); !equalGroups(got, groups[first-1:last]) {
		t.Fatalf("crash %s: recovered groups %d..%d differ from the appended ones", desc, first, last)
	}
	if g, err := l.Append([][]byte{[]byte("after the power cut")}); err != nil || g != last+1 {
		t.Fatalf("crash %s: Append after recovery = %d, %v", desc, g, err)
	}
	if err := l.Sync(); err != nil {
		t.Fatalf("crash %s: Sync after recovery: %v", desc, err)
	}
}

// TestZeroRecordIsNotUnwritten: the last group was written whole (and may
// have been acknowledged) and holds zeros (a file's hole, a free database
// page), in its first record and in a later one; then a byte of the first
// record's frame header changed. Its own commit marker follows the damage,
// and zeros a crash could have left unwritten lie around, but a crash
// only zeroes whole sectors: it cannot make a length larger (here ending
// inside the zero record, whose valid frame then starts inside the damaged
// one, or past the marker), change a frame CRC (the marker's group CRC
// covers it) or zero the type byte of a header whose other bytes in the
// same sector were written. Each was taken for an unwritten sector and the
// group dropped.
func TestZeroRecordIsNotUnwritten(t *testing.T) {
	rec := append(bytes.Repeat([]byte{0x3c}, 600), make([]byte, 1100)...)
	groups := append(genGroups(43, 3, 2, 100), [][]byte{rec, make([]byte, 2048), {1}})
	segs, _, gstart, gend := buildLog(t, 0, groups)
	last := len(groups) - 1
	first := gstart[last] // the damaged frame: the first record's
	if first/sectorSize != (first+frameHeaderLen-1)/sectorSize {
		t.Fatalf("the first record's frame header at %d spans two sectors", first)
	}
	for _, tc := range []struct {
		name   string
		at     int64
		change func(byte) byte
	}{
		{"length-grown-into-zero-record", first + 1, func(b byte) byte { return b ^ 0x04 }}, // 1700 -> 2724
		{"length-grown-past-marker", first + 1, func(b byte) byte { return b ^ 0x10 }},      // 1700 -> 5796
		{"frame-crc-flipped", first + 5, func(b byte) byte { return b ^ 0x01 }},
		{"type-byte-zeroed", first + frameHeaderLen - 1, func(byte) byte { return 0 }},
	} {
		for _, runway := range []int{0, 4096} {
			bad := append(slices.Clone(segs[0]), make([]byte, runway)...)
			bad[tc.at] = tc.change(bad[tc.at])
			t.Run(fmt.Sprintf("%s/runway-%d", tc.name, runway), func(t *testing.T) {
				checkTail(t, bad, false, first, "", gstart[last], gend[last], last)
			})
		}
	}
}
