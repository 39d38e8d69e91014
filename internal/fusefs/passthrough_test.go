package fusefs

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"

	"wsfs/internal/metrics"
)

// opCount reads wsfs_fuse_ops_total for op from the registry.
func opCount(t *testing.T, m *metrics.Metrics, op string) float64 {
	return opCounts(t, m)[op]
}

// TestPassthrough reads a file held in one pool object (chunked contents,
// above the chunk size, are read through the daemon) through a read-only
// open. When the
// kernel accepts the backing file, no READ reaches the daemon; when it
// refuses, the adapter falls back and the reads go through the daemon. In
// both cases the content must be right.
func TestPassthrough(t *testing.T) {
	m := metrics.New("pt")
	e := newEnv(t, Options{Passthrough: true, Metrics: m})
	p := e.path("big")
	want := pattern(1<<20, 9) // above the inline limit, one chunk: a pool object
	mustWrite(t, p, want)
	// Drop the page cache the write left, so reads must fetch data.
	e.remount()

	before := opCount(t, m, "READ")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("passthrough read returned wrong bytes")
	}
	reads := opCount(t, m, "READ") - before
	fs := e.srv.fs
	if fs.passthroughOff.Load() {
		t.Logf("kernel refused passthrough; %v READs went through the daemon", reads)
	} else {
		t.Logf("passthrough active: %v READs reached the daemon for 1 MiB", reads)
		if reads != 0 {
			t.Errorf("passthrough active but %v READs reached the daemon", reads)
		}
	}

	// A second reader shares the backing file. A writer is refused with
	// ETXTBSY while a passthrough reader is open (the kernel allows no
	// other kind of open then), and succeeds once it is closed.
	g, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if !fs.passthroughOff.Load() {
		if _, err := os.OpenFile(p, os.O_WRONLY, 0); !errors.Is(err, syscall.ETXTBSY) {
			t.Fatalf("open for writing while a passthrough reader is open: %v, want ETXTBSY", err)
		}
	}
	f.Close()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open for writing after the reader closed: %v", err)
	}
	if _, err := w.WriteAt([]byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A new open sees the write.
	if got := mustRead(t, p); string(got[:3]) != "new" || !bytes.Equal(got[3:], want[3:]) {
		t.Fatalf("after write: %q...", got[:8])
	}
}
