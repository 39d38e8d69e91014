package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/testenv"
)

// Bounds of every wait on a daemon. None is a performance threshold: each
// only turns a hang into a failure that says what hung.
const (
	readyTimeout   = 60 * time.Second // mount until the ready file appears (a recovery at load 30 took over 30 s)
	stopTimeout    = 30 * time.Second // SIGTERM until the daemon exits
	killTimeout    = 10 * time.Second // SIGKILL until the daemon is reaped
	commandTimeout = 60 * time.Second // wsfs init / create, umount
)

// fuseSuperMagic is statfs.f_type of a FUSE mount.
const fuseSuperMagic = 0x65735546

// kind names a target.
const (
	kindNative = "native"
	kindWsfs   = "wsfs"
)

// target is the directory a test runs in: a native directory, or the root
// of a live wsfs mount. remount (wsfs only) unmounts cleanly and mounts the
// same workspace again, returning the new root.
type target struct {
	kind    string
	variant string // forEachVariant: the mount variant's name
	root    string
	mnt     *mountOpts // wsfs only
	stop    func(kill bool)
}

// forEachTarget runs fn as subtest "native" and subtest "wsfs". The wsfs
// subtest is skipped, with the reason, when a mount is not possible here.
func forEachTarget(t *testing.T, opts mountOpts, fn func(t *testing.T, tg *target)) {
	t.Run(kindNative, func(t *testing.T) {
		fn(t, &target{kind: kindNative, root: t.TempDir()})
	})
	t.Run(kindWsfs, func(t *testing.T) {
		o := opts
		mnt, stop := mountWorkspace(t, &o)
		fn(t, &target{kind: kindWsfs, root: mnt, mnt: &o, stop: stop})
	})
}

// mountVariants are the daemon options the differential and kill tests
// also run under (each a subtest "wsfs-<name>"): the kernel writeback
// cache, FUSE passthrough of whole-object reads, and the legacy syncfs
// drain.
var mountVariants = []struct {
	name string
	args []string
}{
	{"writeback", []string{"--writeback"}},
	{"passthrough", []string{"--passthrough"}},
	{"syncfs", []string{"--drain", "syncfs"}},
}

// forEachVariant runs fn as subtest "wsfs-<variant>" for each of
// mountVariants, after forEachTarget's two.
func forEachVariant(t *testing.T, fn func(t *testing.T, tg *target)) {
	for _, v := range mountVariants {
		t.Run(kindWsfs+"-"+v.name, func(t *testing.T) {
			o := mountOpts{extraArgs: v.args}
			mnt, stop := mountWorkspace(t, &o)
			fn(t, &target{kind: kindWsfs, variant: v.name, root: mnt, mnt: &o, stop: stop})
		})
	}
}

// remount unmounts the target cleanly (SIGTERM, exit status 0) and mounts
// the same workspace again at a new mount point. Native targets stay as
// they are.
func (tg *target) remount(t *testing.T) {
	t.Helper()
	if tg.kind != kindWsfs {
		return
	}
	tg.stop(false)
	tg.mnt.mountpoint = ""
	tg.root, tg.stop = mountWorkspace(t, tg.mnt)
}

// requireMount skips t unless this host can mount (root, /dev/fuse), and
// fails it if the wsfs binary did not build.
func requireMount(t *testing.T) {
	t.Helper()
	testenv.RequireFUSE(t)
	if wsfsBuildErr != nil {
		// Not a skip: a binary that does not build is a failure of the
		// product, and a skipped end-to-end test would hide it.
		t.Fatalf("wsfs target: %v", wsfsBuildErr)
	}
}

// mountOpts select the host, workspace and daemon flags of a mount.
// mountWorkspace fills in the fields it chooses, so the same opts mount the
// same workspace again.
type mountOpts struct {
	home       string   // host directory; "" inits a new host in t.TempDir()
	name       string   // workspace; "" is "ws"
	mountpoint string   // "" makes a new empty directory in t.TempDir()
	drain      string   // --drain (entry, syncfs); "" is the default
	extraArgs  []string // more mount flags
	created    bool     // the workspace exists (set after `wsfs create`)
	// allowCorrupt: a daemon that refuses the workspace as corrupt (exit
	// 4) before it is ready is not a test failure: mountWorkspace returns
	// "" and the daemon's message in refused (tests that plant faults
	// count it as a detection).
	allowCorrupt bool
	refused      string
	// daemonLog is set by mountWorkspace: the daemon's output so far.
	daemonLog *lockedBuffer
	// pid is set by mountWorkspace: the daemon's process id.
	pid int
}

