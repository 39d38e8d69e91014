package snapshot

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"wsfs/internal/workspace"
)

// TestCreateServing takes snapshots of a workspace while a writer keeps
// changing it. Each snapshot must hold every write that completed before
// snapshot create was called, with the content it had then, and nothing
// the writer had not started (the file count is at most what the writer
// had begun); each equals a prefix of the writer's history.
func TestCreateServing(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	defer w.Close()
	var done atomic.Int64  // files whose write completed
	var begun atomic.Int64 // files whose write began
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 3000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			begun.Store(int64(i + 1))
			writeFile(t, w, workspace.RootIno, fmt.Sprintf("f%05d", i), []byte(fmt.Sprint("content ", i)))
			done.Store(int64(i + 1))
		}
	}()
	for k := 0; k < 10; k++ {
		time.Sleep(2 * time.Millisecond)
		before := done.Load()
		in, _, err := CreateServing(w, e.fs, e.wsDir("w"), e.pool, "", time.Now())
		noErr(t, err)
		after := begun.Load()
		v := viewOfSnapshot(t, e.pool, in)
		n := int64(len(v) - 1) // minus the root
		if n < before || n > after {
			t.Fatalf("snapshot %d holds %d files; %d had completed before create, %d begun after", in.ID, n, before, after)
		}
		for i := int64(0); i < n; i++ {
			p := fmt.Sprintf("/f%05d", i)
			want := fmt.Sprint("content ", i)
			// A write in flight during create may be in as its create
			// only (empty) or complete; one completed before must be
			// complete.
			if got := v[p].data; got != want && (i < before || got != "") {
				t.Fatalf("snapshot %d: %s = %q, want %q (%d writes completed before create)", in.ID, p, got, want, before)
			}
		}
	}
	close(stop)
	wg.Wait()
	if done.Load() < 10 {
		t.Fatalf("the writer completed only %d files", done.Load())
	}
}
