package ship

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"wsfs/internal/objid"
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

// aged is a store whose objects written before the test started to write
// through it look older than they are (Modified 48 hours earlier in Stat
// and ListInfo), as a bucket's objects from days ago would; what is
// written through it keeps its real time.
type aged struct {
	remote.Store
	mu      sync.Mutex
	written map[string]bool
}

func (a *aged) age(i remote.Info) remote.Info {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.written[i.Key] {
		i.Modified = i.Modified.Add(-48 * time.Hour)
	}
	return i
}

func (a *aged) wrote(key string) {
	a.mu.Lock()
	a.written[key] = true
	a.mu.Unlock()
}

func (a *aged) Put(ctx context.Context, key string, data []byte) error {
	a.wrote(key)
	return a.Store.Put(ctx, key, data)
}

func (a *aged) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	a.wrote(key)
	return a.Store.PutIf(ctx, key, data, ifMatch)
}

func (a *aged) Stat(ctx context.Context, key string) (remote.Info, bool, error) {
	i, ok, err := a.Store.Stat(ctx, key)
	i.Key = key
	return a.age(i), ok, err
}

func (a *aged) ListInfo(ctx context.Context, prefix string) ([]remote.Info, error) {
	l, err := a.Store.ListInfo(ctx, prefix)
	for k := range l {
		l[k] = a.age(l[k])
	}
	return l, err
}

// TestRemoteGCRefreshedMeanwhile: remote GC lists an object as old and
// unreferenced; before it deletes it, a shipper finds the same content in
// a new group, uploads the object again (it was older than RefreshAfter)
// and writes a head naming it. GC must not delete the object it listed as
// old: the bucket's copy is young now, and the head names it.
func TestRemoteGCRefreshedMeanwhile(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	e := newEnv(t, 43)
	defer e.ws.Close()
	st := &aged{Store: srv.Store(t, "gc-refresh"), written: map[string]bool{}}
	// Content X, shipped, then overwritten and shipped: X is unreferenced.
	x := randData(rand.New(rand.NewPCG(43, 1)), 100<<10)
	e.write("a", x)
	e.commit()
	before := e.objects()
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st.Store})
	if _, err := sh.Round(ctx); err != nil {
		t.Fatal(err)
	}
	e.write("a", []byte("short"))
	e.commit()
	if _, err := sh.Round(ctx); err != nil {
		t.Fatal(err)
	}
	// The same content comes back in a new group (git checkout of an old
	// branch), not shipped yet.
	e.write("b", x)
	want := e.commit()
	var xid objid.ID
	for id := range before {
		xid = id
	}
	if len(before) != 1 {
		t.Fatalf("the file has %d objects, want one", len(before))
	}
	// GC (everything from before looks two days old), and the shipper
	// (restarted: it knows nothing) after GC's listing, before GC's next
	// operation on X.
	f := &remote.Faulty{Store: st}
	shipped := false
	f.Hook = func(op, key string, n int) error {
		// GC's first operation on X after its listing.
		if (op == "delete" || op == "head") && key == remote.ObjectKey(xid.String()) && !shipped {
			shipped = true
			sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: st})
			if g, err := sh.Round(ctx); err != nil || g != want {
				return fmt.Errorf("the shipper inside GC: group %d, %v; want %d", g, err, want)
			}
			if s := sh.Stats(); s.ObjectsUploaded == 0 {
				return fmt.Errorf("the shipper uploaded nothing again (%+v): the test needs it to refresh %s", s, xid)
			}
		}
		return nil
	}
	s, err := GC(ctx, f, 24*time.Hour, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !shipped {
		t.Fatalf("GC did not try to delete %s: %+v", xid, s)
	}
	e.verifyPull(st.Store, want)
}
