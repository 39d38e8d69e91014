package workspace

import (
	"fmt"

	"wsfs/internal/namespace"
)

// StillTree commits every operation completed so far and calls fn with the
// live tree and the last committed group: with no operation in between,
// the tree is exactly the durable state at the end of that group. It is
// for callers that own the workspace and keep it still for the call (an
// offline CLI command such as `wsfs snapshot create`, a test between
// operations): the caller guarantees that no operation runs concurrently.
// It refuses while a file has unflushed content (an open handle wrote
// without a Flush), since that content is not part of any group. fn must
// not change the tree or keep it (or anything in it but the immutable
// content slices) after it returns.
func (w *Workspace) StillTree(fn func(t *namespace.Tree, group uint64) error) error {
	if err := w.Sync(); err != nil {
		return err
	}
	for _, n := range w.tree.Inodes() {
		n.Mu.Lock()
		dirty := false
		if lv := liveOf(n); lv != nil && lv.dirty != nil && !lv.dirty.clean && n.Nlink > 0 {
			dirty = true
		}
		n.Mu.Unlock()
		if dirty {
			return fmt.Errorf("workspace: inode %d has unflushed content; flush or close it first", n.Ino)
		}
	}
	return fn(w.tree, w.com.Stats().LastGroup)
}
