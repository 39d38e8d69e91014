package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/daemon"
	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// snapRun runs one wsfs command line and returns its exit code, stdout
// and stderr.
func snapRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	g := &globals{stdout: &out, stderr: &errb}
	code := run(context.Background(), g, args)
	return code, out.String(), errb.String()
}

// snapHost makes a host with workspace ws and returns its home and a
// function that opens ws (offline) for the test to change it.
func snapHost(t *testing.T) (string, func() *workspace.Workspace) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	for _, args := range [][]string{{"init", "--home", home}, {"create", "--home", home, "ws"}} {
		if code, out, errs := snapRun(args...); code != 0 {
			t.Fatalf("%v: %d %s %s", args, code, out, errs)
		}
	}
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return home, func() *workspace.Workspace {
		t.Helper()
		w, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws"), Pool: p})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
}

func put(t *testing.T, w *workspace.Workspace, name, data string) {
	t.Helper()
	a, err := w.Lookup(workspace.RootIno, name)
	if err != nil {
		if a, err = w.Create(workspace.RootIno, name, 0o644, workspace.Caller{}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := w.OpenFile(a.Ino, syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt([]byte(data), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	h.Release()
}

func get(t *testing.T, w *workspace.Workspace, name string) string {
	t.Helper()
	a, err := w.Lookup(workspace.RootIno, name)
	if err != nil {
		return "<missing>"
	}
	h, err := w.OpenFile(a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	b := make([]byte, a.Size)
	if _, err := h.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSnapshotCommands(t *testing.T) {
	home, open := snapHost(t)
	w := open()
	put(t, w, "keep", "same")
	put(t, w, "edit", "v1")
	put(t, w, "old-name", "moved")
	w.Close()
	want := func(code int, wantOut string, args ...string) string {
		t.Helper()
		got, out, errs := snapRun(append(args, "--home", home)...)
		if got != code || !strings.Contains(out, wantOut) {
			t.Fatalf("%v: exit %d (want %d)\nstdout: %s\nstderr: %s", args, got, code, out, errs)
		}
		return out
	}
	want(0, "ws@1\n", "snapshot", "create", "ws", "--label", "first")
	w = open()
	put(t, w, "edit", "v2-longer")
	put(t, w, "new", "n")
	if err := w.Rename(workspace.RootIno, "old-name", workspace.RootIno, "new-name", 0); err != nil {
		t.Fatal(err)
	}
	w.Close()
	want(0, "ws@2\n", "snapshot", "create", "ws")
	out := want(0, "ws@1", "snapshot", "ls", "ws")
	if !strings.Contains(out, "first") || !strings.Contains(out, "ws@2") {
		t.Fatalf("ls: %s", out)
	}
	wantDiff := "M  /edit\nA  /new\nR  /old-name -> /new-name\n"
	if out := want(0, "", "diff", "ws@1", "ws@2"); out != wantDiff {
		t.Fatalf("diff ws@1 ws@2:\n%s\nwant:\n%s", out, wantDiff)
	}
	// Against the live tree (nothing changed since ws@2): the same.
	if out := want(0, "", "diff", "ws@1"); out != wantDiff {
		t.Fatalf("diff ws@1 (live):\n%s", out)
	}
	if out := want(0, "", "diff", "ws@2"); out != "" {
		t.Fatalf("diff of the latest snapshot with an unchanged workspace: %q", out)
	}
	out = want(0, "", "diff", "--stat", "--json", "ws@1", "ws@2")
	var st diffStat
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if st != (diffStat{Added: 1, Modified: 1, Renamed: 1, AddedBytes: 1, OldBytes: 2, NewBytes: 9}) {
		t.Fatalf("stat %+v", st)
	}
	out = want(0, "", "diff", "--json", "ws@1", "ws@2")
	var cs []changeJSON
	if err := json.Unmarshal([]byte(out), &cs); err != nil || len(cs) != 3 || cs[2].Op != "renamed" || cs[2].OldPath != "/old-name" {
		t.Fatalf("json %v: %s", err, out)
	}

	// Fork the first snapshot; the fork has its content, and is separate.
	want(0, "forked ws@1 as ws-f", "fork", "ws@1", "ws-f")
	want(3, "", "fork", "ws@1", "ws-f") // exists
	want(3, "", "fork", "ws@9", "ws-g") // no such snapshot
	want(2, "", "fork", "ws@1", "Bad/Name")
	h, _ := host.Open(home)
	p, _ := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	fw, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws-f"), Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	if get(t, fw, "edit") != "v1" || get(t, fw, "old-name") != "moved" || get(t, fw, "new") != "<missing>" {
		t.Fatal("fork does not hold snapshot 1")
	}
	fw.Close()
	if out := want(0, "", "ls"); !strings.Contains(out, "ws-f") {
		t.Fatalf("ls does not list the fork: %s", out)
	}

	// Restore snapshot 1; it snapshots the current state first (ws@3).
	want(0, "undo: wsfs restore ws@3", "restore", "ws@1")
	w = open()
	if get(t, w, "edit") != "v1" || get(t, w, "new") != "<missing>" || get(t, w, "old-name") != "moved" {
		t.Fatal("restore did not bring snapshot 1 back")
	}

	// While another process holds the workspace open without a control
	// socket (another command working on it offline: a restore, say),
	// the offline commands exit 3 and say to wait and run them again, not
	// that a daemon does not answer and must be stopped (what two
	// restores of one workspace at once said).
	for _, args := range [][]string{{"snapshot", "create", "ws"}, {"diff", "ws@1"}, {"restore", "ws@1"}} {
		code, _, errs := snapRun(append(args, "--home", home)...)
		if code != 3 || !strings.Contains(errs, "wait for it to finish") || !strings.Contains(errs, "held by pid") ||
			strings.Contains(errs, "does not answer") {
			t.Fatalf("%v while another process holds ws: exit %d, %s", args, code, errs)
		}
	}
	// Snapshot to snapshot needs no lock.
	want(0, "", "diff", "ws@1", "ws@2")
	w.Close()
	want(0, "", "restore", "ws@3") // undo
	w = open()
	if get(t, w, "edit") != "v2-longer" || get(t, w, "new-name") != "moved" {
		t.Fatal("undoing the restore did not bring the state back")
	}
	w.Close()

	want(0, "removed ws@2", "snapshot", "rm", "ws@2")
	want(3, "", "snapshot", "rm", "ws@2")
	want(2, "", "snapshot", "rm", "ws")
	want(2, "", "snapshot", "prune", "ws")
	want(0, "pruned 1 snapshots", "snapshot", "prune", "ws", "--keep-last", "2")
	if out := want(0, "", "snapshot", "ls", "--json", "ws"); strings.Count(out, `"id"`) != 2 {
		t.Fatalf("after prune: %s", out)
	}
	want(2, "", "snapshot", "frobnicate", "ws")
	// Flags may come before the subcommand too.
	if code, out, errs := snapRun("snapshot", "--home", home, "ls", "ws"); code != 0 || !strings.Contains(out, "ws@") {
		t.Fatalf("snapshot --home H ls ws: %d %s %s", code, out, errs)
	}
	want(3, "", "snapshot", "create", "nosuch")
}

// TestSnapshotCreateThroughDaemon: while a daemon serves the workspace
// (here: the workspace open and its control socket served, as wsfs mount
// does), `snapshot create` is taken by the daemon and holds what was
// written before it.
func TestSnapshotCreateThroughDaemon(t *testing.T) {
	home, open := snapHost(t)
	w := open()
	defer w.Close()
	h, _ := host.Open(home)
	p, _ := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	stop, err := daemon.StartControl(w, h.WorkspaceDir("ws"), p, slog.New(slog.DiscardHandler), daemon.ControlHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sp := daemon.ControlSocketPath(h.WorkspaceDir("ws"))
	if st, err := os.Stat(sp); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("control socket %s: %v, mode %v, want 0600", sp, err, st.Mode().Perm())
	}
	put(t, w, "before", "written before the snapshot")
	code, out, errs := snapRun("snapshot", "create", "--home", home, "--label", "online", "ws")
	if code != 0 || out != "ws@1\n" || !strings.Contains(errs, "through the daemon") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	put(t, w, "after", "x")
	in, err := snapshot.Get(vfs.Default, h.WorkspaceDir("ws"), 1)
	if err != nil || in.Label != "online" {
		t.Fatalf("%+v %v", in, err)
	}
	// Diff between snapshots needs no lock; take a second one online.
	if code, out, _ := snapRun("snapshot", "create", "--home", home, "ws"); code != 0 || out != "ws@2\n" {
		t.Fatalf("second: %d %s", code, out)
	}
	if code, out, _ := snapRun("diff", "--home", home, "ws@1", "ws@2"); code != 0 || out != "A  /after\n" {
		t.Fatalf("diff: %d %q", code, out)
	}
	// Fork the online snapshot and find the file in it.
	if code, _, errs := snapRun("fork", "--home", home, "ws@1", "ws-copy"); code != 0 {
		t.Fatalf("fork: %d %s", code, errs)
	}
	fw, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws-copy"), Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	if got := get(t, fw, "before"); got != "written before the snapshot" {
		t.Fatalf("fork of the online snapshot: %q", got)
	}
	if got := get(t, fw, "after"); got != "<missing>" {
		t.Fatalf("fork holds a write made after the snapshot: %q", got)
	}
}

// lockedBuffer is a bytes.Buffer the daemon's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mountWS runs `wsfs mount` for name at mp until the test ends.
func mountWS(t *testing.T, home, name, mp string) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready-"+name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		out := &lockedBuffer{}
		g := &globals{stdout: out, stderr: out}
		code := run(ctx, g, []string{"mount", "--home", home, "--ready-file", ready, "--group-window", "5ms", name, mp})
		done <- fmt.Sprintf("exit %d: %s", code, out.String())
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("daemon did not stop within 30s")
			exec.Command("umount", "-l", mp).Run()
		}
	})
	deadline := time.After(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return
		}
		select {
		case r := <-done:
			t.Fatalf("daemon exited early: %s", r)
		case <-deadline:
			t.Fatal("mount not ready within 30s")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestSnapshotForkMounted: through real mounts, a snapshot of a mounted
// workspace is taken by its daemon, a fork of it mounts at once and holds
// the snapshot's files, and diff shows what changed after it.
func TestSnapshotForkMounted(t *testing.T) {
	skipWithoutFUSE(t)
	home, _ := snapHost(t)
	mp := filepath.Join(home, "mnt", "ws")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	mountWS(t, home, "ws", mp)
	if err := os.MkdirAll(filepath.Join(mp, "src", "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 200<<10) // 3.2 MB: chunked
	files := map[string][]byte{"src/pkg/a.go": []byte("package pkg\n"), "README": []byte("hi\n"), "big.bin": big}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(mp, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("src/pkg/a.go", filepath.Join(mp, "link")); err != nil {
		t.Fatal(err)
	}
	code, out, errs := snapRun("snapshot", "create", "--home", home, "ws")
	if code != 0 || out != "ws@1\n" {
		t.Fatalf("snapshot of a mounted workspace: %d %s %s", code, out, errs)
	}
	if err := os.WriteFile(filepath.Join(mp, "README"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mp, "src", "pkg", "a.go"), filepath.Join(mp, "src", "pkg", "b.go")); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := snapRun("snapshot", "create", "--home", home, "ws"); code != 0 || out != "ws@2\n" {
		t.Fatalf("second snapshot: %d %s", code, out)
	}
	wantDiff := "M  /README\nR  /src/pkg/a.go -> /src/pkg/b.go\n"
	if code, out, _ := snapRun("diff", "--home", home, "ws@1", "ws@2"); code != 0 || out != wantDiff {
		t.Fatalf("diff: %d %q, want %q", code, out, wantDiff)
	}
	if code, _, errs := snapRun("fork", "--home", home, "ws@1", "ws-f"); code != 0 {
		t.Fatalf("fork: %d %s", code, errs)
	}
	fmp := filepath.Join(home, "mnt", "ws-f")
	if err := os.MkdirAll(fmp, 0o755); err != nil {
		t.Fatal(err)
	}
	mountWS(t, home, "ws-f", fmp)
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(fmp, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("fork: %s: %d bytes, %v", name, len(got), err)
		}
	}
	if target, err := os.Readlink(filepath.Join(fmp, "link")); err != nil || target != "src/pkg/a.go" {
		t.Fatalf("fork: link -> %q, %v", target, err)
	}
	// The fork is writable and independent of its origin.
	if err := os.WriteFile(filepath.Join(fmp, "README"), []byte("fork\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(mp, "README")); string(got) != "changed\n" {
		t.Fatalf("origin changed by a write to the fork: %q", got)
	}
}
