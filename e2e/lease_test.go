package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/ship"
	"wsfs/internal/vfs"
)

// startDaemon runs `wsfs mount` and waits for its ready file; unlike
// mountWorkspace it returns the process, for tests that signal it.
func startDaemon(t *testing.T, home, name string, extra ...string) (*exec.Cmd, *lockedBuffer, string, <-chan struct{}) {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	args := append([]string{"mount", "--home", home, "--ready-file", ready}, extra...)
	cmd := exec.Command(wsfsBin, append(args, name, mnt)...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(killTimeout):
			t.Errorf("daemon (pid %d) not reaped", cmd.Process.Pid)
		}
		if isFUSEMount(mnt) {
			lazyUnmount(t, mnt)
		}
		if out.contains("WARNING: DATA RACE") {
			t.Errorf("daemon reported a data race:\n%s", out.from("WARNING: DATA RACE"))
		}
	})
	deadline := time.Now().Add(readyTimeout)
	for {
		if _, err := os.Stat(ready); err == nil {
			return cmd, out, mnt, done
		}
		select {
		case <-done:
			t.Fatalf("wsfs mount exited before it was ready (exit %d):\n%s", cmd.ProcessState.ExitCode(), out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("wsfs mount: not ready within %v:\n%s", readyTimeout, out)
		}
	}
}

// mountRefused runs `wsfs mount` expecting a refusal before it serves:
// it returns the exit code and output.
func mountRefused(t *testing.T, home, name string, extra ...string) (int, string) {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(append([]string{"mount", "--home", home}, extra...), name, mnt)
	out, err := exec.CommandContext(ctx, wsfsBin, args...).CombinedOutput()
	if isFUSEMount(mnt) {
		lazyUnmount(t, mnt)
		t.Fatalf("wsfs %s served; want a refusal:\n%s", strings.Join(args, " "), out)
	}
	return exitCodeOfErr(err), string(out)
}

// TestDaemonLease: with a remote tier, the daemon holds the workspace's
// lease. Host B (another HOME) cannot serve the workspace while host A's
// daemon does (exit 3 naming A and the lease's age), nor after A stops
// renewing without --steal; once B took the workspace over (pull --steal
// after expiry), A's daemon, resumed, finds the lease lost: it
// acknowledges nothing more and exits with an error naming it.
func TestDaemonLease(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("lease")
	cfg.LeaseTTLSeconds = 3
	const wsName = "lease-ws"
	homes := map[string]string{}
	for _, h := range []string{"a", "b"} {
		homes[h] = filepath.Join(t.TempDir(), "home-"+h)
		wsfsCommand(t, "init", "--home", homes[h])
		setRemote(t, homes[h], cfg)
	}
	// B registers the name before A's daemon takes it: afterwards
	// `wsfs create` on B would refuse a name the remote has.
	wsfsCommand(t, "create", "--home", homes["a"], wsName)
	wsfsCommand(t, "create", "--home", homes["b"], wsName)
	daemonA, outA, mntA, doneA := startDaemon(t, homes["a"], wsName)
	hostA, err := os.ReadFile(filepath.Join(homes["a"], "host-id"))
	if err != nil {
		t.Fatal(err)
	}
	writeSynced(t, filepath.Join(mntA, "a"), []byte("written on A"))
	wsfsOutput(t, 2*time.Minute, "sync", "--home", homes["a"], wsName)

	// A third host cannot register the name A serves (nor fork into it).
	homeC := filepath.Join(t.TempDir(), "home-c")
	wsfsCommand(t, "init", "--home", homeC)
	setRemote(t, homeC, cfg)
	if out, code := wsfsExit(t, "create", "--home", homeC, wsName); code != 3 || !strings.Contains(out, "exists in") || !strings.Contains(out, "served by host") {
		t.Fatalf("create on C of the name A serves: exit %d\n%s\nwant exit 3 naming the holder", code, out)
	}
	wsfsCommand(t, "create", "--home", homeC, "c-ws")
	wsfsOutput(t, time.Minute, "snapshot", "create", "--home", homeC, "c-ws")
	if out, code := wsfsExit(t, "fork", "--home", homeC, "c-ws@1", wsName); code != 3 || !strings.Contains(out, "exists in") {
		t.Fatalf("fork on C into the name A serves: exit %d\n%s\nwant exit 3", code, out)
	}
	code, out := mountRefused(t, homes["b"], wsName)
	if code != 3 || !strings.Contains(out, "served by host "+strings.TrimSpace(string(hostA))) || !strings.Contains(out, "renewed") {
		t.Fatalf("mount on B while A serves: exit %d\n%s\nwant exit 3 naming host %s and the lease's age", code, out, hostA)
	}
	// A stops renewing (SIGSTOP: alive, but out of contact).
	if err := daemonA.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(cfg.LeaseTTLSeconds)*time.Second + 500*time.Millisecond)
	code, out = mountRefused(t, homes["b"], wsName)
	if code != 3 || !strings.Contains(out, "--steal") {
		daemonA.Process.Signal(syscall.SIGCONT)
		t.Fatalf("mount on B after A's lease expired, without --steal: exit %d\n%s\nwant exit 3 pointing at --steal", code, out)
	}
	wsfsOutput(t, time.Minute, "rm", "--home", homes["b"], wsName)
	wsfsOutput(t, 2*time.Minute, "pull", "--home", homes["b"], "--steal", "--no-agent-state", wsName)
	daemonA.Process.Signal(syscall.SIGCONT)
	select {
	case <-doneA:
	case <-time.After(2 * time.Minute):
		t.Fatalf("A's daemon still runs 2m after it lost its lease:\n%s", outA)
	}
	if c := daemonA.ProcessState.ExitCode(); c != 1 || !outA.contains("lease lost") {
		t.Fatalf("A's daemon after losing the lease: exit %d\n%s\nwant exit 1 saying the lease was lost", c, outA)
	}
	// B serves what A had synced.
	_, _, mntB, _ := startDaemon(t, homes["b"], wsName)
	if b, err := os.ReadFile(filepath.Join(mntB, "a")); err != nil || string(b) != "written on A" {
		t.Fatalf("B reads %q, %v", b, err)
	}
}

