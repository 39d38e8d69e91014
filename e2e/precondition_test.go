package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// exitPrecondition is wsfs's exit code for an unmet precondition.
const exitPrecondition = 3

// TestMountPreconditions starts `wsfs mount` the ways a user gets wrong
// and requires exit code 3 with a message, while the workspace's real
// daemon keeps serving and its data survives: the same workspace a second
// time (the lock, not a corrupted log), the live mount point again, an
// unknown workspace, a missing and a non-empty mount point.
func TestMountPreconditions(t *testing.T) {
	opts := mountOpts{}
	mnt, stop := mountWorkspace(t, &opts)
	data := []byte("written before the second daemon tried\n")
	if err := os.WriteFile(filepath.Join(mnt, "keep"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := func() string {
		d := filepath.Join(t.TempDir(), "mnt")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	full := empty()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Workspace "other" is not served, so its cases reach the mount
	// point checks.
	cases := []struct {
		what string
		name string
		mp   string
	}{
		{"the workspace is served by another daemon", opts.name, empty()},
		{"the mount point is already mounted", "other", mnt},
		{"unknown workspace", "no-such-workspace", empty()},
		{"missing mount point", "other", filepath.Join(t.TempDir(), "missing")},
		{"non-empty mount point", "other", full},
	}
	wsfsCommand(t, "create", "--home", opts.home, "other")
	for _, c := range cases {
		out, code := wsfsExit(t, "mount", "--home", opts.home, c.name, c.mp)
		if code != exitPrecondition {
			t.Errorf("%s: wsfs mount %s %s exited %d, want %d; output:\n%s", c.what, c.name, c.mp, code, exitPrecondition, out)
		} else if strings.TrimSpace(out) == "" {
			t.Errorf("%s: exit %d without a message", c.what, code)
		} else {
			t.Logf("%s: %s", c.what, strings.TrimSpace(out))
		}
		if isFUSEMount(c.mp) && c.mp != mnt {
			t.Errorf("%s: the refused daemon left a mount at %s", c.what, c.mp)
			lazyUnmount(t, c.mp)
		}
	}
	// The real daemon still serves, and what it held survives a remount.
	got, err := os.ReadFile(filepath.Join(mnt, "keep"))
	if err != nil || string(got) != string(data) {
		t.Fatalf("after the refused mounts: read keep = %q, %v; want %q", got, err, data)
	}
	tg := &target{kind: kindWsfs, root: mnt, mnt: &opts, stop: stop}
	tg.remount(t)
	got, err = os.ReadFile(filepath.Join(tg.root, "keep"))
	if err != nil || string(got) != string(data) {
		t.Fatalf("after a remount: read keep = %q, %v; want %q", got, err, data)
	}
}

// wsfsExit runs wsfs with args, bounded by commandTimeout, and returns its
// output and exit code (a daemon that does not exit fails t).
func wsfsExit(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, wsfsBin, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("wsfs %s did not exit within %v (it should have refused)", strings.Join(args, " "), commandTimeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("wsfs %s: %v", strings.Join(args, " "), err)
	}
	return string(out), 0
}
