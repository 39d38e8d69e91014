// Package seglog is the workspace's segment log: an append-only sequence of
// groups of records, each group made atomic by a commit marker, split over
// segment files, with torn-tail repair, corruption detection and checkpoint
// files.
//
// # Files
//
// A log lives in one directory. Segment files are named <seq>.seg with seq a
// decimal number printed as %020d, starting at 1 and increasing by one with
// every rollover. Only the last (highest-numbered) segment is ever appended
// to; every other segment is sealed. DeleteThrough removes segments from the
// front only, so the segments present are always a contiguous run of
// sequence numbers.
//
// # Wire format (version 1; these constants are frozen)
//
// All integers are little-endian. CRCs are CRC-32C (Castagnoli).
//
// A segment starts with a 32-byte header:
//
//	+----------+---------+---------+-------------+------------+
//	| magic    | version | seq     | first group | header CRC |
//	| 8 bytes  | u32     | u64     | u64         | u32        |
//	+----------+---------+---------+-------------+------------+
//	  "WSFSSEG1"   = 1     = name     group number   CRC-32C of the
//	                                  of the first   preceding 28 bytes
//	                                  group in this
//	                                  segment
//
// The header is followed by frames, back to back, up to the end of the file
// (in the last segment: up to its runway, zeros that the next groups will
// overwrite; see runway.go):
//
//	+--------+--------+------+--------------------+
//	| length | CRC    | type | payload            |
//	| u32    | u32    | u8   | length bytes       |
//	+--------+--------+------+--------------------+
//
// length counts the payload only (a frame occupies 9+length bytes); CRC is
// the CRC-32C of the type byte followed by the payload. Types:
//
//	1 data    payload = one record, opaque to the log
//	2 commit  payload = 16 bytes:
//	          +--------------+--------------+------------------------+
//	          | group number | record count | group CRC              |
//	          | u64          | u32          | u32                    |
//	          +--------------+--------------+------------------------+
//	          group CRC = CRC-32C over the frame CRCs (each as u32 LE)
//	          of the group's data frames, in order
//
// Type 0 is never written, so a zero-filled region never validates.
//
// A group is its data frames followed by exactly one commit marker. Group
// numbers start at 1 and increase by exactly 1, across segment boundaries
// too: a segment's header names the group number its first commit marker
// must carry. A group never spans two segments. A group without its commit
// marker did not happen.
//
// # Recovery rules
//
// Open reads every segment. Damage (an invalid or incomplete frame, a bad
// header, a commit marker whose group number, count or group CRC does not
// match, a missing segment, a gap in group numbers) anywhere but the tail of
// the last segment is a *CorruptError: that data was sealed, so a sync
// returned for it, and wsfs will not guess what it said.
//
// In the last segment, zeros after the last complete group (and nothing
// else) are its runway: a clean end, kept as it is. Otherwise the first
// invalid or incomplete frame, or a complete group missing its commit
// marker at the end of the file, starts the tail.
// The tail is torn, not corrupt, when it is what a crash during an unsynced
// append leaves (a group is one write at the end of the file: the file can
// end anywhere in it, and whole sectors of it can read back as zeros, but
// no written byte changes) and no valid commit marker with a higher group
// number exists anywhere after the damage (searched byte by byte) — except
// the damaged group's own marker when nothing follows it and the damage
// holds a 512-byte sector of zeros (the sector the damage starts in counts
// from the damage on: its first bytes are the previous group's) and the
// damaged frame's header is what a crash leaves of one (it zeroes whole
// sectors, nothing else): a length not running past the marker or over
// valid frames that lead to it, a type byte that is a data frame's or
// zero with the rest of its sector, and, when the header is whole, a CRC
// that the marker's group CRC covers: the last group's append, never
// acknowledged, reached the disk out of order before a power loss (found
// by the crashfs power-cut tests). A changed byte in a record that itself
// holds a whole zero sector still reads as such a power cut: the zeros
// may be a sector that was never written, and nothing tells them apart.
// So the tail is torn when:
//
//   - every frame verifies and the file ends before the commit marker;
//   - the first bad frame runs past the end of the file, unless its bytes
//     are the commit marker the group needs with only the length damaged;
//   - only zeros follow from inside the first bad frame on (an append into
//     the runway cut short), unless it is a commit marker whose bytes up
//     to the first sector boundary after its last nonzero byte are not
//     the start of the marker the group needs, or no such boundary lies
//     inside it: zeros inside a written sector were written, so such a
//     marker was changed, not cut short;
//   - the first bad frame is complete but overlaps a 512-byte sector that
//     is zero from the frame (or the sector's start) to the sector's end
//     or the end of the file.
//
// A torn tail is truncated to the end of the last complete group, synced,
// logged (saying the group was not acknowledged unless the storage lost
// synced data: the code cannot know more) and reported through Repaired.
// Anything else is a *CorruptError: a later valid commit marker (a group
// that may have been acknowledged lies behind the damage), or a complete
// frame that fails verification with no zeroed sector, such as the last
// group's commit marker with one flipped byte behind records that all
// verify: that group was written whole and may have been acknowledged.
// The error names the segment and offset and `wsfs fsck --repair`, which
// cuts the log there after saving a copy (Log.Cut).
//
// OpenReadOnly applies the same rules without writing (for wsfs fsck):
// it reports a torn tail without truncating it and stops at damage,
// keeping the complete groups before it for Replay.
//
// # Durability
//
// Append writes but does not sync; Sync makes every appended group durable
// (fdatasync). Appends overwrite the active segment's runway, zeros written
// ahead, so that most fdatasyncs commit no size change (runway.go). Creating a segment (at Open of an empty directory and at
// rollover) is synchronous: the previous segment is synced first, then the
// new file's header and the directory entry. Therefore a sealed segment is
// always complete on disk, and only the last segment can have a torn tail.
//
// Open also syncs the last segment before returning: the previous process
// may have exited after appending without syncing, and every group that
// Open reports and Replay hands out must be durable (a checkpoint built
// from it must never be ahead of the log on disk).
//
// A failed write or sync fails the Log for good: after a failed fdatasync
// the kernel may have dropped the dirty pages (fsyncgate), so neither a
// retry nor a truncate-and-rewrite can prove anything. The workspace must be
// reopened, which re-reads what really is on disk.
//
// # Concurrency
//
// A Log is used by a single goroutine (the workspace's flusher): Open, then
// Replay, then Append/Sync/DeleteThrough, then Close. Only LastGroup and
// Repaired may be called concurrently with that goroutine.
package seglog
