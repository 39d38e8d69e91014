package fusefs

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/metrics"
)

// opCounts reads wsfs_fuse_ops_total per operation.
func opCounts(t testing.TB, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wsfs_fuse_ops_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "op" {
					out[l.GetValue()] = mt.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestRoundTrips pins the kernel caching decisions by counting requests
// (not time): reading back files just written and closed must be served
// from the page cache (no READ), close of a read-only descriptor must not
// send FLUSH, and a second stat of a known name must not send LOOKUP.
func TestRoundTrips(t *testing.T) {
	m := metrics.New("rt")
	e := newEnv(t, Options{Metrics: m})
	d := e.path("rt")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("page"), 1024) // one full page
	const n = 50
	names := make([]string, n)
	for i := range names {
		names[i] = filepath.Join(d, fmt.Sprintf("f%d", i))
		mustWrite(t, names[i], data)
	}
	before := opCounts(t, m)
	for _, p := range names {
		if got := mustRead(t, p); !bytes.Equal(got, data) {
			t.Fatalf("%s: wrong content", p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
	after := opCounts(t, m)
	for _, op := range []string{"READ", "FLUSH", "LOOKUP"} {
		if d := after[op] - before[op]; d != 0 {
			t.Errorf("reading back %d cached files sent %v %s requests, want 0", n, d, op)
		}
	}
	if d := after["OPEN"] - before["OPEN"]; d != n {
		t.Errorf("%v OPEN requests for %d opens", d, n)
	}
}

// settledCounts returns the request counts once they stop changing: RELEASE
// and FORGET arrive asynchronously after close(2) and unlink(2). Bounded
// (5 s); the counts are then taken as they are.
func settledCounts(t testing.TB, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	prev := opCounts(t, m)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		cur := opCounts(t, m)
		if maps.Equal(cur, prev) {
			return cur
		}
		prev = cur
	}
	return prev
}

// perOp returns the requests by opcode between two counts, divided by n.
func perOp(before, after map[string]float64, n int) map[string]float64 {
	out := map[string]float64{}
	for op, v := range after {
		if d := v - before[op]; d != 0 {
			out[op] = d / float64(n)
		}
	}
	return out
}

// opsStep is one step of TestRoundTripsPerOp: run does the step on file i
// of dir (single-threaded, raw system calls so that the library adds no
// requests of its own).
type opsStep struct {
	name string
	run  func(t *testing.T, dir string, i int)
	want map[string]float64 // requests per operation, by opcode
}

func fileOf(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("f%03d", i)) }

// TestRoundTripsPerOp pins the requests each common operation costs (the
// counts in docs/benchmarks.md, "FUSE round trips per operation"). Each step
// runs on n files of one directory, after the previous step on all of
// them; the counts are exact and do not depend on timing (RELEASE and
// FORGET are waited for).
func TestRoundTripsPerOp(t *testing.T) {
	m := metrics.New("rtops")
	e := newEnv(t, Options{Metrics: m})
	d := e.path("ops")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("x"), 2048)
	const n = 20
	// Where the counts come from (kernel 6.18, fs/fuse):
	//   - the GETATTR of a create and of an unlink is the directory's: each
	//     create or unlink in it drops its cached attributes, and with
	//     default_permissions the next one's permission check fetches them
	//     again (the first create found them cached, hence 1 - 1/n for
	//     unlink and the extra 1/n of the stat after the creates);
	//   - a WRITE drops the file's cached size and times, so the stat
	//     after it sends GETATTR;
	//   - a 2 KiB write leaves its page not up to date (only whole pages
	//     written are), so reading the file back sends READ, and a READ
	//     drops the cached atime, so the next stat sends GETATTR again;
	//   - negative entries are cached (NegativeTimeout), and so are
	//     directory listings (FOPEN_CACHE_DIR): only the first listing
	//     sends READDIRPLUS (two: the second finds the end), and symlink
	//     targets (CACHE_SYMLINKS): only the first readlink sends READLINK.
	steps := []opsStep{
		{"create+write+close 2 KiB", func(t *testing.T, dir string, i int) {
			fd, err := unix.Open(fileOf(dir, i), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := unix.Write(fd, data); err != nil {
				t.Fatal(err)
			}
			if err := unix.Close(fd); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{"LOOKUP": 1, "CREATE": 1, "WRITE": 1, "FLUSH": 1, "RELEASE": 1, "GETATTR": 1}},
		{"stat after write", func(t *testing.T, dir string, i int) {
			var st unix.Stat_t
			if err := unix.Stat(fileOf(dir, i), &st); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{"GETATTR": 1.05}},
		{"open+read+close", func(t *testing.T, dir string, i int) {
			fd, err := unix.Open(fileOf(dir, i), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			if k, err := unix.Read(fd, buf); err != nil || k != len(data) {
				t.Fatalf("read %d, %v", k, err)
			}
			unix.Close(fd)
		}, map[string]float64{"OPEN": 1, "READ": 1, "RELEASE": 1}},
		{"stat again", func(t *testing.T, dir string, i int) {
			var st unix.Stat_t
			if err := unix.Stat(fileOf(dir, i), &st); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{"GETATTR": 1}},
		{"stat of a missing name", func(t *testing.T, dir string, i int) {
			var st unix.Stat_t
			if err := unix.Stat(fileOf(dir, i)+".missing", &st); err != unix.ENOENT {
				t.Fatalf("stat of a missing name: %v", err)
			}
		}, map[string]float64{"LOOKUP": 1}},
		{"stat of a missing name again", func(t *testing.T, dir string, i int) {
			var st unix.Stat_t
			if err := unix.Stat(fileOf(dir, i)+".missing", &st); err != unix.ENOENT {
				t.Fatalf("stat of a missing name: %v", err)
			}
		}, map[string]float64{}},
		{"list the directory", func(t *testing.T, dir string, i int) { listDir(t, dir) }, map[string]float64{"OPENDIR": 1.0 / n, "READDIRPLUS": 2.0 / n}},
		{"list the directory again", func(t *testing.T, dir string, i int) { listDir(t, dir) }, map[string]float64{}},
		{"symlink", func(t *testing.T, dir string, i int) {
			if err := unix.Symlink(fmt.Sprintf("f%03d", i), fileOf(dir, i)+".l"); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{"LOOKUP": 1, "SYMLINK": 1, "GETATTR": 1 - 1.0/n}},
		{"readlink", func(t *testing.T, dir string, i int) { readlink(t, fileOf(dir, i)+".l") }, map[string]float64{"READLINK": 1, "GETATTR": 1.0 / n}},
		{"readlink again", func(t *testing.T, dir string, i int) { readlink(t, fileOf(dir, i)+".l") }, map[string]float64{}},
		{"unlink", func(t *testing.T, dir string, i int) {
			if err := unix.Unlink(fileOf(dir, i)); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{"UNLINK": 1, "FORGET": 1, "GETATTR": 1 - 1.0/n}},
	}
	for _, s := range steps {
		before := settledCounts(t, m)
		for i := range n {
			s.run(t, d, i)
		}
		got := perOp(before, settledCounts(t, m), n)
		t.Logf("%s: %v", s.name, got)
		if !maps.Equal(got, s.want) {
			t.Errorf("%s: requests per operation %v, want %v", s.name, got, s.want)
		}
	}
}

// listDir reads dir to its end with getdents(2), as ls and find do.
func listDir(t *testing.T, dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 32<<10)
	for {
		k, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			return
		}
	}
}

// TestDirCacheSeesChanges checks that a listing the kernel serves from its
// directory cache (FOPEN_CACHE_DIR) reflects every change made through the
// mount since the listing before: create, mkdir, symlink, link, rename
// within and across directories, unlink and rmdir.
func TestDirCacheSeesChanges(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.path("a"), e.path("b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(a, "f"), []byte("x"))
	steps := []struct {
		name   string
		change func() error
		a, b   string // the listings after the change, names joined by " "
	}{
		{"nothing", func() error { return nil }, "f", ""},
		{"create", func() error { return os.WriteFile(filepath.Join(a, "g"), nil, 0o644) }, "f g", ""},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(a, "d"), 0o755) }, "d f g", ""},
		{"symlink", func() error { return os.Symlink("f", filepath.Join(a, "s")) }, "d f g s", ""},
		{"link across", func() error { return os.Link(filepath.Join(a, "f"), filepath.Join(b, "h")) }, "d f g s", "h"},
		{"rename within", func() error { return os.Rename(filepath.Join(a, "g"), filepath.Join(a, "g2")) }, "d f g2 s", "h"},
		{"rename across", func() error { return os.Rename(filepath.Join(a, "s"), filepath.Join(b, "s")) }, "d f g2", "h s"},
		{"rename over", func() error { return os.Rename(filepath.Join(b, "h"), filepath.Join(b, "s")) }, "d f g2", "s"},
		{"unlink", func() error { return os.Remove(filepath.Join(a, "f")) }, "d g2", "s"},
		{"rmdir", func() error { return os.Remove(filepath.Join(a, "d")) }, "g2", "s"},
	}
	list := func(d string) string {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return strings.Join(names, " ")
	}
	for _, s := range steps {
		// List twice before the change so that the kernel has the
		// listing cached, then change and list again.
		list(a)
		list(b)
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := list(a); got != s.a {
			t.Errorf("after %s: a lists %q, want %q", s.name, got, s.a)
		}
		if got := list(b); got != s.b {
			t.Errorf("after %s: b lists %q, want %q", s.name, got, s.b)
		}
	}
}

func readlink(t *testing.T, p string) {
	buf := make([]byte, 256)
	if _, err := unix.Readlink(p, buf); err != nil {
		t.Fatal(err)
	}
}
