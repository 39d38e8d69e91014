package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
)

// asNobody runs name args as uid/gid 65534 and returns its stdout, stderr
// and exit code.
func asNobody(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%s as uid 65534: %v", name, err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// TestPrivateToOtherUsers: what a workspace stores outside the mount —
// segments, checkpoints, pool objects, status files, the agent state
// database — can be read by no other user (uid 65534 here): grep -a over
// STATE and POOL finds neither an inline nor a pooled secret, and every
// file refuses to open. Inside the mount the file modes decide: a 0644
// file is readable by uid 65534, a root-owned 0600 file is not.
func TestPrivateToOtherUsers(t *testing.T) {
	needRoot(t)
	skipWithoutFUSE(t)
	base := publicDir(t)
	home := filepath.Join(base, "home")
	ctx := context.Background()
	if code, out := wsfsRun(ctx, "init", "--home", home); code != 0 {
		t.Fatalf("init: %d %s", code, out)
	}
	if code, out := wsfsRun(ctx, "create", "--home", home, "ws"); code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	// Control: uid 65534 can read a world-readable file next to HOME, so a
	// refusal below comes from wsfs's modes, not from the test's paths.
	control := filepath.Join(base, "control")
	if err := os.WriteFile(control, []byte("control"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := asNobody(t, "cat", control); code != 0 || out != "control" {
		t.Fatalf("control read as uid 65534: %d %q %q", code, out, errOut)
	}

	secret := func() string {
		b := make([]byte, 16)
		rand.Read(b)
		return "SECRET-" + hex.EncodeToString(b)
	}
	small, large := secret(), secret()
	public := secret()
	d := startDaemon(t, home, "")
	writeSync(t, filepath.Join(d.mp, "small"), []byte(small), 0o600)
	// Large enough to be a pool object (inline up to 64 KiB).
	writeSync(t, filepath.Join(d.mp, "large"), []byte(strings.Repeat(large+"\n", 200<<10/len(large))), 0o600)
	writeSync(t, filepath.Join(d.mp, "public"), []byte(public), 0o644)
	if out, errOut, code := asNobody(t, "cat", filepath.Join(d.mp, "public")); code != 0 || out != public {
		t.Errorf("a 0644 file in the mount as uid 65534: %d %q %q; the mount's own permissions let it in", code, out, errOut)
	}
	if out, _, code := asNobody(t, "cat", filepath.Join(d.mp, "small")); code == 0 || strings.Contains(out, small) {
		t.Errorf("a root-owned 0600 file in the mount was read by uid 65534: %q", out)
	}
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	dbPath := agentstate.PathsFor(h, "ws").DB
	if err := agentstate.Ensure(dbPath, "ws"); err != nil {
		t.Fatal(err)
	}
	db, err := agentstate.OpenDB(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	agentSecret := secret()
	if _, err := db.Exec(`INSERT INTO wsfs_meta (key, value) VALUES ('secret', ?)`, agentSecret); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if code, _ := d.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("daemon: exit %d: %s", code, d.out)
	}

	// As root: the secrets are there, and every mode is private.
	var files []string
	for _, dir := range []string{h.StateDir(), h.PoolDir()} {
		err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := e.Info()
			if err != nil {
				return err
			}
			if info.Mode().Perm()&0o077 != 0 && info.Mode().Type()&fs.ModeSocket == 0 {
				t.Errorf("%s is %04o: open to other users", p, info.Mode().Perm())
			}
			if info.Mode().IsRegular() {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rootHits, err := exec.Command("grep", append([]string{"-a", "-l", "-e", small, "-e", large, "-e", agentSecret}, files...)...).Output()
	if err != nil || !bytes.Contains(rootHits, []byte(".seg")) || !bytes.Contains(rootHits, []byte("objects")) || !bytes.Contains(rootHits, []byte("state.db")) {
		t.Fatalf("as root, the secrets should be in a segment, a pool object and state.db (else the test proves nothing): %q %v", rootHits, err)
	}

	// As uid 65534: nothing.
	for _, dir := range []string{h.StateDir(), h.PoolDir()} {
		out, _, code := asNobody(t, "grep", "-r", "-a", "-l", "-e", small, "-e", large, "-e", agentSecret, dir)
		if code == 0 || out != "" {
			t.Errorf("uid 65534 found a secret under %s (grep exit %d): %s", dir, code, out)
		}
	}
	out, errOut, code := asNobody(t, "cat", files...)
	if code == 0 || out != "" || strings.Count(errOut, "Permission denied") != len(files) {
		t.Errorf("uid 65534 read %d files of STATE and POOL: exit %d, %d bytes, stderr %q", len(files), code, len(out), errOut)
	}
}

// TestEnsurePrivateTightens: an existing host whose state and pool are
// 0755 (made by an older version) is made private by the next mount, with
// a WARN line naming each directory.
func TestEnsurePrivateTightens(t *testing.T) {
	home := newHost(t)
	for _, d := range []string{"state", "pool"} {
		if err := os.Chmod(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A mount that fails later (its mount point does not exist) has
	// already checked the host.
	_, out := wsfsRun(context.Background(), "mount", "--home", home, "ws", filepath.Join(t.TempDir(), "missing"))
	for _, d := range []string{"state", "pool"} {
		p := filepath.Join(home, d)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o700 {
			t.Errorf("%s is %04o after mount, want 0700", p, st.Mode().Perm())
		}
		if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "dir="+p+" was=0755 now=0700") {
			t.Errorf("no WARN line naming %s: %s", p, out)
		}
	}
	if st, err := os.Stat(filepath.Join(home, "mnt")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the mount directory must stay reachable (0755): %v %v", st.Mode(), err)
	}
}
