package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/layout"
	"wsfs/internal/testenv"
)

// needLayout additionally needs loop devices and the layout tools.
func needLayout(t *testing.T) {
	t.Helper()
	needE2E(t)
	testenv.RequireLoop(t)
}

// createLayout runs `wsfs layout create` and registers its teardown (after
// the up process's cleanup, which runs first: cleanups are LIFO).
func createLayout(t *testing.T, home, stateSize, poolSize string) {
	t.Helper()
	out, err := exec.Command(wsfsBin, "layout", "create", "--home", home, "--state-size", stateSize, "--pool-size", poolSize).CombinedOutput()
	t.Cleanup(func() {
		for _, d := range []string{"state", "pool"} {
			exec.Command("umount", "-l", filepath.Join(home, d)).Run()
		}
		for _, img := range []string{"state.img", "pool.img"} {
			out, _ := exec.Command("losetup", "--noheadings", "--output", "NAME", "--associated", filepath.Join(home, "layout", img)).Output()
			for _, dev := range strings.Fields(string(out)) {
				exec.Command("losetup", "--detach", dev).Run()
			}
		}
	})
	if err != nil {
		t.Fatalf("wsfs layout create: %v\n%s", err, out)
	}
}

func waitReady(ctx context.Context, t *testing.T, u *upProc) {
	t.Helper()
	select {
	case <-u.ready:
	case <-u.exited:
		t.Fatalf("wsfs up exited before ready: %v", u.cmd.ProcessState)
	case <-ctx.Done():
		t.Fatal("wsfs up never became ready")
	}
}

func stopUp(ctx context.Context, t *testing.T, u *upProc) int {
	t.Helper()
	u.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-u.exited:
	case <-ctx.Done():
		t.Fatal("wsfs up did not exit after SIGTERM")
	}
	return u.cmd.ProcessState.ExitCode()
}

func TestUpOnDedicatedLayout(t *testing.T) {
	needLayout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	home := t.TempDir()
	createLayout(t, home, "64M", "128M")
	u := startUp(t, home, "--workspaces", "2")
	waitReady(ctx, t, u)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	// The workspaces live on the layout's filesystems, with no extra config.
	st, err := layout.Status(h, "")
	if err != nil {
		t.Fatal(err)
	}
	stateDev := devOf(t, h.StateDir())
	if devOf(t, h.WorkspaceDir("ws-1")) != stateDev || devOf(t, h.Home()) == stateDev {
		t.Error("workspace state is not on the layout's state filesystem")
	}
	files := writeFsynced(t, h.MountPoint("ws-1"), "on-layout", 10)

	// Destroy refuses while the workspaces are served.
	out, err := exec.Command(wsfsBin, "layout", "destroy", "--home", home).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "ws-1") {
		t.Errorf("layout destroy while up runs: %v, want exit 3 naming ws-1:\n%s", err, out)
	}
	if code := stopUp(ctx, t, u); code != 0 {
		t.Errorf("wsfs up exited %d", code)
	}

	// The data is on the layout: serve it again, then destroy.
	u2 := startUp(t, home)
	waitReady(ctx, t, u2)
	checkFiles(t, h.MountPoint("ws-1"), files)
	if code := stopUp(ctx, t, u2); code != 0 {
		t.Errorf("second wsfs up exited %d", code)
	}
	out, err = exec.Command(wsfsBin, "layout", "destroy", "--home", home).CombinedOutput()
	if err != nil {
		t.Fatalf("layout destroy: %v\n%s", err, out)
	}
	for _, f := range st {
		if _, err := os.Stat(f.Image); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after destroy", f.Image)
		}
	}
}

