package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"wsfs/internal/host"
	"wsfs/internal/metrics"
)

// testChild is the body of the test binary run as a child by the
// supervisor: mode "exit3" exits at once with code 3; mode "deaf" writes
// the daemon's ready file (if asked for one) and then ignores SIGTERM.
func testChild(mode string) {
	switch mode {
	case "gc":
		// A daemon or sidecar that stays up; a gc pass that records its
		// arguments.
		if len(os.Args) > 1 && os.Args[1] == "gc" {
			f, err := os.OpenFile(filepath.Join(os.Getenv("WSFS_SUPERVISOR_TEST_DIR"), "gc.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				fmt.Fprintln(f, strings.Join(os.Args[1:], " "))
				f.Close()
			}
			fmt.Println("wsfs gc: reclaimed 0 B (0 bytes)")
			os.Exit(0)
		}
		time.Sleep(time.Hour)
	case "exit3":
		os.Exit(3)
	case "metrics":
		// A daemon that serves a metrics endpoint the way wsfs does
		// (--metrics, --metrics-file); a sidecar that keeps dying.
		if len(os.Args) > 1 && os.Args[1] == "sidecar" {
			os.Exit(3)
		}
		serveTestMetrics()
		time.Sleep(time.Hour)
	case "deaf":
		signal.Ignore(syscall.SIGTERM)
		// Tell the test that SIGTERM is now ignored.
		os.WriteFile(filepath.Join(os.Getenv("WSFS_SUPERVISOR_TEST_DIR"), fmt.Sprint(os.Getpid())), nil, 0o644)
		for _, a := range os.Args {
			if f, ok := strings.CutPrefix(a, "--ready-file="); ok {
				os.WriteFile(f, nil, 0o644)
			}
		}
		time.Sleep(time.Hour)
	}
	os.Exit(2)
}

// serveTestMetrics serves test_child_pid on the child's --metrics address
// and publishes the address in its --metrics-file.
func serveTestMetrics() {
	var addr, file string
	for _, a := range os.Args {
		if v, ok := strings.CutPrefix(a, "--metrics="); ok {
			addr = v
		}
		if v, ok := strings.CutPrefix(a, "--metrics-file="); ok {
			file = v
		}
	}
	m := metrics.New("ignored")
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "test_child_pid", Help: "pid"},
		func() float64 { return float64(os.Getpid()) }))
	s, err := m.Serve(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := s.PublishAddr(file); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func testHost(t *testing.T) *host.Host {
	t.Helper()
	h, err := host.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CreateWorkspace("ws-1"); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestBackoffDoublesToCap(t *testing.T) {
	t.Setenv("WSFS_SUPERVISOR_TEST_CHILD", "exit3")
	h := testHost(t)
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Host: h, Workspaces: []string{"ws-1"}, Exe: os.Args[0],
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, StopTimeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(log, nil)),
		})
	}()
	// Wait (bounded) for enough daemon deaths to see the whole sequence.
	deadline := time.After(time.Minute)
	re := regexp.MustCompile(`msg=died workspace=ws-1 kind=daemon pid=\d+ how="exit code 3" after=\S+ restart_in=(\S+)`)
	for len(re.FindAllStringSubmatch(log.String(), -1)) < 5 {
		select {
		case <-deadline:
			cancel()
			t.Fatalf("fewer than 5 logged deaths:\n%s", log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after cancel")
	}
	var got []string
	for _, m := range re.FindAllStringSubmatch(log.String(), -1)[:5] {
		got = append(got, m[1])
	}
	if want := []string{"10ms", "20ms", "40ms", "40ms", "40ms"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("restart delays %v, want %v", got, want)
	}
	st, err := ReadState(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Children {
		// The stop may catch a child the supervisor has just restarted,
		// before it reaches its own exit: then SIGTERM ended it.
		lastExitOK := c.LastExit == "exit code 3" || c.LastExit == "signal SIGTERM"
		if (c.Kind == KindDaemon && c.Restarts < 5) || c.PID != 0 || !lastExitOK {
			t.Errorf("up.json child %+v", c)
		}
	}
}

// TestGCInterval: with GCInterval set, the supervisor runs `wsfs gc
// --home HOME` periodically while the children serve, and logs each pass.
func TestGCInterval(t *testing.T) {
	t.Setenv("WSFS_SUPERVISOR_TEST_CHILD", "gc")
	marks := t.TempDir()
	t.Setenv("WSFS_SUPERVISOR_TEST_DIR", marks)
	h := testHost(t)
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Host: h, Workspaces: []string{"ws-1"}, Exe: os.Args[0], StopTimeout: 5 * time.Second,
			GCInterval: 50 * time.Millisecond, GCArgs: []string{"--grace=2h"},
			Logger: slog.New(slog.NewTextHandler(log, nil)),
		})
	}()
	deadline := time.After(time.Minute)
	for strings.Count(log.String(), "msg=\"wsfs up: periodic gc\"") < 3 {
		select {
		case <-deadline:
			cancel()
			t.Fatalf("fewer than 3 periodic gc passes logged:\n%s", log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(marks, "gc.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := "gc --home=" + h.Home() + " --grace=2h"
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line != want {
			t.Errorf("gc ran as %q, want %q", line, want)
		}
	}
}

func TestStopKillsDeafChildren(t *testing.T) {
	t.Setenv("WSFS_SUPERVISOR_TEST_CHILD", "deaf")
	marks := t.TempDir()
	t.Setenv("WSFS_SUPERVISOR_TEST_DIR", marks)
	h := testHost(t)
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Host: h, Workspaces: []string{"ws-1"}, Exe: os.Args[0],
			StopTimeout: 300 * time.Millisecond,
			Logger:      slog.New(slog.NewTextHandler(log, nil)),
			Ready:       func() { close(ready) },
		})
	}()
	select {
	case <-ready:
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("never ready:\n%s", log.String())
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if m, _ := os.ReadDir(marks); len(m) == 2 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("children never reported ignoring SIGTERM")
		}
	}
	st, err := ReadState(h)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, c := range st.Children {
		pids = append(pids, c.PID)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after cancel")
	}
	for _, pid := range pids {
		if pid == 0 {
			t.Error("a child had no pid in up.json")
		} else if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("child %d still alive after Run returned", pid)
		}
	}
	out := log.String()
	if n := strings.Count(out, "did not stop in time: sending SIGKILL"); n != 2 {
		t.Errorf("%d SIGKILL messages, want 2 (daemon and sidecar):\n%s", n, out)
	}
	// Sidecars are stopped before daemons.
	si := strings.Index(out, `"stopping with SIGTERM" workspace=ws-1 kind=sidecar`)
	di := strings.Index(out, `"stopping with SIGTERM" workspace=ws-1 kind=daemon`)
	if si < 0 || di < 0 || si > di {
		t.Errorf("sidecar stop at %d, daemon stop at %d: want the sidecar first", si, di)
	}
	if _, err := os.Stat(ReadyFile(h, "ws-1")); !os.IsNotExist(err) {
		t.Errorf("ready file left behind: %v", err)
	}
}
