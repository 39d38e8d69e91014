package namespace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"wsfs/internal/objid"
)

func sum(b []byte) objid.ID { return sha256.Sum256(b) }

// sumContent is the tests' content ID for Dump: the hash of inline bytes,
// the object ID, or the hash of the chunk list (trees in these tests are
// compared with trees built from the same records, so one form per file).
func sumContent(n *Inode) objid.ID {
	switch c := &n.Content; {
	case c.Ranges != nil:
		base := &Inode{Content: c.Base()}
		id := sumContent(base)
		b := append(id[:], fmt.Sprint(c.BaseSize)...)
		for _, r := range c.Ranges {
			b = append(append(b, fmt.Sprintf(";%d:", r.Off)...), r.Data...)
		}
		return sum(b)
	case c.IsChunked():
		var b []byte
		for _, id := range c.Chunks {
			b = append(b, id[:]...)
		}
		return sum(append(b, c.ChunkShift))
	case c.IsObject:
		return c.Object
	}
	return sum(n.Content.Inline)
}

// build applies records in order, failing the test on any error.
func build(t *testing.T, recs ...*Record) *Tree {
	t.Helper()
	tr := New(0o755, 0, 0, 1)
	for i, r := range recs {
		if err := tr.Apply(r); err != nil {
			t.Fatalf("record %d (%s): %v", i, r.Op, err)
		}
		if err := tr.Check(); err != nil {
			t.Fatalf("after record %d (%s): %v", i, r.Op, err)
		}
	}
	return tr
}

func mkdir(ino, parent Ino, name string) *Record {
	return &Record{Op: OpMkdir, Ino: ino, Parent: parent, Name: name, Mode: 0o755, Time: 10}
}
func create(ino, parent Ino, name string) *Record {
	return &Record{Op: OpCreate, Ino: ino, Parent: parent, Name: name, Mode: S_IFREG | 0o644, Time: 10}
}

func TestApplyErrors(t *testing.T) {
	base := []*Record{mkdir(2, 1, "d"), create(3, 2, "f"), mkdir(4, 2, "sub"), create(5, 4, "g")}
	for _, tc := range []struct {
		name  string
		rec   *Record
		errno syscall.Errno
	}{
		{"create exists", create(9, 2, "f"), syscall.EEXIST},
		{"create reuses ino", create(3, 1, "x"), syscall.EEXIST},
		{"create in file", create(9, 3, "x"), syscall.ENOTDIR},
		{"create in missing", create(9, 99, "x"), syscall.ENOENT},
		{"bad name", create(9, 1, "a/b"), syscall.EINVAL},
		{"dotdot", create(9, 1, ".."), syscall.EINVAL},
		{"unlink dir", &Record{Op: OpUnlink, Parent: 2, Name: "sub", Ino: 4}, syscall.EISDIR},
		{"unlink wrong ino", &Record{Op: OpUnlink, Parent: 2, Name: "f", Ino: 5}, syscall.ESTALE},
		{"rmdir nonempty", &Record{Op: OpRmdir, Parent: 2, Name: "sub", Ino: 4}, syscall.ENOTEMPTY},
		{"rmdir file", &Record{Op: OpRmdir, Parent: 2, Name: "f", Ino: 3}, syscall.ENOTDIR},
		{"link dir", &Record{Op: OpLink, Ino: 4, Parent: 1, Name: "x"}, syscall.EPERM},
		{"rename into own subtree", &Record{Op: OpRename, Parent: 1, Name: "d", NewParent: 4, NewName: "x", Ino: 2}, syscall.EINVAL},
		{"rename dir over file", &Record{Op: OpRename, Parent: 2, Name: "sub", NewParent: 2, NewName: "f", Ino: 4, Replaced: 3}, syscall.ENOTDIR},
		{"rename file over dir", &Record{Op: OpRename, Parent: 2, Name: "f", NewParent: 2, NewName: "sub", Ino: 3, Replaced: 4}, syscall.EISDIR},
		{"rename noreplace", &Record{Op: OpRename, Parent: 4, Name: "g", NewParent: 2, NewName: "f", Ino: 5, Replaced: 3, Flags: RenameNoReplace}, syscall.EEXIST},
		{"rename replaced mismatch", &Record{Op: OpRename, Parent: 4, Name: "g", NewParent: 2, NewName: "f", Ino: 5}, syscall.ESTALE},
		{"rename over nonempty", &Record{Op: OpRename, Parent: 1, Name: "e", NewParent: 2, NewName: "sub", Ino: 6, Replaced: 4}, syscall.ENOENT},
		{"content for dir", &Record{Op: OpSetContent, Ino: 2}, syscall.EINVAL},
		{"remove missing xattr", &Record{Op: OpRemoveXattr, Ino: 3, Name: "user.x"}, syscall.ENODATA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := build(t, base...)
			before := DumpString(tr.Dump(sumContent))
			err := tr.Apply(tc.rec)
			if !errors.Is(err, tc.errno) {
				t.Fatalf("err = %v, want %v", err, tc.errno)
			}
			if after := DumpString(tr.Dump(sumContent)); after != before {
				t.Fatalf("failed Apply changed the tree:\n%s\nvs\n%s", before, after)
			}
		})
	}
}