// TestRemoteFsync: with --remote-fsync every fsync returns only once the
// remote head names a group at or after the fsync's; with the remote
// down, fsync fails with EIO instead of being acknowledged.
func TestRemoteFsync(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("rfsync")
	st := srv.Store(t, "rfsync")
	home := filepath.Join(t.TempDir(), "home")
	wsfsCommand(t, "init", "--home", home)
	setRemote(t, home, cfg)
	const wsName = "rfsync-ws"
	wsfsCommand(t, "create", "--home", home, wsName)
	_, outD, mnt, _ := startDaemon(t, home, wsName, "--remote-fsync", "--remote-fsync-timeout", "30s")
	startShipper(t, home, wsName)
	hst, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	wsDir := hst.WorkspaceDir(wsName)
	ctx := context.Background()
	for i := range 20 {
		writeSynced(t, filepath.Join(mnt, fmt.Sprintf("f%02d", i)), []byte(strings.Repeat("x", 100+i*3000)))
		local, err := ship.LocalLast(vfs.Default, wsDir)
		if err != nil {
			t.Fatal(err)
		}
		h, ok, err := ship.ReadHead(ctx, st, wsName)
		if err != nil || !ok || h.Group < local {
			t.Fatalf("fsync %d returned with the remote head at group %d (%v %v), the local log at %d", i, h.Group, ok, err, local)
		}
	}
	srv.Stop()
	f, err := os.OpenFile(filepath.Join(mnt, "after-stop"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("not in the remote")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = f.Sync()
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync with the remote down: %v after %v; want EIO\n%s", err, time.Since(start), outD)
	}
	t.Logf("fsync with the remote down: %v after %v", err, time.Since(start).Round(time.Millisecond))
}

// TestRemoteFsyncCost measures fsync latency (p50/p99) of small files on
// a mount with --remote-fsync against one without (both with a shipper to
// the same versitygw on 127.0.0.1) and against the native filesystem, in
// the same run and interleaved, and the latency of `wsfs sync` after each
// local fsync. Set WSFS_REMOTE_FSYNC_BENCH to the number
// of fsyncs per variant (docs/benchmarks.md, "Remote fsync").
func TestRemoteFsyncCost(t *testing.T) {
	n := 0
	if v := os.Getenv("WSFS_REMOTE_FSYNC_BENCH"); v != "" {
		fmt.Sscan(v, &n)
	}
	if n <= 0 {
		t.Skip("set WSFS_REMOTE_FSYNC_BENCH=N to measure")
	}
	requireMount(t)
	srv := s3test.Start(t)
	home := filepath.Join(t.TempDir(), "home")
	wsfsCommand(t, "init", "--home", home)
	setRemote(t, home, srv.Config("cost"))
	dirs := map[string]string{"native": t.TempDir()}
	for _, v := range []string{"local", "remote"} {
		name := "cost-" + v
		wsfsCommand(t, "create", "--home", home, name)
		var extra []string
		if v == "remote" {
			extra = []string{"--remote-fsync"}
		}
		_, _, mnt, _ := startDaemon(t, home, name, extra...)
		startShipper(t, home, name)
		dirs[v] = mnt
	}
	lat := map[string][]time.Duration{}
	data := []byte(strings.Repeat("y", 4096))
	for i := range n {
		for _, v := range []string{"native", "local", "remote"} {
			start := time.Now()
			writeSynced(t, filepath.Join(dirs[v], fmt.Sprintf("f%05d", i)), data)
			lat[v] = append(lat[v], time.Since(start))
		}
		// `wsfs sync` (a remote barrier: a process of its own, waiting on
		// the running shipper) after the local variant's fsync.
		start := time.Now()
		wsfsCommand(t, "sync", "--home", home, "cost-local")
		lat["sync"] = append(lat["sync"], time.Since(start))
		// Again, with nothing left to wait for: the command's own cost.
		start = time.Now()
		wsfsCommand(t, "sync", "--home", home, "cost-local")
		lat["sync0"] = append(lat["sync0"], time.Since(start))
	}
	pct := func(d []time.Duration, p int) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, len(s)*p/100)]
	}
	t.Logf("%-6s wsfs sync after a local fsync:        p50 %v p99 %v (n=%d)", "sync", pct(lat["sync"], 50).Round(10*time.Microsecond), pct(lat["sync"], 99).Round(10*time.Microsecond), n)
	t.Logf("%-6s wsfs sync with nothing to wait for:   p50 %v p99 %v (n=%d)", "sync0", pct(lat["sync0"], 50).Round(10*time.Microsecond), pct(lat["sync0"], 99).Round(10*time.Microsecond), n)
	for _, v := range []string{"native", "local", "remote"} {
		t.Logf("%-6s create+write 4 KiB+fsync+close: p50 %v p99 %v (n=%d)", v, pct(lat[v], 50).Round(10*time.Microsecond), pct(lat[v], 99).Round(10*time.Microsecond), n)
	}
	t.Logf("remote/local p50 ratio %.1f, p99 ratio %.1f", float64(pct(lat["remote"], 50))/float64(pct(lat["local"], 50)), float64(pct(lat["remote"], 99))/float64(pct(lat["local"], 99)))
}

