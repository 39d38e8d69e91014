package namespace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"wsfs/internal/objid"
	"wsfs/internal/wire"
)

// Op is the type byte of a record. The values are frozen: they are written
// to every segment log and checkpoint-era log on disk (golden_test.go).
type Op uint8

// Record types. Each completed namespace change produces exactly one record.
const (
	OpCreate      Op = 1  // regular file, fifo, socket or device node (creat, mknod)
	OpMkdir       Op = 2  // directory
	OpSymlink     Op = 3  // symbolic link
	OpLink        Op = 4  // new hard link to an existing non-directory
	OpUnlink      Op = 5  // remove a non-directory entry
	OpRmdir       Op = 6  // remove an empty directory
	OpRename      Op = 7  // rename(2)/renameat2(2), with flags and the replaced inode
	OpSetAttr     Op = 8  // chmod/chown/utimes: changed fields only
	OpSetContent  Op = 9  // new file content (inline bytes or a pool object)
	OpSetXattr    Op = 10 // set an extended attribute
	OpRemoveXattr Op = 11 // remove an extended attribute

	// opSetContentWide is the wire op of a SetContent record whose mtime
	// does not fit int64 nanoseconds (Timestamp.FitsNs): its mtime is
	// written as seconds and nanoseconds. It exists only on the wire:
	// DecodeRecord returns such a record as OpSetContent, and Encode picks
	// it exactly when it is needed, so a build from before it refuses such
	// a record ("unknown op 12") instead of misreading it, and every other
	// record keeps its version 1 bytes.
	opSetContentWide Op = 12

	// OpWriteRange writes bytes over a regular file's content and sets its
	// size (never below the current size) and mtime: small writes to a
	// large file, logged instead of new chunk objects. Applied, it adds
	// Content.Ranges (the content before it becomes the base). Its mtime
	// must fit int64 nanoseconds (the workspace writes a SetContent
	// otherwise). Builds from before it refuse it ("unknown op 13").
	OpWriteRange Op = 13
)

var opNames = [...]string{
	OpCreate: "create", OpMkdir: "mkdir", OpSymlink: "symlink", OpLink: "link",
	OpUnlink: "unlink", OpRmdir: "rmdir", OpRename: "rename", OpSetAttr: "setattr",
	OpSetContent: "setcontent", OpSetXattr: "setxattr", OpRemoveXattr: "removexattr",
	OpWriteRange: "writerange",
}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// SetAttr field mask bits (Record.Mask).
const (
	AttrMode  uint32 = 1 << 0 // permission bits (07777); the file type never changes
	AttrUid   uint32 = 1 << 1
	AttrGid   uint32 = 1 << 2
	AttrAtime uint32 = 1 << 3
	AttrMtime uint32 = 1 << 4
	attrAll          = AttrMode | AttrUid | AttrGid | AttrAtime | AttrMtime

	// attrWideTimes is a wire-only mask bit: the record's atime and mtime
	// are written as seconds (zigzag) and nanoseconds (uvarint) instead of
	// int64 nanoseconds. Encode sets it exactly when a present time does
	// not fit int64 nanoseconds, and DecodeRecord clears it (Record.Mask
	// never holds it) and refuses it when every present time would fit,
	// so each record has one encoding. Builds from before it refuse the
	// record ("unknown setattr mask bits") instead of misreading it.
	attrWideTimes uint32 = 1 << 5
)

// Rename flags, equal to Linux RENAME_NOREPLACE and RENAME_EXCHANGE.
const (
	RenameNoReplace uint32 = 1 << 0
	RenameExchange  uint32 = 1 << 1
)

// Limits enforced when decoding, so that corrupt input cannot make the
// decoder allocate without bound.
const (
	MaxNameLen  = 255     // bytes in one directory entry name (NAME_MAX)
	MaxTarget   = 4096    // bytes in a symlink target (PATH_MAX)
	MaxXattrVal = 1 << 16 // bytes in one xattr value (XATTR_SIZE_MAX)
)