func TestApplySequences(t *testing.T) {
	var id objid.ID
	id[0] = 7
	for _, tc := range []struct {
		name string
		recs []*Record
		want string
	}{
		{"hard links and unlink", []*Record{
			create(2, 1, "a"), mkdir(3, 1, "d"),
			{Op: OpLink, Ino: 2, Parent: 3, Name: "b", Time: 11},
			{Op: OpUnlink, Parent: 1, Name: "a", Ino: 2, Time: 12},
		}, "/ d 0755 0:0 n3\n/d d 0755 0:0 n2\n/d/b f 0644 0:0 n1 size=0 content=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"},
		{"rename replaces and moves dir", []*Record{
			mkdir(2, 1, "a"), mkdir(3, 1, "b"), mkdir(4, 2, "x"), mkdir(5, 3, "x"),
			{Op: OpRename, Parent: 2, Name: "x", NewParent: 3, NewName: "x", Ino: 4, Replaced: 5, Time: 12},
		}, "/ d 0755 0:0 n4\n/a d 0755 0:0 n2\n/b d 0755 0:0 n3\n/b/x d 0755 0:0 n2\n"},
		{"exchange file and dir across dirs", []*Record{
			mkdir(2, 1, "a"), mkdir(3, 1, "b"), create(4, 2, "f"), mkdir(5, 3, "g"),
			{Op: OpRename, Parent: 2, Name: "f", NewParent: 3, NewName: "g", Ino: 4, Replaced: 5, Flags: RenameExchange, Time: 12},
		}, "/ d 0755 0:0 n4\n/a d 0755 0:0 n3\n/a/f d 0755 0:0 n2\n/b d 0755 0:0 n2\n/b/g f 0644 0:0 n1 size=0 content=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"},
		{"content, attrs, xattrs, symlink, device", []*Record{
			create(2, 1, "f"),
			{Op: OpSetContent, Ino: 2, Size: 1 << 40, Content: Content{IsObject: true, Object: id}},
			{Op: OpSetAttr, Ino: 2, Mask: AttrMode | AttrUid, Mode: 0o4711, Uid: 5},
			{Op: OpSetXattr, Ino: 2, Name: "user.a", Value: []byte("v")},
			{Op: OpSymlink, Ino: 3, Parent: 1, Name: "l", Target: "f"},
			{Op: OpCreate, Ino: 4, Parent: 1, Name: "c", Mode: S_IFCHR | 0o600, Rdev: 259},
		}, "/ d 0755 0:0 n2\n/c c 0600 0:0 n1 rdev=259\n/f f 4711 5:0 n1 size=1099511627776 content=0700000000000000000000000000000000000000000000000000000000000000 xattrs=user.a=76;\n/l l 0777 0:0 n1 -> \"f\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := build(t, tc.recs...)
			got := DumpString(tr.Dump(sumContent))
			if got != tc.want {
				t.Fatalf("dump:\n%s\nwant:\n%s", got, tc.want)
			}
			// The checkpoint round trip gives the same tree and the same bytes.
			ck := tr.EncodeCheckpoint()
			back, err := DecodeCheckpoint(ck)
			if err != nil {
				t.Fatal(err)
			}
			if d := DumpString(back.Dump(sumContent)); d != got {
				t.Fatalf("checkpoint round trip:\n%s\nwant:\n%s", d, got)
			}
			if string(back.EncodeCheckpoint()) != string(ck) {
				t.Fatal("checkpoint re-encoding differs")
			}
			if back.NextIno() != tr.NextIno() {
				t.Fatalf("next ino %d, want %d", back.NextIno(), tr.NextIno())
			}
		})
	}
}

