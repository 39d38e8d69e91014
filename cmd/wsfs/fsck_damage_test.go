package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/ship"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// TestFsckDamageThenMount is the fsck proof of the lifecycle issue: for
// each kind of damage the test makes (a flipped byte in an object, a
// deleted object, a corrupt snapshot manifest, a torn log tail, a corrupt
// group before the tail), `wsfs fsck` finds and names it, and a real
// `wsfs mount` of the workspace still serves the rest: every file the
// damage does not touch reads back whole, a file whose object is damaged
// or gone gives EIO, and a torn last group is dropped. A corrupt group
// before the tail is refused by the mount (exit 4, naming the repair)
// until `wsfs fsck --repair`, after which the groups before it are served.
func TestFsckDamageThenMount(t *testing.T) {
	skipWithoutFUSE(t)
	ctx := context.Background()
	first, mid, last := []byte("FIRST-GROUP-CONTENT"), []byte("MID-GROUP-CONTENT"), []byte("LAST-GROUP-CONTENT")
	big1 := bytes.Repeat([]byte("pooled one "), 8000)
	big2 := bytes.Repeat([]byte("pooled two "), 8000)
	const eio = "EIO" // a file whose read must fail with EIO
	all := map[string]string{"a": string(first), "big1": string(big1), "big2": string(big2), "mid": string(mid), "last": string(last)}
	without := func(names ...string) map[string]string {
		m := map[string]string{}
		for k, v := range all {
			m[k] = v
		}
		for _, n := range names {
			delete(m, n)
		}
		return m
	}
	flipFile := func(t *testing.T, path string, at int) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[at] ^= 0x20
		os.Chmod(path, 0o600)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lastSeg := func(t *testing.T, h *host.Host) string {
		t.Helper()
		segs, _ := filepath.Glob(filepath.Join(h.WorkspaceDir("ws"), "log", "*.seg"))
		if len(segs) == 0 {
			t.Fatal("no segments")
		}
		sort.Strings(segs)
		return segs[len(segs)-1]
	}
	for _, tc := range []struct {
		name   string
		verify bool
		damage func(t *testing.T, h *host.Host) []string // what fsck must print
		exit   int                                       // fsck's exit code
		refuse bool                                      // the mount refuses until fsck --repair
		want   map[string]string                         // what the mount serves afterwards
	}{
		{"object flipped", true, func(t *testing.T, h *host.Host) []string {
			p := objPath(t, h, objid.Sum(big1))
			flipFile(t, p, 100)
			return []string{objid.Sum(big1).String(), "/big1"}
		}, exitCorrupt, false, func() map[string]string { m := without(); m["big1"] = eio; return m }()},
		// Found presence-only by the review of 2026-12-03: fsck without
		// --verify-data took the directory for the object.
		{"object replaced by a directory", false, func(t *testing.T, h *host.Host) []string {
			p := objPath(t, h, objid.Sum(big1))
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			return []string{"object-corrupt", "not a file", objid.Sum(big1).String(), "/big1"}
		}, exitCorrupt, false, func() map[string]string { m := without(); m["big1"] = eio; return m }()},
		{"object deleted", false, func(t *testing.T, h *host.Host) []string {
			p := objPath(t, h, objid.Sum(big1))
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return []string{"object-missing", objid.Sum(big1).String(), "/big1"}
		}, exitCorrupt, false, func() map[string]string { m := without(); m["big1"] = eio; return m }()},
		{"manifest corrupt", false, func(t *testing.T, h *host.Host) []string {
			in, err := snapshot.Get(vfs.Default, h.WorkspaceDir("ws"), 1)
			if err != nil {
				t.Fatal(err)
			}
			flipFile(t, objPath(t, h, in.Root), 12)
			return []string{"the manifests of ws@1 cannot be read"}
		}, exitCorrupt, false, without()},
		{"torn tail", false, func(t *testing.T, h *host.Host) []string {
			seg := lastSeg(t, h)
			// Cut the last group short: 6 bytes before the end of the
			// groups, where the runway of zeros after them starts.
			l, err := seglog.OpenReadOnly(vfs.Default, filepath.Dir(seg))
			if err != nil {
				t.Fatal(err)
			}
			segs := l.Segments()
			l.Close()
			if err := os.Truncate(seg, segs[len(segs)-1].Size-6); err != nil {
				t.Fatal(err)
			}
			return []string{"torn-tail", seg}
		}, exitOK, false, without("last")},
		{"corrupt group before the tail", false, func(t *testing.T, h *host.Host) []string {
			seg := lastSeg(t, h)
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			at := bytes.Index(b, mid)
			if at < 0 {
				t.Fatal("the middle group is not in the last segment")
			}
			flipFile(t, seg, at)
			return []string{seg, "offset", "wsfs fsck --repair ws"}
		}, exitCorrupt, true, without("mid", "last")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := newHost(t)
			h, err := host.Open(home)
			if err != nil {
				t.Fatal(err)
			}
			fsckWrite(t, h, map[string][]byte{"a": first, "big1": big1})
			if code, out, errs := runCLI(ctx, "snapshot", "create", "--home", home, "ws"); code != 0 {
				t.Fatalf("snapshot: %d %s%s", code, out, errs)
			}
			fsckWrite(t, h, map[string][]byte{"big2": big2})
			fsckWrite(t, h, map[string][]byte{"mid": mid})
			fsckWrite(t, h, map[string][]byte{"last": last})
			if code, out, errs := runCLI(ctx, "fsck", "--home", home, "--verify-data", "ws"); code != exitOK {
				t.Fatalf("fsck before the damage: %d\n%s%s", code, out, errs)
			}
			names := tc.damage(t, h)
			args := []string{"fsck", "--home", home, "ws"}
			if tc.verify {
				args = append(args, "--verify-data")
			}
			code, out, errs := runCLI(ctx, args...)
			if code != tc.exit {
				t.Errorf("fsck: exit %d, want %d\n%s%s", code, tc.exit, out, errs)
			}
			for _, n := range names {
				if !strings.Contains(out, n) {
					t.Errorf("fsck does not name %q:\n%s%s", n, out, errs)
				}
			}
			mp := filepath.Join(t.TempDir(), "mnt")
			os.Mkdir(mp, 0o755)
			if tc.refuse {
				code, out := runProc(t, nil, "mount", "--home", home, "ws", mp)
				if code != exitCorrupt || !strings.Contains(out, "wsfs fsck --repair ws") {
					t.Fatalf("mount of the damaged log: exit %d, want %d naming the repair:\n%s", code, exitCorrupt, out)
				}
				if code, out, errs := runCLI(ctx, "fsck", "--home", home, "--repair", "ws"); code != exitOK {
					t.Fatalf("fsck --repair: exit %d\n%s%s", code, out, errs)
				}
			}
			d := startNamedDaemon(t, home, "ws", mp, nil)
			for name, want := range tc.want {
				got, err := os.ReadFile(filepath.Join(mp, name))
				switch {
				case want == eio:
					if !errors.Is(err, syscall.EIO) {
						t.Errorf("%s: read %d bytes, %v; want EIO", name, len(got), err)
					}
				case err != nil || string(got) != want:
					t.Errorf("%s: read %d bytes, %v; want %d bytes", name, len(got), err, len(want))
				}
			}
			for name := range all {
				if _, ok := tc.want[name]; !ok {
					if _, err := os.Stat(filepath.Join(mp, name)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s: %v; want it gone with its group", name, err)
					}
				}
			}
			stopOK(t, d)
		})
	}
}

