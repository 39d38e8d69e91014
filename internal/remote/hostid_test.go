package remote

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// TestHostIDMalformed: a host-id file that does not hold 32 hex digits is
// an error that shows what it holds and says what removing it costs,
// never "(<nil>)"; the file is left as it is.
func TestHostIDMalformed(t *testing.T) {
	for _, bad := range []string{"nothex\n", strings.Repeat("z", 32) + "\n", ""} {
		h, err := host.Init(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(h.Home(), HostIDFile)
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		id, err := HostID(h)
		if err == nil || strings.Contains(err.Error(), "<nil>") || !strings.Contains(err.Error(), fmt.Sprintf("%q", strings.TrimSpace(bad))) ||
			!strings.Contains(err.Error(), "--steal") {
			t.Errorf("host-id %q: %q, %v; want an error quoting it and naming --steal", bad, id, err)
		}
		if b, _ := os.ReadFile(path); string(b) != bad {
			t.Errorf("host-id %q rewritten to %q", bad, b)
		}
	}
}