func TestOrphanPinning(t *testing.T) {
	tr := build(t, create(2, 1, "f"))
	n := tr.Get(2)
	n.Pinned = true
	if err := tr.Apply(&Record{Op: OpUnlink, Parent: 1, Name: "f", Ino: 2}); err != nil {
		t.Fatal(err)
	}
	if tr.Get(2) == nil {
		t.Fatal("pinned orphan dropped")
	}
	if strings.Contains(string(tr.EncodeCheckpoint()), "f") && tr.Len() != 2 {
		t.Fatal("unexpected table")
	}
	if back, err := DecodeCheckpoint(tr.EncodeCheckpoint()); err != nil || back.Len() != 1 {
		t.Fatalf("orphan persisted in checkpoint (len %d, err %v)", back.Len(), err)
	}
	n.Pinned = false
	if !tr.Release(n) || tr.Get(2) != nil || !n.Dropped {
		t.Fatal("released orphan not dropped")
	}
	if tr.AllocIno() != 3 {
		t.Fatal("inode number reused")
	}
}

func TestDecodeCheckpointCorrupt(t *testing.T) {
	tr := build(t, mkdir(2, 1, "d"), create(3, 2, "f"),
		&Record{Op: OpSetContent, Ino: 3, Size: 3, Content: Content{Inline: []byte("abc")}})
	ck := tr.EncodeCheckpoint()
	for i := range ck {
		bad := append([]byte(nil), ck...)
		bad[i] ^= 0x40
		if _, err := DecodeCheckpoint(bad); !errors.Is(err, ErrBadCheckpoint) {
			t.Fatalf("flipped byte %d: err = %v", i, err)
		}
		if _, err := DecodeCheckpoint(ck[:i]); !errors.Is(err, ErrBadCheckpoint) {
			t.Fatalf("prefix %d: err = %v", i, err)
		}
	}
}

// checkpointRecords are the fixed records behind the checkpoint goldens.
func checkpointRecords() (base, chunked, wide []*Record) {
	var id objid.ID
	for i := range id {
		id[i] = byte(255 - i)
	}
	base = []*Record{
		mkdir(2, 1, "dir"), create(3, 2, "inline"),
		{Op: OpSetContent, Ino: 3, Size: 5, Mtime: FromNs(20), Time: 21, Content: Content{Inline: []byte("bytes")}},
		create(4, 1, "object"),
		{Op: OpSetContent, Ino: 4, Size: 1 << 20, Mtime: FromNs(22), Time: 23, Content: Content{IsObject: true, Object: id}},
		{Op: OpLink, Ino: 4, Parent: 2, Name: "hard", Time: 24},
		{Op: OpSymlink, Ino: 5, Parent: 1, Name: "sl", Target: "dir/inline", Uid: 7, Gid: 8, Time: 25},
		{Op: OpCreate, Ino: 6, Parent: 1, Name: "blk", Mode: S_IFBLK | 0o660, Rdev: 0x0801, Time: 26},
		{Op: OpSetXattr, Ino: 2, Name: "user.x", Value: []byte{1, 2}, Time: 27},
	}
	chunked = append(slices.Clone(base), create(7, 2, "chunked"),
		&Record{Op: OpSetContent, Ino: 7, Size: 3<<20 - 1, Mtime: FromNs(28), Time: 29, Content: Content{Chunks: []objid.ID{HoleChunk, id, {31: 1}}, ChunkShift: 20}})
	wide = append(slices.Clone(chunked),
		&Record{Op: OpSetAttr, Ino: 3, Mask: AttrAtime | AttrMtime, Atime: Timestamp{Sec: 10413792000}, Mtime: Timestamp{Sec: -14831769600, Nsec: 7}, Time: 30},
		&Record{Op: OpSetAttr, Ino: 2, Mask: AttrMtime, Mtime: Timestamp{Sec: math.MaxInt64, Nsec: 999999999}, Time: 31},
		&Record{Op: OpSetContent, Ino: 4, Size: 1 << 20, Mtime: Timestamp{Sec: math.MinInt64}, Time: 32, Content: Content{IsObject: true, Object: id}})
	return base, chunked, wide
}

