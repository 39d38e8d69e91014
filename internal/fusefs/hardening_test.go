package fusefs

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"wsfs/internal/objid"

	"golang.org/x/sys/unix"
)

// TestTimestampsFullRange: times outside int64 nanoseconds (before 1677,
// after 2262, up to what time64_t and a 64-bit filesystem hold) are stored
// as set, not wrapped, and survive a remount (log replay) and a checkpoint
// (checkpoints: workspace TestWideTimesCheckpointAndLog; issue 11 item 4: `touch -d "2300-01-01 UTC"` read back as 1715-06-13).
func TestTimestampsFullRange(t *testing.T) {
	e := newEnv(t, Options{})
	cases := []struct {
		name  string
		atime unix.Timespec
		mtime unix.Timespec
	}{
		{"y2300", unix.Timespec{Sec: 10413792000}, unix.Timespec{Sec: 10413792000, Nsec: 123456789}},
		{"y1500", unix.Timespec{Sec: -14831769600, Nsec: 1}, unix.Timespec{Sec: -14831769600}},
		{"ns-edge", unix.Timespec{Sec: 9223372036, Nsec: 854775807}, unix.Timespec{Sec: 9223372036, Nsec: 854775808}},
		{"year-100000", unix.Timespec{Sec: 3093527980800}, unix.Timespec{Sec: -3093527980800}},
	}
	for _, c := range cases {
		mustWrite(t, e.path(c.name), []byte("x"))
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, e.path(c.name), []unix.Timespec{c.atime, c.mtime}, 0); err != nil {
			t.Fatalf("%s: utimensat: %v", c.name, err)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, c := range cases {
			var st unix.Stat_t
			if err := unix.Stat(e.path(c.name), &st); err != nil {
				t.Fatal(err)
			}
			if st.Atim != c.atime || st.Mtim != c.mtime {
				t.Errorf("%s %s: atime %v mtime %v, want %v %v", when, c.name, st.Atim, st.Mtim, c.atime, c.mtime)
			}
		}
	}
	check("live")
	// The kernel refuses nanoseconds of a second or more itself (EINVAL);
	// the engine refuses them too (workspace test).
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, e.path("y2300"), []unix.Timespec{{Sec: 1, Nsec: 1e9}, {Sec: 1}}, 0); err != unix.EINVAL {
		t.Errorf("nanoseconds 1e9: %v, want EINVAL", err)
	}
	if touch, err := exec.LookPath("touch"); err == nil {
		p := e.path("touched")
		if out, err := exec.Command(touch, "-d", "2300-01-01 UTC", p).CombinedOutput(); err != nil {
			t.Fatalf("touch: %v: %s", err, out)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.ModTime().UTC().Format("2006-01-02"); got != "2300-01-01" {
			t.Errorf("touch -d 2300-01-01: mtime reads back as %s", got)
		}
	}
	e.remount()
	check("after remount")
}

