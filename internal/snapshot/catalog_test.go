package snapshot

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestEntryGolden(t *testing.T) {
	in := Info{ID: 7, Label: "before refactor", Time: time.Unix(1764547200, 123456789), Group: 4242, Root: objid.Sum([]byte("root"))}
	b := EncodeEntry(in)
	path := filepath.Join("testdata", "entry-v1.golden")
	if *update {
		noErr(t, os.MkdirAll("testdata", 0o755))
		noErr(t, os.WriteFile(path, b, 0o644))
	}
	want, err := os.ReadFile(path)
	noErr(t, err)
	if !bytes.Equal(b, want) {
		t.Fatalf("entry encoding changed")
	}
	got, err := DecodeEntry(want)
	noErr(t, err)
	if got.ID != in.ID || got.Label != in.Label || !got.Time.Equal(in.Time) || got.Group != in.Group || got.Root != in.Root {
		t.Fatalf("decoded %+v, want %+v", got, in)
	}
	for i := range want {
		bad := bytes.Clone(want)
		bad[i] ^= 0x10
		if _, err := DecodeEntry(bad); !errors.Is(err, ErrBadEntry) {
			t.Fatalf("flipped byte %d: err = %v", i, err)
		}
	}
	if _, err := DecodeEntry(want[:len(want)-1]); !errors.Is(err, ErrBadEntry) {
		t.Fatalf("truncated: %v", err)
	}
}

// TestEntryGoldenV2: an entry with an agent state copy is version 2
// (frozen in testdata/entry-v2.golden); the version 1 golden above still
// decodes, with no agent state.
func TestEntryGoldenV2(t *testing.T) {
	in := Info{ID: 8, Label: "agent", Time: time.Unix(1764547200, 5), Group: 9, Root: objid.Sum([]byte("root")),
		Agent: &AgentCopy{Size: 3<<20 + 17, Content: namespace.Content{ChunkShift: AgentChunkShift,
			Chunks: []objid.ID{objid.Sum([]byte("a")), objid.Sum([]byte("b")), objid.Sum([]byte("a")), objid.Sum([]byte("c"))}}}}
	b := EncodeEntry(in)
	path := filepath.Join("testdata", "entry-v2.golden")
	if *update {
		noErr(t, os.WriteFile(path, b, 0o644))
	}
	want, err := os.ReadFile(path)
	noErr(t, err)
	if !bytes.Equal(b, want) {
		t.Fatalf("entry encoding changed")
	}
	got, err := DecodeEntry(want)
	noErr(t, err)
	if got.ID != in.ID || got.Label != in.Label || got.Group != in.Group || got.Root != in.Root || got.Agent == nil ||
		got.Agent.Size != in.Agent.Size || !slices.Equal(got.Agent.Content.Chunks, in.Agent.Content.Chunks) || got.Agent.Content.ChunkShift != AgentChunkShift {
		t.Fatalf("decoded %+v, want %+v", got, in)
	}
	for i := range want {
		bad := bytes.Clone(want)
		bad[i] ^= 0x10
		if _, err := DecodeEntry(bad); !errors.Is(err, ErrBadEntry) {
			t.Fatalf("flipped byte %d: err = %v", i, err)
		}
	}
	old, err := os.ReadFile(filepath.Join("testdata", "entry-v1.golden"))
	noErr(t, err)
	v1, err := DecodeEntry(old)
	noErr(t, err)
	if v1.Agent != nil {
		t.Fatalf("a version 1 entry decoded with agent state %+v", v1.Agent)
	}
	// Without agent state the entry stays version 1 (older wsfs reads it).
	if b := EncodeEntry(Info{ID: 1, Time: time.Unix(0, 0)}); b[len(entryMagic)] != entryVersion {
		t.Fatalf("an entry without agent state is version %d", b[len(entryMagic)])
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(EncodeEntry(Info{ID: 1, Time: time.Unix(0, 0)}))
	f.Add(EncodeEntry(Info{ID: 2, Time: time.Unix(3, 4), Agent: &AgentCopy{Size: 5, Content: namespace.Content{ChunkShift: AgentChunkShift, Chunks: []objid.ID{objid.Sum([]byte("x"))}}}}))
	f.Add(EncodeEntry(Info{ID: 9, Label: "x", Time: time.Unix(-5, 3), Group: 3}))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := DecodeEntry(data)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatal(err)
			}
			return
		}
		if !bytes.Equal(EncodeEntry(in), data) {
			// Non-minimal varints could decode; they must still decode
			// to the same entry after re-encoding.
			in2, err := DecodeEntry(EncodeEntry(in))
			if err != nil || in2.ID != in.ID || in2.Label != in.Label || !in2.Time.Equal(in.Time) || (in2.Agent == nil) != (in.Agent == nil) ||
				(in.Agent != nil && (in2.Agent.Size != in.Agent.Size || !slices.Equal(in2.Agent.Content.Chunks, in.Agent.Content.Chunks))) {
				t.Fatalf("re-encoding differs: %+v %+v %v", in, in2, err)
			}
		}
	})
}

