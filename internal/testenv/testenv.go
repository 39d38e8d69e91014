// Package testenv decides what a test does when the host lacks something it
// needs (root, /dev/fuse, loop devices, a command-line tool): skip on a
// developer's machine, fail where the environment promises it.
//
// A requirement is promised when the environment variable CI is "true" (every
// requirement), or when WSFS_REQUIRE lists it by key ("root", "fuse", "loop",
// "tools", or "all"; comma-separated). `.ci/run` sets both, so on a CI runner
// that lost /dev/fuse the mount tests fail instead of passing with no mount
// coverage.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Keys of the requirements, as WSFS_REQUIRE names them.
const (
	Root  = "root"  // the test runs as uid 0
	FUSE  = "fuse"  // /dev/fuse exists and this process may mount (root)
	Loop  = "loop"  // loop devices (/dev/loop-control) and the layout tools
	Tools = "tools" // the command-line tools a test names (git, sqlite3, ...)
)

// Promised reports whether the environment promises requirement key.
func Promised(key string) bool {
	if os.Getenv("CI") == "true" {
		return true
	}
	for _, k := range strings.Split(os.Getenv("WSFS_REQUIRE"), ",") {
		k = strings.TrimSpace(k)
		if k == key || k == "all" {
			return true
		}
	}
	return false
}

// missing skips t, or fails it when key is promised.
func missing(t testing.TB, key, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Promised(key) {
		t.Fatalf("required by the environment (CI or WSFS_REQUIRE=%s) but missing: %s", key, msg)
	}
	t.Skipf("skipping: %s (set WSFS_REQUIRE=%s to make this a failure)", msg, key)
}

// RequireRoot skips or fails t unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, Root, "needs root, running as uid %d", os.Geteuid())
	}
}

// RequireFUSE skips or fails t unless this process can mount FUSE
// filesystems: /dev/fuse exists and the process is root (go-fuse mounts
// directly, without fusermount3).
func RequireFUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing(t, FUSE, "needs /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		missing(t, FUSE, "needs root to mount FUSE, running as uid %d", os.Geteuid())
	}
}

// RequireLoop skips or fails t unless loop devices and the layout tools
// (losetup, mkfs.ext4, mount, umount) are available to root.
func RequireLoop(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		missing(t, Loop, "needs loop devices: %v", err)
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, Loop, "needs %s: %v", tool, err)
		}
	}
}

// RequireTool skips or fails t unless the command name is installed, and
// returns its path.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, Tools, "needs %s: %v", name, err)
	}
	return p
}
