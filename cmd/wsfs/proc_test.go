package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"wsfs/internal/testenv"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the wsfs binary: with WSFS_TEST_RUN_MAIN=1 it
// runs main() with its arguments. The tests below start real daemon
// processes from it (with -race when the tests run with -race), so they
// can SIGKILL one, hold its lock from another process, and read exit codes.
const runMainEnv = "WSFS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	code := m.Run()
	if nobodyBin != "" {
		os.RemoveAll(filepath.Dir(nobodyBin))
	}
	os.Exit(code)
}

// Bounds of the waits on a daemon process: none is a performance
// threshold, each turns a hang into a failure that says what hung.
const (
	procReadyTimeout = 30 * time.Second
	procStopTimeout  = 30 * time.Second
	procCmdTimeout   = 60 * time.Second
)

// daemonProc is a `wsfs mount` process started by startDaemon.
type daemonProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	mp    string
	out   *syncBuffer
	done  chan struct{}
	code  int // valid after done
	ready string
}

// wsfsCmd is a command running the test binary as wsfs.
func wsfsCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

// startDaemon runs `wsfs mount --home home [args] ws [mp]` (mp "" for the
// default mount point) and waits until it serves. Cleanup stops it
// (SIGTERM, then SIGKILL) and lazily unmounts mp.
func startDaemon(t *testing.T, home, mp string, args ...string) *daemonProc {
	t.Helper()
	d := tryDaemon(t, home, mp, args...)
	if err := d.waitReady(); err != nil {
		t.Fatal(err)
	}
	return d
}

func tryDaemon(t *testing.T, home, mp string, args ...string) *daemonProc {
	t.Helper()
	return launchDaemon(t, home, "ws", mp, nil, args...)
}

// startNamedDaemon is startDaemon for workspace name, with env added to
// the daemon's environment.
func startNamedDaemon(t *testing.T, home, name, mp string, env []string, args ...string) *daemonProc {
	t.Helper()
	d := launchDaemon(t, home, name, mp, env, args...)
	if err := d.waitReady(); err != nil {
		t.Fatal(err)
	}
	return d
}

// launchDaemon starts `wsfs mount --home home [args] name [mp]` without
// waiting for it to serve.
func launchDaemon(t *testing.T, home, name, mp string, env []string, args ...string) *daemonProc {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	a := append([]string{"mount", "--home", home, "--ready-file", ready, "--group-window", "5ms"}, args...)
	a = append(a, name)
	if mp != "" {
		a = append(a, mp)
	} else {
		mp = filepath.Join(home, "mnt", name)
	}
	d := &daemonProc{t: t, cmd: wsfsCmd(context.Background(), a...), mp: mp, out: &syncBuffer{}, done: make(chan struct{}), ready: ready}
	d.cmd.Env = append(d.cmd.Env, env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.done:
			case <-time.After(procStopTimeout):
				t.Errorf("daemon pid %d did not stop within %v of SIGTERM; killed", d.cmd.Process.Pid, procStopTimeout)
				d.cmd.Process.Kill()
				<-d.done
			}
		}
		unix.Unmount(d.mp, unix.MNT_DETACH)
	})
	return d
}