// Record is one namespace change. Which fields are meaningful depends on Op;
// the wire format below lists them. Time is the wall clock (unix ns) of the
// change: it becomes the ctime (and mtime where POSIX says so) of every inode
// the change touches, so replay reproduces timestamps exactly. Atime and
// Mtime are times a caller set (utimensat) or carried over, of any range.
//
// Wire format (frozen; all integers are unsigned varints unless noted, times
// are signed zigzag varints, str/bytes are a uvarint length then the bytes):
//
//	record      = op:u8 body
//	Create      = ino parent name:str mode uid gid rdev time
//	Mkdir       = ino parent name:str mode uid gid time
//	Symlink     = ino parent name:str uid gid target:str time
//	Link        = ino parent name:str time
//	Unlink      = parent name:str ino time
//	Rmdir       = parent name:str ino time
//	Rename      = parent name:str newparent newname:str flags ino replaced time
//	SetAttr     = ino mask [mode] [uid] [gid] [atime] [mtime] time
//	              atime, mtime: ns, or with mask bit 5 (wide times)
//	              sec:zigzag nsec:uvarint
//	SetContent  = ino size mtime:ns time content (content.go: kind 0
//	              inline, 1 one object, 3 chunked)
//	op 12       = SetContent with mtime as sec:zigzag nsec:uvarint
//	SetXattr    = ino name:str value:bytes time
//	RemoveXattr = ino name:str time
//	WriteRange  = ino size mtime:ns time count (off data:bytes)*count
//	              (op 13; Content.Ranges, in order; 1 to MaxRanges ranges
//	              of at most MaxRangeRecord bytes in total)
//
// For Unlink, Rmdir and Rename, Ino is the inode the entry named when the
// change was made; replay checks it, which catches a log that does not match
// the tree it is replayed onto. Replaced is the inode that was at the
// destination (0 if none; with RenameExchange, the other inode).
type Record struct {
	Op        Op
	Ino       Ino
	Parent    Ino
	Name      string
	NewParent Ino
	NewName   string
	Replaced  Ino
	Flags     uint32
	Mode      uint32 // Create/Mkdir: S_IFMT|perm; SetAttr: perm bits
	Uid, Gid  uint32
	Rdev      uint32
	Mask      uint32 // SetAttr: which of Mode/Uid/Gid/Atime/Mtime are set
	Atime     Timestamp
	Mtime     Timestamp
	Time      int64 // unix ns
	Size      uint64
	Target    string
	Content   Content // SetContent
	Value     []byte  // SetXattr
}

// encodedSizeHint is an estimate of len(r.Encode(nil)), at or above it
// for every record: the fixed-size fields (at most 16 varints of 10
// bytes) plus the variable parts with their length prefixes.
func (r *Record) encodedSizeHint() int {
	c := &r.Content
	n := 1 + 16*10 + 4*10 + len(r.Name) + len(r.NewName) + len(r.Target) + len(r.Value) +
		2 + 10 + len(c.Inline) + len(c.Object) + 10 + len(c.Chunks)*len(objid.ID{}) + 10 + 10
	for _, rg := range c.Ranges {
		n += 20 + len(rg.Data)
	}
	return n
}

// Encode appends the wire form of r to buf and returns it. A nil buf is
// allocated once at about the encoded size (encodedSizeHint), not grown
// by doubling field by field.
func (r *Record) Encode(buf []byte) []byte {
	if buf == nil {
		buf = make([]byte, 0, r.encodedSizeHint())
	}
	b := append(buf, byte(r.Op))
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	s := func(v string) { u(uint64(len(v))); b = append(b, v...) }
	t := func(v int64) { b = binary.AppendVarint(b, v) }
	wide := func(v Timestamp) { t(v.Sec); u(uint64(v.Nsec)) }
	switch r.Op {
	case OpCreate:
		u(uint64(r.Ino))
		u(uint64(r.Parent))
		s(r.Name)
		u(uint64(r.Mode))
		u(uint64(r.Uid))
		u(uint64(r.Gid))
		u(uint64(r.Rdev))
		t(r.Time)
	case OpMkdir:
		u(uint64(r.Ino))
		u(uint64(r.Parent))
		s(r.Name)
		u(uint64(r.Mode))
		u(uint64(r.Uid))
		u(uint64(r.Gid))
		t(r.Time)
	case OpSymlink:
		u(uint64(r.Ino))
		u(uint64(r.Parent))
		s(r.Name)
		u(uint64(r.Uid))
		u(uint64(r.Gid))
		s(r.Target)
		t(r.Time)
	case OpLink:
		u(uint64(r.Ino))
		u(uint64(r.Parent))
		s(r.Name)
		t(r.Time)
	case OpUnlink, OpRmdir:
		u(uint64(r.Parent))
		s(r.Name)
		u(uint64(r.Ino))
		t(r.Time)
	case OpRename:
		u(uint64(r.Parent))
		s(r.Name)
		u(uint64(r.NewParent))
		s(r.NewName)
		u(uint64(r.Flags))
		u(uint64(r.Ino))
		u(uint64(r.Replaced))
		t(r.Time)
	case OpSetAttr:
		mask := r.Mask &^ attrWideTimes
		if r.Mask&AttrAtime != 0 && !r.Atime.FitsNs() || r.Mask&AttrMtime != 0 && !r.Mtime.FitsNs() {
			mask |= attrWideTimes
		}
		tm := func(v Timestamp) {
			if mask&attrWideTimes != 0 {
				wide(v)
			} else {
				t(v.Ns())
			}
		}
		u(uint64(r.Ino))
		u(uint64(mask))
		if r.Mask&AttrMode != 0 {
			u(uint64(r.Mode))
		}
		if r.Mask&AttrUid != 0 {
			u(uint64(r.Uid))
		}
		if r.Mask&AttrGid != 0 {
			u(uint64(r.Gid))
		}
		if r.Mask&AttrAtime != 0 {
			tm(r.Atime)
		}
		if r.Mask&AttrMtime != 0 {
			tm(r.Mtime)
		}
		t(r.Time)
	case OpSetContent:
		if !r.Mtime.FitsNs() {
			b[len(b)-1] = byte(opSetContentWide)
		}
		u(uint64(r.Ino))
		u(r.Size)
		if r.Mtime.FitsNs() {
			t(r.Mtime.Ns())
		} else {
			wide(r.Mtime)
		}
		t(r.Time)
		b = AppendContent(b, &r.Content)
	case OpWriteRange:
		if !r.Mtime.FitsNs() {
			panic("namespace: WriteRange record with an mtime outside int64 nanoseconds")
		}
		u(uint64(r.Ino))
		u(r.Size)
		t(r.Mtime.Ns())
		t(r.Time)
		b = appendRanges(b, r.Content.Ranges)
	case OpSetXattr:
		u(uint64(r.Ino))
		s(r.Name)
		u(uint64(len(r.Value)))
		b = append(b, r.Value...)
		t(r.Time)
	case OpRemoveXattr:
		u(uint64(r.Ino))
		s(r.Name)
		t(r.Time)
	default:
		panic(fmt.Sprintf("namespace: encoding record with unknown op %d", r.Op))
	}
	return b
}

