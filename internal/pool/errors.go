package pool

import (
	"fmt"
	"strings"
)

// CorruptObjectError reports an object whose bytes do not hash to its name.
// The pool never hands such bytes to a reader.
type CorruptObjectError struct {
	ID   ID     // the name the object was stored under
	Path string // its file
	Got  ID     // what the bytes on disk hash to
}

func (e *CorruptObjectError) Error() string {
	return fmt.Sprintf("pool: object %s at %s is corrupt: its content hashes to %s "+
		"(damaged by a disk error, or lost in a crash before it was synced). "+
		"Files that reference it cannot be read; Put the original content again to repair the object, "+
		"or restore it from a backup", e.ID, e.Path, e.Got)
}

// MissingObjectError reports an object that is not in the pool.
type MissingObjectError struct {
	ID   ID
	Path string
	Err  error // the underlying error (satisfies errors.Is(err, fs.ErrNotExist))
}

func (e *MissingObjectError) Error() string {
	return fmt.Sprintf("pool: object %s is missing (%s does not exist): it was never published here, "+
		"was removed by GC while unreferenced, or was lost in a crash before it was synced. "+
		"Check that this pool directory is the one the workspace was created with; "+
		"files that reference it cannot be read until the content is Put again", e.ID, e.Path)
}

func (e *MissingObjectError) Unwrap() error { return e.Err }

// SyncError reports a failed drain (SyncObjects). Nothing in the drain's set
// was marked durable.
//
// After a failed fsync the kernel may have dropped the dirty pages, so a
// later sync that succeeds proves nothing (fsyncgate). Before the caller
// retries the group it must call Republish for every ID in Republish: that
// rewrites the object from bytes that verify, syncs the new copy and its
// directory.
type SyncError struct {
	// Republish lists the objects that must be republished: those whose
	// SyncData failed and those whose publication directory failed to sync.
	Republish []ID
	// Missing lists the objects that do not exist (each also has a
	// *MissingObjectError in Errs): their content must be Put again.
	Missing []ID
	// Errs holds one error per failed step, each naming its object or
	// directory.
	Errs []error
}

func (e *SyncError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pool: drain failed (%d step(s)); the objects are not durable: "+
		"call Republish on %d object(s) before retrying the group", len(e.Errs), len(e.Republish))
	if len(e.Missing) > 0 {
		fmt.Fprintf(&b, "; %d object(s) are missing and must be Put again", len(e.Missing))
	}
	for _, err := range e.Errs {
		b.WriteString("; ")
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *SyncError) Unwrap() []error { return e.Errs }
