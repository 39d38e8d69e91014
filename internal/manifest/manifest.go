// Package manifest stores a workspace tree as a Merkle tree of directory
// manifests: each directory is one pool object listing its entries sorted
// by name, and a subdirectory's entry names the object ID of that
// directory's manifest. An unchanged subtree therefore keeps its ID, two
// trees are compared by walking only the subtrees whose IDs differ, and a
// tree is named by one ID (its root object).
//
// # Format (frozen, version 1; golden files in testdata/)
//
// All integers are unsigned varints unless noted; sint is a zigzag varint;
// str/bytes are a uvarint length then the bytes; id is 32 raw bytes.
//
//	root      = magic:"WSFSMRT1" version:1 nextIno entry
//	dir       = magic:"WSFSMDR1" version:1 count entry*count
//	entry     = name:str ino mode nlink uid gid rdev size
//	            atime mtime ctime
//	            nxattr (name:str value:bytes)*nxattr
//	            body
//	time      = sec:sint nsec (nsec < 1e9)
//	body      = directory:  manifest:id
//	            regular:    content (below)
//	            symlink:    target:str
//	            otherwise:  nothing
//	content   = kind:u8 (0 inline: bytes | 1 object: id |
//	                     3 chunked: shift:u8 count id*count)
//
// The root object carries the root directory's own entry (with the empty
// name) and the workspace's next inode number; its ID is the tree's ID.
// Entries of a directory are in strictly increasing byte order of name and
// xattrs in strictly increasing name order, so equal trees encode to equal
// bytes and the same ID. The body is chosen by the file type bits of mode.
// There is no checksum: a manifest is read through the pool, which
// verifies every object against its ID.
//
// Inode numbers are kept (ino): hard links are the entries that share an
// ino (and have nlink > 1), a fork keeps the numbers of its origin, and
// diff detects renames by them. Times are seconds and nanoseconds so that
// the full range of a file system time fits.
//
// Inline contents (up to the workspace's InlineMax, 64 KiB) stay inside
// their directory's manifest instead of becoming objects of their own; see
// docs/format.md for the measurement behind it.
package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
)

// Frozen constants of the format.
const (
	rootMagic = "WSFSMRT1"
	dirMagic  = "WSFSMDR1"
	version   = 1

	kindInline  = 0
	kindObject  = 1
	kindChunked = 3
	kindRanged  = 4 // base content + ranges (namespace.Content.Ranges)
)

// ErrBadManifest is wrapped by every decoding error.
var ErrBadManifest = errors.New("malformed manifest")

// Time is a file time: the namespace's timestamp (seconds since the Unix
// epoch and nanoseconds < 1e9, the full range the kernel passes), encoded
// as a varint and a uint32.
type Time = namespace.Timestamp

// Xattr is one extended attribute.
type Xattr struct {
	Name  string
	Value []byte
}

// Entry is one name in a directory (or the root itself, with Name "").
type Entry struct {
	Name                string
	Ino                 uint64
	Mode                uint32 // S_IFxxx | permission bits
	Nlink               uint32
	Uid, Gid, Rdev      uint32
	Size                uint64
	Atime, Mtime, Ctime Time
	Xattrs              []Xattr           // sorted by Name
	Dir                 objid.ID          // directories: the ID of their manifest
	Content             namespace.Content // regular files
	Target              string            // symlinks
}

// IsDir reports whether e is a directory.
func (e *Entry) IsDir() bool { return e.Mode&namespace.S_IFMT == namespace.S_IFDIR }

// IsReg reports whether e is a regular file.
func (e *Entry) IsReg() bool { return e.Mode&namespace.S_IFMT == namespace.S_IFREG }

// IsSymlink reports whether e is a symbolic link.
func (e *Entry) IsSymlink() bool { return e.Mode&namespace.S_IFMT == namespace.S_IFLNK }

// Root is the decoded root object.
type Root struct {
	NextIno uint64
	Entry   Entry // the root directory; Name is ""
}

