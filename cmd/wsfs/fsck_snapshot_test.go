package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
)

// TestFsckSnapshots: fsck checks the snapshots as well as the workspace:
// a damaged catalog entry, a corrupt or missing manifest, and a missing
// or (with --verify-data) corrupt content object referenced only by a
// snapshot are each named with exit 4; a healthy catalog is exit 0.
func TestFsckSnapshots(t *testing.T) {
	flip := func(t *testing.T, path string) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x20
		os.Chmod(path, 0o600)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		verify bool
		damage func(t *testing.T, entry string, root, content string)
		want   string // in stdout; "" for a healthy host
	}{
		{"healthy", true, func(*testing.T, string, string, string) {}, ""},
		{"entry flipped", false, func(t *testing.T, entry, _, _ string) { flip(t, entry) }, "catalog entry of ws@1 is damaged"},
		{"entry emptied", false, func(t *testing.T, entry, _, _ string) { os.WriteFile(entry, nil, 0o600) }, "catalog entry of ws@1 is damaged"},
		{"manifest corrupt", false, func(t *testing.T, _, root, _ string) { flip(t, root) }, "the manifests of ws@1 cannot be read"},
		{"manifest missing", false, func(t *testing.T, _, root, _ string) { os.Remove(root) }, "the manifests of ws@1 cannot be read"},
		{"content missing", false, func(t *testing.T, _, _, content string) { os.Remove(content) }, "content of files in ws@1, is missing"},
		{"content corrupt", true, func(t *testing.T, _, _, content string) { flip(t, content) }, "content of files in ws@1, is corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, open := snapHost(t)
			w := open()
			big := strings.Repeat("only in the snapshot ", 10000) // pooled, not inline
			put(t, w, "f", big)
			w.Close()
			if code, out, errs := snapRun("snapshot", "create", "ws", "--home", home); code != 0 {
				t.Fatalf("snapshot create: %d %s %s", code, out, errs)
			}
			w = open()
			put(t, w, "f", "now small") // the workspace no longer references the object
			w.Close()
			h, err := host.Open(home)
			if err != nil {
				t.Fatal(err)
			}
			p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
			if err != nil {
				t.Fatal(err)
			}
			in, err := snapshot.Get(vfs.Default, h.WorkspaceDir("ws"), 1)
			if err != nil {
				t.Fatal(err)
			}
			content, _, _ := p.Put([]byte(big)) // its ID (a dedup hit)
			tc.damage(t, filepath.Join(snapshot.Dir(h.WorkspaceDir("ws")), "00000000000000000001.snap"), p.Path(in.Root), p.Path(content))
			args := []string{"fsck", "--home", home, "ws"}
			if tc.verify {
				args = append(args, "--verify-data")
			}
			code, out, errs := snapRun(args...)
			if tc.want == "" {
				if code != exitOK || !strings.Contains(out, "ws: snapshots ok: 1 snapshots") {
					t.Fatalf("healthy: exit %d\n%s%s", code, out, errs)
				}
				return
			}
			if code != exitCorrupt || !strings.Contains(out, tc.want) || !strings.Contains(out, "to do: ") {
				t.Fatalf("exit %d (want %d), want %q in\n%s%s", code, exitCorrupt, tc.want, out, errs)
			}
		})
	}
}

// snapHostWithSnapshots is snapHost with n snapshots of ws taken (ws@1 to
// ws@n); it returns the home and the opened host.
func snapHostWithSnapshots(t *testing.T, n int) (string, *host.Host) {
	t.Helper()
	home, _ := snapHost(t)
	for range n {
		if code, out, errs := snapRun("snapshot", "create", "ws", "--home", home); code != 0 {
			t.Fatalf("snapshot create: %d %s %s", code, out, errs)
		}
	}
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	return home, h
}

// TestDamagedSnapshotEntryExitCode: a damaged snapshot catalog entry is
// corrupt data to every command that meets it, exit 4 with the message
// naming the entry and the repair: not exit 4 from 'snapshot ls' and exit
// 1 from fork, diff, restore (of that snapshot) and gc, which read the
// same entry.
func TestDamagedSnapshotEntryExitCode(t *testing.T) {
	home, h := snapHostWithSnapshots(t, 2)
	if err := os.WriteFile(filepath.Join(snapshot.Dir(h.WorkspaceDir("ws")), "00000000000000000001.snap"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"snapshot", "ls", "ws"},
		{"fork", "ws@1", "other"},
		{"diff", "ws@1", "ws@2"},
		{"restore", "ws@1"},
		{"gc", "--grace", "1h"},
	} {
		code, out, errs := snapRun(append(args, "--home", home)...)
		if code != exitCorrupt || !strings.Contains(errs, "00000000000000000001.snap") || !strings.Contains(errs, "wsfs snapshot rm ws@1") {
			t.Errorf("%q with ws@1's entry damaged: exit %d\n%s%s\nwant exit %d naming the entry and its removal", args, code, out, errs, exitCorrupt)
		}
	}
}

// TestSnapshotEntryReplacedByDirectory: a directory where a catalog entry
// belongs (an operator's mistake, a restore from a bad backup) is a
// damaged entry like any other: exit 4 naming it and its removal from
// 'snapshot ls', fsck and gc, and 'wsfs snapshot rm' removes it, after
// which the catalog reads again. Before, every command exited 1 with "is
// a directory" and 'snapshot rm' refused too, leaving no way out but
// editing the state directory by hand.
func TestSnapshotEntryReplacedByDirectory(t *testing.T) {
	home, h := snapHostWithSnapshots(t, 2)
	entry := filepath.Join(snapshot.Dir(h.WorkspaceDir("ws")), "00000000000000000001.snap")
	if err := os.Remove(entry); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(entry, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"snapshot", "ls", "ws"}, {"fsck", "ws"}, {"gc", "--grace", "1h"}} {
		code, out, errs := snapRun(append(args, "--home", home)...)
		if code != exitCorrupt || !strings.Contains(out+errs, entry) || !strings.Contains(out+errs, "wsfs snapshot rm ws@1") {
			t.Errorf("%q with a directory for ws@1's entry: exit %d\n%s%s\nwant exit %d naming the entry and its removal", args, code, out, errs, exitCorrupt)
		}
	}
	if code, out, errs := snapRun("snapshot", "rm", "ws@1", "--home", home); code != exitOK {
		t.Fatalf("snapshot rm of the directory entry: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := snapRun("snapshot", "ls", "ws", "--home", home); code != exitOK || !strings.Contains(out, "ws@2") {
		t.Fatalf("snapshot ls after the removal: exit %d\n%s%s", code, out, errs)
	}
}
