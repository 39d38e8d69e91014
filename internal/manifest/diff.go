package manifest

import (
	"bytes"
	"encoding/binary"
	"sort"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
)

// Change kinds of Diff.
const (
	Added    = 'A'
	Removed  = 'D'
	Modified = 'M'
	Renamed  = 'R'
)

// Change is one difference between two trees.
//
// Semantics (the differential test checks them against a model):
//   - A path present in both trees with the same file type is Modified
//     when its content (bytes, not their form: inline, object, chunks),
//     size, symlink target, device number, permission bits, owner, group
//     or xattrs differ. Times and link counts alone are not changes.
//   - A path present in both with different file types is Removed (with
//     its subtree) and Added (with its subtree).
//   - Among the paths present only in the old tree and only in the new
//     one, those with the same inode number are Renamed (pairs formed in
//     path order when a hard-linked inode has several); Modified then says
//     whether the entry also changed. The rest are Removed and Added; a
//     directory's subtree is listed path by path.
//
// Subtrees whose manifest IDs are equal are skipped unread, so the cost is
// O(changed directories + changed entries), not O(tree).
type Change struct {
	Kind     byte   // Added, Removed, Modified, Renamed
	Path     string // the path in the new tree ("/a/b"); the old one for Removed
	OldPath  string // Renamed: the path in the old tree
	Type     byte   // namespace.TypeChar of the entry
	Size     uint64 // new size (0 for Removed)
	OldSize  uint64 // old size (0 for Added)
	Modified bool   // Renamed: the entry changed too
}

// pathEntry is an entry with its full path, collected by the walk.
type pathEntry struct {
	path string
	e    Entry
}

// Diff compares the trees of root objects a and b.
func Diff(st Store, a, b objid.ID) ([]Change, error) {
	ra, err := ReadRoot(st, a)
	if err != nil {
		return nil, err
	}
	rb, err := ReadRoot(st, b)
	if err != nil {
		return nil, err
	}
	d := &differ{st: st}
	if EntryChanged(&ra.Entry, &rb.Entry) {
		d.out = append(d.out, Change{Kind: Modified, Path: "/", Type: 'd'})
	}
	if err := d.dir("/", ra.Entry.Dir, rb.Entry.Dir); err != nil {
		return nil, err
	}
	return pairRenames(d.out, d.removed, d.added, EntryChanged), nil
}

