package e2e

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// uringParam is the fuse module parameter FUSE over io_uring needs. The
// tests never write it.
const uringParam = "/sys/module/fuse/parameters/enable_uring"

// uringTimeout bounds a workload on an io_uring mount: past it the daemon
// is killed (the kernel ends every blocked call) and the test fails.
const uringTimeout = 60 * time.Second

// requireURing skips t unless WSFS_TEST_URING=1 and an administrator has
// set the module parameter to Y (CI sets neither).
func requireURing(t *testing.T) {
	t.Helper()
	if os.Getenv("WSFS_TEST_URING") != "1" {
		t.Skip("FUSE over io_uring tests run only with WSFS_TEST_URING=1 (and " + uringParam + " already Y)")
	}
	b, err := os.ReadFile(uringParam)
	if err != nil || strings.TrimSpace(string(b)) != "Y" {
		t.Skipf("FUSE over io_uring is not enabled (%s: %q, %v); the tests never enable it", uringParam, bytes.TrimSpace(b), err)
	}
}

// ringCompletions sums the completions of the daemon's io_uring
// instances (fdinfo CqTail): how many requests (and wake-ups) went
// through the rings.
func ringCompletions(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if !strings.Contains(link, "io_uring") {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "CqTail:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				total += n
			}
		}
	}
	return total
}

// uringClient is one client's workload: small files written, read back,
// renamed, unlinked and listed, and a 1.5 MiB file written in one call,
// fsynced and read back. It returns the SHA-256 of the large file.
func uringClient(root string, c int) ([32]byte, error) {
	var sum [32]byte
	dir := filepath.Join(root, fmt.Sprintf("c%d", c))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return sum, err
	}
	const n = 60
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), []byte(fmt.Sprintf("client %d file %d\n", c, i)), 0o644); err != nil {
			return sum, err
		}
	}
	var want []string
	for i := range n {
		name := fmt.Sprintf("f%02d", i)
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return sum, err
		}
		if string(got) != fmt.Sprintf("client %d file %d\n", c, i) {
			return sum, fmt.Errorf("%s/%s reads %q", dir, name, got)
		}
		switch i % 3 {
		case 0:
			if err := os.Rename(filepath.Join(dir, name), filepath.Join(dir, "r"+name)); err != nil {
				return sum, err
			}
			want = append(want, "r"+name)
		case 1:
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return sum, err
			}
		default:
			want = append(want, name)
		}
	}
	big := make([]byte, 1536<<10)
	rng := rand.New(rand.NewPCG(uint64(c), 1))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	sum = sha256.Sum256(big)
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		return sum, err
	}
	if _, err := f.Write(big); err != nil {
		f.Close()
		return sum, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return sum, err
	}
	if err := f.Close(); err != nil {
		return sum, err
	}
	want = append(want, "big")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return sum, err
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return sum, fmt.Errorf("%s lists %v, want %v", dir, got, want)
	}
	back, err := os.ReadFile(filepath.Join(dir, "big"))
	if err != nil {
		return sum, err
	}
	if sha256.Sum256(back) != sum {
		return sum, fmt.Errorf("%s/big reads back different data (%d bytes)", dir, len(back))
	}
	d, err := os.Open(dir)
	if err != nil {
		return sum, err
	}
	defer d.Close()
	return sum, d.Sync()
}

// runClients runs fn for clients 0..n-1 at once and returns their
// errors, or fails t (after killing the daemon, which ends every blocked
// call) if they do not all return within uringTimeout.
func runClients(t *testing.T, n int, stop func(kill bool), fn func(c int) error) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c] = fn(c)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return errs
	case <-time.After(uringTimeout):
		stop(true)
		select {
		case <-done:
		case <-time.After(killTimeout):
		}
		t.Fatalf("clients of the io_uring mount did not finish within %v (daemon killed)", uringTimeout)
		return nil
	}
}

