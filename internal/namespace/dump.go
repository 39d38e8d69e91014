package namespace

import (
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"wsfs/internal/objid"
)

// DumpEntry is the canonical description of one path, independent of inode
// numbers and timestamps, so that trees built different ways (live, replayed,
// a test's model) compare equal when they hold the same files.
type DumpEntry struct {
	Path    string // "/" for the root, "/a/b" below it
	Type    byte   // 'd', 'f', 'l', 'p' (fifo), 's', 'c', 'b'
	Perm    uint32 // permission bits
	Uid     uint32
	Gid     uint32
	Nlink   uint32
	Size    uint64
	Content string // regular files: hex content ID (see Dump)
	Target  string // symlinks
	Rdev    uint32
	Xattrs  string // "name=hex;..." in name order
	LinkOf  string // non-directories with nlink > 1: the first path of this inode
}

func (e DumpEntry) String() string {
	s := fmt.Sprintf("%s %c %04o %d:%d n%d", e.Path, e.Type, e.Perm, e.Uid, e.Gid, e.Nlink)
	switch e.Type {
	case 'f':
		s += fmt.Sprintf(" size=%d content=%s", e.Size, e.Content)
	case 'l':
		s += fmt.Sprintf(" -> %q", e.Target)
	case 'c', 'b':
		s += fmt.Sprintf(" rdev=%d", e.Rdev)
	}
	if e.Xattrs != "" {
		s += " xattrs=" + e.Xattrs
	}
	if e.LinkOf != "" {
		s += " link-of=" + e.LinkOf
	}
	return s
}

// TypeChar returns the one-letter type of a mode, as DumpEntry.Type.
func TypeChar(mode uint32) byte {
	switch mode & S_IFMT {
	case S_IFDIR:
		return 'd'
	case S_IFREG:
		return 'f'
	case S_IFLNK:
		return 'l'
	case S_IFIFO:
		return 'p'
	case S_IFSOCK:
		return 's'
	case S_IFCHR:
		return 'c'
	case S_IFBLK:
		return 'b'
	}
	return '?'
}

// Dump walks the tree from the root in name order. contentID names each
// regular file's content; for trees built different ways to compare equal
// it must give the same ID to the same bytes whatever their form (inline,
// one object, chunks): the pool ID of the whole content. The tree must be
// still.
func (t *Tree) Dump(contentID func(n *Inode) objid.ID) []DumpEntry {
	var out []DumpEntry
	first := map[Ino]string{}
	var walk func(n *Inode, path string)
	walk = func(n *Inode, path string) {
		e := DumpEntry{Path: path, Type: TypeChar(n.Mode), Perm: n.Mode & PermMask,
			Uid: n.Uid, Gid: n.Gid, Nlink: n.Nlink, Rdev: n.Rdev}
		switch {
		case n.IsReg():
			e.Size = n.Size
			id := contentID(n)
			e.Content = hex.EncodeToString(id[:])
		case n.Mode&S_IFMT == S_IFLNK:
			e.Target = n.Target
		}
		if len(n.Xattrs) > 0 {
			var b strings.Builder
			for _, k := range sortedKeys(n.Xattrs) {
				fmt.Fprintf(&b, "%s=%x;", k, n.Xattrs[k])
			}
			e.Xattrs = b.String()
		}
		if !n.IsDir() && n.Nlink > 1 {
			if p, ok := first[n.Ino]; ok {
				e.LinkOf = p
			} else {
				first[n.Ino] = path
			}
		}
		out = append(out, e)
		if n.IsDir() {
			names := sortedKeys(n.Entries)
			for _, name := range names {
				c := t.Get(n.Entries[name])
				if c == nil {
					out = append(out, DumpEntry{Path: join(path, name), Type: '?'})
					continue
				}
				walk(c, join(path, name))
			}
		}
	}
	walk(t.Get(RootIno), "/")
	return out
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// DumpString renders a dump one entry per line.
func DumpString(d []DumpEntry) string {
	var b strings.Builder
	for _, e := range d {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// DiffDumps describes the first differences between two dumps ("" if equal).
func DiffDumps(want, got []DumpEntry) string {
	wm := map[string]string{}
	gm := map[string]string{}
	for _, e := range want {
		wm[e.Path] = e.String()
	}
	for _, e := range got {
		gm[e.Path] = e.String()
	}
	var diffs []string
	for p, w := range wm {
		if g, ok := gm[p]; !ok {
			diffs = append(diffs, "missing: "+w)
		} else if g != w {
			diffs = append(diffs, "want: "+w+"\n   got: "+g)
		}
	}
	for p, g := range gm {
		if _, ok := wm[p]; !ok {
			diffs = append(diffs, "extra: "+g)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... and %d more", len(diffs)-10))
	}
	return strings.Join(diffs, "\n")
}
