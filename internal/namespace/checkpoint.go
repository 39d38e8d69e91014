package namespace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
)

// Checkpoint format (frozen, versions 1 and 2; integers are uvarints,
// str/bytes a uvarint length then the bytes):
//
//	checkpoint = magic:"WSFSNS\x00\x01" version nextIno count inode*count crc32c:u32le
//	inode      = ino mode nlink uid gid rdev size atime mtime ctime
//	             content (content.go) | kind 2:u8 (not a regular file)
//	             target:str nxattr (name:str value:bytes)*nxattr
//	             nentries (name:str ino)*nentries
//
// A time is, in version 1, int64 unix nanoseconds as a zigzag varint
// (1677 to 2262 only); in version 2, seconds as a zigzag varint then
// nanoseconds (below 1e9) as a uvarint, which holds every time the kernel
// passes. EncodeCheckpoint writes version 2; DecodeCheckpoint reads both.
//
// Inodes appear in increasing number; entries and xattrs in name order, so
// equal trees encode to equal bytes. The CRC (Castagnoli) covers everything
// before it. Orphans are never written (nlink 0 inodes are skipped).
const (
	checkpointMagic   = "WSFSNS\x00\x01"
	checkpointVersion = 2
	contentNone       = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadCheckpoint is wrapped by every checkpoint decoding error.
var ErrBadCheckpoint = errors.New("malformed namespace checkpoint")

// EncodeCheckpoint returns the whole tree in checkpoint form. The caller
// must keep the tree still while it runs (the durable shadow is only
// changed by the committer goroutine that also calls this).
func (t *Tree) EncodeCheckpoint() []byte {
	var inos []Ino
	for _, n := range t.Inodes() {
		if n.Nlink > 0 {
			inos = append(inos, n.Ino)
		}
	}
	next := t.NextIno()
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	b := []byte(checkpointMagic)
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	s := func(v []byte) { u(uint64(len(v))); b = append(b, v...) }
	tm := func(v Timestamp) {
		b = binary.AppendVarint(b, v.Sec)
		b = binary.AppendUvarint(b, uint64(v.Nsec))
	}
	u(checkpointVersion)
	u(uint64(next))
	u(uint64(len(inos)))
	for _, ino := range inos {
		n := t.Get(ino)
		u(uint64(n.Ino))
		u(uint64(n.Mode))
		u(uint64(n.Nlink))
		u(uint64(n.Uid))
		u(uint64(n.Gid))
		u(uint64(n.Rdev))
		u(n.Size)
		tm(n.Atime)
		tm(n.Mtime)
		tm(n.Ctime)
		switch {
		case !n.IsReg():
			b = append(b, contentNone)
		default:
			b = AppendContent(b, &n.Content)
		}
		s([]byte(n.Target))
		u(uint64(len(n.Xattrs)))
		for _, k := range sortedKeys(n.Xattrs) {
			s([]byte(k))
			s(n.Xattrs[k])
		}
		u(uint64(len(n.Entries)))
		for _, k := range sortedKeys(n.Entries) {
			s([]byte(k))
			u(uint64(n.Entries[k]))
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// DecodeCheckpoint rebuilds a tree from EncodeCheckpoint output. It checks
// the CRC and the tree's structure (every entry names an inode, every
// directory has one parent, nlink counts agree) and never panics. Inline
// contents and xattr values alias data.
func DecodeCheckpoint(data []byte) (*Tree, error) {
	fail := func(format string, args ...any) (*Tree, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadCheckpoint, fmt.Sprintf(format, args...))
	}
	if len(data) < len(checkpointMagic)+4 || string(data[:len(checkpointMagic)]) != checkpointMagic {
		return fail("bad magic (not a wsfs namespace checkpoint)")
	}
	body := data[:len(data)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(data[len(data)-4:]); got != want {
		return fail("checksum mismatch (crc32c %08x, stored %08x)", got, want)
	}
	d := newDecoder(body[len(checkpointMagic):], ErrBadRecord)
	version := d.Uvarint("version")
	if d.Err == nil && version != 1 && version != checkpointVersion {
		return fail("version %d, this wsfs reads versions 1 and %d (written by a newer wsfs?)", version, checkpointVersion)
	}
	tm := func(what string) Timestamp {
		if version == 1 {
			return FromNs(d.Varint(what))
		}
		return d.wide(what)
	}
	next := d.ino("next ino")
	count := d.Uvarint("inode count")
	if d.Err == nil && count > uint64(len(d.B)) {
		return fail("inode count %d exceeds the data", count)
	}
	inodes := make(map[Ino]*Inode, count)
	var prev Ino
	for i := uint64(0); i < count && d.Err == nil; i++ {
		n := &Inode{Ino: d.ino("ino")}
		if d.Err == nil && (n.Ino <= prev || n.Ino == 0) {
			return fail("inode %d out of order", n.Ino)
		}
		prev = n.Ino
		n.Mode = d.U32("mode")
		n.Nlink = d.U32("nlink")
		n.Uid = d.U32("uid")
		n.Gid = d.U32("gid")
		n.Rdev = d.U32("rdev")
		n.Size = d.Uvarint("size")
		n.Atime = tm("atime")
		n.Mtime = tm("mtime")
		n.Ctime = tm("ctime")
		if k := d.Byte("content kind"); k != contentNone {
			var ok bool
			if n.Content, ok = d.contentOfKind(k, n.Size); !ok {
				d.Fail(fmt.Sprintf("unknown content kind %d", k))
			}
		}
		n.Target = d.Str("target", MaxTarget)
		if nx := d.Uvarint("xattr count"); nx > 0 && d.Err == nil {
			if nx > uint64(len(d.B)) {
				return fail("inode %d: xattr count %d exceeds the data", n.Ino, nx)
			}
			n.Xattrs = make(map[string][]byte, nx)
			for j := uint64(0); j < nx && d.Err == nil; j++ {
				k := d.Str("xattr name", MaxNameLen)
				n.Xattrs[k] = d.Bytes("xattr value", MaxXattrVal)
			}
		}
		ne := d.Uvarint("entry count")
		if n.Mode&S_IFMT == S_IFDIR {
			if ne > uint64(len(d.B)) {
				return fail("inode %d: entry count %d exceeds the data", n.Ino, ne)
			}
			n.Entries = make(map[string]Ino, ne)
		} else if ne != 0 && d.Err == nil {
			return fail("non-directory inode %d has %d entries", n.Ino, ne)
		}
		for j := uint64(0); j < ne && d.Err == nil; j++ {
			k := d.Str("entry name", MaxNameLen)
			n.Entries[k] = d.ino("entry ino")
		}
		if d.Err == nil {
			inodes[n.Ino] = n
		}
	}
	if d.Err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCheckpoint, d.Err)
	}
	if len(d.B) != 0 {
		return fail("%d trailing bytes", len(d.B))
	}
	if next <= prev {
		return fail("next inode %d not above the largest inode %d", next, prev)
	}
	if err := checkTree(inodes, true); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	t := &Tree{}
	for _, n := range inodes {
		t.insert(n)
	}
	t.nextIno.Store(uint64(next))
	return t, nil
}

// checkTree verifies the structural invariants of a table: every entry
// names an existing inode, every directory but the root is named exactly
// once, every non-directory's nlink equals the number of entries naming it,
// directory nlink is 2 + subdirectories, and every inode is reachable from
// the root. With setParent it fills in directory Parent fields (decoding);
// otherwise it verifies them.
func checkTree(inodes map[Ino]*Inode, setParent bool) error {
	root := inodes[RootIno]
	if root == nil || !root.IsDir() {
		return errors.New("no root directory")
	}
	if setParent {
		root.Parent = RootIno
	} else if root.Parent != RootIno {
		return errors.New("root's parent is not itself")
	}
	links := make(map[Ino]uint32, len(inodes))
	for _, n := range inodes {
		if n.Nlink == 0 {
			return fmt.Errorf("inode %d has nlink 0", n.Ino)
		}
		if n.IsDir() && n.Entries == nil {
			if !setParent {
				return fmt.Errorf("directory %d has no entry map", n.Ino)
			}
			n.Entries = map[string]Ino{}
		}
		if !n.IsDir() && len(n.Entries) != 0 {
			return fmt.Errorf("non-directory %d has entries", n.Ino)
		}
		subdirs := uint32(0)
		for name, c := range n.Entries {
			child := inodes[c]
			if child == nil {
				return fmt.Errorf("entry %q of directory %d names missing inode %d", name, n.Ino, c)
			}
			if c == RootIno {
				return fmt.Errorf("entry %q of directory %d names the root", name, n.Ino)
			}
			links[c]++
			if child.IsDir() {
				subdirs++
				if setParent {
					child.Parent = n.Ino
				} else if child.Parent != n.Ino {
					return fmt.Errorf("directory %d is named in %d but its parent is %d", c, n.Ino, child.Parent)
				}
			}
		}
		if n.IsDir() && n.Nlink != 2+subdirs {
			return fmt.Errorf("directory %d has nlink %d, expected %d", n.Ino, n.Nlink, 2+subdirs)
		}
		if n.IsReg() {
			if err := n.Content.Validate(n.Size); err != nil {
				return fmt.Errorf("file %d: %v", n.Ino, err)
			}
		}
	}
	for _, n := range inodes {
		switch {
		case n.Ino == RootIno:
			if links[n.Ino] != 0 {
				return errors.New("root is linked")
			}
		case n.IsDir():
			if links[n.Ino] != 1 {
				return fmt.Errorf("directory %d has %d names", n.Ino, links[n.Ino])
			}
		case links[n.Ino] != n.Nlink:
			return fmt.Errorf("inode %d has nlink %d but %d names", n.Ino, n.Nlink, links[n.Ino])
		}
	}
	// Reachability: a cycle of directories detached from the root would pass
	// the counts above.
	seen := map[Ino]bool{RootIno: true}
	stack := []Ino{RootIno}
	for len(stack) > 0 {
		n := inodes[stack[len(stack)-1]]
		stack = stack[:len(stack)-1]
		for _, c := range n.Entries {
			if !seen[c] {
				seen[c] = true
				stack = append(stack, c)
			}
		}
	}
	if len(seen) != len(inodes) {
		return fmt.Errorf("%d inodes unreachable from the root", len(inodes)-len(seen))
	}
	return nil
}

// Check verifies the tree's structural invariants (see checkTree), ignoring
// pinned orphans. The tree must be still (no concurrent Apply).
func (t *Tree) Check() error {
	live := make(map[Ino]*Inode, t.Len())
	for _, n := range t.Inodes() {
		if n.Nlink > 0 || n.Ino == RootIno {
			live[n.Ino] = n
		}
	}
	return checkTree(live, false)
}
