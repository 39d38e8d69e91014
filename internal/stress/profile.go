// Package stress is the `wsfs stress` harness: it reproduces the user's method
// (DESIGN.md, "The stress harness") on any host. A stub agent per workspace
// runs a deterministic file workload (write, read back and verify, overwrite,
// rename, delete, walk and compare) against one arm — native buffered, native
// with fsync per file, a plain go-fuse loopback, or wsfs with either drain —
// while a host sampler records page-cache and disk figures. The harness
// spawns every daemon and every agent as its own process, collects their JSON
// results, and writes a summary table, results.json, report.md, bench.txt and
// plots.
//
// The harness is not an engine package: it measures filesystems from the
// outside, so it calls the os package directly instead of going through
// internal/vfs (the measured arms must see exactly the syscalls an agent
// makes).
package stress

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
)

// Profile is a workload size: how many files one workspace writes and about
// how many bytes in total. Smaller profiles scale both by the same factor and
// keep the size mix of the seed profile.
type Profile struct {
	Name  string
	Files int
	Bytes int64 // target total; a generated file set lands within ±10 %
}

// Profiles are the named workload sizes. seed is the user's workload: 8,000
// files and about 600 MB per workspace.
var Profiles = map[string]Profile{
	"seed":  {Name: "seed", Files: 8000, Bytes: 600_000_000},
	"small": {Name: "small", Files: 800, Bytes: 60_000_000},
	"tiny":  {Name: "tiny", Files: 80, Bytes: 6_000_000},
}

// ProfileNames lists the valid --profile values in size order.
var ProfileNames = []string{"seed", "small", "tiny"}

// MaxFileSize is the largest file any profile generates (8 MiB).
const MaxFileSize = 8 << 20

// sizeClass is one band of the size mix. Sizes are drawn log-uniformly
// within [min, max].
type sizeClass struct {
	share    float64 // fraction of the file count
	min, max int64
}

// sizeMix is the seed profile's size distribution: most files under 4 KiB, a
// few up to 8 MiB. The two large classes are rescaled after drawing so the
// total meets the profile's byte target (see GenerateFiles).
var sizeMix = []sizeClass{
	{share: 0.70, min: 64, max: 4 << 10},
	{share: 0.22, min: 4 << 10, max: 64 << 10},
	{share: 0.06, min: 64 << 10, max: 1 << 20},
	{share: 0.02, min: 1 << 20, max: MaxFileSize},
}

// SmallFileLimit is the boundary of the "small" class: files below it are the
// majority of every profile.
const SmallFileLimit = 4 << 10

// FileSpec is one file of the generated set.
type FileSpec struct {
	ID   int    // stable index in the set, 0..Files-1
	Path string // slash-separated, relative to the workspace root
	Size int64
}

// FileSet is a generated workload: directories (parents before children) and
// files. It depends only on the profile, the seed and the workspace index.
type FileSet struct {
	Dirs  []string
	Files []FileSpec
}

// TotalBytes is the sum of the file sizes.
func (s *FileSet) TotalBytes() int64 {
	var n int64
	for _, f := range s.Files {
		n += f.Size
	}
	return n
}

// rng returns the generator for (seed, workspace, stream). Distinct streams
// keep the tree, the sizes and the later phase choices independent, so adding
// a draw to one phase does not shift the others.
func rng(seed int64, workspace int, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed)^stream*0x9e3779b97f4a7c15, uint64(workspace)+1))
}

// dirWords name directories the way a source repository does.
var dirWords = []string{"src", "pkg", "internal", "cmd", "lib", "test", "docs", "api", "util",
	"core", "net", "store", "web", "assets", "build", "gen", "model", "proto", "tools", "vendor"}

var fileExts = []string{".go", ".py", ".md", ".json", ".txt", ".ts", ".c", ".h", ".yaml", ".bin"}

