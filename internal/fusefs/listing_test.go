package fusefs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/workspace"
)

// TestListings checks the offsets of handle-less READDIR: offset 0 starts
// a snapshot, an offset continues the snapshot it came from whatever the
// directory became meanwhile, a snapshot no longer kept is replaced by a
// new one at the same index, and an offset the mount never gave is
// EINVAL.
func TestListings(t *testing.T) {
	clock := time.Unix(1e9, 0)
	l := newListings()
	l.now = func() time.Time { return clock }
	state := map[workspace.Ino][]string{1: {"a", "b", "c"}, 2: {"x"}}
	reads := 0
	read := func(dir workspace.Ino) func() ([]workspace.DirEntry, error) {
		return func() ([]workspace.DirEntry, error) {
			reads++
			var ents []workspace.DirEntry
			for i, n := range state[dir] {
				ents = append(ents, workspace.DirEntry{Name: n, Ino: workspace.Ino(100 + i)})
			}
			return ents, nil
		}
	}
	names := func(ls *listing, idx int) string {
		s := ""
		for _, e := range ls.entries[min(idx, len(ls.entries)):] {
			s += e.Name + " "
		}
		return s
	}

	first, idx, err := l.at(1, 0, read(1))
	if err != nil || idx != 0 || names(first, idx) != ". .. a b c " {
		t.Fatalf("first listing: %v %d %q", err, idx, names(first, 0))
	}
	// The directory changes between two READDIRs of one listing: the
	// listing continues in its snapshot, at the offset after "a".
	state[1] = []string{"b", "c", "d"}
	off := dirOffset(first.num, 2)
	cont, idx, err := l.at(1, off, read(1))
	if err != nil || cont != first || names(cont, idx) != "b c " {
		t.Fatalf("continued listing: %v %q", err, names(cont, idx))
	}
	// A new listing (offset 0) sees the change.
	second, _, err := l.at(1, 0, read(1))
	if err != nil || second.num == first.num || names(second, 0) != ". .. b c d " {
		t.Fatalf("second listing: %v %q", err, names(second, 0))
	}
	// An offset of directory 1's listing used on directory 2 is not
	// continued there: a new snapshot of 2 at that index.
	other, idx, err := l.at(2, off, read(2))
	if err != nil || other.dir != 2 || names(other, idx) != "" {
		t.Fatalf("foreign offset: %v dir %d %q", err, other.dir, names(other, idx))
	}
	for _, bad := range []uint64{1 << 32, dirOffset(maxListing+1, 0), 0xffffffff_00000005} {
		if _, _, err := l.at(1, bad, read(1)); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("offset %#x: %v, want EINVAL", bad, err)
		}
	}
	// Idle listings are dropped at the next new one; an offset into a
	// dropped listing is served from a new snapshot at the same index.
	clock = clock.Add(listingsIdle + time.Second)
	if _, _, err := l.at(2, 0, read(2)); err != nil {
		t.Fatal(err)
	}
	if l.get(first.num, 1) != nil {
		t.Fatal("idle listing kept")
	}
	before := reads
	again, idx, err := l.at(1, off, read(1))
	if err != nil || reads != before+1 || again.num == first.num || names(again, idx) != "c d " {
		t.Fatalf("dropped listing: %v reads %d→%d %q", err, before, reads, names(again, idx))
	}
	// A failed read is the READDIR's error.
	boom := errors.New("boom")
	if _, _, err := l.at(1, 0, func() ([]workspace.DirEntry, error) { return nil, boom }); err != boom {
		t.Fatalf("failed read: %v", err)
	}
}

