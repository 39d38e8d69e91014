package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/fusefs"
	"wsfs/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe for a daemon goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// wsfsRun runs one command in-process and returns its exit code and output.
func wsfsRun(ctx context.Context, args ...string) (int, string) {
	var out syncBuffer
	g := &globals{stdout: &out, stderr: &out}
	code := run(ctx, g, args)
	return code, out.String()
}

func newHost(t *testing.T) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	if code, out := wsfsRun(context.Background(), "init", "--home", home); code != 0 {
		t.Fatalf("init: %d %s", code, out)
	}
	if code, out := wsfsRun(context.Background(), "create", "--home", home, "ws"); code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	return home
}

func skipWithoutFUSE(t *testing.T) {
	t.Helper()
	testenv.RequireFUSE(t)
	if err := fusefs.CheckFUSE(); err != nil {
		t.Fatalf("/dev/fuse is present and the process is root, but FUSE cannot be used: %v", err)
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestHostCommands(t *testing.T) {
	home := newHost(t)
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init", "--home", home}, 0, "host ready"},
		{[]string{"create", "--home", home, "ws"}, exitPrecondition, "workspace exists"},
		{[]string{"create", "--home", home, "Bad/Name"}, exitUsage, "invalid workspace name"},
		{[]string{"create", "--home", filepath.Join(home, "nohost"), "x"}, exitPrecondition, "wsfs init --home"},
		{[]string{"ls", "--home", home}, 0, "ws "},
		{[]string{"rm", "--home", home, "nope"}, exitPrecondition, "no such workspace"},
		{[]string{"mount", "--home", home, "nope"}, exitPrecondition, "no such workspace"},
		{[]string{"mount", "--home", home, "--drain", "fast", "ws"}, exitUsage, "unknown drain mode"},
		{[]string{"mount", "--home", home}, exitUsage, "want NAME"},
		{[]string{"create", "--home", home, "gone"}, 0, "created workspace gone"},
		{[]string{"rm", "--home", home, "gone"}, 0, "removed workspace gone"},
	} {
		code, out := wsfsRun(ctx, c.args...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("wsfs %s: exit %d, output %q; want exit %d and %q", strings.Join(c.args, " "), code, out, c.code, c.want)
		}
	}
	if _, out := wsfsRun(ctx, "ls", "--home", home); strings.Contains(out, "gone") {
		t.Errorf("removed workspace still listed: %s", out)
	}
}

func TestMountPreconditions(t *testing.T) {
	skipWithoutFUSE(t)
	home := newHost(t)
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "missing")
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mp, want string
	}{
		{missing, "does not exist"},
		{full, "not empty"},
	} {
		code, out := wsfsRun(ctx, "mount", "--home", home, "ws", c.mp)
		if code != exitPrecondition || !strings.Contains(out, c.want) {
			t.Errorf("mount at %s: exit %d, %q; want exit 3 and %q", c.mp, code, out, c.want)
		}
	}
}

