package remote

import (
	"sync"
	"testing"

	"wsfs/internal/host"
)

// TestHostIDConcurrentFirstUse: processes that ask for the host ID at once
// on a fresh host (wsfs up starts a daemon and a shipper together) must all
// get the ID that ends up in HOME/host-id; with a replacing publication one
// of them kept an ID that the file no longer held, and the daemon and the
// shipper of one host then locked each other out of the workspace's lease.
func TestHostIDConcurrentFirstUse(t *testing.T) {
	for round := 0; round < 20; round++ {
		h, err := host.Init(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		ids := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ids[i], errs[i] = HostID(h)
			}()
		}
		close(start)
		wg.Wait()
		final, err := HostID(h)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d caller %d: %v", round, i, errs[i])
			}
			if ids[i] != final {
				t.Fatalf("round %d: caller %d got host ID %s, but HOME/host-id holds %s", round, i, ids[i], final)
			}
		}
	}
}