// TestXattrNamespacesOnMount: an unknown namespace gives EOPNOTSUPP as on
// Linux, and security.capability is refused rather than dropped.
func TestXattrNamespacesOnMount(t *testing.T) {
	e := newEnv(t, Options{})
	p := e.path("f")
	mustWrite(t, p, []byte("x"))
	for _, name := range []string{"bogus.x", "system.whatever"} {
		if err := unix.Setxattr(p, name, []byte("v"), 0); err != unix.EOPNOTSUPP {
			t.Errorf("setxattr %s: %v, want EOPNOTSUPP", name, err)
		}
		if _, err := unix.Getxattr(p, name, make([]byte, 8)); err != unix.EOPNOTSUPP {
			t.Errorf("getxattr %s: %v, want EOPNOTSUPP", name, err)
		}
	}
	if err := unix.Setxattr(p, "security.capability", []byte{1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0); err != unix.EOPNOTSUPP {
		t.Errorf("setxattr security.capability: %v, want EOPNOTSUPP", err)
	}
	buf := make([]byte, 256)
	n, err := unix.Listxattr(p, buf)
	if err != nil || n != 0 {
		t.Errorf("listxattr after refused sets: %q %v", buf[:n], err)
	}
	if err := unix.Setxattr(p, "trusted.ok", []byte("v"), 0); err != nil {
		t.Errorf("trusted.ok: %v", err)
	}
}

// TestSparseBlocks: a 5 GiB file with one byte written reports the blocks
// of the one chunk stored, so du shows its real use and cp --sparse keeps
// the holes.
func TestSparseBlocks(t *testing.T) {
	e := newEnv(t, Options{})
	p := e.path("sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("z"), 5<<30-1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	for _, when := range []string{"live", "after remount"} {
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != 5<<30 || st.Blocks*512 > 2<<20 || st.Blocks == 0 {
			t.Errorf("%s: size %d blocks %d (%d bytes), want at most one 1 MiB chunk", when, st.Size, st.Blocks, st.Blocks*512)
		}
		if when == "live" {
			e.remount()
		}
	}
	if du, err := exec.LookPath("du"); err == nil {
		out, err := exec.Command(du, "-k", p).Output()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("du -k: %s", out)
	}
}

// TestMissingObjectEIOOnMount: a file whose pool object was deleted is
// still listed and stat-able, and reading it gives EIO (issue 11 item 8:
// it gave ENOENT for a file ls shows); the rest of the mount reads.
func TestMissingObjectEIOOnMount(t *testing.T) {
	e := newEnv(t, Options{})
	big := pattern(300<<10, 3)
	mustWrite(t, e.path("big"), big)
	mustWrite(t, e.path("small"), []byte("fine"))
	e.unmount()
	if err := os.Remove(e.pool.Path(objid.Sum(big))); err != nil {
		t.Fatal(err)
	}
	e.mount()
	if fi, err := os.Stat(e.path("big")); err != nil || fi.Size() != int64(len(big)) {
		t.Fatalf("stat: %v %v", fi, err)
	}
	if _, err := os.ReadFile(e.path("big")); errnoOf(err) != syscall.EIO {
		t.Fatalf("read of a file whose object is gone: %v, want EIO", err)
	}
	if string(mustRead(t, e.path("small"))) != "fine" {
		t.Fatal("the rest of the mount does not read")
	}
}

// TestXattrLimitsOnMount: a name that is only a namespace prefix
// ("user.") is EINVAL, as on Linux filesystems, not an attribute with an
// empty name; and the names of one inode's attributes stay within what
// listxattr(2) can return (XATTR_LIST_MAX, 64 KiB): one more name is
// ENOSPC, as on ext4 when an inode's attributes are full. Before, the
// names grew without bound and once past 64 KiB every listxattr of the
// file failed with E2BIG (getfattr -d, rsync -X, tar --xattrs), also
// after a remount.
func TestXattrLimitsOnMount(t *testing.T) {
	e := newEnv(t, Options{})
	p := e.path("f")
	mustWrite(t, p, []byte("x"))
	for _, name := range []string{"user.", "trusted.", "security."} {
		if err := unix.Setxattr(p, name, []byte("v"), 0); err != unix.EINVAL {
			t.Errorf("setxattr %q: %v, want EINVAL", name, err)
		}
		if _, err := unix.Getxattr(p, name, make([]byte, 8)); err != unix.EINVAL {
			t.Errorf("getxattr %q: %v, want EINVAL", name, err)
		}
		if err := unix.Removexattr(p, name); err != unix.EINVAL {
			t.Errorf("removexattr %q: %v, want EINVAL", name, err)
		}
	}
	// Names of 255 bytes: 256 bytes each in the list, so the 256th does
	// not fit (the list would be exactly 64 KiB plus one name).
	name := func(i int) string { return fmt.Sprintf("user.%03d%s", i, strings.Repeat("n", 247)) }
	set := 0
	for ; set < 300; set++ {
		err := unix.Setxattr(p, name(set), nil, 0)
		if err == unix.ENOSPC {
			break
		}
		if err != nil {
			t.Fatalf("setxattr #%d: %v", set, err)
		}
	}
	if set != 256 {
		t.Fatalf("%d names of 255 bytes set before ENOSPC, want 256 (64 KiB of list)", set)
	}
	// Replacing an existing attribute's value needs no room in the list.
	if err := unix.Setxattr(p, name(0), []byte("new"), unix.XATTR_REPLACE); err != nil {
		t.Fatalf("replace with a full list: %v", err)
	}
	check := func(when string) {
		t.Helper()
		n, err := unix.Listxattr(p, nil)
		if err != nil || n != 1<<16 {
			t.Fatalf("%s: listxattr size probe: %d %v, want %d", when, n, err, 1<<16)
		}
		buf := make([]byte, n)
		if n, err = unix.Listxattr(p, buf); err != nil || n != len(buf) {
			t.Fatalf("%s: listxattr: %d %v", when, n, err)
		}
	}
	check("full")
	// Removing one makes room for one.
	if err := unix.Removexattr(p, name(7)); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, name(999), nil, 0); err != nil {
		t.Fatalf("setxattr after a removal: %v", err)
	}
	e.remount()
	check("after remount")
}