// objPath is the path of object id in h's pool.
func objPath(t *testing.T, h *host.Host, id objid.ID) string {
	t.Helper()
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Path(id)
}

// TestFsckDamagedFetchState: a damaged remote-fetch.json (the list of
// objects a lazily pulled workspace has not fetched yet) is corrupt data,
// exit 4 from fsck as from mount, naming the file; not a runtime failure.
func TestFsckDamagedFetchState(t *testing.T) {
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(h.WorkspaceDir("ws"), ship.FetchStateName)
	if err := os.WriteFile(path, []byte("{\"version\": 1, \"objects\": [tor"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(context.Background(), "fsck", "--home", home, "ws")
	if code != exitCorrupt || !strings.Contains(out+errOut, path) {
		t.Fatalf("fsck with a damaged %s: exit %d\n%s%s\nwant exit %d naming it", ship.FetchStateName, code, out, errOut, exitCorrupt)
	}
}

// TestDamagedPoolFormat: a flipped byte in POOL/format is corrupt data
// (exit 4) to every command that opens the pool, and the message names the
// file and says to write the layout name back: before, it was exit 1 with
// the advice to remove the pool, which would lose every workspace's
// contents and every snapshot on the host.
func TestDamagedPoolFormat(t *testing.T) {
	ctx := context.Background()
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	fsckWrite(t, h, map[string][]byte{"big": bytes.Repeat([]byte("pooled "), 20000)})
	format := filepath.Join(h.PoolDir(), "format")
	b, err := os.ReadFile(format)
	if err != nil {
		t.Fatal(err)
	}
	b[6] ^= 0x01
	if err := os.WriteFile(format, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"fsck", "ws"}, {"gc"}, {"snapshot", "create", "ws"}} {
		code, out, errs := runCLI(ctx, append(args, "--home", home)...)
		if code != exitCorrupt || !strings.Contains(errs, format) || strings.Contains(errs, "let wsfs create a new one") {
			t.Errorf("%v with a damaged pool format file: exit %d, want %d naming %s without advice to remove the pool\n%s%s",
				args, code, exitCorrupt, format, out, errs)
		}
	}
}

// TestFsckDamagedCheckpointLogDoesNotReplay: the only checkpoint of a
// restored workspace is damaged, and its log from the first group does not
// rebuild the tree (the restore replaced the tree at that checkpoint, so
// later records apply to the snapshot's tree, not to the log's). fsck must
// not claim that recovery can replay the log without the checkpoint, and
// --repair must leave the checkpoint where it is (a backup of it, or of
// the one flipped byte, is the way back). Before, fsck offered the
// removal as a repair, did it, and the workspace still did not mount.
func TestFsckDamagedCheckpointLogDoesNotReplay(t *testing.T) {
	ctx := context.Background()
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	unlink := func(name string) {
		t.Helper()
		ws, _ := openHostWorkspace(t, h)
		if err := ws.Unlink(workspace.RootIno, name); err != nil {
			t.Fatal(err)
		}
		if err := ws.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fsckWrite(t, h, map[string][]byte{"x": []byte("in the snapshot")})
	if code, out, errs := runCLI(ctx, "snapshot", "create", "--home", home, "ws"); code != exitOK {
		t.Fatalf("snapshot: %d %s%s", code, out, errs)
	}
	unlink("x")
	if code, out, errs := runCLI(ctx, "restore", "--home", home, "ws@1"); code != exitOK {
		t.Fatalf("restore: %d %s%s", code, out, errs)
	}
	unlink("x") // applies to the restored tree, not to the log's own
	cks, err := filepath.Glob(filepath.Join(h.WorkspaceDir("ws"), "checkpoint", "*.ckpt"))
	if err != nil || len(cks) != 1 {
		t.Fatalf("checkpoints %v %v, want one", cks, err)
	}
	b, err := os.ReadFile(cks[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-10] ^= 0x01
	if err := os.WriteFile(cks[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(ctx, "fsck", "--home", home, "ws")
	if code != exitCorrupt || !strings.Contains(out, cks[0]) || strings.Contains(out, "replay it all") || strings.Contains(out, "removes the damaged checkpoint") {
		t.Errorf("fsck: exit %d, want %d naming the checkpoint without offering its removal\n%s%s", code, exitCorrupt, out, errs)
	}
	runCLI(ctx, "fsck", "--home", home, "--repair", "ws")
	if got, err := os.ReadFile(cks[0]); err != nil || !bytes.Equal(got, b) {
		t.Errorf("fsck --repair removed or changed the damaged checkpoint the log cannot replace: %v", err)
	}
}

// TestStateFileNotRegular: a directory or a FIFO where wsfs keeps one of
// its files (a segment, the host config, the pool's format name, the host
// identity) is damage: exit 4, naming the path and what to do, at once.
// Before, a directory gave exit 1 without advice, and a FIFO blocked every
// command in open(2) for ever (SIGTERM did not stop it).
func TestStateFileNotRegular(t *testing.T) {
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	fsckWrite(t, h, map[string][]byte{"a": []byte("acknowledged")})
	segs, err := filepath.Glob(filepath.Join(h.WorkspaceDir("ws"), "log", "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments of ws: %v, %v", segs, err)
	}
	for _, path := range []string{
		segs[0],
		filepath.Join(home, host.ConfigFile),
		filepath.Join(h.PoolDir(), "format"),
		filepath.Join(h.StateDir(), host.IDFile),
	} {
		for _, kind := range []string{"directory", "FIFO"} {
			t.Run(filepath.Base(path)+"/"+kind, func(t *testing.T) {
				saved := path + ".saved"
				if err := os.Rename(path, saved); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					os.Remove(path)
					if err := os.Rename(saved, path); err != nil {
						t.Fatal(err)
					}
				})
				if kind == "directory" {
					err = os.Mkdir(path, 0o700)
				} else {
					err = syscall.Mkfifo(path, 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
				type result struct {
					code      int
					out, errs string
				}
				done := make(chan result, 1)
				go func() {
					code, out, errs := runCLI(context.Background(), "gc", "--home", home)
					done <- result{code, out, errs}
				}()
				var r result
				select {
				case r = <-done:
				case <-time.After(time.Minute):
					t.Fatalf("gc with a %s at %s did not return within a minute", kind, path)
				}
				code, out, errs := r.code, r.out, r.errs
				if code != exitCorrupt || !strings.Contains(errs, path+" is a "+kind) || !strings.Contains(errs, "move it aside") {
					t.Errorf("gc with a %s at %s: exit %d, want %d naming it and what to do\n%s%s", kind, path, code, exitCorrupt, out, errs)
				}
			})
		}
	}
}
