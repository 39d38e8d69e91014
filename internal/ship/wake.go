package ship

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"wsfs/internal/unixsock"
	"wsfs/internal/vfs"
)

// Wake sockets: event-driven wakeups between the daemon, the shipper and
// the waiters of a remote barrier, each a unix datagram socket in the
// workspace directory.
//
//   - ShipWakeName: the shipper listens; the daemon sends one datagram
//     after each group commit (the group is durable), so the shipper
//     starts a round at once instead of at its next poll.
//   - FsyncWakeName: a daemon with remote fsync listens; the shipper sends
//     after each round that changed its status (a group shipped, or a
//     round failed), so fsyncs waiting for the remote wake at once.
//   - sync-*.wake: each Barrier waiting on a running shipper listens on its
//     own socket; the shipper sends to all of them with FsyncWakeName.
//
// # Invariant: a wakeup carries no information
//
// A datagram only says "look again". Every listener re-reads the durable
// state it waits on (the log, ship.json) after every wakeup and also polls
// it on a timer, so a wakeup that is lost — nobody listening, a socket
// that could not be bound (a path too long, a directory that is not a
// real one), a listener that restarted, a full queue — costs latency,
// never correctness; a spurious one costs one look. A waiter arms (takes
// Armed's channel) before it reads the state, so a wakeup sent after that
// read is never missed while it listens: the datagram queues in the
// socket until its reader takes it. Wake never blocks and never fails its
// caller: a missing socket (ENOENT), one without a listener
// (ECONNREFUSED) and a full queue (EAGAIN: a wakeup is pending already)
// are ignored. Wake sends only to a socket file itself, never through a
// symbolic link (sendto would follow it to any socket on the host) nor
// to anything else found at the path: those are ignored too.
//
// Sockets are 0600 in the (0700) workspace directory. A socket file left
// by a listener that died is replaced by the next ListenWake of the same
// name, whose caller holds the lock of that role (ship.lock for the
// shipper, the workspace lock for the daemon), so no live listener's
// socket is ever taken over; a file there that is not a socket is never
// removed.
const (
	ShipWakeName  = "ship.wake"
	FsyncWakeName = "fsync.wake"
	// syncWakePrefix + unique + wakeSuffix: a Barrier's socket.
	syncWakePrefix = "sync-"
	wakeSuffix     = ".wake"
)

// WakeListener receives wakeups on a unix datagram socket. A nil
// *WakeListener is valid: it never wakes (its waiters poll).
type WakeListener struct {
	conn *net.UnixConn
	path string
	fi   os.FileInfo // the socket file as bound (Close removes only it)
	dirf *os.File    // O_PATH handle of the directory, for a long path

	mu sync.Mutex
	ch chan struct{} // closed at the next wakeup
	n  uint64        // wakeups received
}

// ListenWake binds a datagram socket at path (mode 0600), replacing a
// socket file left there by a dead listener; the caller holds the lock
// that makes it the only listener of that name. A non-socket file at path
// is an error.
func ListenWake(path string) (*WakeListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("wake socket %s: a file that is not a socket (%s) is in the way; remove it (wsfs recreates the socket at the next start)", path, fileKind(fi))
		}
		if err := vfs.Default.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("wake socket %s: remove the stale socket: %w", path, err)
		}
	}
	addr, dirf, err := sockAddr(path)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		closeFile(dirf)
		return nil, fmt.Errorf("wake socket %s: %w", path, err)
	}
	l := &WakeListener{conn: conn, path: path, dirf: dirf, ch: make(chan struct{})}
	// The socket is bound with the umask's mode and narrowed here; in the
	// window between, only the workspace directory's own mode (0700,
	// vfs.PrivateDir, for every workspace, pulled ones included) keeps
	// other users from connecting.
	if err := os.Chmod(path, 0o600); err == nil {
		l.fi, err = os.Lstat(path)
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("wake socket %s: %w", path, err)
	}
	go l.read()
	return l, nil
}

func (l *WakeListener) read() {
	buf := make([]byte, 16)
	for {
		if _, _, err := l.conn.ReadFrom(buf); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		l.mu.Lock()
		close(l.ch)
		l.ch = make(chan struct{})
		l.n++
		l.mu.Unlock()
	}
}

