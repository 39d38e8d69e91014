package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// TestDamagedLogKeepsItsObjects: a workspace whose log has lost groups
// that its checkpoint needs (a segment's header damaged, a flipped byte
// before later groups, a segment emptied, the segments removed) is refused
// by gc with exit 4 naming the log (for the flipped byte: once rereads
// show the log unchanged, where it was exit 1 asking "damaged?"), and gc removes nothing: the objects only those groups reference
// stay in the pool, so a repair (putting the segments back, restoring them
// from a backup) loses nothing more. An offline command refused on such a
// log (diff, restore) writes nothing into it either: before, it created a
// fresh segment 1 in the emptied log directory, named that segment as the
// damage, and gc then read the log as complete and removed the objects of
// the missing groups.
func TestDamagedLogKeepsItsObjects(t *testing.T) {
	ctx := context.Background()
	// gc rereads a log that does not read consistently, in case a daemon
	// was writing it; a few quick rereads suffice here.
	defer func(n int, d time.Duration) { markRetries, markRetryDelay = n, d }(markRetries, markRetryDelay)
	markRetries, markRetryDelay = 3, time.Millisecond
	big1 := bytes.Repeat([]byte("pooled one "), 8000)
	after := bytes.Repeat([]byte("only in the log after the checkpoint "), 3000)
	segments := func(t *testing.T, h *host.Host) []string {
		t.Helper()
		segs, err := filepath.Glob(filepath.Join(h.WorkspaceDir("ws"), "log", "*.seg"))
		if err != nil {
			t.Fatal(err)
		}
		return segs
	}
	// logState is the log directory's segments with their sizes.
	logState := func(t *testing.T, h *host.Host) string {
		t.Helper()
		var b strings.Builder
		for _, s := range segments(t, h) {
			fi, err := os.Stat(s)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %d\n", filepath.Base(s), fi.Size())
		}
		return b.String()
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, seg string)
	}{
		{"segment header flipped", func(t *testing.T, seg string) {
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			b[3] ^= 0x20
			if err := os.WriteFile(seg, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"byte flipped in a group before the checkpoint", func(t *testing.T, seg string) {
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			b[40] ^= 0x20 // in the first group's first frame; later markers are valid
			if err := os.WriteFile(seg, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"segment emptied", func(t *testing.T, seg string) {
			if err := os.Truncate(seg, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"segments removed", func(t *testing.T, seg string) {
			if err := os.Remove(seg); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := newHost(t)
			h, err := host.Open(home)
			if err != nil {
				t.Fatal(err)
			}
			fsckWrite(t, h, map[string][]byte{"big1": big1})
			if code, out, errs := runCLI(ctx, "snapshot", "create", "--home", home, "ws"); code != exitOK {
				t.Fatalf("snapshot: %d %s%s", code, out, errs)
			}
			// An offline restore publishes a checkpoint of the last group;
			// the file written after it is only in the log.
			if code, out, errs := runCLI(ctx, "restore", "--home", home, "ws@1"); code != exitOK {
				t.Fatalf("restore: %d %s%s", code, out, errs)
			}
			fsckWrite(t, h, map[string][]byte{"after": after})
			segs := segments(t, h)
			if len(segs) != 1 {
				t.Fatalf("segments %v, want one", segs)
			}
			backdate(t, h.PoolDir(), 2*time.Hour)
			kept := objPath(t, h, objid.Sum(after))
			if _, err := os.Stat(kept); err != nil {
				t.Fatalf("the object of the file written after the checkpoint: %v", err)
			}

			tc.damage(t, segs[0])
			damaged := logState(t, h)
			for _, args := range [][]string{{"diff", "ws@1"}, {"restore", "ws@1"}} {
				code, out, errs := runCLI(ctx, append(args, "--home", home)...)
				if code != exitCorrupt || !strings.Contains(errs, "wsfs fsck --repair ws") {
					t.Errorf("%v on the damaged log: exit %d, want %d naming the repair\n%s%s", args, code, exitCorrupt, out, errs)
				}
			}
			if got := logState(t, h); got != damaged {
				t.Errorf("the refused commands wrote into the damaged log: segments\n%swant\n%s", got, damaged)
			}
			code, out, errs := runCLI(ctx, "gc", "--home", home, "--grace", "1h")
			if code != exitCorrupt || !strings.Contains(errs, filepath.Join(h.WorkspaceDir("ws"), "log")) {
				t.Errorf("gc on the damaged log: exit %d, want %d naming the log\n%s%s", code, exitCorrupt, out, errs)
			}
			if _, err := os.Stat(kept); err != nil {
				t.Errorf("gc removed the object of a group the damaged log lost: %v", err)
			}
		})
	}
}

// TestMissingManifestIsCorrupt: a manifest object that is missing from the
// pool is corrupt data (exit 4) to every command that needs it, as it is
// to fsck: the root of the tree a restored workspace's checkpoint names
// (diff, restore, fork, mount and gc open that workspace), and the root of
// a snapshot only (gc marks every snapshot). Before, these exited 1, and
// gc first reread the workspace for about 20 s as if its log were
// changing.
func TestMissingManifestIsCorrupt(t *testing.T) {
	ctx := context.Background()
	defer func(n int, d time.Duration) { markRetries, markRetryDelay = n, d }(markRetries, markRetryDelay)
	markRetries, markRetryDelay = 3, time.Millisecond
	for _, live := range []bool{true, false} {
		t.Run(fmt.Sprintf("checkpoint=%v", live), func(t *testing.T) {
			home := newHost(t)
			h, err := host.Open(home)
			if err != nil {
				t.Fatal(err)
			}
			fsckWrite(t, h, map[string][]byte{"a": []byte("first"), "big": bytes.Repeat([]byte("pooled "), 20000)})
			if code, out, errs := runCLI(ctx, "snapshot", "create", "--home", home, "ws"); code != exitOK {
				t.Fatalf("snapshot: %d %s%s", code, out, errs)
			}
			fsckWrite(t, h, map[string][]byte{"b": []byte("second")})
			// The checkpoint now names ws@1's tree; ws@2 (the undo) is
			// a snapshot only.
			if code, out, errs := runCLI(ctx, "restore", "--home", home, "ws@1"); code != exitOK {
				t.Fatalf("restore: %d %s%s", code, out, errs)
			}
			id := 2
			if live {
				id = 1
			}
			in, err := snapshot.Get(vfs.Default, h.WorkspaceDir("ws"), uint64(id))
			if err != nil {
				t.Fatal(err)
			}
			root := objPath(t, h, in.Root)
			if err := os.Remove(root); err != nil {
				t.Fatal(err)
			}
			cmds := [][]string{{"gc"}, {"fsck", "ws"}}
			if live {
				cmds = append(cmds, []string{"diff", "ws@2"}, []string{"restore", "ws@2"}, []string{"fork", "ws@1", "ws2"})
			}
			for _, args := range cmds {
				code, out, errs := runCLI(ctx, append(args, "--home", home)...)
				if code != exitCorrupt || !strings.Contains(out+errs, in.Root.String()) {
					t.Errorf("%v with the manifest root of ws@%d missing: exit %d, want %d naming %s\n%s%s",
						args, id, code, exitCorrupt, in.Root, out, errs)
				}
			}
			if live {
				mp := filepath.Join(t.TempDir(), "mnt")
				os.Mkdir(mp, 0o755)
				if code, out := runProc(t, nil, "mount", "--home", home, "ws", mp); code != exitCorrupt {
					t.Errorf("mount with the manifest root of its checkpoint missing: exit %d, want %d\n%s", code, exitCorrupt, out)
				}
			}
		})
	}
}

// TestCheckpointRemovedAfterRestore: the checkpoint of a restored
// workspace deleted (its log from group 1 then replays records that apply
// only to the restored tree) is corrupt state to every command, as to
// fsck: mount, diff and restore exit 4 saying to run wsfs fsck, and gc
// exits 4 (once rereads show the log unchanged) and removes nothing.
// Before, all of them exited 1.
func TestCheckpointRemovedAfterRestore(t *testing.T) {
	ctx := context.Background()
	defer func(n int, d time.Duration) { markRetries, markRetryDelay = n, d }(markRetries, markRetryDelay)
	markRetries, markRetryDelay = 3, time.Millisecond
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	fsckWrite(t, h, map[string][]byte{"x": []byte("in the snapshot")})
	if code, out, errs := runCLI(ctx, "snapshot", "create", "--home", home, "ws"); code != exitOK {
		t.Fatalf("snapshot: %d %s%s", code, out, errs)
	}
	fsckWrite(t, h, map[string][]byte{"y": []byte("after the snapshot")})
	if code, out, errs := runCLI(ctx, "restore", "--home", home, "ws@1"); code != exitOK {
		t.Fatalf("restore: %d %s%s", code, out, errs)
	}
	fsckWrite(t, h, map[string][]byte{"y": []byte("again, in the restored tree")}) // y exists in the log's own tree
	cks, err := filepath.Glob(filepath.Join(h.WorkspaceDir("ws"), "checkpoint", "*.ckpt"))
	if err != nil || len(cks) != 1 {
		t.Fatalf("checkpoints %v %v, want one", cks, err)
	}
	if err := os.Remove(cks[0]); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"diff", "ws@1"}, {"restore", "ws@1"}, {"gc"}, {"fsck", "ws"}} {
		code, out, errs := runCLI(ctx, append(args, "--home", home)...)
		if code != exitCorrupt || !strings.Contains(out+errs, "record") {
			t.Errorf("%v without the restored workspace's checkpoint: exit %d, want %d naming the record\n%s%s", args, code, exitCorrupt, out, errs)
		}
	}
	mp := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(mp, 0o755)
	if code, out := runProc(t, nil, "mount", "--home", home, "ws", mp); code != exitCorrupt || !strings.Contains(out, "wsfs fsck ws") {
		t.Errorf("mount without the restored workspace's checkpoint: exit %d, want %d saying to run wsfs fsck\n%s", code, exitCorrupt, out)
	}
}

// TestDamagedMiddleSegment: a flipped byte inside a sealed segment between
// two others (a multi-segment log; the default segment is 64 MiB, so the
// workspace is written here with 2 KiB segments) is corruption to every
// command: exit 4 naming that segment, and gc removes no pool object (the
// groups after the damage still reference theirs).
func TestDamagedMiddleSegment(t *testing.T) {
	defer func(n int, d time.Duration) { markRetries, markRetryDelay = n, d }(markRetries, markRetryDelay)
	markRetries, markRetryDelay = 3, time.Millisecond
	ctx := context.Background()
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := openHostWorkspace(t, h, func(o *workspace.Options) { o.SegmentSize, o.CheckpointBytes = 2<<10, 1<<30 })
	for i := range 40 {
		if err := putFile(ws, fmt.Sprintf("f%02d", i), randBytes(uint64(i), 70_000)); err != nil {
			t.Fatal(err)
		}
		if err := ws.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(h.WorkspaceDir("ws"), "log", "*.seg"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("want at least 3 segments, got %v (%v)", segs, err)
	}
	sort.Strings(segs)
	middle := segs[len(segs)/2]
	b, err := os.ReadFile(middle)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(middle, b, 0o600); err != nil {
		t.Fatal(err)
	}
	objects := func() int {
		n := 0
		filepath.WalkDir(filepath.Join(h.PoolDir(), "objects"), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				n++
			}
			return nil
		})
		return n
	}
	before := objects()
	for _, args := range [][]string{{"fsck", "ws"}, {"gc"}, {"snapshot", "create", "ws"}} {
		code, out, errs := runCLI(ctx, append(args, "--home", home)...)
		if code != exitCorrupt || !strings.Contains(out+errs, filepath.Base(middle)) {
			t.Errorf("%v with a flipped byte in %s: exit %d, want %d naming the segment\n%s%s", args, middle, code, exitCorrupt, out, errs)
		}
	}
	if after := objects(); after != before {
		t.Errorf("gc removed %d of %d pool objects of a workspace with a damaged middle segment", before-after, before)
	}
}