// TestURing serves a workspace over FUSE over io_uring to several
// concurrent clients, checks every result and that the requests went
// through the rings, then remounts over /dev/fuse and checks the data.
func TestURing(t *testing.T) {
	requireURing(t)
	opts := &mountOpts{extraArgs: []string{"--fuse-transport=uring"}}
	mnt, stop := mountWorkspace(t, opts)
	if !opts.daemonLog.contains("transport=io_uring") {
		t.Fatalf("daemon does not say it serves through io_uring:\n%s", opts.daemonLog)
	}
	const clients = 4
	sums := make([][32]byte, clients)
	for c, err := range runClients(t, clients, stop, func(c int) (err error) {
		sums[c], err = uringClient(mnt, c)
		return err
	}) {
		if err != nil {
			t.Errorf("client %d: %v", c, err)
		}
	}
	// Each client makes several hundred requests.
	if n := ringCompletions(t, opts.pid); n < 100*clients {
		t.Errorf("%d completions on the daemon's rings; want most of the clients' requests served through io_uring", n)
	}
	stop(false)

	opts.extraArgs = nil
	mnt, _ = mountWorkspace(t, opts)
	for c := range clients {
		b, err := os.ReadFile(filepath.Join(mnt, fmt.Sprintf("c%d", c), "big"))
		if err != nil || sha256.Sum256(b) != sums[c] {
			t.Errorf("after a remount over /dev/fuse, c%d/big: %d bytes, %v", c, len(b), err)
		}
		if b, err := os.ReadFile(filepath.Join(mnt, fmt.Sprintf("c%d", c), "rf00")); err != nil || string(b) != fmt.Sprintf("client %d file 0\n", c) {
			t.Errorf("after a remount over /dev/fuse, c%d/rf00: %q, %v", c, b, err)
		}
	}
}

// TestURingKill SIGKILLs a daemon serving through io_uring while clients
// write: every client call must return, the mount must detach, and no
// task may stay blocked in FUSE.
func TestURingKill(t *testing.T) {
	requireURing(t)
	opts := &mountOpts{extraArgs: []string{"--fuse-transport=uring"}}
	mnt, stop := mountWorkspace(t, opts)
	const clients = 4
	var ops atomic.Int64
	progress := make(chan struct{})
	var once sync.Once
	killed := make(chan struct{})
	var killing atomic.Bool
	go func() {
		select {
		case <-progress:
		case <-time.After(uringTimeout):
		}
		killing.Store(true)
		stop(true) // SIGKILL, then lazy unmount
		close(killed)
	}()
	errs := runClients(t, clients, stop, func(c int) error {
		buf := bytes.Repeat([]byte{byte(c)}, 64<<10)
		for i := 0; ; i++ {
			f, err := os.Create(filepath.Join(mnt, fmt.Sprintf("k%d-%d", c, i%20)))
			if err == nil {
				_, err = f.Write(buf)
				if err == nil && i%5 == 0 {
					err = f.Sync()
				}
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				if !killing.Load() {
					once.Do(func() { close(progress) })
					return fmt.Errorf("before the daemon was killed: %w", err)
				}
				return err
			}
			if ops.Add(1) >= 100 {
				once.Do(func() { close(progress) })
			}
		}
	})
	<-killed
	for c, err := range errs {
		// Killed under them: ENOTCONN or ECONNABORTED, or ENOENT once
		// the mount point is detached.
		if err == nil || strings.HasPrefix(err.Error(), "before the daemon was killed") {
			t.Errorf("client %d: %v (want an error from the kill)", c, err)
		}
	}
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), " "+mnt+" ") {
		t.Errorf("%s still in /proc/mounts after the kill and lazy unmount", mnt)
	}
	// No task blocked in FUSE (state D with fuse in its kernel stack);
	// other D states on a shared machine are not ours. Bounded retry:
	// a task may be on its way out.
	deadline := time.Now().Add(killTimeout)
	for {
		stuck := fuseBlockedTasks()
		if len(stuck) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks blocked in FUSE %v after the daemon was killed:\n%s", killTimeout, strings.Join(stuck, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fuseBlockedTasks lists the tasks in uninterruptible sleep whose kernel
// stack is in FUSE or io_uring code.
func fuseBlockedTasks() []string {
	var stuck []string
	stats, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'D' {
			continue
		}
		stack, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stack"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
		if bytes.Contains(stack, []byte("fuse")) || bytes.Contains(stack, []byte("io_uring")) {
			stuck = append(stuck, fmt.Sprintf("%s: %s\n%s", p, b[:i+1], stack))
		}
	}
	return stuck
}
