package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// entry is what the tests compare of one file in a tree. Fields that
// legitimately differ between filesystems (inode numbers, st_blocks, a
// directory's st_size, atime, ctime) are left out.
type entry struct {
	Type   byte   // 'f' regular, 'd' directory, 'l' symlink, '?' other
	Perm   uint32 // permission, setuid/setgid and sticky bits
	Size   int64  // regular files and symlinks
	Hash   string // sha256 of a regular file's content
	Nlink  uint64
	Target string            // symlink target
	Links  string            // regular files: the first path (sorted) of the same inode
	Xattrs map[string]string // user.* attributes (hex values), files and directories
	Mtime  int64             // nanoseconds; compared only when the snapshot asks for it
}

// tree is a snapshot: relative path ("." is the root) to entry.
type tree map[string]entry

// snapOpts choose what a snapshot records.
type snapOpts struct {
	mtime   bool // record mtimes of files and directories
	dirLink bool // record directories' link counts
	skip    func(rel string) bool
}

// snapshot walks root without following symlinks and records every entry.
func snapshot(root string, o snapOpts) (tree, error) {
	t := tree{}
	byIno := map[[2]uint64][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if o.skip != nil && rel != "." && o.skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("lstat %s: %w", p, err)
		}
		e := entry{Perm: st.Mode & 0o7777, Nlink: uint64(st.Nlink)}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Type, e.Size = 'f', st.Size
			h, n, err := hashFile(p)
			if err != nil {
				return err
			}
			if n != st.Size {
				return fmt.Errorf("%s: stat size %d but read %d bytes", p, st.Size, n)
			}
			e.Hash = h
			k := [2]uint64{uint64(st.Dev), st.Ino}
			byIno[k] = append(byIno[k], rel)
		case unix.S_IFDIR:
			e.Type = 'd'
			if !o.dirLink {
				e.Nlink = 0
			}
		case unix.S_IFLNK:
			e.Type, e.Size = 'l', st.Size
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.Target = tgt
			e.Perm = 0 // symlink permissions are meaningless on Linux
		default:
			e.Type = '?'
		}
		if o.mtime && e.Type != 'l' {
			e.Mtime = st.Mtim.Nano()
		}
		if e.Type == 'f' || e.Type == 'd' {
			x, err := userXattrs(p)
			if err != nil {
				return err
			}
			e.Xattrs = x
		}
		t[rel] = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, paths := range byIno {
		sort.Strings(paths)
		for _, p := range paths {
			e := t[p]
			e.Links = paths[0]
			t[p] = e
		}
	}
	return t, nil
}

// hashFile returns the sha256 of a file's content and its length.
func hashFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", n, fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func hashBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// userXattrs returns the user.* extended attributes of p (nil if none).
func userXattrs(p string) (map[string]string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err == syscall.ENOTSUP {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listxattr %s: %w", p, err)
	}
	var m map[string]string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 65536)
		vn, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			return nil, fmt.Errorf("getxattr %s %s: %w", p, name, err)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[name] = hex.EncodeToString(v[:vn])
	}
	return m, nil
}

// diffTrees describes every difference between want and got, sorted by
// path, at most max lines (0: all).
func diffTrees(want, got tree, max int) []string {
	var out []string
	paths := map[string]bool{}
	for p := range want {
		paths[p] = true
	}
	for p := range got {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		w, wok := want[p]
		g, gok := got[p]
		switch {
		case !gok:
			out = append(out, fmt.Sprintf("%s: missing (want %s)", p, w))
		case !wok:
			out = append(out, fmt.Sprintf("%s: unexpected %s", p, g))
		default:
			if d := w.diff(g); d != "" {
				out = append(out, fmt.Sprintf("%s: %s", p, d))
			}
		}
		if max > 0 && len(out) >= max {
			out = append(out, "...")
			break
		}
	}
	return out
}

// diff describes how g differs from e ("" if not at all).
func (e entry) diff(g entry) string {
	var d []string
	add := func(field string, w, x any) { d = append(d, fmt.Sprintf("%s want %v got %v", field, w, x)) }
	if e.Type != g.Type {
		add("type", string(e.Type), string(g.Type))
	}
	if e.Perm != g.Perm {
		add("perm", fmt.Sprintf("%#o", e.Perm), fmt.Sprintf("%#o", g.Perm))
	}
	if e.Size != g.Size {
		add("size", e.Size, g.Size)
	}
	if e.Hash != g.Hash {
		add("sha256", short(e.Hash), short(g.Hash))
	}
	if e.Nlink != g.Nlink {
		add("nlink", e.Nlink, g.Nlink)
	}
	if e.Target != g.Target {
		add("symlink target", e.Target, g.Target)
	}
	if e.Links != g.Links {
		add("hard-link group (first path)", e.Links, g.Links)
	}
	if fmt.Sprint(e.Xattrs) != fmt.Sprint(g.Xattrs) {
		add("xattrs", e.Xattrs, g.Xattrs)
	}
	if e.Mtime != g.Mtime {
		add("mtime", e.Mtime, g.Mtime)
	}
	return strings.Join(d, "; ")
}

func (e entry) String() string {
	switch e.Type {
	case 'f':
		return fmt.Sprintf("file %#o size %d sha256 %s nlink %d", e.Perm, e.Size, short(e.Hash), e.Nlink)
	case 'l':
		return fmt.Sprintf("symlink -> %q", e.Target)
	case 'd':
		return fmt.Sprintf("dir %#o", e.Perm)
	}
	return "other"
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
