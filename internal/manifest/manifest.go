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
	"wsfs/internal/wire"
)

// Frozen constants of the format.
const (
	rootMagic = "WSFSMRT1"
	dirMagic  = "WSFSMDR1"
	version   = 1
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

// A regular file's content is namespace.AppendContent's encoding (kinds
// 0 inline, 1 object, 3 chunked and 4 ranged). Kind 4 (content with
// pending ranges) was added after version 1's first release; manifests
// without it are unchanged, and a build from before it refuses it
// ("unknown content kind").

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
		b = namespace.AppendContent(b, &e.Content)
	case e.IsSymlink():
		b = appendStr(b, e.Target)
	}
	return b
}

// DecodeRoot decodes a root object. It never panics; errors wrap
// ErrBadManifest.
func DecodeRoot(data []byte) (*Root, error) {
	d := newDecoder(data)
	d.magic(rootMagic)
	r := &Root{NextIno: d.Uvarint("next ino")}
	r.Entry = d.entry()
	if d.Err == nil && len(d.B) != 0 {
		d.Fail(fmt.Sprintf("%d trailing bytes", len(d.B)))
	}
	if d.Err == nil {
		switch {
		case r.Entry.Name != "":
			d.Fail(fmt.Sprintf("root entry has name %q", r.Entry.Name))
		case !r.Entry.IsDir():
			d.Fail("root entry is not a directory")
		case r.Entry.Ino != uint64(namespace.RootIno):
			d.Fail(fmt.Sprintf("root entry has inode %d", r.Entry.Ino))
		case r.NextIno <= uint64(namespace.RootIno):
			d.Fail(fmt.Sprintf("next inode %d", r.NextIno))
		}
	}
	if d.Err != nil {
		return nil, d.Err
	}
	return r, nil
}

// DecodeDir decodes a directory manifest. It checks the encoding (names
// valid, sorted and unique, known kinds, content matching its size) and
// never panics; errors wrap ErrBadManifest. Inline contents and xattr
// values alias data.
func DecodeDir(data []byte) ([]Entry, error) {
	d := newDecoder(data)
	d.magic(dirMagic)
	n := d.Uvarint("entry count")
	// Each entry takes at least 14 bytes: bound the allocation by the input.
	if d.Err == nil && n > uint64(len(d.B))/14 {
		d.Fail(fmt.Sprintf("entry count %d with %d bytes left", n, len(d.B)))
	}
	var out []Entry
	if d.Err == nil {
		out = make([]Entry, 0, n)
	}
	for i := uint64(0); i < n && d.Err == nil; i++ {
		e := d.entry()
		if d.Err != nil {
			break
		}
		if err := validName(e.Name); err != nil {
			d.Fail(err.Error())
			break
		}
		if len(out) > 0 && out[len(out)-1].Name >= e.Name {
			d.Fail(fmt.Sprintf("entry %q after %q: not in increasing order", e.Name, out[len(out)-1].Name))
			break
		}
		if e.Ino <= uint64(namespace.RootIno) {
			d.Fail(fmt.Sprintf("entry %q has inode %d", e.Name, e.Ino))
			break
		}
		out = append(out, e)
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Fail(fmt.Sprintf("%d trailing bytes", len(d.B)))
	}
	if d.Err != nil {
		return nil, d.Err
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

// decoder reads the shared wire encoding (wire.Decoder: sticky error,
// minimal varints, bounded lengths) and adds the manifest's own fields.
type decoder struct{ wire.Decoder }

func newDecoder(b []byte) *decoder {
	return &decoder{wire.Decoder{B: b, Kind: ErrBadManifest}}
}

func (d *decoder) magic(m string) {
	if len(d.B) < len(m) || string(d.B[:len(m)]) != m {
		d.Fail("bad magic (want " + m + ")")
		return
	}
	d.B = d.B[len(m):]
	if v := d.Uvarint("version"); d.Err == nil && v != version {
		d.Fail(fmt.Sprintf("version %d, this wsfs reads version %d", v, version))
	}
}

func (d *decoder) time(what string) Time {
	sec, nsec := d.Time(what)
	return Time{Sec: sec, Nsec: nsec}
}

func (d *decoder) entry() Entry {
	var e Entry
	e.Name = string(d.Bytes("name", namespace.MaxNameLen))
	e.Ino = d.Uvarint("ino")
	e.Mode = d.U32("mode")
	e.Nlink = d.U32("nlink")
	e.Uid = d.U32("uid")
	e.Gid = d.U32("gid")
	e.Rdev = d.U32("rdev")
	e.Size = d.Uvarint("size")
	e.Atime = d.time("atime")
	e.Mtime = d.time("mtime")
	e.Ctime = d.time("ctime")
	nx := d.Uvarint("xattr count")
	if d.Err == nil && nx > uint64(len(d.B))/2 {
		d.Fail(fmt.Sprintf("xattr count %d with %d bytes left", nx, len(d.B)))
	}
	if d.Err == nil && nx > 0 {
		e.Xattrs = make([]Xattr, 0, nx)
		for i := uint64(0); i < nx && d.Err == nil; i++ {
			x := Xattr{Name: string(d.Bytes("xattr name", namespace.MaxNameLen)), Value: d.Bytes("xattr value", namespace.MaxXattrVal)}
			if d.Err == nil && (x.Name == "" || (i > 0 && e.Xattrs[i-1].Name >= x.Name)) {
				d.Fail(fmt.Sprintf("xattr %q out of order or empty", x.Name))
			}
			e.Xattrs = append(e.Xattrs, x)
		}
	}
	if d.Err != nil {
		return e
	}
	if e.Nlink == 0 {
		d.Fail(fmt.Sprintf("entry %q has nlink 0", e.Name))
		return e
	}
	switch e.Mode & namespace.S_IFMT {
	case namespace.S_IFDIR:
		e.Dir = d.ID("directory manifest id")
	case namespace.S_IFREG:
		e.Content = namespace.DecodeContent(&d.Decoder, e.Size)
	case namespace.S_IFLNK:
		e.Target = string(d.Bytes("symlink target", namespace.MaxTarget))
		if d.Err == nil && (e.Target == "" || uint64(len(e.Target)) != e.Size) {
			d.Fail(fmt.Sprintf("symlink %q: target of %d bytes, size %d", e.Name, len(e.Target), e.Size))
		}
	case namespace.S_IFIFO, namespace.S_IFSOCK, namespace.S_IFCHR, namespace.S_IFBLK:
	default:
		d.Fail(fmt.Sprintf("entry %q has file type %#o", e.Name, e.Mode&namespace.S_IFMT))
	}
	if d.Err == nil && e.Mode&^(namespace.S_IFMT|namespace.PermMask) != 0 {
		d.Fail(fmt.Sprintf("entry %q has mode bits %#o", e.Name, e.Mode))
	}
	return e
}

// sortEntries sorts entries by name.
func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
}
