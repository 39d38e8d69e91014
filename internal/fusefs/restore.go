package fusefs

import (
	"errors"
	"fmt"

	"github.com/hanwen/go-fuse/v2/fuse"

	"wsfs/internal/workspace"
)

// InvalidateRestored drops what the kernel caches of a tree that
// workspace.ReplaceTree (online restore) replaced, so that after it
// returns every path resolves in the new tree:
//   - the root's attributes and data (its directory listing), and every
//     entry of the root, old or new (EntryNotify: an invalidated directory
//     entry takes its cached subtree with it; a negative entry for a name
//     the restore brought back goes too);
//   - the attributes and page cache of every old inode the kernel held
//     (InodeNotify on the whole range): an mmap of an old file faults its
//     pages in again and gets ESTALE (SIGBUS), an open file reads nothing
//     stale from the page cache.
//
// Old node ids are never reused (the new tree's numbers start above
// them), so the kernel cannot confuse an old inode with a new one. It must
// be called without holding any lock a FUSE request may wait for (the
// kernel takes the directory's lock for EntryNotify). ENOENT from the
// kernel (an inode or entry it no longer caches) is not an error.
func (s *Server) InvalidateRestored(r workspace.Restored) error {
	srv := s.fs.server.Load()
	if srv == nil {
		return errors.New("fusefs: the mount is not initialized")
	}
	var errs []error
	check := func(what string, st fuse.Status) {
		if st != fuse.OK && st != fuse.ENOENT {
			errs = append(errs, fmt.Errorf("%s: %v", what, st))
		}
	}
	for _, name := range r.RootNames {
		check("invalidate entry /"+name, srv.EntryNotify(uint64(workspace.RootIno), name))
	}
	check("invalidate the root", srv.InodeNotify(uint64(workspace.RootIno), 0, 0))
	for _, ino := range r.Known {
		check(fmt.Sprintf("invalidate inode %d", ino), srv.InodeNotify(uint64(ino), 0, 0))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fusefs: after restore: %w", err)
	}
	return nil
}