// EncodeRoot returns the root object's bytes.
func EncodeRoot(r *Root) []byte {
	b := []byte(rootMagic)
	b = binary.AppendUvarint(b, version)
	b = binary.AppendUvarint(b, r.NextIno)
	return appendEntry(b, &r.Entry)
}

// EncodeDir returns a directory manifest's bytes. entries must be sorted
// by name with no duplicates (EncodeDir panics otherwise: a caller bug
// that would make equal trees encode differently).
func EncodeDir(entries []Entry) []byte {
	size := len(dirMagic) + 12
	for i := range entries {
		e := &entries[i]
		size += 96 + len(e.Name) + len(e.Content.Inline) + 32*len(e.Content.Chunks) + len(e.Target)
		for _, x := range e.Xattrs {
			size += 8 + len(x.Name) + len(x.Value)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, dirMagic...)
	b = binary.AppendUvarint(b, version)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for i := range entries {
		if i > 0 && entries[i-1].Name >= entries[i].Name {
			panic(fmt.Sprintf("manifest: entries not sorted: %q then %q", entries[i-1].Name, entries[i].Name))
		}
		b = appendEntry(b, &entries[i])
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t Time) []byte {
	b = binary.AppendVarint(b, t.Sec)
	return binary.AppendUvarint(b, uint64(t.Nsec))
}

// appendContent appends a regular file's content:
//
//	kind:u8 (0: inline:bytes | 1: object:[32]u8 |
//	         3: chunked: shift:u8 count:uvarint [32]u8*count |
//	         4: ranged: basesize:uvarint base:content(kind 0, 1 or 3)
//	            count:uvarint (off:uvarint data:bytes)*count)
//
// Kind 4 (content with pending ranges, see namespace.Content) was added
// after version 1's first release; manifests without it are unchanged,
// and a build from before it refuses it ("unknown content kind").
func appendContent(b []byte, c *namespace.Content) []byte {
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	switch {
	case c.Ranges != nil:
		b = append(b, kindRanged)
		u(c.BaseSize)
		base := c.Base()
		b = appendContent(b, &base)
		u(uint64(len(c.Ranges)))
		for _, r := range c.Ranges {
			u(r.Off)
			u(uint64(len(r.Data)))
			b = append(b, r.Data...)
		}
	case c.IsChunked():
		b = append(b, kindChunked, c.ChunkShift)
		u(uint64(len(c.Chunks)))
		for i := range c.Chunks {
			b = append(b, c.Chunks[i][:]...)
		}
	case c.IsObject:
		b = append(b, kindObject)
		b = append(b, c.Object[:]...)
	default:
		b = append(b, kindInline)
		u(uint64(len(c.Inline)))
		b = append(b, c.Inline...)
	}
	return b
}

func appendEntry(b []byte, e *Entry) []byte {
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	b = appendStr(b, e.Name)
	u(e.Ino)
	u(uint64(e.Mode))
	u(uint64(e.Nlink))
	u(uint64(e.Uid))
	u(uint64(e.Gid))
	u(uint64(e.Rdev))
	u(e.Size)
	b = appendTime(b, e.Atime)
	b = appendTime(b, e.Mtime)
	b = appendTime(b, e.Ctime)
	u(uint64(len(e.Xattrs)))
	for i, x := range e.Xattrs {
		if i > 0 && e.Xattrs[i-1].Name >= x.Name {
			panic(fmt.Sprintf("manifest: xattrs not sorted: %q then %q", e.Xattrs[i-1].Name, x.Name))
		}
		b = appendStr(b, x.Name)
		u(uint64(len(x.Value)))
		b = append(b, x.Value...)
	}
	switch {
	case e.IsDir():
		b = append(b, e.Dir[:]...)
	case e.IsReg():
		b = appendContent(b, &e.Content)
	case e.IsSymlink():
		b = appendStr(b, e.Target)
	}
	return b
}

// DecodeRoot decodes a root object. It never panics; errors wrap
// ErrBadManifest.
func DecodeRoot(data []byte) (*Root, error) {
	d := &decoder{b: data}
	d.magic(rootMagic)
	r := &Root{NextIno: d.uvarint("next ino")}
	r.Entry = d.entry()
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err == nil {
		switch {
		case r.Entry.Name != "":
			d.fail(fmt.Sprintf("root entry has name %q", r.Entry.Name))
		case !r.Entry.IsDir():
			d.fail("root entry is not a directory")
		case r.Entry.Ino != uint64(namespace.RootIno):
			d.fail(fmt.Sprintf("root entry has inode %d", r.Entry.Ino))
		case r.NextIno <= uint64(namespace.RootIno):
			d.fail(fmt.Sprintf("next inode %d", r.NextIno))
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

// DecodeDir decodes a directory manifest. It checks the encoding (names
// valid, sorted and unique, known kinds, content matching its size) and
// never panics; errors wrap ErrBadManifest. Inline contents and xattr
// values alias data.
func DecodeDir(data []byte) ([]Entry, error) {
	d := &decoder{b: data}
	d.magic(dirMagic)
	n := d.uvarint("entry count")
	// Each entry takes at least 14 bytes: bound the allocation by the input.
	if d.err == nil && n > uint64(len(d.b))/14 {
		d.fail(fmt.Sprintf("entry count %d with %d bytes left", n, len(d.b)))
	}
	var out []Entry
	if d.err == nil {
		out = make([]Entry, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		e := d.entry()
		if d.err != nil {
			break
		}
		if err := validName(e.Name); err != nil {
			d.fail(err.Error())
			break
		}
		if len(out) > 0 && out[len(out)-1].Name >= e.Name {
			d.fail(fmt.Sprintf("entry %q after %q: not in increasing order", e.Name, out[len(out)-1].Name))
			break
		}
		if e.Ino <= uint64(namespace.RootIno) {
			d.fail(fmt.Sprintf("entry %q has inode %d", e.Name, e.Ino))
			break
		}
		out = append(out, e)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

func validName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > namespace.MaxNameLen ||
		bytes.IndexByte([]byte(name), '/') >= 0 || bytes.IndexByte([]byte(name), 0) >= 0 {
		return fmt.Errorf("invalid entry name %q", name)
	}
	return nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadManifest, what)
	}
}

func (d *decoder) magic(m string) {
	if len(d.b) < len(m) || string(d.b[:len(m)]) != m {
		d.fail("bad magic (want " + m + ")")
		return
	}
	d.b = d.b[len(m):]
	if v := d.uvarint("version"); d.err == nil && v != version {
		d.fail(fmt.Sprintf("version %d, this wsfs reads version %d", v, version))
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32(what string) uint32 {
	v := d.uvarint(what)
	if v > 1<<32-1 {
		d.fail(fmt.Sprintf("%s %d out of range", what, v))
	}
	return uint32(v)
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(what string, max int) []byte {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) || (max >= 0 && n > uint64(max)) {
		d.fail(fmt.Sprintf("%s of %d bytes (limit %d, %d left)", what, n, max, len(d.b)))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte1(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated " + what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) id(what string) (id objid.ID) {
	if d.err != nil {
		return id
	}
	if len(d.b) < len(id) {
		d.fail("truncated " + what)
		return id
	}
	copy(id[:], d.b)
	d.b = d.b[len(id):]
	return id
}

func (d *decoder) time(what string) Time {
	t := Time{Sec: d.varint(what)}
	ns := d.uvarint(what + " nanoseconds")
	if d.err == nil && ns >= 1e9 {
		d.fail(fmt.Sprintf("%s nanoseconds %d", what, ns))
	}
	t.Nsec = uint32(ns)
	return t
}

func (d *decoder) entry() Entry {
	var e Entry
	e.Name = string(d.bytes("name", namespace.MaxNameLen))
	e.Ino = d.uvarint("ino")
	e.Mode = d.u32("mode")
	e.Nlink = d.u32("nlink")
	e.Uid = d.u32("uid")
	e.Gid = d.u32("gid")
	e.Rdev = d.u32("rdev")
	e.Size = d.uvarint("size")
	e.Atime = d.time("atime")
	e.Mtime = d.time("mtime")
	e.Ctime = d.time("ctime")
	nx := d.uvarint("xattr count")
	if d.err == nil && nx > uint64(len(d.b))/2 {
		d.fail(fmt.Sprintf("xattr count %d with %d bytes left", nx, len(d.b)))
	}
	if d.err == nil && nx > 0 {
		e.Xattrs = make([]Xattr, 0, nx)
		for i := uint64(0); i < nx && d.err == nil; i++ {
			x := Xattr{Name: string(d.bytes("xattr name", namespace.MaxNameLen)), Value: d.bytes("xattr value", namespace.MaxXattrVal)}
			if d.err == nil && (x.Name == "" || (i > 0 && e.Xattrs[i-1].Name >= x.Name)) {
				d.fail(fmt.Sprintf("xattr %q out of order or empty", x.Name))
			}
			e.Xattrs = append(e.Xattrs, x)
		}
	}
	if d.err != nil {
		return e
	}
	if e.Nlink == 0 {
		d.fail(fmt.Sprintf("entry %q has nlink 0", e.Name))
		return e
	}
	switch e.Mode & namespace.S_IFMT {
	case namespace.S_IFDIR:
		e.Dir = d.id("directory manifest id")
	case namespace.S_IFREG:
		e.Content = d.content(e.Size)
	case namespace.S_IFLNK:
		e.Target = string(d.bytes("symlink target", namespace.MaxTarget))
		if d.err == nil && (e.Target == "" || uint64(len(e.Target)) != e.Size) {
			d.fail(fmt.Sprintf("symlink %q: target of %d bytes, size %d", e.Name, len(e.Target), e.Size))
		}
	case namespace.S_IFIFO, namespace.S_IFSOCK, namespace.S_IFCHR, namespace.S_IFBLK:
	default:
		d.fail(fmt.Sprintf("entry %q has file type %#o", e.Name, e.Mode&namespace.S_IFMT))
	}
	if d.err == nil && e.Mode&^(namespace.S_IFMT|namespace.PermMask) != 0 {
		d.fail(fmt.Sprintf("entry %q has mode bits %#o", e.Name, e.Mode))
	}
	return e
}

func (d *decoder) content(size uint64) namespace.Content {
	return d.contentNested(size, true)
}

// contentNested decodes a content; ranged says whether kind 4 is allowed
// (not inside a ranged content's base).
func (d *decoder) contentNested(size uint64, ranged bool) namespace.Content {
	var c namespace.Content
	switch k := d.byte1("content kind"); k {
	case kindRanged:
		if !ranged {
			d.fail("ranged content as the base of ranged content")
			return c
		}
		base := d.uvarint("base size")
		c = d.contentNested(base, false)
		c.BaseSize = base
		n := d.uvarint("range count")
		if d.err != nil {
			return c
		}
		// Each range takes at least 3 bytes: bound the allocation first.
		if n == 0 || n > namespace.MaxRanges || n > uint64(len(d.b)/3) {
			d.fail(fmt.Sprintf("range count %d with %d bytes left", n, len(d.b)))
			return c
		}
		c.Ranges = make([]namespace.Range, n)
		for i := range c.Ranges {
			c.Ranges[i].Off = d.uvarint("range offset")
			c.Ranges[i].Data = d.bytes("range data", namespace.MaxRangeBytes)
		}
	case kindInline:
		c.Inline = d.bytes("inline content", -1)
	case kindObject:
		c.IsObject = true
		c.Object = d.id("object id")
	case kindChunked:
		c.ChunkShift = d.byte1("chunk shift")
		n := d.uvarint("chunk count")
		if d.err != nil {
			return c
		}
		if n == 0 || n > uint64(len(d.b)/32) {
			d.fail(fmt.Sprintf("chunk count %d with %d bytes left", n, len(d.b)))
			return c
		}
		c.Chunks = make([]objid.ID, n)
		for i := range c.Chunks {
			c.Chunks[i] = d.id("chunk id")
		}
	default:
		if d.err == nil {
			d.fail(fmt.Sprintf("unknown content kind %d", k))
		}
	}
	if d.err == nil {
		if err := c.Validate(size); err != nil {
			d.fail(err.Error())
		}
	}
	return c
}

// sortEntries sorts entries by name.
func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
}
