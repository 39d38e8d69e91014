// Package peercred checks who is at the other end of a unix socket
// connection (SO_PEERCRED).
//
// wsfs's control sockets (the daemon's control.sock, the sidecar's
// sidecar.sock) live in the private workspace directory, whose modes keep
// other users out. A workspace directory whose path is too long for a
// socket address uses an abstract socket instead, which has no
// permissions at all: any local user can connect to it, and any local
// user can bind its name first when no wsfs process holds it. So both
// ends check each other: a server answers only root and its own user,
// and a client believes only a server run by root or by its own user (a
// squatter's "replicated" or "snapshot taken" would be an acknowledgement
// that never happened).
package peercred

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Get returns the credentials of the peer of c, a unix socket connection.
func Get(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("peer credentials: %w", cerr)
	}
	return cred, nil
}

// Trusted reports whether cred is root or this process's effective user:
// the only users wsfs processes of one host run as.
func Trusted(cred *unix.Ucred) bool {
	return cred.Uid == 0 || int(cred.Uid) == os.Geteuid()
}

// CheckServer returns an error unless the peer of c, a connection this
// process dialed to addr, is Trusted: what a server of another user
// answers must not be believed.
func CheckServer(c net.Conn, addr string) error {
	cred, err := Get(c)
	if err != nil {
		return fmt.Errorf("socket %s: %w", addr, err)
	}
	if !Trusted(cred) {
		return fmt.Errorf("socket %s is held by pid %d of uid %d, not by wsfs (root or uid %d): another user took its address (an abstract socket has no permissions); its answer is ignored: stop that process",
			addr, cred.Pid, cred.Uid, os.Geteuid())
	}
	return nil
}