// daemon is one `wsfs mount` child process.
type daemon struct {
	cmd     *exec.Cmd
	stderr  *lockedBuffer
	done    chan struct{} // closed when Wait returned
	err     error         // Wait's result, valid after done
	refused bool          // exited with exit 4 before ready, allowed by mountOpts.allowCorrupt
}

// mountWorkspace mounts the workspace of opts (initialising the host and
// creating the workspace the first time) with `wsfs mount` as a real child
// process and returns the mount point once the ready file exists and the
// directory is a FUSE mount.
//
// stop(false) sends SIGTERM and expects the daemon to commit, unmount and
// exit 0 within stopTimeout; stop(true) SIGKILLs it. Either way a daemon
// that does not exit is killed and the mount point lazily unmounted, so a
// stuck mount never hangs the run. stop is idempotent and registered with
// t.Cleanup. A data race reported by a -race daemon fails t.
func mountWorkspace(t *testing.T, opts *mountOpts) (string, func(kill bool)) {
	t.Helper()
	requireMount(t)
	if opts.home == "" {
		opts.home = filepath.Join(t.TempDir(), "home")
		wsfsCommand(t, "init", "--home", opts.home)
	}
	if opts.name == "" {
		opts.name = "ws"
	}
	if !opts.created {
		wsfsCommand(t, "create", "--home", opts.home, opts.name)
		opts.created = true
	}
	if opts.mountpoint == "" {
		opts.mountpoint = filepath.Join(t.TempDir(), "mnt")
		if err := os.Mkdir(opts.mountpoint, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mnt := opts.mountpoint
	ready := filepath.Join(t.TempDir(), "ready")
	args := []string{"mount", "--home", opts.home, "--ready-file", ready}
	if opts.drain != "" {
		args = append(args, "--drain", opts.drain)
	}
	args = append(args, opts.extraArgs...)
	args = append(args, opts.name, mnt)

	d := &daemon{stderr: &lockedBuffer{}, done: make(chan struct{})}
	opts.daemonLog = d.stderr
	d.cmd = exec.Command(wsfsBin, args...)
	d.cmd.Stdout = d.stderr
	d.cmd.Stderr = d.stderr
	// If the test process dies without its cleanups (a panic, a test
	// timeout), the daemon gets SIGTERM and unmounts itself instead of
	// serving a mount nobody will ever detach.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start wsfs %s: %v", strings.Join(args, " "), err)
	}
	opts.pid = d.cmd.Process.Pid
	go func() { d.err = d.cmd.Wait(); close(d.done) }()

	var once sync.Once
	stop := func(kill bool) {
		once.Do(func() { d.stop(t, mnt, kill) })
	}
	t.Cleanup(func() { stop(false) })

	// Watchdog: if the test is about to hit its deadline (a request stuck
	// in the daemon), kill the daemon so the kernel aborts the connection
	// and every blocked system call returns instead of hanging the run.
	if dl, ok := t.Deadline(); ok {
		wd := time.AfterFunc(time.Until(dl)-30*time.Second, func() {
			fmt.Fprintf(os.Stderr, "e2e: %s: deadline near, SIGKILL wsfs daemon of %s\n", t.Name(), mnt)
			d.cmd.Process.Kill()
		})
		t.Cleanup(func() { wd.Stop() })
	}

	deadline := time.Now().Add(readyTimeout)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case <-d.done:
			if opts.allowCorrupt && d.cmd.ProcessState.ExitCode() == 4 {
				d.refused, opts.refused = true, d.stderr.String()
				return "", stop
			}
			t.Fatalf("wsfs %s exited before it was ready (%v); stderr:\n%s", strings.Join(args, " "), d.err, d.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			// SIGQUIT first: the Go runtime prints every goroutine's stack,
			// which tells a daemon stuck in a call from one starved of CPU.
			d.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-d.done:
			case <-time.After(killTimeout):
			}
			stop(true)
			t.Fatalf("wsfs mount: no ready file %s within %v; stderr (with the goroutine dump of SIGQUIT):\n%s", ready, readyTimeout, d.stderr)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil || st.Type != fuseSuperMagic {
		stop(true)
		t.Fatalf("wsfs mount: ready file written but %s is not a FUSE mount (statfs type %#x, err %v); stderr:\n%s", mnt, st.Type, err, d.stderr)
	}
	return mnt, stop
}

// stop ends the daemon; see mountWorkspace.
func (d *daemon) stop(t *testing.T, mnt string, kill bool) {
	sig, bound := syscall.SIGTERM, stopTimeout
	if kill {
		sig, bound = syscall.SIGKILL, killTimeout
	}
	select {
	case <-d.done: // already gone: unmounted from outside, or crashed
		if !kill && !d.refused {
			t.Errorf("wsfs daemon of %s exited before it was stopped (%v); stderr:\n%s", mnt, d.err, d.stderr)
		}
	default:
		d.cmd.Process.Signal(sig)
		select {
		case <-d.done:
			if !kill && d.err != nil {
				t.Errorf("wsfs daemon of %s: exit after SIGTERM: %v (want status 0); stderr:\n%s", mnt, d.err, d.stderr)
			}
		case <-time.After(bound):
			t.Errorf("wsfs daemon of %s did not exit within %v of %v; killing it; stderr:\n%s", mnt, bound, sig, d.stderr)
			d.cmd.Process.Kill()
			select {
			case <-d.done:
			case <-time.After(killTimeout):
				t.Errorf("wsfs daemon of %s (pid %d) not reaped %v after SIGKILL", mnt, d.cmd.Process.Pid, killTimeout)
			}
		}
	}
	// After SIGKILL (or a failed clean stop) the mount point is still
	// attached to a dead connection: detach it.
	if isFUSEMount(mnt) {
		if !kill {
			t.Errorf("wsfs daemon of %s exited but left the mount attached", mnt)
		}
		lazyUnmount(t, mnt)
	}
	if d.stderr.contains("WARNING: DATA RACE") {
		t.Errorf("wsfs daemon of %s reported a data race:\n%s", mnt, d.stderr.from("WARNING: DATA RACE"))
	}
}

// isFUSEMount reports whether dir is (still) the root of a FUSE mount. A
// dead connection answers ENOTCONN, which counts as mounted.
func isFUSEMount(dir string) bool {
	var st unix.Statfs_t
	err := unix.Statfs(dir, &st)
	// A request the kernel has not yet handed to a daemon that just died
	// (e.g. queued for an io_uring entry the kernel is cancelling) ends
	// with EINTR when a signal arrives (the Go runtime's preemption
	// signal): ask again.
	for i := 0; errors.Is(err, syscall.EINTR) && i < 1000; i++ {
		err = unix.Statfs(dir, &st)
	}
	if errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
		return true
	}
	return err == nil && st.Type == fuseSuperMagic
}

