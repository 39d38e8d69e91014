package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/seglog"
)

// TestExitCodes pins the exit code and the gist of the message of each
// refusal of the daemon and the sidecar (README: exit codes), each
// reproduced with real processes where one is needed.
func TestExitCodes(t *testing.T) {
	needRoot(t)
	skipWithoutFUSE(t)
	for _, c := range []struct {
		name string
		run  func(t *testing.T) (int, string)
		code int
		want []string
	}{
		{"mount point inside the pool", func(t *testing.T) (int, string) {
			home := newHost(t)
			return runProc(t, nil, "mount", "--home", home, "ws", filepath.Join(home, "pool", "tmp"))
		}, exitPrecondition, []string{"is inside the host directory", "pool"}},
		{"mount point is a symlink into the state", func(t *testing.T) (int, string) {
			home := newHost(t)
			target := filepath.Join(home, "state", "workspaces", "empty")
			if err := os.Mkdir(target, 0o700); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			return runProc(t, nil, "mount", "--home", home, "ws", link)
		}, exitPrecondition, []string{"is inside the host directory", "state"}},
		{"mount point contains the pool", func(t *testing.T) (int, string) {
			home := newHost(t)
			outer := filepath.Join(t.TempDir(), "outer")
			cfg, _ := json.Marshal(host.Config{StateDir: "state", PoolDir: filepath.Join(outer, "pool"), MountDir: "mnt"})
			if err := os.WriteFile(filepath.Join(home, host.ConfigFile), cfg, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := host.Init(home); err != nil {
				t.Fatal(err)
			}
			return runProc(t, nil, "mount", "--home", home, "ws", outer)
		}, exitPrecondition, []string{"is inside the mount point"}},
		{"second daemon", func(t *testing.T) (int, string) {
			home := newHost(t)
			startDaemon(t, home, "")
			return runProc(t, nil, "mount", "--home", home, "ws", unmountedDir(t))
		}, exitPrecondition, []string{"served by another wsfs daemon", "held by pid"}},
		{"second daemon, lock file deleted", func(t *testing.T) (int, string) {
			home := newHost(t)
			startDaemon(t, home, "")
			if err := os.Remove(filepath.Join(home, "state", "workspaces", "ws", "lock")); err != nil {
				t.Fatal(err)
			}
			return runProc(t, nil, "mount", "--home", home, "ws", unmountedDir(t))
		}, exitPrecondition, []string{"served by another wsfs daemon", "held by pid"}},
		{"pulled checkpoint torn by a crash before its sync", func(t *testing.T) (int, string) {
			return runProc(t, nil, "mount", "--home", tornPulledBase(t), "ws", unmountedDir(t))
		}, exitCorrupt, []string{"not corruption", "`wsfs rm ws`, then `wsfs pull ws --from 's3://bucket/p?endpoint=http://127.0.0.1:9'`"}},
		{"fsck of a pulled checkpoint torn by a crash", func(t *testing.T) (int, string) {
			return runProc(t, nil, "fsck", "--home", tornPulledBase(t), "ws")
		}, exitCorrupt, []string{"torn-pulled-base", "wsfs rm ws, then wsfs pull ws --from 's3://bucket/p?endpoint=http://127.0.0.1:9'"}},
		{"non-root mount", func(t *testing.T) (int, string) {
			base := publicDir(t)
			if err := os.Chown(base, int(nobody.Uid), int(nobody.Gid)); err != nil {
				t.Fatal(err)
			}
			home := filepath.Join(base, "home")
			for _, a := range [][]string{{"init", "--home", home}, {"create", "--home", home, "ws"}} {
				if code, out := runProc(t, nobody, a...); code != 0 {
					t.Fatalf("wsfs %s as uid 65534: %d %s", a[0], code, out)
				}
			}
			t.Cleanup(func() { syscall.Unmount(filepath.Join(home, "mnt", "ws"), syscall.MNT_DETACH) })
			return runProc(t, nobody, "mount", "--home", home, "ws")
		}, exitPrecondition, []string{"as uid 65534 failed", "run the daemon as root"}},
		{"another user's host", func(t *testing.T) (int, string) {
			// Every command opens the host first; status stands for them.
			home := filepath.Join(publicDir(t), "home")
			if code, out := wsfsRun(context.Background(), "init", "--home", home); code != 0 {
				t.Fatalf("init: %d %s", code, out)
			}
			return runProc(t, nobody, "status", "--home", home)
		}, exitPrecondition, []string{"is private to uid 0", "run wsfs as that user"}},
		{"another user's host with a config others can read (older host)", func(t *testing.T) (int, string) {
			home := filepath.Join(publicDir(t), "home")
			for _, a := range [][]string{{"init", "--home", home}, {"create", "--home", home, "ws"}} {
				if code, out := wsfsRun(context.Background(), a...); code != 0 {
					t.Fatalf("%s: %d %s", a[0], code, out)
				}
			}
			if err := os.Chmod(filepath.Join(home, host.ConfigFile), 0o644); err != nil {
				t.Fatal(err)
			}
			return runProc(t, nobody, "snapshot", "create", "--home", home, "ws")
		}, exitPrecondition, []string{"is private to uid 0", "run wsfs as that user"}},
		{"second sidecar", func(t *testing.T) (int, string) {
			home := newHost(t)
			h, err := host.Open(home)
			if err != nil {
				t.Fatal(err)
			}
			first := startSidecar(t, home, agentstate.PathsFor(h, "ws").Status)
			code, out := runProc(t, nil, "sidecar", "--home", home, "ws")
			if c, _ := first.stop(syscall.SIGTERM); c != 0 {
				t.Errorf("first sidecar: exit %d: %s", c, first.out)
			}
			return code, out
		}, exitPrecondition, []string{"another sidecar is already replicating"}},
		{"SIGTERM with a file open", func(t *testing.T) (int, string) {
			home := newHost(t)
			d := startDaemon(t, home, "")
			f, err := os.Create(filepath.Join(d.mp, "open"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			code, took := d.stop(syscall.SIGTERM)
			if took > 5*time.Second {
				t.Errorf("stop took %v", took)
			}
			return code, d.out.String()
		}, exitOK, []string{"detaching lazily"}},
		{"SIGTERM after a SIGKILLed daemon's remount", func(t *testing.T) (int, string) {
			home := newHost(t)
			d := startDaemon(t, home, "")
			d.stop(syscall.SIGKILL)
			d = startDaemon(t, home, "")
			code, _ := d.stop(syscall.SIGTERM)
			return code, d.out.String()
		}, exitOK, []string{"detached the dead mount", "unmounted cleanly"}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			code, out := c.run(t)
			if code != c.code {
				t.Errorf("exit %d, want %d: %s", code, c.code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q: %s", w, out)
				}
			}
		})
	}
}

// startSidecar runs `wsfs sidecar --home home ws` and waits for its status
// file.
func startSidecar(t *testing.T, home, status string) *daemonProc {
	t.Helper()
	d := &daemonProc{t: t, cmd: wsfsCmd(context.Background(), "sidecar", "--home", home, "ws"), out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	deadline := time.After(procReadyTimeout)
	for {
		if _, err := os.Stat(status); err == nil {
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("sidecar exited early with %d: %s", d.code, d.out)
		case <-deadline:
			t.Fatalf("sidecar status not written within %v: %s", procReadyTimeout, d.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tornPulledBase returns a host whose workspace ws looks as a crash
// leaves a pull whose checkpoint was never synced: the checkpoint is empty
// and its durable .unsynced marker names the remote.
func tornPulledBase(t *testing.T) string {
	t.Helper()
	home := newHost(t)
	ck := filepath.Join(home, "state", "workspaces", "ws", "checkpoint")
	if err := os.MkdirAll(ck, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		seglog.UnsyncedName(7):      "s3://bucket/p?endpoint=http://127.0.0.1:9\n",
		"00000000000000000007.ckpt": "",
	} {
		if err := os.WriteFile(filepath.Join(ck, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return home
}
