package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// mmapHelperEnv names the file TestMmapHelper maps (in a child process:
// a page fault on a FUSE mapping blocks its thread in the kernel, where
// the Go runtime cannot stop it for GC, so the daemon serving the fault
// must not run in the same process).
const mmapHelperEnv = "WSFS_TEST_MMAP_FILE"

// TestMmapHelper is not a test: run by mmapChild, it maps the file named
// by mmapHelperEnv, prints "mmap: B" with its first byte, and after each
// line on stdin reads the byte again and prints it, or "mmap: fault" if
// the access faulted (SIGBUS).
func TestMmapHelper(t *testing.T) {
	path := os.Getenv(mmapHelperEnv)
	if path == "" {
		t.Skip("helper process of TestRestoreMounted")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	debug.SetPanicOnFault(true)
	read := func() (s string) {
		defer func() {
			if recover() != nil {
				s = "fault"
			}
		}()
		return string(m[:1])
	}
	fmt.Printf("mmap: %s\n", read())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Printf("mmap: %s\n", read())
	}
}

// mmapChild starts TestMmapHelper on path; ask reads the mapping's first
// byte again (the first call returns the first line, read at start).
func mmapChild(t *testing.T, path string) (ask func() string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMmapHelper$", "-test.v")
	cmd.Env = append(os.Environ(), mmapHelperEnv+"="+path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "mmap: "); ok {
				lines <- l
			}
		}
		close(lines)
	}()
	first := true
	return func() string {
		t.Helper()
		if !first {
			if _, err := in.Write([]byte("\n")); err != nil {
				t.Fatalf("mmap helper: %v", err)
			}
		}
		first = false
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("mmap helper exited")
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatal("mmap helper did not answer within 60s")
		}
		return ""
	}
}

