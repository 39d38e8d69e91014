// Package mountinfo reads the kernel's mount table (/proc/self/mountinfo):
// the one parser the layout tool, the FUSE adapter (dead-mount detection,
// mount points inside the host), the supervisor and the stress harness use.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Path is the mount table of the calling process.
const Path = "/proc/self/mountinfo"

// Mount is one line of the mount table.
type Mount struct {
	Major, Minor int    // device of the mounted filesystem
	Root         string // path inside the filesystem that is mounted
	Point        string // mount point
	FSType       string // e.g. ext4, fuse.wsfs
	Source       string // e.g. /dev/loop3, wsfs:ws-1
}

// Read reads the mount table of the calling process. Lines are in mount
// order, so of several mounts at one point the last is on top.
func Read() ([]Mount, error) {
	f, err := os.Open(Path)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse parses mountinfo lines:
//
//	id parent major:minor root point options [optional...] - fstype source superopts
//
// A malformed line is an error naming it.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+2 >= len(f) {
			return nil, fmt.Errorf("mountinfo: malformed line %q", sc.Text())
		}
		mm := strings.SplitN(f[2], ":", 2)
		if len(mm) != 2 {
			return nil, fmt.Errorf("mountinfo: malformed device %q", f[2])
		}
		maj, err1 := strconv.Atoi(mm[0])
		min, err2 := strconv.Atoi(mm[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mountinfo: malformed device %q", f[2])
		}
		out = append(out, Mount{
			Major: maj, Minor: min,
			Root:   Unescape(f[3]),
			Point:  Unescape(f[4]),
			FSType: f[sep+1],
			Source: Unescape(f[sep+2]),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return out, nil
}

// Unescape undoes the kernel's octal escapes of space, tab, newline and
// backslash (\040, \011, \012, \134).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// At returns the mount whose mount point is path (the top one, if several
// are stacked), and whether there is one.
func At(mounts []Mount, path string) (Mount, bool) {
	var m Mount
	found := false
	for _, x := range mounts {
		if x.Point == path {
			m, found = x, true
		}
	}
	return m, found
}

// IsMountPoint reports whether path (absolute and clean) is a mount point
// of the calling process.
func IsMountPoint(path string) (bool, error) {
	ms, err := Read()
	if err != nil {
		return false, err
	}
	_, ok := At(ms, path)
	return ok, nil
}
