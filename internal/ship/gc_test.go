package ship

import (
	"context"
	"strings"
	"testing"
	"time"

	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
)

// TestRemoteGC: after overwrites, checkpoints and merges, GC (with the
// clock past the grace) removes the objects no head's tree references and
// the batches and checkpoints no head names, keeps everything else, and
// every workspace still restores exactly; with the real clock it removes
// nothing (all of it is younger than the grace). A shipper re-uploads a
// present object older than RefreshAfter.
func TestRemoteGC(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Store(t, "gc")
	ctx := context.Background()
	var envs []*env
	for i, name := range []string{"ws", "other"} {
		e := newEnv(t, uint64(30+i))
		defer e.ws.Close()
		sh := New(Options{Dir: e.dir(), Name: name, Pool: e.pool, Store: st, CompactBatches: 4})
		for range 12 {
			for range 3 {
				e.step()
				e.commit()
			}
			if _, err := sh.Round(ctx); err != nil {
				t.Fatal(err)
			}
		}
		envs = append(envs, e)
	}
	count := func(prefix string) int {
		keys, err := st.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	objects, logs := count("objects/"), count("workspaces/ws/log/")+count("workspaces/ws/checkpoint/")
	if s, err := GC(ctx, st, time.Hour, time.Now(), false); err != nil || s.ObjectsDeleted+s.LogFilesDeleted != 0 {
		t.Fatalf("gc with everything young: %+v %v", s, err)
	}
	if _, err := GC(ctx, st, time.Minute, time.Now(), false); err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("a grace under the minimum: %v", err)
	}
	s, err := GC(ctx, st, 24*time.Hour, time.Now().Add(48*time.Hour), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gc: %+v (before: %d objects, %d log files of ws)", s, objects, logs)
	if s.Workspaces != 2 || s.ObjectsDeleted == 0 || s.LogFilesDeleted == 0 {
		t.Errorf("gc removed %d objects and %d log files of %d workspaces; the history had overwrites and merges", s.ObjectsDeleted, s.LogFilesDeleted, s.Workspaces)
	}
	if got := count("objects/"); got != s.Referenced {
		t.Errorf("%d objects left, %d referenced", got, s.Referenced)
	}
	// Both restore exactly, to the shipped group.
	envs[0].verifyPull(st, envs[0].ws.Stats().CommittedGroup)
	for _, k := range []string{HeadKey("other")} {
		if ok, _ := st.Exists(ctx, k); !ok {
			t.Errorf("%s removed", k)
		}
	}

	// Refresh: a shipper whose object is present but "old" uploads it again.
	e := envs[1]
	e.write("refresh-me", make([]byte, 200<<10)) // zeros: an object "other" may already have
	e.commit()
	f := &remote.Faulty{Store: st}
	sh := New(Options{Dir: e.dir(), Name: "third", Pool: e.pool, Store: f, RefreshAfter: time.Nanosecond})
	if _, err := sh.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if s := sh.Stats(); s.ObjectsPresent != 0 || s.ObjectsUploaded == 0 {
		t.Errorf("with RefreshAfter 1ns every present object is uploaded again: %+v", s)
	}
}
