package mountinfo

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
35 22 7:3 / /tmp/a\040b/state rw,noatime shared:7 - ext4 /dev/loop3 rw
36 22 0:48 / /tmp/mnt/ws-1 rw,nosuid,nodev - fuse.wsfs wsfs:ws-1 rw,user_id=0
37 22 0:49 /sub /tmp/a\040b\134c rw master:2 shared:9 - fuse.wsfs wsfs:x rw
38 22 0:50 / /tmp/mnt/ws-1 rw - fuse.wsfs wsfs:ws-1 rw
`
	m, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 5 {
		t.Fatalf("%d mounts", len(m))
	}
	for _, c := range []struct {
		path   string
		ok     bool
		source string
		minor  int
	}{
		{"/tmp/a b/state", true, "/dev/loop3", 3},
		{`/tmp/a b\c`, true, "wsfs:x", 49},
		{"/tmp/mnt/ws-1", true, "wsfs:ws-1", 50}, // the top of two stacked mounts
		{"/tmp/a", false, "", 0},                 // a prefix is not a mount point
		{"/tmp/mnt", false, "", 0},
	} {
		got, ok := At(m, c.path)
		if ok != c.ok || got.Source != c.source || got.Minor != c.minor {
			t.Errorf("At(%q) = %+v, %v; want source %q minor %d, %v", c.path, got, ok, c.source, c.minor, c.ok)
		}
	}
	if m[3].Root != "/sub" || m[3].FSType != "fuse.wsfs" || m[0].Point != "/" || m[1].Major != 7 {
		t.Errorf("parsed %+v", m)
	}
}

func TestParseRejects(t *testing.T) {
	for _, line := range []string{
		"garbage line",
		"36 22 0:48 / /mnt rw - fuse.wsfs",              // no source
		"36 22 048 / /mnt rw shared:1 - ext4 /dev/x rw", // no major:minor
		"36 22 a:b / /mnt rw shared:1 - ext4 /dev/x rw", // not numbers
		"36 22 0:48 / /mnt rw shared:1 ext4 /dev/x rw",  // no separator
	} {
		if _, err := Parse(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("accepted %q", line)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`plain`: "plain", `a\040b`: "a b", `tab\011x`: "tab\tx", `back\134slash`: `back\slash`,
		`short\04`: `short\04`, `not\999octal`: `not\999octal`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReadSelf: the running process's own table parses and has a root.
func TestReadSelf(t *testing.T) {
	ms, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := At(ms, "/"); !ok {
		t.Fatalf("no mount at / among %d", len(ms))
	}
	if ok, err := IsMountPoint("/"); err != nil || !ok {
		t.Fatalf("IsMountPoint(/) = %v, %v", ok, err)
	}
}