// lazyUnmount detaches mnt (umount -l), bounded by commandTimeout.
func lazyUnmount(t *testing.T, mnt string) {
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "umount", "-l", mnt).CombinedOutput(); err != nil {
		t.Errorf("umount -l %s: %v: %s", mnt, err, out)
	}
}

// wsfsCommand runs a short wsfs command (init, create) and fails t unless
// it exits 0 within commandTimeout.
func wsfsCommand(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, wsfsBin, args...)
	// On timeout SIGQUIT, so the output holds every goroutine's stack (what
	// the command was stuck in); SIGKILL 5 s later if that does not end it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wsfs %s: %v (bound %v)\n%s", strings.Join(args, " "), err, commandTimeout, out)
	}
}

// runIn runs name with args in dir with env added to the test's environment,
// bounded by timeout, and fails t with the command's output unless it exits 0.
func runIn(t *testing.T, dir string, env []string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v (timeout %v)\n%s", name, strings.Join(args, " "), dir, err, timeout, tail(out.String(), 4000))
	}
	return out.String()
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// lockedBuffer is a bytes.Buffer safe for a child's output and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// contains reports whether the whole output holds s.
func (b *lockedBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.b.String(), s)
}

// from returns up to 8000 bytes of the output from the first s on.
func (b *lockedBuffer) from(s string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.b.String()
	if i := strings.Index(out, s); i >= 0 {
		out = out[i:]
	}
	return out[:min(len(out), 8000)]
}

// String returns the last 8000 bytes of the output.
func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return tail(b.b.String(), 8000)
}