// ErrBadRecord is wrapped by every decoding error.
var ErrBadRecord = errors.New("malformed namespace record")

// decoder reads the shared wire encoding (wire.Decoder: sticky error,
// minimal varints, bounded lengths) and adds the namespace's own fields.
type decoder struct{ wire.Decoder }

func newDecoder(b []byte, kind error) *decoder {
	return &decoder{wire.Decoder{B: b, Kind: kind}}
}

func (d *decoder) ino(what string) Ino { return Ino(d.Uvarint(what)) }

// wide reads a seconds+nanoseconds time; the nanoseconds must be within a
// second.
func (d *decoder) wide(what string) Timestamp {
	sec, nsec := d.Time(what)
	return Timestamp{Sec: sec, Nsec: nsec}
}

// DecodeRecord parses one record. Inline content and xattr values alias
// data (they are never mutated after decoding, so sharing is safe); the
// caller must not modify data afterwards. It never panics on any input.
func DecodeRecord(data []byte) (*Record, error) {
	r := new(Record)
	if err := r.Decode(data); err != nil {
		return nil, err
	}
	return r, nil
}

// Decode is DecodeRecord into r, which it overwrites entirely (on error,
// with a partial record): a caller that decodes many records and keeps
// none of them (Tree.Apply copies what it keeps) reuses one Record.
func (r *Record) Decode(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrBadRecord)
	}
	*r = Record{Op: Op(data[0])}
	d := newDecoder(data[1:], ErrBadRecord)
	switch r.Op {
	case OpCreate:
		r.Ino = d.ino("ino")
		r.Parent = d.ino("parent")
		r.Name = d.Str("name", MaxNameLen)
		r.Mode = d.U32("mode")
		r.Uid = d.U32("uid")
		r.Gid = d.U32("gid")
		r.Rdev = d.U32("rdev")
		r.Time = d.Varint("time")
	case OpMkdir:
		r.Ino = d.ino("ino")
		r.Parent = d.ino("parent")
		r.Name = d.Str("name", MaxNameLen)
		r.Mode = d.U32("mode")
		r.Uid = d.U32("uid")
		r.Gid = d.U32("gid")
		r.Time = d.Varint("time")
	case OpSymlink:
		r.Ino = d.ino("ino")
		r.Parent = d.ino("parent")
		r.Name = d.Str("name", MaxNameLen)
		r.Uid = d.U32("uid")
		r.Gid = d.U32("gid")
		r.Target = d.Str("target", MaxTarget)
		r.Time = d.Varint("time")
	case OpLink:
		r.Ino = d.ino("ino")
		r.Parent = d.ino("parent")
		r.Name = d.Str("name", MaxNameLen)
		r.Time = d.Varint("time")
	case OpUnlink, OpRmdir:
		r.Parent = d.ino("parent")
		r.Name = d.Str("name", MaxNameLen)
		r.Ino = d.ino("ino")
		r.Time = d.Varint("time")
	case OpRename:
		r.Parent = d.ino("parent")
		r.Name = d.Str("name", MaxNameLen)
		r.NewParent = d.ino("newparent")
		r.NewName = d.Str("newname", MaxNameLen)
		r.Flags = d.U32("flags")
		r.Ino = d.ino("ino")
		r.Replaced = d.ino("replaced")
		r.Time = d.Varint("time")
	case OpSetAttr:
		r.Ino = d.ino("ino")
		r.Mask = d.U32("mask")
		wideTimes := r.Mask&attrWideTimes != 0
		r.Mask &^= attrWideTimes
		if r.Mask&^attrAll != 0 {
			d.Fail(fmt.Sprintf("unknown setattr mask bits %#x", r.Mask&^attrAll))
		}
		tm := func(what string) Timestamp {
			if wideTimes {
				return d.wide(what)
			}
			return FromNs(d.Varint(what))
		}
		if r.Mask&AttrMode != 0 {
			r.Mode = d.U32("mode")
		}
		if r.Mask&AttrUid != 0 {
			r.Uid = d.U32("uid")
		}
		if r.Mask&AttrGid != 0 {
			r.Gid = d.U32("gid")
		}
		if r.Mask&AttrAtime != 0 {
			r.Atime = tm("atime")
		}
		if r.Mask&AttrMtime != 0 {
			r.Mtime = tm("mtime")
		}
		r.Time = d.Varint("time")
		if wideTimes && d.Err == nil && (r.Mask&AttrAtime == 0 || r.Atime.FitsNs()) && (r.Mask&AttrMtime == 0 || r.Mtime.FitsNs()) {
			d.Fail("wide times where every time fits nanoseconds (not the canonical encoding)")
		}
	case OpSetContent, opSetContentWide:
		r.Ino = d.ino("ino")
		r.Size = d.Uvarint("size")
		if r.Op == opSetContentWide {
			r.Mtime = d.wide("mtime")
			if d.Err == nil && r.Mtime.FitsNs() {
				d.Fail("wide mtime that fits nanoseconds (not the canonical encoding)")
			}
			r.Op = OpSetContent
		} else {
			r.Mtime = FromNs(d.Varint("mtime"))
		}
		r.Time = d.Varint("time")
		k := d.Byte("content kind")
		var ok bool
		if k == contentRanged {
			d.Fail("ranged content in a record (ranges travel as WriteRange records)")
		} else if r.Content, ok = d.contentOfKind(k, r.Size); !ok {
			d.Fail(fmt.Sprintf("unknown content kind %d", k))
		}
	case OpWriteRange:
		r.Ino = d.ino("ino")
		r.Size = d.Uvarint("size")
		r.Mtime = FromNs(d.Varint("mtime"))
		r.Time = d.Varint("time")
		r.Content.Ranges = d.ranges(MaxRanges)
		if d.Err == nil {
			total := 0
			for _, rg := range r.Content.Ranges {
				total += len(rg.Data)
				if rg.Off > r.Size || uint64(len(rg.Data)) > r.Size-rg.Off {
					d.Fail(fmt.Sprintf("range of %d bytes at %d beyond size %d", len(rg.Data), rg.Off, r.Size))
					break
				}
			}
			if total > MaxRangeRecord {
				d.Fail(fmt.Sprintf("ranges of %d bytes in one record, more than %d", total, MaxRangeRecord))
			}
			if r.Size > MaxFileSize {
				d.Fail(fmt.Sprintf("size %d exceeds the maximum %d", r.Size, uint64(MaxFileSize)))
			}
		}
	case OpSetXattr:
		r.Ino = d.ino("ino")
		r.Name = d.Str("xattr name", MaxNameLen)
		r.Value = d.Bytes("xattr value", MaxXattrVal)
		r.Time = d.Varint("time")
	case OpRemoveXattr:
		r.Ino = d.ino("ino")
		r.Name = d.Str("xattr name", MaxNameLen)
		r.Time = d.Varint("time")
	default:
		return fmt.Errorf("%w: unknown op %d", ErrBadRecord, data[0])
	}
	if d.Err != nil {
		return fmt.Errorf("%s record: %w", r.Op, d.Err)
	}
	if len(d.B) != 0 {
		return fmt.Errorf("%w: %s record has %d trailing bytes", ErrBadRecord, r.Op, len(d.B))
	}
	return nil
}
