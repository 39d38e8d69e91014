package seglog

import (
	"errors"
	"fmt"
	"io"
)

// The runway: the active segment is kept written with zeros for up to
// runwayLen bytes past its last group, so that an append overwrites
// blocks the file already has instead of growing it.
//
// Why: fdatasync(2) of a file that grew must also commit its new size and
// its newly allocated blocks, which on ext4 is a journal commit on top of
// the data write; an overwrite of blocks already allocated and written
// needs only the data write and the cache flush. On the reference VM
// (virtio disk, ext4) a 4 KiB append plus fdatasync took 263 µs at the
// median, the same write over zeros written and synced before 172 µs,
// and a SQLite transaction (synchronous=FULL) in a mount went from
// 0.66–1.42 ms to 0.48–0.72 ms at the median (docs/benchmarks.md, "The
// log's runway"). Space that fallocate(2) reserves does not help: its
// blocks are "unwritten", and the first write to each converts it in the
// journal (measured: the same 263 µs).
//
// Invariants:
//
//   - Only the active (last) segment has a runway. Rollover cuts it off
//     and syncs before the next segment is created, so a sealed segment
//     ends exactly at its last commit marker, as the format says.
//   - The runway holds only zeros and what Append wrote into it. Zeros
//     never validate as a frame (type 0 is never written), so after the
//     last complete group a reader finds either the next group being
//     written or zeros.
//   - A runway is written with a group and synced with it (Sync), so it
//     costs one size change per runwayLen bytes of log instead of one per
//     group. A runway whose zeros were lost in a crash is shorter; one
//     partly written is zeros and then the end of the file: both read as
//     a clean end.
//
// Recovery (Open, OpenReadOnly): the last segment is clean when everything
// after its last complete group is zeros and no record of an incomplete
// group precedes them (runwayTail); it is kept as it is, runway included.
// Anything else after the last group is judged by the torn-tail rules of
// the package documentation, which already expect zeroed sectors (an
// append into the runway that a crash interrupted leaves exactly that) and
// truncate a torn tail, runway included. A group of the old kind (appended
// at the end of the file) whose sectors all read back as zeros after a
// crash looked torn before and reads as a clean end now: either way it was
// never acknowledged, unless the storage lost bytes it reported synced.

// runwayLen is how far past its last group the active segment is kept
// written with zeros, and runwayMaxGroup the size from which a group that
// ends past the runway does not extend it. Writing the zeros costs disk
// bandwidth (the next sync writes them), which small groups repay with the
// size changes they no longer commit (~90 µs each on the reference VM,
// 256 KiB of zeros ~0.6 ms) and large ones do not: a 2 MiB group extended
// by 1 MiB each time took 7.6–8.3 ms against 5.8–6.2 ms to append and sync
// (BenchmarkAppendSync). The runway is also disk space per active
// workspace, and the sync that writes it is slower by that much.
const (
	runwayLen      = 256 << 10
	runwayMaxGroup = runwayLen / 8
)

// zeros is the source of the runway's bytes (read only).
var zeros [runwayLen]byte

// runwayTail reports whether the last segment ends cleanly in a runway:
// every byte after its last complete group is zero and no data frame of
// an incomplete group lies between.
func runwayTail(buf []byte, res scanResult) bool {
	return res.pendingRecords == 0 && isZero(buf[res.validEnd:])
}

// extendRunway is called by Append after it wrote a group of size bytes
// that ends at end, past the runway: unless the group is large
// (runwayMaxGroup), it writes zeros after it, up to runwayLen but not past
// the segment's rollover size, and records the file's new length. A full
// filesystem (or quota) leaves the log usable without a runway: the zeros
// written, if any, are cut off again. Any other failure is returned (and
// fails the log).
func (l *Log) extendRunway(path string, end int64, size int) error {
	l.fileEnd = end
	n := min(runwayLen, l.opts.SegmentSize-end)
	if n <= 0 || size >= runwayMaxGroup {
		return nil
	}
	w, err := l.active.WriteAt(zeros[:n], end)
	if err == nil && int64(w) == n {
		l.fileEnd = end + n
		return nil
	}
	if err == nil {
		err = io.ErrShortWrite
	}
	if isNoSpace(err) || errors.Is(err, io.ErrShortWrite) {
		if terr := l.active.Truncate(end); terr != nil {
			return fmt.Errorf("seglog: extend the runway of %s at %d: %v; cutting it back failed: %w", path, end, err, terr)
		}
		return nil
	}
	return fmt.Errorf("seglog: extend the runway of %s at %d: %w", path, end, err)
}

// dropRunway cuts the active segment back to end, the end of its last
// group, before it is sealed; the Sync that seals it makes the cut
// durable.
func (l *Log) dropRunway(path string, end int64) error {
	if l.fileEnd <= end {
		return nil
	}
	if err := l.active.Truncate(end); err != nil {
		return l.fail(fmt.Errorf("seglog: cut the runway off %s at %d before sealing it: %w", path, end, err))
	}
	l.fileEnd = end
	l.dirty = true
	return nil
}

// nonZeroEnd returns the length of b without its trailing zero bytes.
func nonZeroEnd(b []byte) int {
	i := len(b)
	for i >= 8 && [8]byte(b[i-8:i]) == [8]byte{} {
		i -= 8
	}
	for i > 0 && b[i-1] == 0 {
		i--
	}
	return i
}
