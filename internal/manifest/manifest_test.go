package manifest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
)

var update = flag.Bool("update", false, "rewrite golden files")

// tb builds namespace trees from records, failing the test on error.
type tb struct {
	t    testing.TB
	tree *namespace.Tree
	now  int64
}

func newTB(t testing.TB) *tb {
	// Times include negative and sub-second values, so the sec/nsec split
	// is exercised.
	return &tb{t: t, tree: namespace.New(0o755, 0, 0, -1_500_000_001), now: 1_700_000_000_123_456_789}
}

func (b *tb) apply(r *namespace.Record) namespace.Ino {
	b.t.Helper()
	b.now += 1_000_001
	if r.Time == 0 {
		r.Time = b.now
	}
	if err := b.tree.Apply(r); err != nil {
		b.t.Fatal(err)
	}
	return r.Ino
}

func (b *tb) mkdir(parent namespace.Ino, name string) namespace.Ino {
	return b.apply(&namespace.Record{Op: namespace.OpMkdir, Ino: b.tree.AllocIno(), Parent: parent, Name: name, Mode: 0o750, Uid: 7, Gid: 8})
}

func (b *tb) file(parent namespace.Ino, name string, data []byte) namespace.Ino {
	ino := b.apply(&namespace.Record{Op: namespace.OpCreate, Ino: b.tree.AllocIno(), Parent: parent, Name: name, Mode: namespace.S_IFREG | 0o644, Uid: 1000, Gid: 1000})
	b.content(ino, namespace.Content{Inline: data}, uint64(len(data)))
	return ino
}

func (b *tb) content(ino namespace.Ino, c namespace.Content, size uint64) {
	b.apply(&namespace.Record{Op: namespace.OpSetContent, Ino: ino, Size: size, Mtime: namespace.FromNs(b.now - 5), Content: c})
}

// sample is a tree with every kind of entry: nested directories, inline,
// object and chunked contents (with a hole), a symlink, a fifo, a device,
// a hard link and xattrs.
func sample(t testing.TB) *tb {
	b := newTB(t)
	src := b.mkdir(namespace.RootIno, "src")
	b.file(src, "main.go", []byte("package main\n"))
	b.file(src, "empty", nil)
	obj := b.file(namespace.RootIno, "big.bin", nil)
	b.content(obj, namespace.Content{IsObject: true, Object: objid.Sum([]byte("one object"))}, 10)
	ch := b.file(namespace.RootIno, "chunked", nil)
	b.content(ch, namespace.Content{ChunkShift: 8, Chunks: []objid.ID{objid.Sum(bytes.Repeat([]byte{1}, 256)), namespace.HoleChunk}}, 300)
	b.apply(&namespace.Record{Op: namespace.OpSymlink, Ino: b.tree.AllocIno(), Parent: src, Name: "link", Target: "../big.bin", Uid: 1, Gid: 2})
	b.apply(&namespace.Record{Op: namespace.OpCreate, Ino: b.tree.AllocIno(), Parent: namespace.RootIno, Name: "fifo", Mode: namespace.S_IFIFO | 0o600})
	b.apply(&namespace.Record{Op: namespace.OpCreate, Ino: b.tree.AllocIno(), Parent: namespace.RootIno, Name: "dev", Mode: namespace.S_IFCHR | 0o600, Rdev: 0x0103})
	b.apply(&namespace.Record{Op: namespace.OpLink, Ino: obj, Parent: src, Name: "big-again"})
	b.apply(&namespace.Record{Op: namespace.OpSetXattr, Ino: src, Name: "user.b", Value: []byte("2")})
	b.apply(&namespace.Record{Op: namespace.OpSetXattr, Ino: src, Name: "user.a", Value: []byte{0, 1}})
	deep := b.mkdir(b.mkdir(src, "a"), "b")
	b.file(deep, "leaf.txt", []byte("leaf"))
	return b
}