// catalogEnv is a workspace with one file and a helper to snapshot it.
func catalogEnv(t *testing.T) (*env, func(label string, at time.Time) Info) {
	e := memEnv(t)
	w := e.open("w")
	writeFile(t, w, workspace.RootIno, "f", []byte("hello"))
	noErr(t, w.Close())
	return e, func(label string, at time.Time) Info {
		t.Helper()
		in, _, err := CreateOffline(e.opts("w"), label, at)
		noErr(t, err)
		return in
	}
}

func ids(t *testing.T, e *env) []uint64 {
	t.Helper()
	all, err := List(e.fs, e.wsDir("w"))
	noErr(t, err)
	var out []uint64
	for _, in := range all {
		out = append(out, in.ID)
	}
	return out
}

func TestCatalogCreateListRemove(t *testing.T) {
	e, take := catalogEnv(t)
	if got := ids(t, e); len(got) != 0 {
		t.Fatalf("new workspace lists %v", got)
	}
	t0 := time.Unix(1764547200, 0)
	a := take("first", t0)
	b := take("", t0.Add(time.Second))
	if a.ID != 1 || b.ID != 2 || a.Label != "first" {
		t.Fatalf("ids %d, %d label %q", a.ID, b.ID, a.Label)
	}
	// The tree did not change: both snapshots name the same root.
	if a.Root != b.Root || a.Group != b.Group {
		t.Fatalf("unchanged workspace: roots %v %v groups %d %d", a.Root, b.Root, a.Group, b.Group)
	}
	got, err := Get(e.fs, e.wsDir("w"), 1)
	noErr(t, err)
	if got.Root != a.Root || !got.Time.Equal(t0) {
		t.Fatalf("Get = %+v", got)
	}
	if _, err := Get(e.fs, e.wsDir("w"), 3); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(3) = %v", err)
	}
	// Removing the largest ID never lets it be reused.
	noErr(t, Remove(e.fs, e.wsDir("w"), 2))
	if c := take("third", t0); c.ID != 3 {
		t.Fatalf("after removing 2, the next id is %d, want 3", c.ID)
	}
	noErr(t, Remove(e.fs, e.wsDir("w"), 3))
	noErr(t, Remove(e.fs, e.wsDir("w"), 1))
	if c := take("", t0); c.ID != 4 {
		t.Fatalf("after removing everything, the next id is %d, want 4", c.ID)
	}
	if err := Remove(e.fs, e.wsDir("w"), 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if _, _, err := CreateOffline(e.opts("w"), string(make([]byte, MaxLabel+1)), t0); err == nil {
		t.Fatal("a label over MaxLabel was accepted")
	}
}

