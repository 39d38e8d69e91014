package ship

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/remote/s3test"
	"wsfs/internal/unixsock"
	"wsfs/internal/vfs"
)

// waitBound bounds every wait for a wakeup in these tests: only a wakeup
// that never comes reaches it (none of them measures speed).
const waitBound = 30 * time.Second

// woken fails the test unless c is closed within waitBound.
func woken(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitBound):
		t.Fatalf("%s: no wakeup within %v", what, waitBound)
	}
}

// deadSocket leaves a socket file at path with nobody listening (what a
// killed listener leaves behind).
func deadSocket(t *testing.T, path string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
}

// TestWake: a wakeup reaches the listener armed before it was sent; the
// socket is private; Close removes it.
func TestWake(t *testing.T) {
	path := filepath.Join(t.TempDir(), ShipWakeName)
	l, err := ListenWake(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file: %v, %v; want a socket with mode 0600", fi.Mode(), err)
	}
	for i := range 3 {
		c := l.Armed()
		if err := Wake(path); err != nil {
			t.Fatal(err)
		}
		woken(t, c, fmt.Sprintf("wake %d", i))
	}
	// A burst that may fill the queue: no Wake blocks or fails (a full
	// queue is a pending wakeup already), the waiter armed before it
	// wakes, and so does one armed after it for a wakeup after it.
	c := l.Armed()
	for range 5000 {
		if err := Wake(path); err != nil {
			t.Fatal(err)
		}
	}
	woken(t, c, "burst")
	c = l.Armed()
	if err := Wake(path); err != nil {
		t.Fatal(err)
	}
	woken(t, c, "after a burst")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after Close: %v; want it removed", err)
	}
	var nilL *WakeListener
	if nilL.Armed() != nil || nilL.Close() != nil {
		t.Fatal("a nil listener must never fire and close cleanly")
	}
}

// TestWakeNoListener: waking nobody is not an error: no file, a socket
// whose listener died, a file that is not a socket.
func TestWakeNoListener(t *testing.T) {
	dir := t.TempDir()
	deadSocket(t, filepath.Join(dir, "dead.wake"))
	if err := os.WriteFile(filepath.Join(dir, "file.wake"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"missing.wake", "dead.wake", "file.wake", "nodir/x.wake"} {
		if err := Wake(filepath.Join(dir, n)); err != nil {
			t.Errorf("Wake %s: %v; want nil", n, err)
		}
	}
}

// TestWakeStaleSocket: a socket left by a dead listener is replaced; a
// file that is not a socket is refused and left alone; Close of a
// listener whose socket was replaced leaves the new one in place.
func TestWakeStaleSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FsyncWakeName)
	deadSocket(t, path)
	l, err := ListenWake(path)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	c := l.Armed()
	Wake(path)
	woken(t, c, "over a stale socket")

	// The role's new holder (the old one lost its lock) replaces it.
	l2, err := ListenWake(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	l.Close()
	c = l2.Armed()
	Wake(path)
	woken(t, c, "after the old listener closed")

	other := filepath.Join(dir, "in-the-way.wake")
	if err := os.WriteFile(other, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenWake(other); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("listen over a regular file: %v; want refused", err)
	}
	if b, err := os.ReadFile(other); err != nil || string(b) != "data" {
		t.Fatalf("the regular file after a refused listen: %q, %v", b, err)
	}
}

// TestWakeLongPath: a workspace directory too long for a socket address
// still gets its wakeups (through /proc/self/fd).
func TestWakeLongPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ShipWakeName)
	if len(path) <= unixsock.MaxPath {
		t.Fatalf("path %s is not too long", path)
	}
	l, err := ListenWake(path)
	if err != nil {
		t.Fatal(err)
	}
	c := l.Armed()
	if err := Wake(path); err != nil {
		t.Fatal(err)
	}
	woken(t, c, "long path")
	l.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after Close: %v; want it removed", err)
	}
}

// TestRunWakes: a running shipper whose poll never comes (an hour) ships a
// new group when woken on ship.wake, and wakes fsync.wake after writing
// the status that says so; on return it leaves no socket behind.
func TestRunWakes(t *testing.T) {
	srv := s3test.Start(t)
	e := newEnv(t, 3)
	defer e.ws.Close()
	daemon, err := ListenWake(filepath.Join(e.dir(), FsyncWakeName))
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: srv.Store(t, "wake")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sh.Run(ctx, RunOptions{Interval: time.Hour, WriteStatus: true, Wake: true}) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitBound):
			t.Errorf("Run did not return within %v of its cancel", waitBound)
		}
		if _, err := os.Lstat(filepath.Join(e.dir(), ShipWakeName)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after Run: %v; want it removed", ShipWakeName, err)
		}
	}()
	waitStatus := func(g uint64) {
		t.Helper()
		deadline := time.Now().Add(waitBound)
		for {
			c := daemon.Armed()
			if st, err := ReadStatus(e.dir()); err == nil && st.Shipped >= g {
				return
			}
			select {
			case <-c:
			case <-time.After(time.Until(deadline)):
				st, err := ReadStatus(e.dir())
				t.Fatalf("status never reached group %d: %+v, %v", g, st, err)
			}
		}
	}
	waitStatus(e.commit()) // the first round, at start
	for range 3 {
		e.step()
		g := e.commit()
		if err := Wake(filepath.Join(e.dir(), ShipWakeName)); err != nil {
			t.Fatal(err)
		}
		waitStatus(g)
	}
}

