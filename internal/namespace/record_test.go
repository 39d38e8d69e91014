package namespace

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"wsfs/internal/objid"
)

// sampleRecords is one record of every op, with every optional field used.
// The golden file testdata/records.golden freezes their encoding.
func sampleRecords() []*Record {
	var id objid.ID
	for i := range id {
		id[i] = byte(i)
	}
	return []*Record{
		{Op: OpCreate, Ino: 2, Parent: 1, Name: "file", Mode: S_IFREG | 0o644, Uid: 1000, Gid: 1000, Time: 1700000000000000000},
		{Op: OpCreate, Ino: 3, Parent: 1, Name: "dev", Mode: S_IFCHR | 0o600, Rdev: 0x0103, Time: 1700000000000000001},
		{Op: OpMkdir, Ino: 4, Parent: 1, Name: "dir", Mode: S_IFDIR | 0o755, Uid: 1, Gid: 2, Time: 1700000000000000002},
		{Op: OpSymlink, Ino: 5, Parent: 4, Name: "sl", Uid: 1, Gid: 2, Target: "../file", Time: 1700000000000000003},
		{Op: OpLink, Ino: 2, Parent: 4, Name: "hard", Time: 1700000000000000004},
		{Op: OpSetContent, Ino: 2, Size: 5, Mtime: FromNs(1700000000000000005), Time: 1700000000000000006, Content: Content{Inline: []byte("hello")}},
		{Op: OpSetContent, Ino: 2, Size: 1 << 33, Mtime: FromNs(-1), Time: 1700000000000000007, Content: Content{IsObject: true, Object: id}},
		{Op: OpSetAttr, Ino: 2, Mask: AttrMode | AttrUid | AttrGid | AttrAtime | AttrMtime, Mode: 0o600, Uid: 7, Gid: 8, Atime: FromNs(11), Mtime: FromNs(-12), Time: 13},
		{Op: OpSetAttr, Ino: 4, Mask: AttrMode, Mode: 0o700, Time: 14},
		{Op: OpSetXattr, Ino: 2, Name: "user.k", Value: []byte{0, 1, 2}, Time: 15},
		{Op: OpRemoveXattr, Ino: 2, Name: "user.k", Time: 16},
		{Op: OpRename, Parent: 1, Name: "file", NewParent: 4, NewName: "moved", Flags: RenameNoReplace, Ino: 2, Time: 17},
		{Op: OpRename, Parent: 4, Name: "moved", NewParent: 4, NewName: "sl", Flags: RenameExchange, Ino: 2, Replaced: 5, Time: 18},
		{Op: OpUnlink, Parent: 4, Name: "hard", Ino: 2, Time: 19},
		{Op: OpRmdir, Parent: 1, Name: "gone", Ino: 9, Time: 20},
		// Added with chunked content; the lines above are unchanged.
		{Op: OpSetContent, Ino: 2, Size: 5<<19 + 1, Mtime: FromNs(21), Time: 22, Content: Content{Chunks: []objid.ID{id, HoleChunk, {7: 7}}, ChunkShift: 20}},
		// Added with wide times (outside int64 nanoseconds: 2300-01-01,
		// the year 1500, and the int64 second extremes); the lines above
		// are unchanged, so a time that fits is still written as before.
		{Op: OpSetAttr, Ino: 2, Mask: AttrAtime | AttrMtime, Atime: Timestamp{Sec: 10413792000, Nsec: 5}, Mtime: FromNs(12), Time: 23},
		{Op: OpSetAttr, Ino: 2, Mask: AttrMtime, Mtime: Timestamp{Sec: -14831769600, Nsec: 999999999}, Time: 24},
		{Op: OpSetAttr, Ino: 2, Mask: AttrMode | AttrAtime, Mode: 0o644, Atime: Timestamp{Sec: math.MinInt64}, Time: 25},
		{Op: OpSetContent, Ino: 2, Size: 1, Mtime: Timestamp{Sec: math.MaxInt64, Nsec: 1}, Time: 26, Content: Content{Inline: []byte("w")}},
		// Added with range records; the lines above are unchanged.
		{Op: OpWriteRange, Ino: 2, Size: 5<<19 + 9, Mtime: FromNs(27), Time: 28, Content: Content{Ranges: []Range{{Off: 24, Data: []byte{1}}, {Off: 5 << 19, Data: []byte("appended!")}}}},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords() {
		data := r.Encode(nil)
		if h := r.encodedSizeHint(); len(data) > h {
			t.Errorf("%s: encoded %d bytes, above encodedSizeHint %d (Encode(nil) grew its buffer)", r.Op, len(data), h)
		}
		got, err := DecodeRecord(data)
		if err != nil {
			t.Fatalf("%s: decode: %v", r.Op, err)
		}
		norm := *r
		if norm.Content.Inline == nil && got.Content.Inline != nil && len(got.Content.Inline) == 0 {
			got.Content.Inline = nil
		}
		if !reflect.DeepEqual(&norm, got) {
			t.Errorf("%s: round trip\n want %+v\n  got %+v", r.Op, &norm, got)
		}
		// Every strict prefix must fail to decode, never panic.
		for i := 0; i < len(data); i++ {
			if _, err := DecodeRecord(data[:i]); err == nil {
				t.Errorf("%s: prefix of %d/%d bytes decoded without error", r.Op, i, len(data))
			}
		}
		if _, err := DecodeRecord(append(data, 0)); err == nil {
			t.Errorf("%s: trailing byte accepted", r.Op)
		}
	}
}

// TestRecordGolden freezes the wire format: the encoding of sampleRecords
// must never change (old logs must still replay). Regenerate only for a new
// format version, with WSFS_UPDATE_GOLDEN=1.
func TestRecordGolden(t *testing.T) {
	var b strings.Builder
	for _, r := range sampleRecords() {
		b.WriteString(r.Op.String() + " " + hex.EncodeToString(r.Encode(nil)) + "\n")
	}
	path := filepath.Join("testdata", "records.golden")
	if os.Getenv("WSFS_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with WSFS_UPDATE_GOLDEN=1 once to create it)", err)
	}
	if b.String() != string(want) {
		t.Fatalf("record encoding changed; the log format is frozen.\n got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"unknown op", []byte{0}},
		{"unknown op 200", []byte{200, 1, 2}},
		{"bad mask", (&Record{Op: OpSetAttr, Ino: 1, Mask: 1 << 7}).Encode(nil)},
		{"inline size mismatch", append([]byte{byte(OpSetContent), 2, 9, 0, 0, contentInline, 2}, 'a', 'b')},
		{"bad content kind", []byte{byte(OpSetContent), 2, 0, 0, 0, 7}},
		{"too few chunks", (&Record{Op: OpSetContent, Ino: 2, Size: 3 << 20, Content: Content{Chunks: make([]objid.ID, 2), ChunkShift: 20}}).Encode(nil)},
		{"too many chunks", (&Record{Op: OpSetContent, Ino: 2, Size: 1 << 20, Content: Content{Chunks: make([]objid.ID, 2), ChunkShift: 20}}).Encode(nil)},
		{"chunk shift too small", (&Record{Op: OpSetContent, Ino: 2, Size: 4, Content: Content{Chunks: make([]objid.ID, 1), ChunkShift: 1}}).Encode(nil)},
		{"chunk count beyond the data", []byte{byte(OpSetContent), 2, 0, 0, 0, contentChunked, 20, 0xff, 0xff, 0xff, 0x0f, 1, 2}},
		{"size beyond the maximum", (&Record{Op: OpSetContent, Ino: 2, Size: MaxFileSize + 1, Content: Content{IsObject: true}}).Encode(nil)},
		{"wide times that fit ns", []byte{byte(OpSetAttr), 2, byte(AttrMtime | attrWideTimes), 4, 0, 0}},
		{"wide mtime that fits ns", []byte{byte(opSetContentWide), 2, 0, 4, 0, 0, contentInline, 0}},
		{"wide time with a second of ns", []byte{byte(OpSetAttr), 2, byte(AttrMtime | attrWideTimes), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0}},
		{"range past the size", (&Record{Op: OpWriteRange, Ino: 2, Size: 4, Content: Content{Ranges: []Range{{Off: 2, Data: []byte("abc")}}}}).Encode(nil)},
		{"empty range", []byte{byte(OpWriteRange), 2, 4, 0, 0, 1, 0, 0}},
		{"no ranges", []byte{byte(OpWriteRange), 2, 4, 0, 0, 0}},
		{"ranged content in setcontent", []byte{byte(OpSetContent), 2, 1, 0, 0, contentRanged, 0, contentInline, 0, 1, 0, 1, 'a'}},
		{"huge name", append([]byte{byte(OpCreate), 2, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, bytes.Repeat([]byte("a"), 10)...)},
	} {
		if _, err := DecodeRecord(tc.data); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: err = %v, want ErrBadRecord", tc.name, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(r.Encode(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRecord(data)
		if err != nil {
			return
		}
		// A record that decodes must re-encode to the same bytes (one
		// canonical form) and must not panic when applied.
		if again := r.Encode(nil); !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", data, again)
		}
		tr := New(0o755, 0, 0, 0)
		_ = tr.Apply(r)
		if err := tr.Check(); err != nil {
			t.Fatalf("tree broken after applying %+v: %v", r, err)
		}
	})
}
