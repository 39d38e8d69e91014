package layout

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"wsfs/internal/host"
	"wsfs/internal/mountinfo"
	"wsfs/internal/testenv"
	"wsfs/internal/vfs"
)

// needLoop skips tests that need root and loop devices.
func needLoop(t *testing.T) {
	t.Helper()
	testenv.RequireLoop(t)
}

// cleanupLayout removes whatever a test's layout left: lazy unmounts, then
// loop devices attached to the images.
func cleanupLayout(t *testing.T, h *host.Host, dir string) {
	t.Cleanup(func() {
		for _, mp := range []string{h.StateDir(), h.PoolDir()} {
			if m, err := mountinfo.Read(); err == nil {
				if _, ok := mountinfo.At(m, mp); ok {
					exec.Command("umount", "-l", mp).Run()
				}
			}
		}
		for _, img := range []string{"state.img", "pool.img"} {
			if dev, err := deviceOf(filepath.Join(dir, img)); err == nil && dev != "" {
				exec.Command("losetup", "--detach", dev).Run()
			}
		}
	})
}

func testOptions(t *testing.T) (Options, *[]string) {
	var log []string
	o := Options{StateSize: 32 << 20, PoolSize: 48 << 20, DirectIO: true,
		Log: func(f string, a ...any) { s := fmt.Sprintf(f, a...); log = append(log, s); t.Log(s) }}
	return o, &log
}

func devOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

func TestCreateUseStatusDestroy(t *testing.T) {
	needLoop(t)
	home := t.TempDir()
	h, err := host.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, "layout")
	cleanupLayout(t, h, dir)
	opts, log := testOptions(t)

	rec, err := Create(h, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Filesystems) != 2 {
		t.Fatalf("record has %d filesystems", len(rec.Filesystems))
	}
	onDisk, err := ReadRecord(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk.Filesystems) != 2 || onDisk.Filesystems[0].Device != rec.Filesystems[0].Device {
		t.Errorf("layout.json %+v does not match %+v", onDisk, rec)
	}
	// The state and pool dirs are now their own filesystems.
	homeDev := devOf(t, home)
	sd, pd := devOf(t, h.StateDir()), devOf(t, h.PoolDir())
	if sd == homeDev || pd == homeDev || sd == pd {
		t.Errorf("devices: home %d, state %d, pool %d: want three different", homeDev, sd, pd)
	}
	// A fresh ext4 root is 0755: private from the moment it is mounted.
	for _, d := range []string{h.StateDir(), h.PoolDir()} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s after layout create: %v, mode %v, want 0700", d, err, st.Mode().Perm())
		}
	}
	// The host's directories exist on the new filesystems.
	if _, err := os.Stat(filepath.Join(h.StateDir(), "workspaces")); err != nil {
		t.Errorf("state filesystem lacks workspaces/: %v", err)
	}
	// Images are sparse.
	for _, f := range rec.Filesystems {
		var st syscall.Stat_t
		if err := syscall.Stat(f.Image, &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 >= st.Size {
			t.Errorf("%s: %d bytes allocated of %d: not sparse", f.Image, st.Blocks*512, st.Size)
		}
	}

	// Use it.
	data := []byte(strings.Repeat("wsfs layout ", 100000))
	p := filepath.Join(h.PoolDir(), "probe")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(p)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	st, err := Status(h, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Mounted || s.Attached == "" || !s.DirectIOOn || s.Problem != "" {
			t.Errorf("%s status: %+v", s.Role, s)
		}
		if s.Size == 0 || s.Used == 0 || s.Used > s.Size {
			t.Errorf("%s usage: size %d used %d", s.Role, s.Size, s.Used)
		}
		if s.Role == RolePool && s.Used < uint64(len(data)) {
			t.Errorf("pool used %d bytes after writing %d", s.Used, len(data))
		}
	}

	// A second create reports what exists and changes nothing.
	*log = nil
	rec2, err := Create(h, opts)
	if err != nil {
		t.Fatalf("second create: %v", err)
	}
	for i := range rec.Filesystems {
		if rec2.Filesystems[i].Device != rec.Filesystems[i].Device {
			t.Errorf("second create moved %s from %s to %s", rec.Filesystems[i].Role, rec.Filesystems[i].Device, rec2.Filesystems[i].Device)
		}
	}
	joined := strings.Join(*log, "\n")
	for _, w := range []string{"image", "exists", "already attached", "is mounted"} {
		if !strings.Contains(joined, w) {
			t.Errorf("second create log lacks %q:\n%s", w, joined)
		}
	}
	if strings.Contains(joined, "made ext4") || strings.Contains(joined, "mounted /dev") {
		t.Errorf("second create redid work:\n%s", joined)
	}
	if got, _ := os.ReadFile(p); string(got) != string(data) {
		t.Error("file changed by the second create")
	}

	// Destroy refuses while a daemon holds a workspace lock.
	if err := h.CreateWorkspace("ws-1"); err != nil {
		t.Fatal(err)
	}
	lock, err := vfs.Default.Lock(h.LockPath("ws-1"))
	if err != nil {
		t.Fatal(err)
	}
	err = Destroy(h, opts)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "ws-1") {
		t.Errorf("destroy while ws-1 is locked: %v, want ErrBusy naming ws-1", err)
	}
	if st, err := Status(h, ""); err != nil || !st[0].Mounted || !st[1].Mounted {
		t.Errorf("refused destroy changed the layout: %+v %v", st, err)
	}
	lock.Close()

	// ... and while a sidecar answers on its socket.
	if err := os.MkdirAll(h.AgentDir("ws-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(h.AgentDir("ws-1"), "sidecar.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	err = Destroy(h, opts)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "sidecar") {
		t.Errorf("destroy while a sidecar runs: %v, want ErrBusy naming the sidecar", err)
	}
	ln.Close()

	if err := Destroy(h, opts); err != nil {
		t.Fatal(err)
	}
	m, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rec.Filesystems {
		if _, ok := mountinfo.At(m, f.MountPoint); ok {
			t.Errorf("%s still mounted after destroy", f.MountPoint)
		}
		if _, err := os.Stat(f.Image); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists after destroy: %v", f.Image, err)
		}
		if out, _ := exec.Command("losetup", "--noheadings", "--output", "BACK-FILE", "--list").Output(); strings.Contains(string(out), f.Image) {
			t.Errorf("a loop device still backs %s:\n%s", f.Image, out)
		}
	}
	if _, err := ReadRecord(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("record still there: %v", err)
	}
}

