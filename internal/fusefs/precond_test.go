package fusefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"wsfs/internal/mountinfo"

	"golang.org/x/sys/unix"
)

func TestCheckMountpoint(t *testing.T) {
	d := t.TempDir()
	file := filepath.Join(d, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(d, "full")
	if err := os.MkdirAll(filepath.Join(full, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(d, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mp, want string
	}{
		{filepath.Join(d, "missing"), "does not exist"},
		{file, "not a directory"},
		{full, "not empty"},
		{"/proc", "already a mount point"},
	} {
		err := CheckMountpoint(c.mp)
		var pe *PreconditionError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a PreconditionError containing %q", c.mp, err, c.want)
		}
	}
	if err := CheckMountpoint(empty); err != nil {
		t.Errorf("empty directory: %v", err)
	}
}

func TestMountedTwice(t *testing.T) {
	e := newEnv(t, Options{})
	_, err := Mount(e.ws, e.mnt, Options{})
	var pe *PreconditionError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "already a mount point") {
		t.Fatalf("second mount on a live mount point: %v", err)
	}
}

func TestMountsOf(t *testing.T) {
	info := "36 35 0:31 / /mnt/ws\\0401 rw - fuse.wsfs wsfs:a rw\n" +
		"37 35 0:32 / /mnt/b rw - fuse.wsfs wsfs:b rw\n" +
		"38 35 0:33 / /mnt/a2 rw shared:3 - fuse.wsfs wsfs:a rw\n" +
		"39 35 8:1 / / rw - ext4 /dev/sda1 rw\n"
	es, err := mountinfo.Parse(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	got := mountsOf(es, MountSource("a"))
	if len(got) != 2 || got[0] != "/mnt/ws 1" || got[1] != "/mnt/a2" {
		t.Fatalf("mounts of a: %q", got)
	}
	if n := len(es); n != 4 || !isWsfs(es[1]) || isWsfs(es[3]) {
		t.Fatalf("entries: %+v", es)
	}
}

// TestReadAhead: the mount's readahead is raised past the 128 KiB that FUSE
// negotiates at INIT (root only: the knob is in sysfs).
func TestReadAhead(t *testing.T) {
	e := newEnv(t, Options{})
	var st unix.Stat_t
	if err := unix.Stat(e.mnt, &st); err != nil {
		t.Fatal(err)
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(DefaultReadAheadKB) {
		t.Errorf("%s = %s, want %d", p, got, DefaultReadAheadKB)
	}
}

// TestCheckURing: with the module parameter not Y (it is N by default,
// and tests never set it), FUSE over io_uring is refused with a
// precondition error that names the parameter.
func TestCheckURing(t *testing.T) {
	b, err := os.ReadFile(URingParam)
	if err == nil && strings.TrimSpace(string(b)) == "Y" {
		t.Skipf("%s reads Y: nothing to refuse", URingParam)
	}
	err = CheckURing()
	var pe *PreconditionError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), URingParam) {
		t.Fatalf("CheckURing() = %v, want a *PreconditionError naming %s", err, URingParam)
	}
}