// rangedRecords extend the wide checkpoint golden's records with range
// records: a chunked file and an object file with pending ranges.
func rangedRecords() []*Record {
	_, _, wide := checkpointRecords()
	return append(slices.Clone(wide),
		&Record{Op: OpWriteRange, Ino: 7, Size: 3 << 20, Mtime: FromNs(33), Time: 34, Content: Content{Ranges: []Range{{Off: 3<<20 - 1, Data: []byte("z")}, {Off: 5, Data: []byte("hdr")}}}},
		&Record{Op: OpWriteRange, Ino: 7, Size: 3<<20 + 4, Mtime: FromNs(35), Time: 36, Content: Content{Ranges: []Range{{Off: 3 << 20, Data: []byte("tail")}}}},
		&Record{Op: OpWriteRange, Ino: 4, Size: 1<<20 + 2, Mtime: FromNs(37), Time: 38, Content: Content{Ranges: []Range{{Off: 1 << 20, Data: []byte("ok")}}}})
}

// times lists every inode's times, for comparing trees (Dump leaves them
// out).
func times(tr *Tree) map[Ino][3]Timestamp {
	m := map[Ino][3]Timestamp{}
	for _, n := range tr.Inodes() {
		m[n.Ino] = [3]Timestamp{n.Atime, n.Mtime, n.Ctime}
	}
	return m
}

// TestCheckpointGolden freezes the checkpoint formats. Version 2 (wide
// times) is what EncodeCheckpoint writes: trees built from fixed records
// must encode to the v2 goldens byte for byte. The version 1 goldens were
// written by earlier builds and must keep decoding to the same trees, times
// included. The chunked goldens were added with chunked content, the wide
// one with version 2; earlier files are unchanged.
func TestCheckpointGolden(t *testing.T) {
	base, chunked, wide := checkpointRecords()
	for _, tc := range []struct {
		golden string
		recs   []*Record
		encode bool // today's encoder must produce it
	}{
		{"checkpoint-v1.golden", base, false},
		{"checkpoint-v1-chunked.golden", chunked, false},
		{"checkpoint-v2-chunked.golden", chunked, true},
		{"checkpoint-v2-wide.golden", wide, true},
		{"checkpoint-v2-ranged.golden", rangedRecords(), true},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			tr := build(t, tc.recs...)
			got := tr.EncodeCheckpoint()
			path := filepath.Join("testdata", tc.golden)
			if tc.encode && os.Getenv("WSFS_UPDATE_GOLDEN") == "1" {
				if err := os.WriteFile(path, []byte(hex.EncodeToString(got)+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with WSFS_UPDATE_GOLDEN=1 once to create it)", err)
			}
			raw, err := hex.DecodeString(strings.TrimSpace(string(want)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.encode && string(raw) != string(got) {
				t.Fatalf("checkpoint encoding changed; version 2 is frozen.\n got %x\nwant %x", got, raw)
			}
			back, err := DecodeCheckpoint(raw)
			if err != nil {
				t.Fatal(err)
			}
			if DumpString(back.Dump(sumContent)) != DumpString(tr.Dump(sumContent)) {
				t.Fatal("golden checkpoint decodes to a different tree")
			}
			if !reflect.DeepEqual(times(back), times(tr)) {
				t.Fatalf("golden checkpoint decodes to different times:\n got %v\nwant %v", times(back), times(tr))
			}
			// A v1 checkpoint re-encodes as v2, which decodes the same.
			again, err := DecodeCheckpoint(back.EncodeCheckpoint())
			if err != nil || !reflect.DeepEqual(times(again), times(tr)) {
				t.Fatalf("re-encoded checkpoint: %v", err)
			}
		})
	}
}

// TestContentValidate covers the content invariants that Apply and both
// decoders enforce.
func TestContentValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Content
		size uint64
		ok   bool
	}{
		{"empty inline", Content{}, 0, true},
		{"inline", Content{Inline: []byte("ab")}, 2, true},
		{"inline short", Content{Inline: []byte("ab")}, 3, false},
		{"object", Content{IsObject: true}, 1 << 30, true},
		{"object with inline bytes", Content{IsObject: true, Inline: []byte("a")}, 1, false},
		{"one chunk", Content{Chunks: make([]objid.ID, 1), ChunkShift: 8}, 1, true},
		{"exact chunks", Content{Chunks: make([]objid.ID, 2), ChunkShift: 8}, 512, true},
		{"one byte more", Content{Chunks: make([]objid.ID, 2), ChunkShift: 8}, 513, false},
		{"empty chunk list", Content{Chunks: []objid.ID{}, ChunkShift: 8}, 0, false},
		{"shift too big", Content{Chunks: make([]objid.ID, 1), ChunkShift: MaxChunkShift + 1}, 1, false},
		{"chunks and object", Content{Chunks: make([]objid.ID, 1), ChunkShift: 8, IsObject: true}, 1, false},
		{"too large", Content{IsObject: true}, MaxFileSize + 1, false},
	} {
		if err := tc.c.Validate(tc.size); (err == nil) != tc.ok {
			t.Errorf("%s: Validate(%d) = %v, want ok=%v", tc.name, tc.size, err, tc.ok)
		}
	}
}

