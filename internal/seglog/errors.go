package seglog

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// CorruptError reports damage that is not a torn tail: bytes that a sync
// had already made durable (a sealed segment, or data before a later valid
// commit marker) are wrong or missing. wsfs refuses to open such a log
// rather than guess.
type CorruptError struct {
	Segment string // path of the segment or checkpoint file
	Offset  int64  // byte offset of the first damaged frame or header
	Reason  string // what is wrong
	// For a segment: GroupEnd is the end of the last complete group of
	// this segment before the damage (where a repair truncates it; 0 if
	// the header itself is bad), LastGood that group's number (the last
	// group of the previous segment if none, 0 if unknown).
	GroupEnd int64
	LastGood uint64
}

func (e *CorruptError) Error() string {
	if strings.HasSuffix(e.Segment, ".ckpt") {
		return fmt.Sprintf("seglog: checkpoint %s is damaged at offset %d: %s. "+
			"No older checkpoint verifies either, and wsfs will not guess the state it held. "+
			"Restore the workspace state from a backup", e.Segment, e.Offset, e.Reason)
	}
	return fmt.Sprintf("seglog: %s is damaged at offset %d: %s. "+
		"Groups that were written completely, and may have been reported durable, lie at or after the damage; wsfs will not guess. "+
		"Run `wsfs fsck NAME` to see what is affected, and `wsfs fsck --repair NAME` to keep every group before offset %d: "+
		"it saves a copy of the damaged segment and truncates the log there (restore from a backup instead if the later groups matter); "+
		"do not move segments aside by hand (that also loses the groups before the damage)",
		e.Segment, e.Offset, e.Reason, e.Offset)
}

// TornTail describes a torn tail that Open repaired: the end of the last
// segment held an incomplete group (a crash during an unsynced append),
// and the segment was truncated to the end of the last complete group.
// When the crash interrupted the creation of the last segment (its header
// is short or invalid and it holds no group), the header is rewritten:
// Offset is then the header length and DroppedBytes the old file length.
type TornTail struct {
	Segment        string // path of the repaired segment
	Offset         int64  // the segment's new length
	DroppedBytes   int64  // bytes removed from the end
	DroppedRecords int    // valid data records of the incomplete group that were dropped
}

// ErrFailed is wrapped by every error a failed Log returns.
var ErrFailed = errors.New("seglog: an earlier write or sync of the log failed, so the log can no longer be trusted " +
	"(after a failed fsync the kernel may have dropped the unsynced data: fsyncgate); " +
	"reopen the workspace to recover from what is on disk")

// failedError is the sticky error of a failed Log: it wraps ErrFailed and
// the first error.
type failedError struct{ first error }

func (e *failedError) Error() string {
	return ErrFailed.Error() + ": first failure: " + e.first.Error()
}

func (e *failedError) Unwrap() []error { return []error{ErrFailed, e.first} }

// NoSpaceError reports an Append that found the log's filesystem full
// (ENOSPC or EDQUOT). Nothing of the group was kept: the segment was cut
// back to the end of the previous group (or a half-created segment
// removed), so the Log stays usable and the same records may be appended
// again once there is space. It wraps the errno.
type NoSpaceError struct {
	Segment string // the segment being written or created
	Err     error  // the write or create error, wrapping ENOSPC or EDQUOT
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("seglog: no space left for the log in %s (nothing was appended; the group can be retried once space is freed): %v", e.Segment, e.Err)
}

func (e *NoSpaceError) Unwrap() error { return e.Err }

// isNoSpace reports whether err says the filesystem or quota is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