// TestRestoreMounted: `wsfs restore` and `wsfs diff NAME@A` while the
// workspace is mounted go through the daemon. After the restore, through
// the kernel: paths, listings and attributes are the snapshot's (cached
// entries, attributes, negative entries and pages were dropped); files
// opened before fail with ESTALE on read and write; an mmap of an old
// file no longer shows the old pages; new files work; writers running
// during the restore are either in the undo snapshot or in the restored
// tree whenever their write was acknowledged.
func TestRestoreMounted(t *testing.T) {
	skipWithoutFUSE(t)
	home, _ := snapHost(t)
	mp := filepath.Join(home, "mnt", "ws")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	mountWS(t, home, "ws", mp)
	at := func(p string) string { return filepath.Join(mp, p) }
	write := func(p, data string) {
		t.Helper()
		if err := os.WriteFile(at(p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(at(p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	if err := os.MkdirAll(at("dir/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 200<<10) // chunked
	write("keep.txt", "v1")
	write("mod.txt", "old")
	write("dir/sub/x", "x1")
	write("big.bin", string(big))
	write("mapped.bin", strings.Repeat("M", 8192))
	if code, out, errs := snapRun("snapshot", "create", "--home", home, "ws"); code != 0 || out != "ws@1\n" {
		t.Fatalf("snapshot: %d %s %s", code, out, errs)
	}
	write("mod.txt", "new, longer content")
	if err := os.Chmod(at("mod.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(at("keep.txt")); err != nil {
		t.Fatal(err)
	}
	write("added.txt", "added")
	write("dir/sub/x", "x2")
	write("mapped.bin", strings.Repeat("N", 8192))
	if err := os.Mkdir(at("newdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Fill the kernel's caches: attributes, pages, a negative entry.
	if st, err := os.Stat(at("mod.txt")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stat mod.txt: %v %v", st, err)
	}
	read("mod.txt")
	if _, err := os.Stat(at("keep.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of removed keep.txt: %v", err)
	}
	rf, err := os.Open(at("mod.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	wf, err := os.OpenFile(at("added.txt"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	mapped := mmapChild(t, at("mapped.bin"))
	if b := mapped(); b != "N" {
		t.Fatalf("mapped.bin through mmap before the restore: %q", b)
	}

	// Online diff: against the live tree, through the daemon.
	wantDiff := "D  /keep.txt\nA  /added.txt\nM  /dir/sub/x\nM  /mapped.bin\nM  /mod.txt\nA  /newdir\n"
	code, out, errs := snapRun("diff", "--home", home, "ws@1")
	if code != 0 || sortLines(out) != sortLines(wantDiff) {
		t.Fatalf("online diff: exit %d\n%s\nwant (any order)\n%s\nstderr: %s", code, out, wantDiff, errs)
	}

	// Writers run during the restore.
	var acked sync.Map
	var nAcked atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for k := 0; k < 2; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("c%d-%05d", k, i)
				data := "concurrent " + name
				err := os.WriteFile(at(name), []byte(data), 0o644)
				switch {
				case err == nil:
					acked.Store(name, data)
					nAcked.Add(1)
				case errors.Is(err, syscall.ESTALE):
				default:
					t.Errorf("concurrent write %s: %v", name, err)
					return
				}
			}
		}()
	}
	// Let some writes complete before the restore (bounded wait).
	for deadline := time.Now().Add(20 * time.Second); nAcked.Load() < 10 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	code, out, errs = snapRun("restore", "--home", home, "ws@1")
	// And some after it.
	for n, deadline := nAcked.Load(), time.Now().Add(20*time.Second); nAcked.Load() < n+10 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if code != 0 || !strings.Contains(out, "restored ws to ws@1") || !strings.Contains(errs, "through the daemon") || strings.Contains(errs, "warning") {
		t.Fatalf("online restore: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	undoID := 2

	// Paths, listings and attributes are the snapshot's.
	for p, want := range map[string]string{"keep.txt": "v1", "mod.txt": "old", "dir/sub/x": "x1", "mapped.bin": strings.Repeat("M", 8192)} {
		if got := read(p); got != want {
			t.Errorf("after restore %s = %.40q, want %.40q", p, got, want)
		}
	}
	if got := read("big.bin"); got != string(big) {
		t.Errorf("after restore big.bin differs (%d bytes)", len(got))
	}
	if st, err := os.Stat(at("mod.txt")); err != nil || st.Mode().Perm() != 0o644 || st.Size() != 3 {
		t.Errorf("after restore stat mod.txt: %v %v", st, err)
	}
	for _, p := range []string{"added.txt", "newdir"} {
		if _, err := os.Lstat(at(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after restore %s: %v, want it gone", p, err)
		}
	}
	ents, err := os.ReadDir(mp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "c") {
			names = append(names, e.Name())
		}
	}
	if got := strings.Join(names, " "); got != "big.bin dir keep.txt mapped.bin mod.txt" {
		t.Errorf("after restore ls: %s", got)
	}
	// Files opened before are stale.
	if _, err := rf.ReadAt(make([]byte, 8), 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("read of a file opened before the restore: %v, want ESTALE", err)
	}
	if _, err := wf.Write([]byte("late")); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("write to a file opened before the restore: %v, want ESTALE", err)
	}
	if b := mapped(); b != "fault" {
		t.Errorf("mmap of a file opened before the restore reads %q, want a fault (old pages dropped, the old file stale)", b)
	}

	// Acknowledged concurrent writes are before (undo snapshot) or after.
	if code, _, errs := snapRun("fork", "--home", home, fmt.Sprintf("ws@%d", undoID), "ws-undo"); code != 0 {
		t.Fatalf("fork of the undo snapshot: %d %s", code, errs)
	}
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	uw, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws-undo"), Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, uw, "mod.txt"); got != "new, longer content" {
		t.Errorf("undo snapshot: mod.txt = %q", got)
	}
	nBefore, nAfter := 0, 0
	acked.Range(func(k, v any) bool {
		name, data := k.(string), v.(string)
		switch {
		case read(name) == data:
			nAfter++
		case get(t, uw, name) == data:
			nBefore++
		default:
			t.Errorf("%s: acknowledged, but neither in the undo snapshot nor in the restored tree", name)
		}
		return true
	})
	uw.Close()
	t.Logf("concurrent writes acknowledged: %d before the restore, %d after", nBefore, nAfter)

	// The workspace keeps working, and diff sees the live tree again.
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "c") {
			os.Remove(at(e.Name()))
		}
	}
	f, err := os.Create(at("after.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("after"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if code, out, errs := snapRun("diff", "--home", home, "ws@1"); code != 0 || out != "A  /after.txt\n" {
		t.Errorf("diff after the restore: %d %q %s", code, out, errs)
	}
	// Undo through the daemon too.
	if code, _, errs := snapRun("restore", "--home", home, fmt.Sprintf("ws@%d", undoID)); code != 0 {
		t.Fatalf("undo: %d %s", code, errs)
	}
	if got := read("mod.txt"); got != "new, longer content" {
		t.Errorf("after undo mod.txt = %q", got)
	}
	if code, _, _ := snapRun("restore", "--home", home, "ws@99"); code != exitPrecondition {
		t.Errorf("restore of a missing snapshot: exit %d, want %d", code, exitPrecondition)
	}
}

func sortLines(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}