// Armed returns a channel closed at the first wakeup received after the
// call. Take it before reading the state waited on (see the invariant).
// A nil listener's channel is nil: it never fires.
func (l *WakeListener) Armed() <-chan struct{} {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ch
}

// Received returns the number of wakeups received so far.
func (l *WakeListener) Received() uint64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Close stops listening and removes the socket file if it is still the
// one this listener bound.
func (l *WakeListener) Close() error {
	if l == nil {
		return nil
	}
	err := l.conn.Close()
	if fi, e := os.Lstat(l.path); e == nil && l.fi != nil && os.SameFile(fi, l.fi) {
		vfs.Default.Remove(l.path)
	}
	closeFile(l.dirf)
	return err
}

var sender struct {
	once sync.Once
	fd   int
	err  error
}

// Wake sends one wakeup to the socket at path without blocking. No
// listener (ENOENT, ECONNREFUSED) and a full queue (EAGAIN) are not
// errors: see the invariant. Safe for concurrent use.
func Wake(path string) error {
	_, err := send(path)
	return err
}

// send is Wake, also reporting a socket file nobody listens on (dead). A
// path that is not a socket (a regular file, a symbolic link) is not
// woken: it has no listener of ours.
func send(path string) (dead bool, err error) {
	sender.once.Do(func() {
		sender.fd, sender.err = syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	})
	if sender.err != nil {
		return false, fmt.Errorf("wake %s: %w", path, sender.err)
	}
	// sendto follows a symbolic link, which would send the datagram to
	// whatever socket it names (a host's syslog, another service's
	// control socket): only a socket file itself is woken, as in
	// ListenWake, which refuses to bind over anything else.
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		return false, nil
	}
	addr, dirf, err := sockAddr(path)
	if err != nil {
		return false, err
	}
	defer closeFile(dirf)
	err = syscall.Sendto(sender.fd, []byte{1}, syscall.MSG_DONTWAIT, &syscall.SockaddrUnix{Name: addr})
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return true, nil
	case err == nil, errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EAGAIN):
		return false, nil
	}
	return false, fmt.Errorf("wake %s: %w", path, err)
}

// wakeWaiters wakes the daemon's remote fsyncs and every Barrier waiting
// in workspace dir, and removes the sockets of Barriers that died
// (sweepBarriers).
func wakeWaiters(dir string) error {
	err := Wake(filepath.Join(dir, FsyncWakeName))
	if e := sweepBarriers(dir); err == nil {
		err = e
	}
	return err
}

// sweepBarriers sends a wakeup to every Barrier socket in workspace dir (a
// send is the only way to tell a live listener from a dead one, and a
// spurious wakeup costs a waiter one re-read) and removes the sockets
// nobody listens on: their names are unique to a process that died (a
// SIGKILLed wsfs sync), so no live waiter can lose its socket.
func sweepBarriers(dir string) error {
	names, _ := vfs.Default.List(dir)
	var err error
	for _, n := range names {
		if !strings.HasPrefix(n, syncWakePrefix) || !strings.HasSuffix(n, wakeSuffix) {
			continue
		}
		p := filepath.Join(dir, n)
		if fi, e := os.Lstat(p); e != nil || fi.Mode().Type() != fs.ModeSocket {
			continue
		}
		dead, e := send(p)
		if dead {
			vfs.Default.Remove(p)
		}
		if err == nil {
			err = e
		}
	}
	return err
}

// listenBarrier binds a Barrier's own wake socket in workspace dir.
//
// It first sweeps the sockets of dead Barriers (sweepBarriers), so that
// they do not pile up while no shipper runs to sweep them.
func listenBarrier(dir string) (*WakeListener, error) {
	_ = sweepBarriers(dir)
	name := syncWakePrefix + strconv.Itoa(os.Getpid()) + "-" + rand.Text()[:10] + wakeSuffix
	return ListenWake(filepath.Join(dir, name))
}

// sockAddr is unixsock.Addr (a long path through its directory's handle).
func sockAddr(path string) (string, *os.File, error) { return unixsock.Addr(path) }

// fileKind names the type of fi for an error message.
func fileKind(fi os.FileInfo) string {
	switch t := fi.Mode().Type(); {
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t == 0:
		return "a regular file"
	default:
		return "a " + t.String() + " file"
	}
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}