// TestBarrierWakes: Barrier waiting on a running shipper (ship.lock held)
// returns when woken after the status says its target shipped, and, with
// the wakeup lost, by its poll; it leaves no socket behind, and a dead
// waiter's socket is removed by the next wakeWaiters.
func TestBarrierWakes(t *testing.T) {
	e := newEnv(t, 4)
	defer e.ws.Close()
	lk, err := Lock(vfs.Default, e.dir())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	dead := filepath.Join(e.dir(), syncWakePrefix+"1-dead"+wakeSuffix)
	deadSocket(t, dead)
	for _, lost := range []bool{false, true} {
		e.step()
		g := e.commit()
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		type result struct {
			g   uint64
			err error
		}
		res := make(chan result, 1)
		go func() {
			g, err := Barrier(ctx, Options{Dir: e.dir(), Name: "ws"})
			res <- result{g, err}
		}()
		// The shipper: ship.json names g (once the Barrier listens, so the
		// wakeup is the one that matters), then its waiters are woken.
		for {
			ents, _ := filepath.Glob(filepath.Join(e.dir(), syncWakePrefix+"*"+wakeSuffix))
			if len(ents) >= 2 || len(ents) == 1 && ents[0] != dead {
				break
			}
			select {
			case r := <-res:
				t.Fatalf("Barrier returned before the status named its group: %+v", r)
			case <-time.After(time.Millisecond):
			}
		}
		b, _ := json.Marshal(Status{Stats: Stats{Shipped: g}})
		if err := os.WriteFile(filepath.Join(e.dir(), StatusName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if !lost {
			if err := wakeWaiters(e.dir()); err != nil {
				t.Fatal(err)
			}
		}
		r := <-res
		cancel()
		if r.err != nil || r.g != g {
			t.Fatalf("Barrier (wakeup lost: %v): %d, %v; want %d", lost, r.g, r.err, g)
		}
		if _, err := os.Lstat(dead); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a dead waiter's socket after wakeWaiters: %v; want it removed", err)
		}
		if ents, _ := filepath.Glob(filepath.Join(e.dir(), "*"+wakeSuffix)); len(ents) != 0 {
			t.Fatalf("sockets left after Barrier: %v", ents)
		}
	}
}

// TestBarrierSweepsDeadSockets: the socket of a wsfs sync that was
// SIGKILLed (bound, never removed) is removed when the next Barrier
// listens, even with no shipper running to sweep it; a live one stays.
func TestBarrierSweepsDeadSockets(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, syncWakePrefix+"1-dead"+wakeSuffix)
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dead, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // a unixgram socket file outlives its closed listener
	live, err := listenBarrier(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := os.Lstat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("dead Barrier socket still there: %v", err)
	}
	l2, err := listenBarrier(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := os.Lstat(live.path); err != nil {
		t.Fatalf("a live Barrier socket was swept: %v", err)
	}
}

// TestWakeNoSymlink: a symbolic link planted at a wake socket's path is
// never followed (sendto would deliver the datagram to whatever socket it
// names), and ListenWake refuses it, naming it, and leaves it in place.
func TestWakeNoSymlink(t *testing.T) {
	dir := t.TempDir()
	// A foreign socket (another service's, say) the link points at.
	target := filepath.Join(dir, "foreign.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: target}); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, ShipWakeName)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Wake(link); err != nil {
		t.Fatalf("Wake through a symlink: %v; want nil (ignored)", err)
	}
	// Delivery to a unix datagram socket is synchronous: a datagram sent
	// through the link would be queued now.
	if n, _, err := syscall.Recvfrom(fd, make([]byte, 16), syscall.MSG_DONTWAIT); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("the foreign socket received %d bytes through the link (err %v); want nothing", n, err)
	}
	if _, err := ListenWake(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("listen over a symlink: %v; want refused, naming the symbolic link", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != fs.ModeSymlink {
		t.Fatalf("the symlink after a refused listen: %v, %v; want it left in place", fi, err)
	}
}
