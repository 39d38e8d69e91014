package vfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockNamesHolder: the OS lock's refusal names the holding process
// (here this one, from /proc/locks), for a directory and for a file.
func TestLockNamesHolder(t *testing.T) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		t.Skipf("no /proc/locks: %v", err)
	}
	dir := t.TempDir()
	for _, name := range []string{dir, filepath.Join(dir, "lock")} {
		l, err := Default.Lock(name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Default.Lock(name)
		want := fmt.Sprintf("held by pid %d (", os.Getpid())
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), want) {
			t.Errorf("second Lock of %s: %v, want ErrLocked naming %q", name, err, want)
		}
		l.Close()
	}
}

func TestFlockHolderPID(t *testing.T) {
	locks := "1: POSIX  ADVISORY  WRITE 77 00:1f:5678 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF\n" +
		"2: -> FLOCK  ADVISORY  WRITE 99 fd:01:5678 0 EOF\n" +
		"3: FLOCK  ADVISORY  WRITE 4321 00:1f:5678 0 EOF\n"
	if got := flockHolderPID(locks, 0, 0x1f, 5678); got != 4321 {
		t.Errorf("00:1f:5678: pid %d, want 4321", got)
	}
	if got := flockHolderPID(locks, 0xfd, 1, 5678); got != 1234 {
		t.Errorf("fd:01:5678: pid %d, want 1234", got)
	}
	if got := flockHolderPID(locks, 0, 0x1f, 1); got != 0 {
		t.Errorf("unknown inode: pid %d, want 0", got)
	}
}