func (d *daemonProc) waitReady() error {
	deadline := time.After(procReadyTimeout)
	for {
		if _, err := os.Stat(d.ready); err == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("daemon exited early with %d: %s", d.code, d.out)
		case <-deadline:
			return fmt.Errorf("daemon not ready within %v: %s", procReadyTimeout, d.out)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stop sends sig and waits for the exit; it returns the exit code (-1 for
// a signal death) and how long the exit took.
func (d *daemonProc) stop(sig syscall.Signal) (int, time.Duration) {
	d.t.Helper()
	start := time.Now()
	d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
	case <-time.After(procStopTimeout):
		d.t.Fatalf("daemon did not exit within %v of %v: %s", procStopTimeout, sig, d.out)
	}
	return d.code, time.Since(start)
}

// runProc runs the test binary as `wsfs args...` in a process (bounded)
// and returns its exit code and combined output.
func runProc(t *testing.T, cred *syscall.Credential, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procCmdTimeout)
	defer cancel()
	cmd := wsfsCmd(ctx, args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Path = nobodyBinary(t)
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("wsfs %s did not finish within %v: %s", strings.Join(args, " "), procCmdTimeout, out)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("wsfs %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// nobody is uid/gid 65534, no supplementary groups.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}

func needRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t) // changes uid, mounts
}

// publicDir is a temporary directory every user can enter (t.TempDir's
// parent is 0700), so that what another user cannot read is refused by
// wsfs's own modes and not by the test's.
func publicDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "wsfs-public-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// nobodyBinary is a copy of the test binary that uid 65534 can execute
// (the go tool builds it in a 0700 directory).
var nobodyBin string

func nobodyBinary(t *testing.T) string {
	t.Helper()
	if nobodyBin != "" {
		return nobodyBin
	}
	d, err := os.MkdirTemp("", "wsfs-nobody-bin-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	p := filepath.Join(d, "wsfs.test")
	dst, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	nobodyBin = p
	return p
}

func writeSync(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSecondDaemonAfterLockFileRemoved: with the lock file deleted under a
// live daemon, a second daemon of the same workspace (another process,
// another mount point) is still refused with exit 3, naming the first
// daemon's pid; the fsynced file survives both.
func TestSecondDaemonAfterLockFileRemoved(t *testing.T) {
	skipWithoutFUSE(t)
	home := newHost(t)
	a := startDaemon(t, home, "")
	writeSync(t, filepath.Join(a.mp, "kept"), []byte("acknowledged"), 0o644)
	if err := os.Remove(filepath.Join(home, "state", "workspaces", "ws", "lock")); err != nil {
		t.Fatal(err)
	}
	code, out := runProc(t, nil, "mount", "--home", home, "ws", unmountedDir(t))
	want := fmt.Sprintf("pid %d", a.cmd.Process.Pid)
	if code != exitPrecondition || !strings.Contains(out, "served by another wsfs daemon") || !strings.Contains(out, want) {
		t.Fatalf("second daemon after rm lock: exit %d, %q; want exit 3, served by another wsfs daemon, %q", code, out, want)
	}
	if code, _ := a.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("first daemon: exit %d: %s", code, a.out)
	}
	b := startDaemon(t, home, "")
	if got, err := os.ReadFile(filepath.Join(b.mp, "kept")); err != nil || string(got) != "acknowledged" {
		t.Fatalf("after both stopped: %q %v", got, err)
	}
}

// TestRemountAfterSIGKILL: a daemon killed with SIGKILL leaves a dead
// mount whose root still stats from the attribute cache; `wsfs status`
// shows it dead, and the next daemon (started at once) detaches it itself,
// says so, and serves the committed data. Several rounds, since the old
// stat-based check failed only in some.
func TestRemountAfterSIGKILL(t *testing.T) {
	skipWithoutFUSE(t)
	home := newHost(t)
	d := startDaemon(t, home, "")
	writeSync(t, filepath.Join(d.mp, "f"), []byte("round 0"), 0o644)
	for round := 1; round <= 4; round++ {
		if _, err := os.Stat(d.mp); err != nil { // fill the attribute cache
			t.Fatal(err)
		}
		if code, _ := d.stop(syscall.SIGKILL); code != -1 {
			t.Fatalf("round %d: SIGKILLed daemon exit %d", round, code)
		}
		if round == 1 {
			code, out := wsfsRun(context.Background(), "status", "--home", home)
			if code != 0 || !strings.Contains(out, " dead ") {
				t.Errorf("status after SIGKILL: exit %d, %q; want the mount shown dead", code, out)
			}
		}
		d = tryDaemon(t, home, "", "--log-level", "debug")
		if err := d.waitReady(); err != nil {
			t.Fatalf("round %d: remount after SIGKILL: %v", round, err)
		}
		if !strings.Contains(d.out.String(), "detached the dead mount") {
			t.Errorf("round %d: the daemon did not log the detach: %s", round, d.out)
		}
		checkNoRepeatedKeys(t, d.out.String())
		p := filepath.Join(d.mp, "f")
		if got, err := os.ReadFile(p); err != nil || string(got) != fmt.Sprintf("round %d", round-1) {
			t.Fatalf("round %d: %q %v", round, got, err)
		}
		writeSync(t, p, []byte(fmt.Sprintf("round %d", round)), 0o644)
	}
	if code, _ := d.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("last daemon: exit %d: %s", code, d.out)
	}
	code, out := wsfsRun(context.Background(), "status", "--home", home)
	if code != 0 || strings.Contains(out, " dead ") || strings.Contains(out, " yes ") {
		t.Errorf("status after a clean stop: exit %d, %q", code, out)
	}
}

// TestStopWithOpenFiles: SIGTERM while files on the mount are open
// (one written and not closed, one held read-only) commits, detaches the
// busy mount lazily and exits 0 at once; the data is there at the next
// mount.
func TestStopWithOpenFiles(t *testing.T) {
	skipWithoutFUSE(t)
	home := newHost(t)
	d := startDaemon(t, home, "")
	writeSync(t, filepath.Join(d.mp, "closed"), []byte("closed file"), 0o644)
	held, err := os.Open(filepath.Join(d.mp, "closed"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	open, err := os.Create(filepath.Join(d.mp, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.Write([]byte("written, not closed")); err != nil {
		t.Fatal(err)
	}
	code, took := d.stop(syscall.SIGTERM)
	if code != 0 || took > 5*time.Second {
		t.Fatalf("SIGTERM with open files: exit %d after %v, want 0 within 5s: %s", code, took, d.out)
	}
	if !strings.Contains(d.out.String(), "detaching lazily") {
		t.Errorf("the daemon did not say it detached the busy mount: %s", d.out)
	}
	held.Close()
	open.Close()
	d2 := startDaemon(t, home, "")
	for name, want := range map[string]string{"closed": "closed file", "open": "written, not closed"} {
		if got, err := os.ReadFile(filepath.Join(d2.mp, name)); err != nil || string(got) != want {
			t.Errorf("%s after the stop: %q %v, want %q", name, got, err, want)
		}
	}
}

// checkNoRepeatedKeys fails if a logfmt line of out (slog's text handler)
// has a key twice, such as workspace=ws workspace=/path.
func checkNoRepeatedKeys(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "time=") {
			continue
		}
		seen := map[string]bool{}
		inQuote := false
		start := 0
		for i := 0; i <= len(line); i++ {
			if i < len(line) && line[i] == '"' && (i == 0 || line[i-1] != '\\') {
				inQuote = !inQuote
			}
			if i == len(line) || (line[i] == ' ' && !inQuote) {
				if k, _, ok := strings.Cut(line[start:i], "="); ok {
					if seen[k] {
						t.Errorf("log line repeats the key %q: %s", k, line)
					}
					seen[k] = true
				}
				start = i + 1
			}
		}
	}
}

// TestWorkspaceDirMoved: moving the workspace directory away under a live
// daemon (which keeps its lock on the moved inode) is reported with an
// ERROR line within seconds; put back, the daemon goes on.
func TestWorkspaceDirMoved(t *testing.T) {
	skipWithoutFUSE(t)
	home := newHost(t)
	d := startDaemon(t, home, "")
	dir := filepath.Join(home, "state", "workspaces", "ws")
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.out.String(), "level=ERROR msg=\"the workspace directory was moved or removed") {
		if time.Now().After(deadline) {
			os.Rename(dir+".moved", dir)
			t.Fatalf("no ERROR line within 10s of moving the workspace directory: %s", d.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.Rename(dir+".moved", dir); err != nil {
		t.Fatal(err)
	}
	writeSync(t, filepath.Join(d.mp, "after"), []byte("x"), 0o644)
	if code, _ := d.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("daemon: exit %d: %s", code, d.out)
	}
}

// unmountedDir is an empty directory for a mount that should be refused;
// if the mount happens anyway, cleanup detaches it.
func unmountedDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	t.Cleanup(func() { unix.Unmount(d, unix.MNT_DETACH) })
	return d
}

// TestMountsOfOtherHosts: a workspace of the same name served from another
// host directory on the machine is not this host's: `wsfs rm` and `wsfs
// ls` of this host ignore it, while this host's own mount still counts.
func TestMountsOfOtherHosts(t *testing.T) {
	skipWithoutFUSE(t)
	other, home := newHost(t), newHost(t)
	d := startDaemon(t, other, "")
	code, out := wsfsRun(context.Background(), "ls", "--home", home)
	if code != 0 || strings.Contains(out, d.mp) {
		t.Fatalf("ls of this host shows another host's mount %s: exit %d\n%s", d.mp, code, out)
	}
	if code, out := wsfsRun(context.Background(), "ls", "--home", other); code != 0 || !strings.Contains(out, d.mp) {
		t.Fatalf("ls of the serving host does not show its mount %s: exit %d\n%s", d.mp, code, out)
	}
	if code, out := wsfsRun(context.Background(), "rm", "--home", other, "ws"); code != exitPrecondition {
		t.Fatalf("rm of a mounted workspace: exit %d, want %d\n%s", code, exitPrecondition, out)
	}
	if code, out := wsfsRun(context.Background(), "rm", "--home", home, "ws"); code != 0 {
		t.Fatalf("rm of this host's unmounted ws, with another host's ws mounted: exit %d\n%s", code, out)
	}
}
