package stress

import (
	"math"
	"path"
	"reflect"
	"testing"
)

func TestGenerateFilesCountsAndBytes(t *testing.T) {
	for _, name := range ProfileNames {
		p := Profiles[name]
		for _, seed := range []int64{1, 2, 42} {
			for ws := range 3 {
				set := GenerateFiles(p, seed, ws)
				if len(set.Files) != p.Files {
					t.Fatalf("%s seed %d ws %d: %d files, want %d", name, seed, ws, len(set.Files), p.Files)
				}
				got := set.TotalBytes()
				if dev := math.Abs(float64(got-p.Bytes)) / float64(p.Bytes); dev > 0.10 {
					t.Errorf("%s seed %d ws %d: %d bytes, %.1f%% from the target %d", name, seed, ws, got, dev*100, p.Bytes)
				}
			}
		}
	}
}

func TestProfilesScale(t *testing.T) {
	seed, small, tiny := Profiles["seed"], Profiles["small"], Profiles["tiny"]
	if small.Files*10 != seed.Files || tiny.Files*100 != seed.Files ||
		small.Bytes*10 != seed.Bytes || tiny.Bytes*100 != seed.Bytes {
		t.Fatalf("profiles do not scale by 1/10 and 1/100: seed %+v small %+v tiny %+v", seed, small, tiny)
	}
}

func TestGenerateFilesSizeMix(t *testing.T) {
	for _, name := range ProfileNames {
		set := GenerateFiles(Profiles[name], 1, 0)
		var small, big int
		var largest int64
		for _, f := range set.Files {
			if f.Size <= 0 || f.Size > MaxFileSize {
				t.Fatalf("%s: %s has size %d outside (0, %d]", name, f.Path, f.Size, MaxFileSize)
			}
			if f.Size < SmallFileLimit {
				small++
			}
			if f.Size >= 1<<20 {
				big++
			}
			largest = max(largest, f.Size)
		}
		n := len(set.Files)
		// "Most under 4 KiB": the mix puts 70 % there.
		if frac := float64(small) / float64(n); frac < 0.65 || frac > 0.75 {
			t.Errorf("%s: %.0f%% of files under 4 KiB, want about 70%%", name, frac*100)
		}
		// "A few up to 8 MiB": at least one file of a MiB or more, and few.
		if big == 0 || float64(big)/float64(n) > 0.05 {
			t.Errorf("%s: %d files >= 1 MiB of %d, want a few (1..5%%)", name, big, n)
		}
		if name == "seed" && largest < 4<<20 {
			t.Errorf("seed: largest file %d bytes, want some close to 8 MiB", largest)
		}
	}
}

func TestGenerateFilesDeterministic(t *testing.T) {
	p := Profiles["tiny"]
	a, b := GenerateFiles(p, 7, 3), GenerateFiles(p, 7, 3)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same profile, seed and workspace gave different file sets")
	}
	if reflect.DeepEqual(a, GenerateFiles(p, 8, 3)) {
		t.Error("a different seed gave the same file set")
	}
	if reflect.DeepEqual(a, GenerateFiles(p, 7, 4)) {
		t.Error("a different workspace gave the same file set")
	}
}

func TestGenerateFilesTree(t *testing.T) {
	set := GenerateFiles(Profiles["small"], 1, 0)
	dirs := map[string]bool{"": true}
	maxDepth := 0
	for _, d := range set.Dirs {
		if dirs[d] {
			t.Fatalf("directory %s listed twice", d)
		}
		if parent := path.Dir(d); parent != "." && !dirs[parent] {
			t.Fatalf("directory %s listed before its parent %s", d, parent)
		}
		dirs[d] = true
		maxDepth = max(maxDepth, len(parentDirs(d))+1)
	}
	if maxDepth < 3 {
		t.Errorf("tree depth %d, want a nested tree (>= 3)", maxDepth)
	}
	paths := map[string]bool{}
	for i, f := range set.Files {
		if f.ID != i {
			t.Fatalf("file %d has ID %d", i, f.ID)
		}
		if paths[f.Path] {
			t.Fatalf("path %s generated twice", f.Path)
		}
		paths[f.Path] = true
		if d := path.Dir(f.Path); d != "." && !dirs[d] {
			t.Fatalf("file %s is in %s, which is not a generated directory", f.Path, d)
		}
	}
}

func TestParseProfile(t *testing.T) {
	if _, err := ParseProfile("huge"); err == nil {
		t.Fatal("ParseProfile(huge) succeeded")
	}
	if p, err := ParseProfile("small"); err != nil || p.Files != 800 {
		t.Fatalf("ParseProfile(small) = %+v, %v", p, err)
	}
}
