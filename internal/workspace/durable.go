package workspace

import (
	"fmt"

	"wsfs/internal/namespace"
)

// DurableTree commits every operation completed before the call and calls
// fn with a copy of the durable tree (the durable shadow, the state at the
// end of a committed group at or after them) and that group's number. It
// is safe while the workspace serves operations: the copy is taken under
// the lock that the committer's flusher holds while it applies a group to
// the shadow, so commits wait for the copy (O(inodes), no I/O), never for
// fn; readers and writers that do not wait for a commit are not blocked
// at all. Dirty content of open files is not in the tree (it is in no
// group). fn owns the copy; contents are shared, immutable.
func (w *Workspace) DurableTree(fn func(t *namespace.Tree, group uint64) error) error {
	if err := w.Sync(); err != nil {
		return err
	}
	w.shadowMu.Lock()
	if w.shadowErr != nil {
		err := w.shadowErr
		w.shadowMu.Unlock()
		return wsErr("snapshot", 0, "", err)
	}
	t, err := cloneTree(w.shadow)
	group := w.shadowGroup
	w.shadowMu.Unlock()
	if err != nil {
		return wsErr("snapshot", 0, "", fmt.Errorf("durable shadow: %w", err))
	}
	return fn(t, group)
}