func TestCreateRefusesNonEmptyDir(t *testing.T) {
	needLoop(t)
	home := t.TempDir()
	h, err := host.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(home, "layout")
	cleanupLayout(t, h, dir)
	keep := filepath.Join(h.StateDir(), "workspaces", "old-file")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, _ := testOptions(t)
	_, err = Create(h, opts)
	if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "old-file") {
		t.Fatalf("create over a non-empty state dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.img")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused create made an image: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the existing file is hidden or gone: %v", err)
	}
}

func TestRootRequired(t *testing.T) {
	home := t.TempDir()
	h, err := host.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := testOptions(t)
	opts.Euid = func() int { return 1000 }
	if _, err := Create(h, opts); !errors.Is(err, ErrNotRoot) || !strings.Contains(err.Error(), "uid 1000") {
		t.Errorf("create as uid 1000: %v, want ErrNotRoot", err)
	}
	if err := Destroy(h, opts); !errors.Is(err, ErrNotRoot) {
		t.Errorf("destroy as uid 1000: %v, want ErrNotRoot", err)
	}
	if _, err := os.Stat(filepath.Join(home, "layout")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused create left %s: %v", filepath.Join(home, "layout"), err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4G": 4 << 30, "16GiB": 16 << 30, "512M": 512 << 20, "1t": 1 << 40, "4096": 4096, "64KB": 64 << 10} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1G", "G", "4X", "1.5G"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// TestRecordPrivate: layout.json is private (0600) like every file of the
// host's own directories, whatever the umask; rewriting it keeps it so.
func TestRecordPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	for range 2 {
		if err := writeRecord(dir, Record{}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, RecordName))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v; want mode 0600", RecordName, fi.Mode(), err)
		}
	}
	if _, err := ReadRecord(dir); err != nil {
		t.Fatalf("read back: %v", err)
	}
}