type differ struct {
	st             Store
	out            []Change
	removed, added []pathEntry
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

func (d *differ) dir(path string, a, b objid.ID) error {
	if a == b {
		return nil
	}
	ea, err := ReadDir(d.st, a)
	if err != nil {
		return err
	}
	eb, err := ReadDir(d.st, b)
	if err != nil {
		return err
	}
	i, j := 0, 0
	for i < len(ea) || j < len(eb) {
		switch {
		case j == len(eb) || (i < len(ea) && ea[i].Name < eb[j].Name):
			if err := d.all(join(path, ea[i].Name), &ea[i], &d.removed); err != nil {
				return err
			}
			i++
		case i == len(ea) || eb[j].Name < ea[i].Name:
			if err := d.all(join(path, eb[j].Name), &eb[j], &d.added); err != nil {
				return err
			}
			j++
		default:
			x, y := &ea[i], &eb[j]
			p := join(path, x.Name)
			if x.Mode&namespace.S_IFMT != y.Mode&namespace.S_IFMT {
				if err := d.all(p, x, &d.removed); err != nil {
					return err
				}
				if err := d.all(p, y, &d.added); err != nil {
					return err
				}
			} else {
				if EntryChanged(x, y) {
					d.out = append(d.out, Change{Kind: Modified, Path: p, Type: namespace.TypeChar(y.Mode), Size: y.Size, OldSize: x.Size})
				}
				if x.IsDir() {
					if err := d.dir(p, x.Dir, y.Dir); err != nil {
						return err
					}
				}
			}
			i++
			j++
		}
	}
	return nil
}

// all appends e and, for a directory, its whole subtree to list.
func (d *differ) all(path string, e *Entry, list *[]pathEntry) error {
	*list = append(*list, pathEntry{path, *e})
	if !e.IsDir() {
		return nil
	}
	es, err := ReadDir(d.st, e.Dir)
	if err != nil {
		return err
	}
	for i := range es {
		if err := d.all(join(path, es[i].Name), &es[i], list); err != nil {
			return err
		}
	}
	return nil
}

// EntryChanged reports whether two entries of the same path and file type
// differ in anything Diff counts as a modification (see Change).
func EntryChanged(a, b *Entry) bool {
	if a.Mode != b.Mode || a.Uid != b.Uid || a.Gid != b.Gid || a.Rdev != b.Rdev || a.Target != b.Target {
		return true
	}
	if len(a.Xattrs) != len(b.Xattrs) {
		return true
	}
	for i := range a.Xattrs {
		if a.Xattrs[i].Name != b.Xattrs[i].Name || !bytes.Equal(a.Xattrs[i].Value, b.Xattrs[i].Value) {
			return true
		}
	}
	if a.IsReg() {
		return a.Size != b.Size || ContentID(&a.Content) != ContentID(&b.Content)
	}
	return false
}

// ContentID names a content independently of its form where that is
// cheap: inline bytes by their pool hash, an object by its ID, chunks by
// the hash of their ID list. Two equal files stored in different forms
// (inline in one tree, an object in the other, which happens only across
// a change of InlineMax or ChunkSize) compare as different; every write
// path of one workspace produces one form for one size.
//
// Content with pending ranges is named by the hash of its base's ID and
// its ranges: the same bytes folded into chunks compare as different (a
// false "modified", never a missed change).
func ContentID(c *namespace.Content) objid.ID {
	switch {
	case c.Ranges != nil:
		base := c.Base()
		id := ContentID(&base)
		h := objid.NewHasher()
		h.Write([]byte{namespace.ContentKindRanged})
		h.Write(id[:])
		var num [binary.MaxVarintLen64]byte
		h.Write(num[:binary.PutUvarint(num[:], c.BaseSize)])
		for _, r := range c.Ranges {
			h.Write(num[:binary.PutUvarint(num[:], r.Off)])
			h.Write(num[:binary.PutUvarint(num[:], uint64(len(r.Data)))])
			h.Write(r.Data)
		}
		return h.Sum()
	case c.IsChunked():
		h := objid.NewHasher()
		h.Write([]byte{namespace.ContentKindChunked, c.ChunkShift})
		for i := range c.Chunks {
			h.Write(c.Chunks[i][:])
		}
		return h.Sum()
	case c.IsObject:
		return c.Object
	}
	return objid.Sum(c.Inline)
}

// pairRenames turns removed/added entries with the same inode number into
// Renamed changes, appends the rest as Removed and Added to out, and sorts
// the result by path (then kind). changed decides Renamed.Modified.
func pairRenames(out []Change, removed, added []pathEntry, changed func(a, b *Entry) bool) []Change {
	byIno := map[uint64][]int{}
	for i := range added {
		byIno[added[i].e.Ino] = append(byIno[added[i].e.Ino], i)
	}
	for k := range byIno {
		sort.Slice(byIno[k], func(x, y int) bool { return added[byIno[k][x]].path < added[byIno[k][y]].path })
	}
	sort.Slice(removed, func(x, y int) bool { return removed[x].path < removed[y].path })
	usedAdded := make([]bool, len(added))
	for i := range removed {
		r := &removed[i]
		cands := byIno[r.e.Ino]
		if len(cands) > 0 && added[cands[0]].e.Mode&namespace.S_IFMT == r.e.Mode&namespace.S_IFMT {
			a := &added[cands[0]]
			byIno[r.e.Ino] = cands[1:]
			usedAdded[cands[0]] = true
			out = append(out, Change{Kind: Renamed, Path: a.path, OldPath: r.path, Type: namespace.TypeChar(a.e.Mode),
				Size: a.e.Size, OldSize: r.e.Size, Modified: changed(&r.e, &a.e)})
			continue
		}
		out = append(out, Change{Kind: Removed, Path: r.path, Type: namespace.TypeChar(r.e.Mode), OldSize: r.e.Size})
	}
	for i := range added {
		if !usedAdded[i] {
			a := &added[i]
			out = append(out, Change{Kind: Added, Path: a.path, Type: namespace.TypeChar(a.e.Mode), Size: a.e.Size})
		}
	}
	sort.Slice(out, func(x, y int) bool {
		if out[x].Path != out[y].Path {
			return out[x].Path < out[y].Path
		}
		return out[x].Kind < out[y].Kind
	})
	return out
}
