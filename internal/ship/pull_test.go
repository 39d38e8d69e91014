package ship

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"wsfs/internal/remote/s3test"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
)

// TestPullWritesItsPartsAtOnce: the pull writes the tree's checkpoint, the
// log and the rest (FetchState, agent state) at the same time, so that
// their syncs share the file system's journal commits (a host with a busy
// neighbour pays for each commit; docs/benchmarks.md, "Remote tier under
// heavy load"). The first sync of the checkpoint and the first of the
// log each wait for the other: written one after the other, they never
// meet (each wait gives up after a minute, and the test fails). And
// the workspace is still published only whole: a crash after any step
// leaves no workspace, or one with its checkpoint marker, its log and its
// FetchState.
func TestPullWritesItsPartsAtOnce(t *testing.T) {
	srv := s3test.Start(t)
	_, st, g := shipped(t, srv, "parts")
	fsys := vfs.NewCrashableMem()
	dir := "/state/workspaces/ws"
	// A rendezvous: the first sync of the checkpoint and the first of
	// the log's segment each wait (at most a minute) for the other.
	logSynced, ckSynced := make(chan struct{}), make(chan struct{})
	var logOnce, ckOnce sync.Once
	var overlapped atomic.Int32
	meet := func(mine, other chan struct{}) {
		close(mine)
		select {
		case <-other:
			overlapped.Add(1)
		case <-time.After(time.Minute):
		}
	}
	var crashErr atomic.Value
	check := func() {
		c := fsys.CrashClone()
		if _, err := c.Stat(dir); err != nil {
			return // not published: nothing to check
		}
		if _, ok, err := ReadFetchState(c, dir); err != nil || !ok {
			crashErr.Store("a crash leaves the workspace without its FetchState")
		}
		if _, err := c.Stat(filepath.Join(dir, "checkpoint", seglog.UnsyncedName(g))); err != nil {
			crashErr.Store("a crash leaves the workspace without its checkpoint marker: " + err.Error())
		}
		if seqs, err := seglog.ListSegments(c, filepath.Join(dir, "log")); err != nil || len(seqs) == 0 {
			crashErr.Store("a crash leaves the workspace without its log")
		}
	}
	fsys.SetHook(func(op vfs.Op, path string) {
		check()
		if op != vfs.OpSync && op != vfs.OpSyncData {
			return
		}
		switch filepath.Base(filepath.Dir(path)) {
		case "log":
			logOnce.Do(func() { meet(logSynced, ckSynced) })
		case "checkpoint":
			ckOnce.Do(func() { meet(ckSynced, logSynced) })
		}
	})
	res, err := Pull(context.Background(), PullOptions{FS: fsys, Store: st, Name: "ws", Dir: dir, Lazy: true, RemoteURL: "s3://test"})
	fsys.SetHook(nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Group != g {
		t.Fatalf("pulled group %d, want %d", res.Group, g)
	}
	if overlapped.Load() != 2 {
		t.Fatal("the checkpoint and the log were written one after the other: their syncs never overlap")
	}
	if e := crashErr.Load(); e != nil {
		t.Fatal(e)
	}
	check()
	if e := crashErr.Load(); e != nil {
		t.Fatal(e)
	}
	if _, err := fsys.Stat(dir); err != nil {
		t.Fatalf("no workspace after the pull: %v", err)
	}
}
