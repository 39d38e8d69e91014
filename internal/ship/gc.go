package ship

import (
	"context"
	"fmt"
	"strings"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/remote"
)

// DefaultGCGrace is remote GC's default grace period: nothing younger is
// ever removed.
const DefaultGCGrace = 24 * time.Hour

// MinGCGrace is the shortest grace GC accepts: it must be far longer than
// any shipping round, and at least twice the shippers' RefreshAfter.
const MinGCGrace = time.Hour

// GCStats describe a remote GC.
type GCStats struct {
	Workspaces        int   // heads marked
	Snapshots         int   // shipped snapshots marked
	Referenced        int   // objects their trees reference
	ObjectsDeleted    int   // unreferenced objects older than the grace
	ObjectsKept       int   // unreferenced but younger than the grace
	LogFilesDeleted   int   // superseded batches and checkpoints
	BytesDeleted      int64 // of both
	LogFilesKept      int   // superseded but younger than the grace
	LogFilesReferring int   // named by a head
}

// GC removes from the bucket what no workspace head or shipped snapshot
// needs: objects that no head's tree and no shipped snapshot's manifests
// reference, and log batches and checkpoints that no head
// names, each only once it is older than grace (now is the clock).
//
// Safety: the mark reads every head and rebuilds its tree (as Pull does),
// and walks every shipped snapshot's manifests (read from the bucket and
// verified); any error stops GC before it deletes anything. A snapshot
// entry is uploaded after all its objects within one round, as a head
// is, so the argument below covers snapshots shipped after the mark;
// snapshot entries themselves are never removed by GC (only by the
// shipper, when the local catalog drops them). A shipper uploads the
// objects, batches and checkpoint a head names before that head. Batches
// and checkpoints are uploaded within one round (far shorter than the
// grace; a merge done in the background is named only while younger than
// the shipper's aheadLimit). An object a head newly names was checked
// (HEAD or PUT) at most aheadLimit before the step that writes the head
// (max(RefreshAfter/2, 1 min): Run uploads objects ahead of the head, and
// a check that old is redone), and a HEAD accepts it only if it was
// modified at most RefreshAfter before; an older one is uploaded again,
// which makes it young. So whatever a head written after the mark names
// was modified at most aheadLimit+RefreshAfter (3/4 of the default grace)
// before that head: with a grace of at least twice RefreshAfter and a GC
// far shorter than a quarter of the grace, it is younger than the grace
// when GC sweeps. GC's listing, though, may be older than such an upload
// (an object found older than RefreshAfter is uploaded again, and a
// restarted merge uploads the same batch key again): so each candidate is
// looked at once more (HEAD) just before its delete, and kept if it is
// young now. What is left is the window between that HEAD and the
// DELETE, one round trip instead of the whole GC (S3 has no delete
// conditional on the modification time). A pull that read a head just
// before GC removed a batch that head
// named (superseded since) fails with "missing" and is retried. The agent
// state replicas (P/agent/) are Litestream's and left alone. With dryRun
// nothing is deleted.
func GC(ctx context.Context, st remote.Store, grace time.Duration, now time.Time, dryRun bool) (GCStats, error) {
	var stats GCStats
	if grace < MinGCGrace {
		return stats, fmt.Errorf("remote gc: grace %v is shorter than the minimum %v", grace, MinGCGrace)
	}
	files, err := st.ListInfo(ctx, "workspaces/")
	if err != nil {
		return stats, err
	}
	named := map[string]bool{}
	refs := map[objid.ID]bool{}
	var names []string
	seen := map[string]bool{}
	for _, f := range files {
		name, _, ok := strings.Cut(strings.TrimPrefix(f.Key, "workspaces/"), "/")
		if ok && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	for _, name := range names {
		// The shipped snapshots first (a workspace may have snapshots
		// before its first head: an empty workspace's).
		nsnap, err := remoteSnapshotObjects(ctx, st, name, func(id objid.ID) { refs[id] = true })
		if err != nil {
			return stats, fmt.Errorf("remote gc: mark the snapshots of %s: %w", name, err)
		}
		stats.Snapshots += nsnap
		h, found, err := ReadHead(ctx, st, name)
		if err != nil {
			return stats, fmt.Errorf("remote gc: mark %s: %w", name, err)
		}
		if !found {
			continue
		}
		tree, _, _, _, err := restoreTree(ctx, st, name, h)
		if err != nil {
			return stats, fmt.Errorf("remote gc: mark %s: %w", name, err)
		}
		stats.Workspaces++
		if h.Checkpoint != nil {
			named[h.Checkpoint.Key] = true
		}
		for _, b := range h.Batches {
			named[b.Key] = true
		}
		for _, n := range tree.Inodes() {
			if n.IsReg() {
				n.Content.Objects(func(id objid.ID) { refs[id] = true })
			}
		}
	}
	stats.Referenced = len(refs)
	old := func(i remote.Info) bool { return now.Sub(i.Modified) > grace }
	// del deletes i if it is still old: the listing may be from before a
	// shipper uploaded it again (a refresh, or a merge re-uploading the
	// same batch key) to name it in a head written after the mark, so
	// the object is looked at once more just before its delete. deleted
	// false: it was kept (young now, or gone).
	del := func(i remote.Info) (deleted bool, err error) {
		cur, ok, err := st.Stat(ctx, i.Key)
		if err != nil || !ok || !old(cur) {
			return false, err
		}
		stats.BytesDeleted += cur.Size
		if dryRun {
			return true, nil
		}
		return true, st.Delete(ctx, i.Key)
	}
	for _, f := range files {
		rest := strings.TrimPrefix(f.Key, "workspaces/")
		_, sub, _ := strings.Cut(rest, "/")
		if !strings.HasPrefix(sub, "log/") && !strings.HasPrefix(sub, "checkpoint/") {
			continue // heads, leases
		}
		switch {
		case named[f.Key]:
			stats.LogFilesReferring++
		case !old(f):
			stats.LogFilesKept++
		default:
			deleted, err := del(f)
			if err != nil {
				return stats, err
			}
			if deleted {
				stats.LogFilesDeleted++
			} else {
				stats.LogFilesKept++
			}
		}
	}
	objs, err := st.ListInfo(ctx, "objects/")
	if err != nil {
		return stats, err
	}
	for _, o := range objs {
		id, err := objid.Parse(strings.TrimPrefix(o.Key, "objects/"))
		if err != nil {
			continue // not ours
		}
		switch {
		case refs[id]:
		case !old(o):
			stats.ObjectsKept++
		default:
			deleted, err := del(o)
			if err != nil {
				return stats, err
			}
			if deleted {
				stats.ObjectsDeleted++
			} else {
				stats.ObjectsKept++
			}
		}
	}
	return stats, nil
}