// TestMountServeAndStop runs the daemon in-process: it serves, refuses a
// second daemon and rm, stops cleanly when its context is cancelled (the
// signal path), and the data is there at the next mount.
func TestMountServeAndStop(t *testing.T) {
	skipWithoutFUSE(t)
	home := newHost(t)
	ready := filepath.Join(t.TempDir(), "ready")
	mp := filepath.Join(home, "mnt", "ws")
	metricsAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		code int
		out  string
	}
	done := make(chan result, 1)
	stopped := false
	go func() {
		code, out := wsfsRun(ctx, "mount", "--home", home, "--ready-file", ready, "--group-window", "5ms", "--metrics", metricsAddr, "ws")
		done <- result{code, out}
	}()
	t.Cleanup(func() {
		cancel()
		if stopped {
			return
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("daemon did not stop within 30s")
			exec.Command("umount", "-l", mp).Run()
		}
	})
	deadline := time.After(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("daemon exited early: %d %s", r.code, r.out)
		case <-deadline:
			t.Fatal("mount not ready within 30s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := os.WriteFile(filepath.Join(mp, "hello"), []byte("world"), 0o644); err != nil {
		t.Fatal(err)
	}
	// fsync: the group commits, so the commit metrics have samples.
	if f, err := os.Open(filepath.Join(mp, "hello")); err != nil {
		t.Fatal(err)
	} else {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`wsfs_fuse_ops_total{op="CREATE",workspace="ws"} 1`, `wsfs_commit_group_records_count{workspace="ws"}`, `wsfs_commit_pending_records{workspace="ws"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	code, out := wsfsRun(context.Background(), "mount", "--home", home, "ws", t.TempDir())
	if code != exitPrecondition || !strings.Contains(out, "served by another") {
		t.Errorf("second daemon: exit %d, %q; want exit 3, served by another", code, out)
	}
	code, out = wsfsRun(context.Background(), "rm", "--home", home, "ws")
	if code != exitPrecondition || !strings.Contains(out, "mounted at") {
		t.Errorf("rm while mounted: exit %d, %q", code, out)
	}
	_, out = wsfsRun(context.Background(), "ls", "--home", home)
	if !strings.Contains(out, "yes") || !strings.Contains(out, mp) {
		t.Errorf("ls while mounted: %q", out)
	}

	cancel()
	select {
	case r := <-done:
		stopped = true
		if r.code != 0 || !strings.Contains(r.out, "wsfs: serving ws at "+mp) {
			t.Fatalf("daemon: exit %d, output %q", r.code, r.out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not stop within 30s of the signal")
	}
	if _, err := os.Stat(ready); !os.IsNotExist(err) {
		t.Errorf("ready file left behind: %v", err)
	}

	// Mount again (a new daemon): the file is there.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done2 := make(chan int, 1)
	go func() {
		code, _ := wsfsRun(ctx2, "mount", "--home", home, "--ready-file", ready, "ws")
		done2 <- code
	}()
	deadline = time.After(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case c := <-done2:
			t.Fatalf("second daemon exited early: %d", c)
		case <-deadline:
			t.Fatal("second mount not ready within 30s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	b, err := os.ReadFile(filepath.Join(mp, "hello"))
	if err != nil || string(b) != "world" {
		t.Errorf("after remount: %q %v", b, err)
	}
	// An unmount from outside ends the daemon with exit code 1.
	if out, err := exec.Command("umount", mp).CombinedOutput(); err != nil {
		cancel2()
		t.Fatalf("umount: %v %s", err, out)
	}
	select {
	case c := <-done2:
		if c != exitFailure {
			t.Errorf("daemon after an external unmount: exit %d, want %d", c, exitFailure)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("second daemon did not stop")
	}
}

// TestMountMetricsAddressRefused: a --metrics address that cannot be
// listened on (in use, malformed) is a usage error (exit 2), as for the
// sidecar, the shipper and `wsfs up`, refused before the workspace is
// opened or mounted.
func TestMountMetricsAddressRefused(t *testing.T) {
	skipWithoutFUSE(t)
	home := newHost(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	mp := t.TempDir()
	for _, addr := range []string{busy.Addr().String(), "nonsense"} {
		code, out := wsfsRun(context.Background(), "mount", "--home", home, "--metrics", addr, "ws", mp)
		if code != exitUsage || !strings.Contains(out, "--metrics") || !strings.Contains(out, "choose another") {
			t.Errorf("mount --metrics %s: exit %d, %q; want exit 2 naming --metrics and what to do", addr, code, out)
		}
		mounts, err := os.ReadFile("/proc/self/mounts")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(mounts), " "+mp+" ") {
			unix.Unmount(mp, unix.MNT_DETACH)
			t.Fatalf("mount --metrics %s left %s mounted", addr, mp)
		}
	}
}