// GenerateFiles builds the deterministic file set of workspace for p and seed.
//
// The tree is a nested directory hierarchy of about one directory per 16
// files, at most 6 levels deep, where each new directory hangs under a random
// existing one (so some branches are deep, most are shallow). Files land in
// directories chosen at random, file names are unique within the set. Sizes
// follow sizeMix; the classes above 64 KiB are then scaled by one common
// factor (clamped to their band) so the total comes close to p.Bytes.
func GenerateFiles(p Profile, seed int64, workspace int) *FileSet {
	if p.Files <= 0 {
		return &FileSet{}
	}
	tr := rng(seed, workspace, 1)
	nDirs := max(p.Files/16, 2)
	type dir struct {
		path  string
		depth int
	}
	dirs := []dir{{path: "", depth: 0}}
	used := map[string]bool{}
	for len(dirs) < nDirs+1 {
		parent := dirs[tr.IntN(len(dirs))]
		if parent.depth >= 6 {
			continue
		}
		name := fmt.Sprintf("%s%d", dirWords[tr.IntN(len(dirWords))], tr.IntN(100))
		path := name
		if parent.path != "" {
			path = parent.path + "/" + name
		}
		if used[path] {
			continue
		}
		used[path] = true
		dirs = append(dirs, dir{path: path, depth: parent.depth + 1})
	}
	set := &FileSet{}
	for _, d := range dirs[1:] {
		set.Dirs = append(set.Dirs, d.path)
	}
	// Parents were created before children, so set.Dirs is already in
	// creation order; sorting keeps that (a parent is a prefix) and makes the
	// order independent of the generation walk.
	sort.Strings(set.Dirs)

	// Sizes: an exact count per class (largest remainder), then shuffled.
	sr := rng(seed, workspace, 2)
	counts := classCounts(p.Files)
	sizes := make([]int64, 0, p.Files)
	classOf := make([]int, 0, p.Files)
	for c, n := range counts {
		for range n {
			sizes = append(sizes, logUniform(sr, sizeMix[c].min, sizeMix[c].max))
			classOf = append(classOf, c)
		}
	}
	scaleLarge(sizes, classOf, p.Bytes)
	sr.Shuffle(len(sizes), func(i, j int) {
		sizes[i], sizes[j] = sizes[j], sizes[i]
		classOf[i], classOf[j] = classOf[j], classOf[i]
	})

	fr := rng(seed, workspace, 3)
	for i := range p.Files {
		d := dirs[fr.IntN(len(dirs))].path
		name := fmt.Sprintf("f%05d%s", i, fileExts[fr.IntN(len(fileExts))])
		path := name
		if d != "" {
			path = d + "/" + name
		}
		set.Files = append(set.Files, FileSpec{ID: i, Path: path, Size: sizes[i]})
	}
	return set
}

// classCounts splits n files over sizeMix by largest remainder, so the counts
// sum to n exactly and every class with a non-zero share gets at least one
// file once n is large enough to hold them all.
func classCounts(n int) []int {
	counts := make([]int, len(sizeMix))
	type rem struct {
		c int
		r float64
	}
	var rems []rem
	left := n
	for c, cl := range sizeMix {
		exact := cl.share * float64(n)
		counts[c] = int(math.Floor(exact))
		left -= counts[c]
		rems = append(rems, rem{c, exact - math.Floor(exact)})
	}
	sort.SliceStable(rems, func(i, j int) bool { return rems[i].r > rems[j].r })
	for i := 0; left > 0; i++ {
		counts[rems[i%len(rems)].c]++
		left--
	}
	// Keep at least one file of the largest class: a profile without a big
	// file would not exercise the large-file path at all.
	last := len(counts) - 1
	if counts[last] == 0 && n >= len(sizeMix) {
		counts[last] = 1
		counts[0]--
	}
	return counts
}

// logUniform draws a size in [lo, hi] whose logarithm is uniform.
func logUniform(r *rand.Rand, lo, hi int64) int64 {
	l, h := math.Log(float64(lo)), math.Log(float64(hi))
	return int64(math.Exp(l + r.Float64()*(h-l)))
}

// scaleLarge multiplies the sizes of the two large classes by a common factor
// so the total approaches target, clamping each to its class band. A few
// rounds of rescaling absorb the clamping.
func scaleLarge(sizes []int64, classOf []int, target int64) {
	for range 8 {
		var fixed, large int64
		for i, s := range sizes {
			if classOf[i] >= 2 {
				large += s
			} else {
				fixed += s
			}
		}
		if large == 0 || target <= fixed {
			return
		}
		f := float64(target-fixed) / float64(large)
		if math.Abs(f-1) < 0.001 {
			return
		}
		for i, s := range sizes {
			if c := classOf[i]; c >= 2 {
				sizes[i] = min(max(int64(float64(s)*f), sizeMix[c].min), sizeMix[c].max)
			}
		}
	}
}

// parentDirs returns every ancestor directory of a slash path, outermost first.
func parentDirs(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// ParseProfile returns the named profile or an error listing the valid names.
func ParseProfile(name string) (Profile, error) {
	p, ok := Profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown profile %q (allowed: %s)", name, strings.Join(ProfileNames, ", "))
	}
	return p, nil
}
