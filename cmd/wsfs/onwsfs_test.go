package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostOnWsfsMountRefused: 'wsfs mount' refuses a host whose state or
// pool lies on a wsfs mount, so init and create refuse to make one there
// (exit 3, nothing created) instead of a host that can never be mounted.
func TestHostOnWsfsMountRefused(t *testing.T) {
	ctx := context.Background()
	outer := t.TempDir() // stands for a wsfs mount
	orig := wsfsMountsForCheck
	t.Cleanup(func() { wsfsMountsForCheck = orig })

	// A host made before the mount appeared around it (or whose mount
	// went up later): create refuses too.
	old := newHost(t)
	wsfsMountsForCheck = func() ([]string, error) { return []string{outer, filepath.Dir(old)}, nil }

	home := filepath.Join(outer, "inner")
	for _, tc := range []struct {
		args []string
		made string
	}{
		{[]string{"init", "--home", home}, home},
		{[]string{"create", "--home", old, "ws-2"}, filepath.Join(old, "state", "workspaces", "ws-2")},
	} {
		code, out := wsfsRun(ctx, tc.args...)
		if code != exitPrecondition || !strings.Contains(out, "lies on the wsfs mount") {
			t.Errorf("%v: exit %d (want %d): %s", tc.args, code, exitPrecondition, out)
		}
		if _, err := os.Stat(tc.made); !os.IsNotExist(err) {
			t.Errorf("%v made %s: %v", tc.args, tc.made, err)
		}
	}
	// Elsewhere, all is as before.
	wsfsMountsForCheck = func() ([]string, error) { return []string{outer}, nil }
	if code, out := wsfsRun(ctx, "create", "--home", old, "ws-2"); code != exitOK {
		t.Errorf("create on a native host: exit %d: %s", code, out)
	}
}