// TestDaemonStartRemoteDown: a daemon that crashes while the remote is
// unreachable starts again without it while the lease this host took is
// unexpired by its own record (lease.held), serving what it had; with no
// record, an unreadable one (as is one naming another host) or an expired
// one, the start is refused (exit 1) saying why and what to do.
func TestDaemonStartRemoteDown(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("down")
	cfg.LeaseTTLSeconds = 600 // the restart below must fall inside it, however loaded the machine
	home := filepath.Join(t.TempDir(), "home")
	wsfsCommand(t, "init", "--home", home)
	setRemote(t, home, cfg)
	const wsName = "down-ws"
	wsfsCommand(t, "create", "--home", home, wsName)
	daemon, _, mnt, done := startDaemon(t, home, wsName)
	writeSynced(t, filepath.Join(mnt, "f"), []byte("before the outage"))
	hst, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(hst.WorkspaceDir(wsName), "lease.held")
	if fi, err := os.Stat(held); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lease record after the start: %v %v; want a 0600 file", fi, err)
	}
	srv.Stop()
	daemon.Process.Kill()
	select {
	case <-done:
	case <-time.After(killTimeout):
		t.Fatal("daemon not reaped")
	}
	lazyUnmount(t, mnt)

	_, out, mnt2, _ := startDaemon(t, home, wsName)
	if b, err := os.ReadFile(filepath.Join(mnt2, "f")); err != nil || string(b) != "before the outage" {
		t.Fatalf("restarted without the remote: read %q, %v\n%s", b, err, out)
	}
	writeSynced(t, filepath.Join(mnt2, "g"), []byte("during the outage"))
	if !out.contains("serving from local disk") {
		t.Fatalf("restart without the remote says nothing of it:\n%s", out)
	}
	lazyUnmount(t, mnt2)

	hostID, err := os.ReadFile(filepath.Join(home, "host-id"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, record, want string
	}{
		{"expired", `{"workspace":"` + wsName + `","holder":"` + strings.TrimSpace(string(hostID)) + `","expires":"2020-01-01T00:00:00Z"}`, "expired"},
		{"unreadable", "{", "refusing to start"},
		{"absent", "", "refusing to start"},
	} {
		if tc.record == "" {
			os.Remove(held)
		} else if err := os.WriteFile(held, []byte(tc.record), 0o600); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		code, out := mountRefused(t, home, wsName)
		t.Logf("refused with the record %s in %v", tc.name, time.Since(start).Round(time.Millisecond))
		if code != 1 || !strings.Contains(out, tc.want) || !strings.Contains(out, "once the remote can be reached") {
			t.Fatalf("start with the remote down and the record %s: exit %d\n%s\nwant exit 1 saying %q", tc.name, code, out, tc.want)
		}
	}
}

