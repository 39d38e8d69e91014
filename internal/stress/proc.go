package stress

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"wsfs/internal/mountinfo"

	"golang.org/x/sys/unix"
)

// proc is a child process the harness started: a daemon, an agent or a
// neighbour. Every child runs in its own process group, so a terminal's
// Ctrl-C reaches only the harness, which then stops children in order
// (agents, neighbours, then daemons, which must unmount cleanly).
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // valid after done is closed
}

// startProc starts exe with args; stdout and stderr go to logPath unless the
// caller set them on the returned command before (see startAgent).
func startProc(name, exe string, args, env []string, logPath string, setup func(*exec.Cmd) error) (*proc, error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	cmd.Stdout = logf
	if setup != nil {
		if err := setup(cmd); err != nil {
			logf.Close()
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process (not its group: a daemon forks nothing).
func (p *proc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM and waits up to grace, then SIGKILL. It returns the
// process's exit error, or an error saying it had to be killed.
func (p *proc) stop(grace time.Duration) error {
	if !p.exited() {
		p.signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return p.exitErr()
	case <-time.After(grace):
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("%s did not exit within %v of SIGTERM and was killed%s", p.name, grace, p.logTail())
}

// exitErr describes a non-zero exit, with the tail of the process's log.
func (p *proc) exitErr() error {
	if p.err == nil {
		return nil
	}
	return fmt.Errorf("%s: %v%s", p.name, p.err, p.logTail())
}

// logTail returns the last lines of the process log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "\n    log " + p.logPath + ":\n    " + strings.Join(lines, "\n    ")
}

// waitReady waits until readyFile exists, p exits (an error) or timeout.
func waitReady(p *proc, readyFile string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(readyFile); err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready: %v%s", p.name, p.err, p.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v%s", p.name, timeout, p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isMounted reports whether dir is a mount point (an unreadable mount
// table reads as not mounted: the caller only tidies up).
func isMounted(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	ok, err := mountinfo.IsMountPoint(abs)
	return err == nil && ok
}

// forceUnmount detaches a mount a daemon left behind (lazy unmount, so
// open files do not block it).
func forceUnmount(dir string) error {
	if !isMounted(dir) {
		return nil
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("umount -l %s: %w", dir, err)
	}
	return nil
}
