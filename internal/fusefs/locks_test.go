package fusefs

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lockHelperEnv makes the test binary act as a second process that tries
// to take a lock on the file named by the variable's value and reports the
// result in its exit code.
const lockHelperEnv = "WSFS_FUSEFS_LOCK_HELPER"

func TestMain(m *testing.M) {
	if p := os.Getenv(lockHelperEnv); p != "" {
		os.Exit(lockHelper(p))
	}
	os.Exit(m.Run())
}

// Exit codes of the helper.
const (
	helperGotFcntl  = 10 // F_SETLK succeeded
	helperFcntlBusy = 11 // F_SETLK: EAGAIN/EACCES
	helperFlockBusy = 12 // flock LOCK_NB: EWOULDBLOCK
	helperGotFlock  = 13
	helperError     = 1
)

func lockHelper(p string) int {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return helperError
	}
	defer f.Close()
	if os.Getenv(lockHelperEnv+"_KIND") == "flock" {
		switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err {
		case nil:
			return helperGotFlock
		case unix.EWOULDBLOCK:
			return helperFlockBusy
		}
		return helperError
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	switch err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err {
	case nil:
		return helperGotFcntl
	case unix.EAGAIN, unix.EACCES:
		return helperFcntlBusy
	}
	return helperError
}

func runLockHelper(t *testing.T, path, kind string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+path, lockHelperEnv+"_KIND="+kind)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("lock helper did not finish within 30s")
	}
	return cmd.ProcessState.ExitCode()
}

// TestLocks checks that flock and fcntl locks on the mount exclude each
// other across processes and open files. The adapter does not implement
// lock requests; the kernel keeps the locks locally, which is correct for
// a file system that only this kernel serves.
func TestLocks(t *testing.T) {
	e := newEnv(t, Options{})
	p := e.path("locked")
	mustWrite(t, p, []byte("x"))

	// fcntl: held by this process, refused to another.
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		t.Fatalf("F_SETLK: %v", err)
	}
	var probe = unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &probe); err != nil {
		t.Fatalf("F_GETLK: %v", err)
	}
	if got := runLockHelper(t, p, "fcntl"); got != helperFcntlBusy {
		t.Fatalf("second process F_SETLK while locked: helper exit %d, want %d", got, helperFcntlBusy)
	}
	lk.Type = unix.F_UNLCK
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if got := runLockHelper(t, p, "fcntl"); got != helperGotFcntl {
		t.Fatalf("second process F_SETLK after unlock: helper exit %d, want %d", got, helperGotFcntl)
	}

	// flock: two open files in this process exclude each other, and
	// another process is refused.
	g, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock: %v", err)
	}
	if err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
		t.Fatalf("flock on second open file: %v, want EWOULDBLOCK", err)
	}
	if got := runLockHelper(t, p, "flock"); got != helperFlockBusy {
		t.Fatalf("second process flock while locked: helper exit %d, want %d", got, helperFlockBusy)
	}
	f.Close() // releases the flock
	if err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock after the holder closed: %v", err)
	}
}