// TestSidecarLease: on a host with a remote tier, the agent state sidecar
// refuses to start while another host holds the workspace's lease (exit
// 3, naming the holder), starts once it is released, and stops (exit 1,
// "lease lost") when another host takes the lease while it replicates:
// two hosts must not write one agent state replica.
func TestSidecarLease(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("sidecar-lease")
	cfg.LeaseTTLSeconds = 3
	home := filepath.Join(t.TempDir(), "home")
	wsfsCommand(t, "init", "--home", home)
	setRemote(t, home, cfg)
	wsfsCommand(t, "create", "--home", home, "ws")
	st := srv.Store(t, "sidecar-lease")
	ctx := context.Background()
	if _, err := ship.AcquireLease(ctx, st, "ws", "other-host", time.Hour, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	exitOf := func(exited <-chan struct{}, result *error, out *lockedBuffer, what string) int {
		t.Helper()
		select {
		case <-exited:
		case <-time.After(commandTimeout):
			t.Fatalf("%s: the sidecar still runs after %v:\n%s", what, commandTimeout, out.String())
		}
		return exitCodeOfErr(*result)
	}
	out, exited, result, _ := startSidecarProc(t, home, "ws")
	if code := exitOf(exited, result, out, "another host's lease"); code != 3 || !out.contains("served by host other-host") {
		t.Fatalf("sidecar while another host holds the lease: exit %d\n%s\nwant exit 3 naming the holder", code, out.String())
	}
	if err := ship.ReleaseLease(ctx, st, "ws", "other-host", time.Now()); err != nil {
		t.Fatal(err)
	}
	out, exited, result, _ = startSidecarProc(t, home, "ws")
	deadline := time.Now().Add(commandTimeout)
	for !out.contains("replicating agent state") {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar with the lease released: not replicating within %v:\n%s", commandTimeout, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := ship.AcquireLease(ctx, st, "ws", "other-host", time.Hour, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(exited, result, out, "a takeover"); code != 1 || !out.contains("lease lost") || !out.contains("without a final sync") {
		t.Fatalf("sidecar after another host took the lease: exit %d\n%s\nwant exit 1, lease lost, no final sync", code, out.String())
	}
}