func TestRoundTripExact(t *testing.T) {
	b := sample(t)
	st := &MemStore{}
	id, stats, err := Build(b.tree, st)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Dirs != 4 || st.Len() != 5 {
		t.Fatalf("stats %+v, %d objects; want 4 directories and 5 objects", stats, st.Len())
	}
	got, r, err := LoadTree(st, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.NextIno != uint64(b.tree.NextIno()) {
		t.Fatalf("next ino %d, want %d", r.NextIno, b.tree.NextIno())
	}
	// The checkpoint encoding covers every persistent field: the loaded
	// tree must encode to the same bytes.
	if !bytes.Equal(got.EncodeCheckpoint(), b.tree.EncodeCheckpoint()) {
		t.Fatalf("round trip differs:\n%s", namespace.DiffDumps(b.tree.Dump(cid), got.Dump(cid)))
	}
	// Building again gives the same ID.
	id2, _, err := Build(got, &MemStore{})
	if err != nil || id2 != id {
		t.Fatalf("rebuild: %v, %v (want %v)", id2, err, id)
	}
}

func cid(n *namespace.Inode) objid.ID {
	return ContentID(&n.Content)
}

func TestUnchangedSubtreeKeepsID(t *testing.T) {
	b := newTB(t)
	a := b.mkdir(namespace.RootIno, "a")
	x := b.mkdir(a, "x")
	f := b.file(x, "f", []byte("1"))
	other := b.mkdir(namespace.RootIno, "other")
	b.file(other, "g", []byte("2"))
	ids := func() map[string]objid.ID {
		st := &MemStore{}
		root, _, err := Build(b.tree, st)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := ReadRoot(st, root)
		out := map[string]objid.ID{"/": root, "/.": r.Entry.Dir}
		var walk func(p string, id objid.ID)
		walk = func(p string, id objid.ID) {
			es, err := ReadDir(st, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if e.IsDir() {
					out[join(p, e.Name)] = e.Dir
					walk(join(p, e.Name), e.Dir)
				}
			}
		}
		walk("/", r.Entry.Dir)
		return out
	}
	before := ids()
	b.content(f, namespace.Content{Inline: []byte("changed")}, 7)
	after := ids()
	for p, changed := range map[string]bool{"/": true, "/.": true, "/a": true, "/a/x": true, "/other": false} {
		if (before[p] != after[p]) != changed {
			t.Errorf("%s: id %v -> %v, changed should be %v", p, before[p], after[p], changed)
		}
	}
}

// goldenTree is a small fixed tree; its objects are frozen in testdata.
func goldenObjects(t testing.TB) (root []byte, dirs [][]byte) {
	b := sample(t)
	st := &MemStore{}
	id, _, err := Build(b.tree, st)
	if err != nil {
		t.Fatal(err)
	}
	root, _ = st.Get(id)
	r, _ := DecodeRoot(root)
	var walk func(id objid.ID)
	walk = func(id objid.ID) {
		d, _ := st.Get(id)
		dirs = append(dirs, d)
		es, _ := DecodeDir(d)
		for _, e := range es {
			if e.IsDir() {
				walk(e.Dir)
			}
		}
	}
	walk(r.Entry.Dir)
	return root, dirs
}

// TestGolden freezes the format: the sample tree's root object and
// directory manifests must encode to the bytes in testdata (regenerate
// only with a new format version: go test -run TestGolden -update).
func TestGolden(t *testing.T) {
	root, dirs := goldenObjects(t)
	files := map[string][]byte{"root-v1.golden": root}
	for i, d := range dirs {
		files[fmt.Sprintf("dir%d-v1.golden", i)] = d
	}
	for name, b := range files {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s: encoding changed (%d bytes, golden %d)", name, len(b), len(want))
		}
	}
	// The golden bytes decode, whatever the encoder does today.
	want, err := os.ReadFile(filepath.Join("testdata", "root-v1.golden"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRoot(want)
	if err != nil || r.Entry.Ino != 1 || r.Entry.Atime != (Time{Sec: -2, Nsec: 499_999_999}) {
		t.Fatalf("golden root: %+v, %v", r, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	root, dirs := goldenObjects(t)
	src := dirs[1] // /src: entries of every kind
	cases := map[string][]byte{
		"empty":          nil,
		"bad magic":      append([]byte("WSFSMDR2"), src[8:]...),
		"truncated":      src[:len(src)-1],
		"trailing":       append(append([]byte{}, src...), 0),
		"root as dir":    root,
		"huge count":     append([]byte(dirMagic), 1, 0xff, 0xff, 0xff, 0xff, 0x0f),
		"wrong version":  append([]byte(dirMagic), 2, 0),
		"unsorted names": EncodeDirUnchecked([]Entry{{Name: "b", Ino: 2, Mode: namespace.S_IFIFO, Nlink: 1}, {Name: "a", Ino: 3, Mode: namespace.S_IFIFO, Nlink: 1}}),
		"dotdot":         EncodeDirUnchecked([]Entry{{Name: "..", Ino: 2, Mode: namespace.S_IFIFO, Nlink: 1}}),
		"slash":          EncodeDirUnchecked([]Entry{{Name: "a/b", Ino: 2, Mode: namespace.S_IFIFO, Nlink: 1}}),
		"nlink 0":        EncodeDirUnchecked([]Entry{{Name: "a", Ino: 2, Mode: namespace.S_IFIFO}}),
		"ino 1":          EncodeDirUnchecked([]Entry{{Name: "a", Ino: 1, Mode: namespace.S_IFIFO, Nlink: 1}}),
		"inline size":    EncodeDirUnchecked([]Entry{{Name: "a", Ino: 2, Mode: namespace.S_IFREG, Nlink: 1, Size: 3, Content: namespace.Content{Inline: []byte("ab")}}}),
		"bad type":       EncodeDirUnchecked([]Entry{{Name: "a", Ino: 2, Mode: 0o170000, Nlink: 1}}),
		"nsec overflow":  EncodeDirUnchecked([]Entry{{Name: "a", Ino: 2, Mode: namespace.S_IFIFO, Nlink: 1, Mtime: Time{Nsec: 1e9}}}),
	}
	for name, b := range cases {
		if _, err := DecodeDir(b); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: err = %v, want ErrBadManifest", name, err)
		}
	}
	if _, err := DecodeRoot(src); !errors.Is(err, ErrBadManifest) {
		t.Errorf("dir as root: err = %v", err)
	}
}

// EncodeDirUnchecked encodes without EncodeDir's order check (tests only).
func EncodeDirUnchecked(entries []Entry) []byte {
	b := []byte(dirMagic)
	b = append(b, version, byte(len(entries)))
	for i := range entries {
		b = appendEntry(b, &entries[i])
	}
	return b
}

func TestLoadTreeRejectsBadTrees(t *testing.T) {
	st := &MemStore{}
	put := func(b []byte) objid.ID { id, _ := st.Put(b); return id }
	now := Time{Sec: 1}
	rootOf := func(dir objid.ID, nlink uint32) objid.ID {
		return put(EncodeRoot(&Root{NextIno: 10, Entry: Entry{Ino: 1, Mode: namespace.S_IFDIR | 0o755, Nlink: nlink, Atime: now, Mtime: now, Ctime: now, Dir: dir}}))
	}
	empty := put(EncodeDir(nil))
	sub := Entry{Name: "d", Ino: 2, Mode: namespace.S_IFDIR | 0o755, Nlink: 2, Dir: empty}
	cases := map[string]objid.ID{
		// The same directory inode named twice.
		"dir twice": rootOf(put(EncodeDir([]Entry{sub, {Name: "e", Ino: 2, Mode: sub.Mode, Nlink: 2, Dir: empty}})), 4),
		// Root nlink wrong for one subdirectory.
		"nlink": rootOf(put(EncodeDir([]Entry{sub})), 2),
		// A hard link whose two entries disagree.
		"link mismatch": rootOf(put(EncodeDir([]Entry{
			{Name: "a", Ino: 3, Mode: namespace.S_IFREG | 0o644, Nlink: 2, Content: namespace.Content{Inline: []byte{}}},
			{Name: "b", Ino: 3, Mode: namespace.S_IFREG | 0o600, Nlink: 2, Content: namespace.Content{Inline: []byte{}}}})), 2),
		// An inode number at or above NextIno.
		"ino above next": rootOf(put(EncodeDir([]Entry{{Name: "a", Ino: 10, Mode: namespace.S_IFIFO, Nlink: 1}})), 2),
		// A missing manifest.
		"missing": rootOf(objid.Sum([]byte("nothing")), 2),
	}
	for name, id := range cases {
		if _, _, err := LoadTree(st, id); err == nil {
			t.Errorf("%s: LoadTree accepted it", name)
		}
	}
	if _, _, err := LoadTree(st, rootOf(put(EncodeDir([]Entry{sub})), 3)); err != nil {
		t.Fatalf("valid tree refused: %v", err)
	}
}

// TestWideTimes: times outside the int64-nanosecond range (years 1677 and
// 2262) survive a manifest round trip, as they do the log.
func TestWideTimes(t *testing.T) {
	for _, tm := range []Time{{Sec: 0}, {Sec: -1, Nsec: 999_999_999}, {Sec: 10_413_792_000}, {Sec: -15_000_000_000, Nsec: 7}, {Sec: 1 << 62, Nsec: 1}} {
		e := Entry{Name: "f", Ino: 2, Mode: namespace.S_IFIFO, Nlink: 1, Atime: tm, Mtime: tm, Ctime: tm}
		got, err := DecodeDir(EncodeDir([]Entry{e}))
		if err != nil {
			t.Fatalf("%+v: %v", tm, err)
		}
		if len(got) != 1 || got[0].Atime != tm || got[0].Mtime != tm || got[0].Ctime != tm {
			t.Errorf("%+v: decoded %+v", tm, got)
		}
	}
}

func FuzzDecodeDir(f *testing.F) {
	root, dirs := goldenObjects(f)
	for _, d := range dirs {
		f.Add(d)
	}
	f.Add(root)
	f.Add(EncodeDir(rangedEntries()))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, dec := range []func([]byte) (any, []byte, error){
			func(b []byte) (any, []byte, error) {
				es, err := DecodeDir(b)
				if err != nil {
					return nil, nil, err
				}
				return es, EncodeDir(es), nil
			},
			func(b []byte) (any, []byte, error) {
				r, err := DecodeRoot(b)
				if err != nil {
					return nil, nil, err
				}
				return r, EncodeRoot(r), nil
			},
		} {
			v, enc, err := dec(data)
			if err != nil {
				if !errors.Is(err, ErrBadManifest) {
					t.Fatalf("error not wrapping ErrBadManifest: %v", err)
				}
				continue
			}
			// What decodes re-encodes (EncodeDir would panic on an order
			// the decoder let through) and decodes to the same value.
			v2, _, err := dec(enc)
			if err != nil || !reflect.DeepEqual(normalize(v), normalize(v2)) {
				t.Fatalf("re-encoding differs: %v\n%#v\n%#v", err, v, v2)
			}
		}
	})
}

// golden returns testdata/name, first writing b there under -update.
func golden(t *testing.T, name string, b []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// normalize maps empty and nil slices together for comparison.
func normalize(v any) string { return fmt.Sprintf("%v", v) }

func TestRefV2Golden(t *testing.T) {
	b := EncodeRefBase(objid.Sum([]byte("root")), 12345, 1000)
	want := golden(t, "ref-v2.golden", b)
	if !bytes.Equal(b, want) {
		t.Fatal("manifest reference v2 encoding changed")
	}
	root, next, base, err := DecodeRefBase(want)
	if err != nil || root != objid.Sum([]byte("root")) || next != 12345 || base != 1000 || !IsRef(want) {
		t.Fatalf("decode: %v %d %d %v", root, next, base, err)
	}
	// Version 1 decodes with base 0; base 0 encodes as version 1.
	v1, err := os.ReadFile(filepath.Join("testdata", "ref-v1.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, base, err := DecodeRefBase(v1); err != nil || base != 0 {
		t.Fatalf("v1 through DecodeRefBase: base %d, %v", base, err)
	}
	if !bytes.Equal(EncodeRefBase(objid.Sum([]byte("root")), 12345, 0), v1) {
		t.Fatal("EncodeRefBase with base 0 is not version 1")
	}
	for _, bad := range [][]byte{want[:len(want)-1], append(bytes.Clone(want), 0), EncodeRefBase(objid.ID{}, 3, 1)} {
		if _, _, _, err := DecodeRefBase(bad); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestRefGolden(t *testing.T) {
	b := EncodeRef(objid.Sum([]byte("root")), 12345)
	want := golden(t, "ref-v1.golden", b)
	if !bytes.Equal(b, want) {
		t.Fatal("manifest reference encoding changed")
	}
	root, next, err := DecodeRef(want)
	if err != nil || root != objid.Sum([]byte("root")) || next != 12345 || !IsRef(want) {
		t.Fatalf("decode: %v %d %v", root, next, err)
	}
	for _, bad := range [][]byte{want[:len(want)-1], append(bytes.Clone(want), 0), []byte("WSFSNS\x00\x01")} {
		if _, _, err := DecodeRef(bad); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if IsRef([]byte("WSFSNS\x00\x01rest")) {
		t.Fatal("a namespace checkpoint is taken for a reference")
	}
}

// rangedEntries is a directory with files whose content has pending
// ranges (content kind 4), over an object base and over a chunked base;
// its encoding is frozen in testdata/dir-ranged-v1.golden (added with
// kind 4; the other goldens are unchanged).
func rangedEntries() []Entry {
	id := objid.Sum([]byte("base"))
	return []Entry{
		{Name: "obj", Ino: 2, Mode: namespace.S_IFREG | 0o644, Nlink: 1, Size: 70_004,
			Content: namespace.Content{IsObject: true, Object: id, BaseSize: 70_000,
				Ranges: []namespace.Range{{Off: 24, Data: []byte{9}}, {Off: 70_000, Data: []byte("tail")}}}},
		{Name: "wal", Ino: 3, Mode: namespace.S_IFREG | 0o600, Nlink: 1, Size: 3<<20 + 2,
			Content: namespace.Content{Chunks: []objid.ID{id, namespace.HoleChunk, id}, ChunkShift: 20, BaseSize: 3 << 20,
				Ranges: []namespace.Range{{Off: 3 << 20, Data: []byte("ok")}}}},
	}
}

func TestGoldenRanged(t *testing.T) {
	b := EncodeDir(rangedEntries())
	want := golden(t, "dir-ranged-v1.golden", b)
	if !bytes.Equal(b, want) {
		t.Errorf("ranged directory: encoding changed (%d bytes, golden %d)", len(b), len(want))
	}
	got, err := DecodeDir(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rangedEntries()) {
		t.Fatalf("golden decodes to\n%+v\nwant\n%+v", got, rangedEntries())
	}
	// A range past the size, and ranged content as a base, are refused.
	bad := rangedEntries()[:1]
	bad[0].Size = 70_003
	if _, err := DecodeDir(EncodeDirUnchecked(bad)); !errors.Is(err, ErrBadManifest) {
		t.Errorf("range past the size: err = %v", err)
	}
	if ContentID(&got[0].Content) == ContentID(&namespace.Content{IsObject: true, Object: got[0].Content.Object}) {
		t.Errorf("ContentID ignores the ranges")
	}
}