// TestFullStateFilesystem fills a small state filesystem through the mount:
// the writer's fsync gets ENOSPC. Once space is freed on that filesystem
// (an operator's ballast file removed), the same daemon commits what was
// queued, without a remount; and every file made durable is there after
// the daemon restarts.
func TestFullStateFilesystem(t *testing.T) {
	needLayout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	home := t.TempDir()
	createLayout(t, home, "16M", "128M")
	u := startUp(t, home, "--workspaces", "1")
	waitReady(ctx, t, u)
	h, _ := host.Open(home)
	mp := h.MountPoint("ws-1")
	ballast := filepath.Join(h.StateDir(), "ballast")
	if err := os.WriteFile(ballast, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	durable := map[string][]byte{}
	pending := map[string][]byte{}
	var failure error
	for i := 0; i < 40000 && failure == nil; i++ {
		if ctx.Err() != nil {
			t.Fatal("timed out filling the state filesystem")
		}
		name := fmt.Sprintf("f-%05d", i)
		data := []byte(strings.Repeat(fmt.Sprintf("%s ", name), 300)) // ~2 KiB: small files go to the log
		f, err := os.Create(filepath.Join(mp, name))
		if err != nil {
			failure = err
			break
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			failure = err
			break
		}
		if i%50 == 49 {
			if err := f.Sync(); err != nil {
				f.Close()
				failure = err
				break
			}
			// fsync returned: every operation completed before it is durable.
			for k, v := range pending {
				durable[k] = v
			}
			clear(pending)
			durable[name] = data
		} else {
			pending[name] = data
		}
		if err := f.Close(); err != nil {
			failure = err
			break
		}
	}
	if failure == nil {
		t.Fatal("40000 files fit in a 16 MiB state filesystem: the workload did not fill it")
	}
	t.Logf("writer stopped after %d durable files: %v", len(durable), failure)
	// A log append that hits ENOSPC commits nothing and is retried; the
	// waiting fsync gets ENOSPC.
	if !errors.Is(failure, syscall.ENOSPC) {
		t.Errorf("writer got %v, want ENOSPC", failure)
	}
	// Free space: the queued records commit, and a new fsync succeeds in
	// the same daemon.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	after := filepath.Join(mp, "after-space-freed")
	f, err := os.Create(after)
	if err != nil {
		t.Fatalf("create after freeing space: %v", err)
	}
	if _, err := f.Write([]byte("committed")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after freeing space: %v (the workspace should recover without a remount)", err)
	}
	f.Close()
	for k, v := range pending {
		durable[k] = v
	}
	durable["after-space-freed"] = []byte("committed")
	if code := stopUp(ctx, t, u); code != 0 {
		t.Errorf("wsfs up exited %d after the filesystem recovered", code)
	}

	// Restart: everything fsynced before the failure is there.
	u2 := startUp(t, home)
	waitReady(ctx, t, u2)
	checkFiles(t, mp, durable)
	stopUp(ctx, t, u2)
}

func devOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

// TestSupervisorKilled: SIGKILL on `wsfs up` leaves no orphan running and
// nothing mounted: the children get SIGTERM (Pdeathsig) and stop cleanly.
func TestSupervisorKilled(t *testing.T) {
	needE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	u := startUp(t, home, "--workspaces", "1")
	waitReady(ctx, t, u)
	h, _ := host.Open(home)
	files := writeFsynced(t, h.MountPoint("ws-1"), "pre-kill", 5)
	st, err := ReadState(h)
	if err != nil {
		t.Fatal(err)
	}
	u.cmd.Process.Kill()
	<-u.exited
	for _, c := range st.Children {
		waitFor(ctx, t, fmt.Sprintf("%s %s (pid %d) to exit", c.Workspace, c.Kind, c.PID), func() bool {
			return syscall.Kill(c.PID, 0) != nil
		})
	}
	waitFor(ctx, t, "the mount to go away", func() bool { return !mounted(h.MountPoint("ws-1")) })
	u2 := startUp(t, home)
	waitReady(ctx, t, u2)
	checkFiles(t, h.MountPoint("ws-1"), files)
	if code := stopUp(ctx, t, u2); code != 0 {
		t.Errorf("second wsfs up exited %d", code)
	}
}