// TestListingsBounds checks that kept listings stay within their count and
// entry bounds, least recently used out first, and that the numbers wrap
// around without reusing one still kept. The listings are read to their
// end (in progress, they would be kept: TestListingsInProgressKept).
func TestListingsBounds(t *testing.T) {
	l := newListings()
	one := func() ([]workspace.DirEntry, error) { return []workspace.DirEntry{{Name: "f", Ino: 9}}, nil }
	var keep *listing
	for i := range listingsMaxCount + 10 {
		ls, _, err := l.at(1, 0, one)
		if err != nil {
			t.Fatal(err)
		}
		l.finished(ls)
		if i == 0 {
			keep = ls
		}
		if i%100 == 0 && l.get(keep.num, 1) == nil { // used recently: kept
			t.Fatalf("listing in use dropped after %d others", i)
		}
	}
	if n := l.lru.Len(); n != listingsMaxCount {
		t.Fatalf("%d listings kept, want %d", n, listingsMaxCount)
	}
	if l.entries != 3*listingsMaxCount {
		t.Fatalf("entries %d, want %d", l.entries, 3*listingsMaxCount)
	}
	big := make([]workspace.DirEntry, listingsMaxEntries/2)
	for i := range big {
		big[i] = workspace.DirEntry{Name: fmt.Sprint(i), Ino: workspace.Ino(i + 2)}
	}
	for range 3 {
		ls, _, err := l.at(2, 0, func() ([]workspace.DirEntry, error) { return big, nil })
		if err != nil {
			t.Fatal(err)
		}
		l.finished(ls)
	}
	if l.entries > listingsMaxEntries {
		t.Fatalf("%d entries kept, bound %d", l.entries, listingsMaxEntries)
	}
	l.next = maxListing - 1
	a, _, _ := l.at(1, 0, one)
	b, _, _ := l.at(1, 0, one)
	if a.num != maxListing || b.num != 1 {
		t.Fatalf("numbers around the wrap: %d, %d", a.num, b.num)
	}
	if dirOffset(a.num, 1<<31) >= 1<<63 {
		t.Fatal("offset above loff_t")
	}
}

// TestListingsInProgressKept: listings still being read are not dropped
// for the count and entry bounds while their readers are active, however
// many there are (25 readers of a 50,000-entry directory that changed
// between their opens took 1.25 M entries: the oldest listings were
// dropped mid-way, each READDIR naming one made a new snapshot that
// dropped the next, and every reader but the last got entries twice or
// not at all). Finished listings, and ones whose reader has been idle for
// listingsBusy, give way as before.
func TestListingsInProgressKept(t *testing.T) {
	clock := time.Unix(1e9, 0)
	l := newListings()
	l.now = func() time.Time { return clock }
	big := make([]workspace.DirEntry, listingsMaxEntries/4)
	for i := range big {
		big[i] = workspace.DirEntry{Name: fmt.Sprint(i), Ino: workspace.Ino(i + 2)}
	}
	read := func() ([]workspace.DirEntry, error) { return big, nil }
	var open []*listing
	for range 8 { // twice the entry bound, all in progress
		ls, _, err := l.at(1, 0, read)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, ls)
		clock = clock.Add(time.Second)
	}
	for i, ls := range open {
		if l.get(ls.num, 1) == nil {
			t.Fatalf("listing %d of 8 dropped while in progress", i)
		}
	}
	// Four readers finish; the next new listing drops finished ones down
	// to the bounds, and no listing still in progress.
	for _, ls := range open[:4] {
		l.finished(ls)
	}
	if _, _, err := l.at(2, 0, read); err != nil {
		t.Fatal(err)
	}
	for i, ls := range open[4:] {
		if l.get(ls.num, 1) == nil {
			t.Fatalf("listing %d in progress dropped", 4+i)
		}
	}
	if kept := l.lru.Len(); kept != 5 {
		t.Fatalf("%d listings kept, want the 4 in progress and the new one", kept)
	}
	// Even listings in progress give way past the hard bound.
	for range 4*listingsHardFactor + 4 {
		if _, _, err := l.at(3, 0, read); err != nil {
			t.Fatal(err)
		}
	}
	if l.entries > listingsHardFactor*listingsMaxEntries {
		t.Fatalf("%d entries kept in progress, hard bound %d", l.entries, listingsHardFactor*listingsMaxEntries)
	}
	if l.get(open[4].num, 1) != nil {
		t.Fatal("the least recently used listing in progress kept past the hard bound")
	}
	// Readers idle for listingsBusy no longer hold their listings.
	clock = clock.Add(listingsBusy + time.Second)
	if _, _, err := l.at(2, 0, read); err != nil {
		t.Fatal(err)
	}
	if l.entries > listingsMaxEntries {
		t.Fatalf("%d entries kept after the readers went idle, bound %d", l.entries, listingsMaxEntries)
	}
}