// FuzzDecodeCheckpoint: any input either decodes to a tree that passes
// Check and re-encodes to the same bytes, or fails with ErrBadCheckpoint;
// it never panics. (The CRC makes random damage fail early; the fuzzer also
// learns to fix it up, which exercises the structural checks.)
func FuzzDecodeCheckpoint(f *testing.F) {
	for _, name := range []string{"checkpoint-v1.golden", "checkpoint-v1-chunked.golden", "checkpoint-v2-chunked.golden", "checkpoint-v2-wide.golden", "checkpoint-v2-ranged.golden"} {
		if golden, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			if raw, err := hex.DecodeString(strings.TrimSpace(string(golden))); err == nil {
				f.Add(raw)
			}
		}
	}
	f.Add(New(0o755, 0, 0, 0).EncodeCheckpoint())
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := DecodeCheckpoint(data)
		if err != nil {
			if !errors.Is(err, ErrBadCheckpoint) {
				t.Fatalf("error without ErrBadCheckpoint: %v", err)
			}
			return
		}
		if err := tr.Check(); err != nil {
			t.Fatalf("decoded tree fails Check: %v", err)
		}
		_ = tr.Dump(sumContent)
	})
}

func TestCloneIsIndependent(t *testing.T) {
	tr := New(0o755, 0, 0, 1)
	d := tr.AllocIno()
	if err := tr.Apply(&Record{Op: OpMkdir, Ino: d, Parent: RootIno, Name: "d", Mode: 0o755, Time: 2}); err != nil {
		t.Fatal(err)
	}
	f := tr.AllocIno()
	if err := tr.Apply(&Record{Op: OpCreate, Ino: f, Parent: d, Name: "f", Mode: S_IFREG | 0o644, Time: 3}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Apply(&Record{Op: OpSetXattr, Ino: f, Name: "user.x", Value: []byte("1"), Time: 4}); err != nil {
		t.Fatal(err)
	}
	c := tr.Clone()
	want := string(tr.EncodeCheckpoint())
	if string(c.EncodeCheckpoint()) != want || c.NextIno() != tr.NextIno() || c.Check() != nil {
		t.Fatal("clone differs from its tree")
	}
	// Changing the original leaves the clone as it was, and back.
	if err := tr.Apply(&Record{Op: OpRename, Parent: d, Name: "f", NewParent: RootIno, NewName: "g", Ino: f, Time: 5}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Apply(&Record{Op: OpRemoveXattr, Ino: f, Name: "user.x", Time: 6}); err != nil {
		t.Fatal(err)
	}
	if string(c.EncodeCheckpoint()) != want {
		t.Fatal("the clone changed with its original")
	}
	if err := c.Apply(&Record{Op: OpUnlink, Parent: d, Name: "f", Ino: f, Time: 7}); err != nil {
		t.Fatal(err)
	}
	if tr.Get(f) == nil || tr.Get(f).Nlink != 1 {
		t.Fatal("the original changed with its clone")
	}
}
