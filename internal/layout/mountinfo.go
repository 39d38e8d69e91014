package layout

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Major, Minor int    // device of the mounted filesystem
	Root         string // path inside the filesystem that is mounted
	Point        string // mount point
	FSType       string // e.g. ext4, fuse.wsfs
	Source       string // e.g. /dev/loop3
}

// Mounts reads /proc/self/mountinfo.
func Mounts() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return parseMountinfo(string(data))
}

func parseMountinfo(s string) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// id parent major:minor root point options [optional...] - fstype source superopts
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
			Root:   unescape(f[3]),
			Point:  unescape(f[4]),
			FSType: f[sep+1],
			Source: unescape(f[sep+2]),
		})
	}
	return out, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for space and so on).
func unescape(s string) string {
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

// MountedAt returns the mount whose mount point is path (the last one, if
// several are stacked), and whether there is one.
func MountedAt(mounts []Mount, path string) (Mount, bool) {
	var m Mount
	found := false
	for _, x := range mounts {
		if x.Point == path {
			m, found = x, true
		}
	}
	return m, found
}