func TestPrune(t *testing.T) {
	now := time.Unix(1764547200, 0)
	for _, tc := range []struct {
		name string
		r    Retention
		keep []uint64
		err  bool
	}{
		{"keep last 2", Retention{KeepLast: 2}, []uint64{4, 5}, false},
		{"keep within 90m", Retention{KeepWithin: 90 * time.Minute}, []uint64{4, 5}, false},
		{"keep within 3h30m", Retention{KeepWithin: 210 * time.Minute}, []uint64{2, 3, 4, 5}, false},
		{"either rule keeps", Retention{KeepLast: 1, KeepWithin: 150 * time.Minute}, []uint64{3, 4, 5}, false},
		{"keep last more than there are", Retention{KeepLast: 10}, []uint64{1, 2, 3, 4, 5}, false},
		{"no rule", Retention{}, []uint64{1, 2, 3, 4, 5}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, take := catalogEnv(t)
			// Snapshots taken 4h, 3h, 2h, 1h and 0h before now.
			for i := 4; i >= 0; i-- {
				take("", now.Add(-time.Duration(i)*time.Hour))
			}
			_, err := Prune(e.fs, e.wsDir("w"), tc.r, now)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			if got := ids(t, e); !equalIDs(got, tc.keep) {
				t.Fatalf("kept %v, want %v", got, tc.keep)
			}
		})
	}
}

func equalIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseRef(t *testing.T) {
	for ref, want := range map[string]uint64{"ws-1@3": 3, "a@18446744073709551615": 1<<64 - 1} {
		if _, id, err := ParseRef(ref); err != nil || id != want {
			t.Errorf("%s: %d, %v", ref, id, err)
		}
	}
	for _, bad := range []string{"ws", "ws@", "@1", "ws@0", "ws@x", "ws@-1"} {
		if _, _, err := ParseRef(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestCreateRefusesServedWorkspace: the offline path takes the workspace
// lock, so it fails while the workspace is open elsewhere.
func TestCreateRefusesServedWorkspace(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	defer w.Close()
	if _, _, err := CreateOffline(e.opts("w"), "", time.Now()); err == nil {
		t.Fatal("snapshot of a served workspace succeeded offline")
	}
}

// TestForEachObject: every object a snapshot needs is listed (its tree
// loads from a pool holding only those objects plus nothing else), and
// objects only a removed snapshot needed are not.
func TestForEachObject(t *testing.T) {
	e := memEnv(t)
	w := e.open("w")
	d := must[workspace.Attr](t)(w.Mkdir(workspace.RootIno, "d", 0o755, me))
	writeFile(t, w, d.Ino, "big", bytes.Repeat([]byte("x"), 100<<10)) // one object
	writeFile(t, w, d.Ino, "huge", bytes.Repeat([]byte("y"), 3<<20))  // chunks
	writeFile(t, w, workspace.RootIno, "small", []byte("s"))
	noErr(t, w.Close())
	a := must[Info](t)(func() (Info, error) { in, _, err := CreateOffline(e.opts("w"), "a", time.Now()); return in, err }())
	listed := map[objid.ID]bool{}
	noErr(t, ForEachObject(e.fs, e.wsDir("w"), e.pool, func(id objid.ID) { listed[id] = true }))
	// 1 root + 2 manifests + 1 object + 3 chunks (equal chunks dedup to 1).
	var need []objid.ID
	noErr(t, manifest.ForEachObject(&manifest.PoolStore{Pool: e.pool}, a.Root, nil, func(id objid.ID) { need = append(need, id) }))
	for _, id := range need {
		if !listed[id] {
			t.Fatalf("object %s needed by the snapshot is not listed", id)
		}
	}
	if len(listed) != 5 {
		t.Fatalf("listed %d objects, want 5 (root, 2 manifests, 1 object, 1 distinct chunk)", len(listed))
	}
	noErr(t, Remove(e.fs, e.wsDir("w"), a.ID))
	n := 0
	noErr(t, ForEachObject(e.fs, e.wsDir("w"), e.pool, func(objid.ID) { n++ }))
	if n != 0 {
		t.Fatalf("after removing the only snapshot, %d objects listed", n)
	}
}

// TestRemoveDamagedEntry: a catalog entry with a flipped byte makes List
// fail (naming the file and the way out), and Remove of that ID removes
// it, after which the catalog lists again.
func TestRemoveDamagedEntry(t *testing.T) {
	e, create := catalogEnv(t)
	create("a", time.Now())
	b := create("b", time.Now())
	path := filepath.Join(Dir(e.wsDir("w")), entryName(b.ID))
	data, err := vfs.ReadFile(e.fs, path)
	noErr(t, err)
	data[len(data)/2] ^= 0xff
	noErr(t, vfs.Publish(e.fs, path, true, func(f vfs.File) error { _, err := f.Write(data); return err }))
	_, err = List(e.fs, e.wsDir("w"))
	if !errors.Is(err, ErrBadEntry) || !strings.Contains(err.Error(), "wsfs snapshot rm w@2") {
		t.Fatalf("List of a damaged catalog: %v", err)
	}
	noErr(t, Remove(e.fs, e.wsDir("w"), b.ID))
	if got := ids(t, e); !equalIDs(got, []uint64{1}) {
		t.Fatalf("after removing the damaged entry: %v", got)
	}
	if in := create("c", time.Now()); in.ID != 3 {
		t.Fatalf("next ID %d, want 3 (IDs are never reused)", in.ID)
	}
}

// TestLabels: a label that 'snapshot ls' could not print on one line is
// refused before anything is written; printable ones (UTF-8 included)
// are kept as given.
func TestLabels(t *testing.T) {
	e, _ := catalogEnv(t)
	for _, tc := range []struct {
		label string
		ok    bool
	}{
		{"before refactor", true},
		{"über-test ✓", true},
		{"", true},
		{strings.Repeat("x", MaxLabel), true},
		{strings.Repeat("x", MaxLabel+1), false},
		{"a\nws@99  2026-01-01T00:00:00Z", false},
		{"tab\there", false},
		{"esc\x1b[2J", false},
		{"nul\x00", false},
		{"\xff\xfe", false},
		{"del\x7f", false},
	} {
		err := ValidateLabel(tc.label)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateLabel(%q) = %v, want ok=%v", tc.label, err, tc.ok)
		}
		before := ids(t, e)
		in, _, err := CreateOffline(e.opts("w"), tc.label, time.Now())
		if (err == nil) != tc.ok {
			t.Errorf("CreateOffline(label %q) = %v, want ok=%v", tc.label, err, tc.ok)
		}
		if err != nil && len(ids(t, e)) != len(before) {
			t.Errorf("label %q refused, but an entry was published", tc.label)
		}
		if err == nil && in.Label != tc.label {
			t.Errorf("label %q stored as %q", tc.label, in.Label)
		}
	}
}

// TestLabelsReadByPullAt: a new label that 'wsfs pull --at' would read as
// something else (an ID, a duration ago, an RFC 3339 time) is refused
// before anything is written, since no --at could ever select it by
// label; labels that merely contain digits are kept.
func TestLabelsReadByPullAt(t *testing.T) {
	e, _ := catalogEnv(t)
	for _, tc := range []struct {
		label string
		ok    bool
	}{
		{"7", false},
		{"0042", false},
		{"2h", false},
		{"90m", false},
		{"2026-01-01T00:00:00Z", false},
		{"v7", true},
		{"2026-01-01", true},
		{"7 files", true},
	} {
		before := ids(t, e)
		_, _, err := CreateOffline(e.opts("w"), tc.label, time.Now())
		if (err == nil) != tc.ok {
			t.Errorf("CreateOffline(label %q) = %v, want ok=%v", tc.label, err, tc.ok)
		}
		if err != nil && (len(ids(t, e)) != len(before) || !strings.Contains(err.Error(), "pull --at")) {
			t.Errorf("label %q refused with %v (want it to name pull --at), entries %d then %d", tc.label, err, len(before), len(ids(t, e)))
		}
		if err := ValidateNewLabel(tc.label); (err == nil) != tc.ok {
			t.Errorf("ValidateNewLabel(%q) = %v, want ok=%v", tc.label, err, tc.ok)
		}
	}
}
