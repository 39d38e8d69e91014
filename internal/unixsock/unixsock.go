// Package unixsock binds and dials unix sockets by file path, whatever
// the path's length.
//
// A socket address holds at most MaxPath bytes of path. wsfs's sockets
// (the daemon's control.sock, the sidecar's sidecar.sock, the wake
// sockets) live in the private workspace directory, whose path can be
// longer (a deep HOME). An abstract socket would fit any name, but it has
// no permissions: any local user could connect to it, or bind its name
// first and so keep the daemon or sidecar from starting. So a path too
// long is reached through an O_PATH handle of its directory instead
// (/proc/self/fd/N/NAME): the socket is a file in the same private
// directory, protected by its modes, whatever the length.
package unixsock

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxPath is the longest unix socket path the kernel takes (108 bytes in
// sockaddr_un, with its terminating NUL).
const MaxPath = 107

// Addr returns the address to bind or dial for the socket file at path:
// path itself, or, when it is too long for a socket address, the same
// file through an O_PATH handle of its directory (/proc/self/fd/N/NAME).
// The caller closes dir (nil for a short path) once bound or connected:
// the address is valid only while dir is open.
func Addr(path string) (addr string, dir *os.File, err error) {
	if len(path) <= MaxPath {
		return path, nil, nil
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("socket %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Dir(path))
	addr = "/proc/self/fd/" + strconv.Itoa(fd) + "/" + filepath.Base(path)
	if len(addr) > MaxPath {
		f.Close()
		return "", nil, fmt.Errorf("socket %s: name too long for a socket", path)
	}
	return addr, f, nil
}

// Listen binds a stream socket at path (see Addr) and listens. Closing
// the listener does not remove the socket file: the caller removes it by
// path (a /proc/self/fd address is stale by then).
func Listen(path string) (*net.UnixListener, error) {
	addr, dir, err := Addr(path)
	if err != nil {
		return nil, err
	}
	if dir != nil {
		defer dir.Close()
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// Dial connects to the stream socket at path (see Addr).
func Dial(ctx context.Context, path string) (net.Conn, error) {
	addr, dir, err := Addr(path)
	if err != nil {
		return nil, err
	}
	if dir != nil {
		defer dir.Close()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return c, nil
}
