package e2e

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDifferential applies one seeded random sequence of system calls to
// the target and to a native directory and requires, after every call, the
// same result (return value, errno, data read) on both, and at the end the
// same tree (type, permissions, size, content hash, link counts, hard-link
// groups, symlink targets, xattrs), also after a remount. On the native
// target the reference is a second native directory, which proves the test
// deterministic. A failure names the seed and the op index; -e2e.seed=N
// replays the sequence.
func TestDifferential(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 500
	}
	run := func(t *testing.T, tg *target) {
		seed := testSeed(t)
		ref := t.TempDir()
		r := &diffGen{Rand: rand.New(rand.NewSource(seed)), ref: ref}
		// --passthrough refuses a writer with ETXTBSY while a read-only
		// (passthrough) descriptor of the file is open: a documented
		// deviation, so that variant keeps no read-only descriptor open
		// across ops.
		r.noReadOnlySlots = tg.variant == "passthrough"
		got, want := newSide(tg.root), newSide(ref)
		defer got.closeAll()
		defer want.closeAll()
		failed := 0 // ops that returned an error on both sides
		ops := make([]diffOp, 0, n)
		for i := range n {
			op := genDiffOp(r)
			ops = append(ops, op)
			w := op.run(want)
			g := op.run(got)
			if strings.HasPrefix(w, "E") || strings.Contains(w, "open E") {
				failed++
			}
			if w != g {
				got.closeAll()
				want.closeAll()
				t.Fatalf("seed %d op %d: %s\n  native: %s\n  %s: %s\n%s(replay: go test ./e2e -run '%s' -args -e2e.seed=%d)",
					seed, i, op.desc, w, tg.kind, g, shrinkReport(t, tg.root, ops), t.Name(), seed)
			}
		}
		got.closeAll()
		want.closeAll()
		t.Logf("%d ops, %d of them failed with the same errno on both sides", n, failed)
		if !sameTrees(ref, tg.root) {
			t.Log(shrinkReport(t, tg.root, ops))
		}
		compareTrees(t, fmt.Sprintf("seed %d: after %d ops", seed, n), ref, tg.root)
		tg.remount(t)
		compareTrees(t, fmt.Sprintf("seed %d: after %d ops and a remount", seed, n), ref, tg.root)
	}
	forEachTarget(t, mountOpts{}, run)
	forEachVariant(t, run)
}

// testSeed returns -e2e.seed or a time-based seed, and logs it.
func testSeed(t *testing.T) int64 {
	seed := *flagSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d", seed)
	return seed
}

// compareTrees fails t if the trees at want and got differ.
func compareTrees(t *testing.T, what, want, got string) {
	t.Helper()
	o := snapOpts{dirLink: true}
	w, err := snapshot(want, o)
	if err != nil {
		t.Fatalf("%s: snapshot of the native tree: %v", what, err)
	}
	g, err := snapshot(got, o)
	if err != nil {
		t.Fatalf("%s: snapshot of the target tree: %v", what, err)
	}
	if d := diffTrees(w, g, 40); len(d) > 0 {
		t.Fatalf("%s: trees differ (%d entries native, %d target):\n  %s", what, len(w), len(g), strings.Join(d, "\n  "))
	}
}

// sameTrees reports whether the trees at want and got are the same for
// compareTrees (false if either cannot be read).
func sameTrees(want, got string) bool {
	o := snapOpts{dirLink: true}
	w, err := snapshot(want, o)
	if err != nil {
		return false
	}
	g, err := snapshot(got, o)
	return err == nil && len(diffTrees(w, g, 1)) == 0
}

// maxShrinkRuns bounds the replays of one shrink (each replays at most the
// whole failing sequence in fresh directories).
const maxShrinkRuns = 300

// shrinkReport replays subsequences of a failing op sequence in fresh
// directories (under root, the target, and a native temporary directory)
// and returns the shortest one found that still fails (a result or the
// final tree differs), for the failure message: a divergence after op
// 1,500 usually needs a handful of them. It says so when the failure does
// not reproduce in a fresh directory (it then depends on state outside
// the sequence's own directory).
func shrinkReport(t *testing.T, root string, ops []diffOp) string {
	runs := 0
	fails := func(seq []diffOp) bool {
		runs++
		g := filepath.Join(root, fmt.Sprintf(".shrink%d", runs))
		w := filepath.Join(t.TempDir(), "ref")
		if os.Mkdir(g, 0o755) != nil || os.Mkdir(w, 0o755) != nil {
			return false
		}
		got, want := newSide(g), newSide(w)
		defer got.closeAll()
		defer want.closeAll()
		for _, op := range seq {
			if op.run(want) != op.run(got) {
				return true
			}
		}
		got.closeAll()
		want.closeAll()
		return !sameTrees(w, g)
	}
	if !fails(ops) {
		return "(the failure does not reproduce in a fresh directory: not shrunk)\n"
	}
	min := shrink(ops, func(seq []diffOp) bool { return runs < maxShrinkRuns && fails(seq) })
	var b strings.Builder
	fmt.Fprintf(&b, "shortest failing sequence found (%d of %d ops, %d replays):\n", len(min), len(ops), runs)
	for _, op := range min {
		fmt.Fprintf(&b, "  %s\n", op.desc)
	}
	return b.String()
}

// shrink returns a subsequence of seq for which fails holds, as short as
// delta debugging finds it (ddmin: drop ever smaller chunks while the
// rest still fails). fails(seq) must hold; it is called only on proper
// subsequences, and a false answer (also one for lack of budget) keeps
// what it was asked about.
func shrink[T any](seq []T, fails func([]T) bool) []T {
	n := 2
	for len(seq) >= 2 {
		chunk := (len(seq) + n - 1) / n
		reduced := false
		for start := 0; start < len(seq); start += chunk {
			rest := append(append([]T(nil), seq[:start]...), seq[min(start+chunk, len(seq)):]...)
			if len(rest) > 0 && fails(rest) {
				seq, n, reduced = rest, max(n-1, 2), true
				break
			}
		}
		if !reduced {
			if n >= len(seq) {
				break
			}
			n = min(2*n, len(seq))
		}
	}
	return seq
}

// diffSlots is the number of file descriptors kept open across ops.
const diffSlots = 4

// side is one of the two trees of the differential test with its open
// descriptors (-1: closed).
type side struct {
	root string
	fds  [diffSlots]int
}

func newSide(root string) *side {
	s := &side{root: root}
	for i := range s.fds {
		s.fds[i] = -1
	}
	return s
}

func (s *side) closeAll() {
	for i, fd := range s.fds {
		if fd >= 0 {
			unix.Close(fd)
			s.fds[i] = -1
		}
	}
}

func (s *side) path(rel string) string { return filepath.Join(s.root, rel) }

// diffOp is one step: desc names it and its arguments; run performs it on
// a side and describes everything observable about the result.
type diffOp struct {
	desc string
	run  func(s *side) string
}

// errno renders an error as its errno name ("ok" for nil).
func errno(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno %d", int(e))
	}
	return err.Error()
}

// diffNames is the small name space the ops draw from, so they often meet
// existing files, directories and links.
var diffNames = []string{"a", "b", "c", "d"}

// diffGen draws ops: half of the paths name an entry that exists in the
// reference tree (read before each op; it is a function of the seed), the
// rest come from the small name space.
type diffGen struct {
	*rand.Rand
	ref      string
	existing []string // every path
	files    []string // regular files
	dirs     []string // directories, "." included

	// noReadOnlySlots: no O_RDONLY descriptor stays open while another
	// op opens the file (slots, copy_file_range's input).
	noReadOnlySlots bool
}

// refresh lists the reference tree's paths, sorted.
func (g *diffGen) refresh() {
	g.existing, g.files, g.dirs = g.existing[:0], g.files[:0], g.dirs[:0]
	filepath.WalkDir(g.ref, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(g.ref, p)
		switch {
		case d.IsDir():
			g.dirs = append(g.dirs, rel)
		case d.Type().IsRegular():
			g.files = append(g.files, rel)
		}
		if rel != "." {
			g.existing = append(g.existing, rel)
		}
		return nil
	})
}

// file names an existing regular file two times in three.
func (g *diffGen) file() string {
	if len(g.files) > 0 && g.Intn(3) != 0 {
		return g.files[g.Intn(len(g.files))]
	}
	return g.path()
}

// newPath names an entry in an existing directory two times in three
// (it may exist already).
func (g *diffGen) newPath() string {
	if g.Intn(3) != 0 {
		return filepath.Join(g.dirs[g.Intn(len(g.dirs))], diffNames[g.Intn(len(diffNames))])
	}
	return g.path()
}

func (g *diffGen) path() string {
	if len(g.existing) > 0 && g.Intn(2) == 0 {
		return g.existing[g.Intn(len(g.existing))]
	}
	return randPath(g.Rand)
}

func randPath(r *rand.Rand) string {
	depth := 1 // 50 %; 2: 35 %; 3: 15 %
	switch x := r.Intn(20); {
	case x >= 17:
		depth = 3
	case x >= 10:
		depth = 2
	}
	parts := make([]string, depth)
	for i := range parts {
		parts[i] = diffNames[r.Intn(len(diffNames))]
	}
	return filepath.Join(parts...)
}

// randSize picks a size around the interesting boundaries: small, a few
// pages, the inline limit (64 KiB) and beyond, and the 1 MiB chunk size and
// beyond (chunked content).
func randSize(r intner) int {
	switch r.Intn(9) {
	case 8:
		return 1<<20 - 4096 + r.Intn(2<<20)
	case 0:
		return 0
	case 1, 2, 3:
		return r.Intn(300)
	case 4, 5:
		return 1000 + r.Intn(9000)
	case 6:
		return 60<<10 + r.Intn(10<<10)
	default:
		return 100<<10 + r.Intn(200<<10)
	}
}

// intner is a *rand.Rand or a diffGen.
type intner interface{ Intn(int) int }

func randData(r io.Reader, n int) []byte {
	b := make([]byte, n)
	r.Read(b)
	return b
}

func randMode(r intner) uint32 {
	modes := []uint32{0o644, 0o600, 0o755, 0o700, 0o444, 0o4755, 0o1777, 0o640}
	return modes[r.Intn(len(modes))]
}

// statString describes an lstat result, leaving out what may differ
// between filesystems (inode, blocks, times, a directory's size).
func statString(st *unix.Stat_t) string {
	size := st.Size
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		size = -1
	}
	return fmt.Sprintf("mode %#o size %d nlink %d uid %d gid %d", st.Mode, size, st.Nlink, st.Uid, st.Gid)
}

func preadAll(fd int) string {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "fstat " + errno(err)
	}
	buf := make([]byte, st.Size+10)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil {
		return "pread " + errno(err)
	}
	return fmt.Sprintf("read %d sha256 %s", n, short(hashBytes(buf[:n])))
}

type weighted struct {
	w   int
	gen func(r *diffGen) diffOp
}

var diffOps = []weighted{
	{12, genCreate}, {10, genWriteAt}, {6, genAppend}, {5, genTruncate},
	{8, genRename}, {4, genLink}, {6, genUnlink}, {8, genMkdir}, {4, genRmdir},
	{4, genSymlink}, {3, genChmod}, {2, genUtimes}, {4, genReaddir},
	{5, genRead}, {2, genFsync}, {3, genOpenUnlinkRead}, {4, genStat},
	{2, genReadlink}, {4, genSlotOpen}, {5, genSlotWrite}, {4, genSlotRead},
	{2, genSlotTruncate}, {3, genSlotStat}, {1, genSlotFsync}, {3, genSlotClose},
	{3, genXattr}, {2, genFallocate}, {2, genCopyRange}, {2, genChown},
	{2, genMmap},
}

func genDiffOp(r *diffGen) diffOp {
	r.refresh()
	total := 0
	for _, o := range diffOps {
		total += o.w
	}
	x := r.Intn(total)
	for _, o := range diffOps {
		if x < o.w {
			return o.gen(r)
		}
		x -= o.w
	}
	panic("unreachable")
}

func genCreate(r *diffGen) diffOp {
	p, mode := r.newPath(), randMode(r)&0o777
	flags := unix.O_CREAT | unix.O_WRONLY
	switch r.Intn(3) {
	case 0:
		flags |= unix.O_TRUNC
	case 1:
		flags |= unix.O_EXCL
	}
	data := randData(r, randSize(r))
	return diffOp{fmt.Sprintf("create %s flags %#x mode %#o len %d", p, flags, mode, len(data)), func(s *side) string {
		fd, err := unix.Open(s.path(p), flags, mode)
		if err != nil {
			return "open " + errno(err)
		}
		n, werr := unix.Write(fd, data)
		return fmt.Sprintf("open ok write %d %s close %s", n, errno(werr), errno(unix.Close(fd)))
	}}
}

func genWriteAt(r *diffGen) diffOp {
	p, off := r.file(), int64(randSize(r))
	data := randData(r, 1+randSize(r)/2)
	return diffOp{fmt.Sprintf("pwrite %s off %d len %d", p, off, len(data)), func(s *side) string {
		fd, err := unix.Open(s.path(p), unix.O_WRONLY, 0)
		if err != nil {
			return "open " + errno(err)
		}
		n, werr := unix.Pwrite(fd, data, off)
		return fmt.Sprintf("pwrite %d %s close %s", n, errno(werr), errno(unix.Close(fd)))
	}}
}

func genAppend(r *diffGen) diffOp {
	p := r.file()
	data := randData(r, 1+r.Intn(5000))
	return diffOp{fmt.Sprintf("append %s len %d", p, len(data)), func(s *side) string {
		fd, err := unix.Open(s.path(p), unix.O_WRONLY|unix.O_APPEND, 0)
		if err != nil {
			return "open " + errno(err)
		}
		n, werr := unix.Write(fd, data)
		var st unix.Stat_t
		serr := unix.Fstat(fd, &st)
		return fmt.Sprintf("write %d %s fstat %s size %d close %s", n, errno(werr), errno(serr), st.Size, errno(unix.Close(fd)))
	}}
}

func genTruncate(r *diffGen) diffOp {
	p, size := r.file(), int64(randSize(r))
	return diffOp{fmt.Sprintf("truncate %s %d", p, size), func(s *side) string {
		return errno(unix.Truncate(s.path(p), size))
	}}
}

func genRename(r *diffGen) diffOp {
	from, to := r.path(), r.newPath()
	flags, name := 0, "rename"
	switch r.Intn(10) {
	case 0:
		flags, name = unix.RENAME_NOREPLACE, "rename NOREPLACE"
	case 1:
		flags, name = unix.RENAME_EXCHANGE, "rename EXCHANGE"
	}
	return diffOp{fmt.Sprintf("%s %s %s", name, from, to), func(s *side) string {
		return errno(unix.Renameat2(unix.AT_FDCWD, s.path(from), unix.AT_FDCWD, s.path(to), uint(flags)))
	}}
}

func genLink(r *diffGen) diffOp {
	from, to := r.file(), r.newPath()
	return diffOp{fmt.Sprintf("link %s %s", from, to), func(s *side) string {
		return errno(unix.Link(s.path(from), s.path(to)))
	}}
}

func genUnlink(r *diffGen) diffOp {
	p := r.path()
	return diffOp{"unlink " + p, func(s *side) string { return errno(unix.Unlink(s.path(p))) }}
}

func genMkdir(r *diffGen) diffOp {
	p := r.newPath()
	mode := []uint32{0o755, 0o700, 0o777, 0o1777}[r.Intn(4)]
	return diffOp{fmt.Sprintf("mkdir %s %#o", p, mode), func(s *side) string {
		return errno(unix.Mkdir(s.path(p), mode))
	}}
}

func genRmdir(r *diffGen) diffOp {
	p := r.path()
	return diffOp{"rmdir " + p, func(s *side) string { return errno(unix.Rmdir(s.path(p))) }}
}

func genSymlink(r *diffGen) diffOp {
	// Targets are relative names without "..", so nothing resolves outside
	// the tree under test.
	target, p := r.path(), r.newPath()
	return diffOp{fmt.Sprintf("symlink %s -> %s", p, target), func(s *side) string {
		return errno(unix.Symlink(target, s.path(p)))
	}}
}

func genChmod(r *diffGen) diffOp {
	p, mode := r.path(), randMode(r)
	return diffOp{fmt.Sprintf("chmod %s %#o", p, mode), func(s *side) string {
		return errno(unix.Chmod(s.path(p), mode))
	}}
}

func genUtimes(r *diffGen) diffOp {
	p := r.path()
	at := unix.NsecToTimespec(1_600_000_000_000_000_000 + r.Int63n(1e17))
	mt := unix.NsecToTimespec(1_600_000_000_000_000_000 + r.Int63n(1e17))
	return diffOp{fmt.Sprintf("utimes %s", p), func(s *side) string {
		if err := unix.UtimesNano(s.path(p), []unix.Timespec{at, mt}); err != nil {
			return errno(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(s.path(p), &st); err != nil {
			return "stat " + errno(err)
		}
		return fmt.Sprintf("ok mtime %d", st.Mtim.Nano())
	}}
}

func genReaddir(r *diffGen) diffOp {
	p := r.path()
	if r.Intn(5) == 0 {
		p = "."
	}
	return diffOp{"readdir " + p, func(s *side) string {
		ents, err := os.ReadDir(s.path(p))
		if err != nil {
			return errno(err)
		}
		names := make([]string, len(ents))
		for i, e := range ents {
			names[i] = fmt.Sprintf("%s:%v", e.Name(), e.Type())
		}
		sort.Strings(names)
		return strings.Join(names, " ")
	}}
}

func genRead(r *diffGen) diffOp {
	p := r.file()
	return diffOp{"read " + p, func(s *side) string {
		b, err := os.ReadFile(s.path(p))
		if err != nil {
			return errno(err)
		}
		return fmt.Sprintf("read %d sha256 %s", len(b), short(hashBytes(b)))
	}}
}

func genFsync(r *diffGen) diffOp {
	p := r.path()
	return diffOp{"fsync " + p, func(s *side) string {
		fd, err := unix.Open(s.path(p), unix.O_RDONLY, 0)
		if err != nil {
			return "open " + errno(err)
		}
		ferr := unix.Fsync(fd)
		return fmt.Sprintf("fsync %s close %s", errno(ferr), errno(unix.Close(fd)))
	}}
}

func genOpenUnlinkRead(r *diffGen) diffOp {
	p := r.file()
	data := randData(r, randSize(r))
	return diffOp{fmt.Sprintf("open-unlink-write-read %s len %d", p, len(data)), func(s *side) string {
		fd, err := unix.Open(s.path(p), unix.O_RDWR, 0)
		if err != nil {
			return "open " + errno(err)
		}
		defer unix.Close(fd)
		before := preadAll(fd)
		uerr := unix.Unlink(s.path(p))
		n, werr := unix.Pwrite(fd, data, 0)
		after := preadAll(fd)
		var st unix.Stat_t
		serr := unix.Fstat(fd, &st)
		return fmt.Sprintf("%s unlink %s pwrite %d %s %s fstat %s nlink %d size %d",
			before, errno(uerr), n, errno(werr), after, errno(serr), st.Nlink, st.Size)
	}}
}

func genStat(r *diffGen) diffOp {
	p := r.path()
	return diffOp{"lstat " + p, func(s *side) string {
		var st unix.Stat_t
		if err := unix.Lstat(s.path(p), &st); err != nil {
			return errno(err)
		}
		return statString(&st)
	}}
}

func genReadlink(r *diffGen) diffOp {
	p := r.path()
	return diffOp{"readlink " + p, func(s *side) string {
		tgt, err := os.Readlink(s.path(p))
		return fmt.Sprintf("%q %s", tgt, errno(err))
	}}
}

func genSlotOpen(r *diffGen) diffOp {
	slot, p := r.Intn(diffSlots), r.file()
	flags := []int{unix.O_RDONLY, unix.O_RDWR, unix.O_RDWR | unix.O_APPEND, unix.O_RDWR | unix.O_CREAT, unix.O_WRONLY | unix.O_TRUNC}[r.Intn(5)]
	if flags == unix.O_RDONLY && r.noReadOnlySlots {
		flags = unix.O_RDWR
	}
	return diffOp{fmt.Sprintf("slot %d: open %s flags %#x", slot, p, flags), func(s *side) string {
		cerr := "none"
		if s.fds[slot] >= 0 {
			cerr = errno(unix.Close(s.fds[slot]))
			s.fds[slot] = -1
		}
		fd, err := unix.Open(s.path(p), flags, 0o644)
		if err == nil {
			s.fds[slot] = fd
		}
		return fmt.Sprintf("close old %s open %s", cerr, errno(err))
	}}
}

func genSlotWrite(r *diffGen) diffOp {
	slot, off := r.Intn(diffSlots), int64(randSize(r))
	data := randData(r, 1+randSize(r)/2)
	return diffOp{fmt.Sprintf("slot %d: pwrite off %d len %d", slot, off, len(data)), func(s *side) string {
		if s.fds[slot] < 0 {
			return "closed"
		}
		n, err := unix.Pwrite(s.fds[slot], data, off)
		return fmt.Sprintf("pwrite %d %s", n, errno(err))
	}}
}

func genSlotRead(r *diffGen) diffOp {
	slot := r.Intn(diffSlots)
	return diffOp{fmt.Sprintf("slot %d: read all", slot), func(s *side) string {
		if s.fds[slot] < 0 {
			return "closed"
		}
		return preadAll(s.fds[slot])
	}}
}

func genSlotTruncate(r *diffGen) diffOp {
	slot, size := r.Intn(diffSlots), int64(randSize(r))
	return diffOp{fmt.Sprintf("slot %d: ftruncate %d", slot, size), func(s *side) string {
		if s.fds[slot] < 0 {
			return "closed"
		}
		return errno(unix.Ftruncate(s.fds[slot], size))
	}}
}

func genSlotStat(r *diffGen) diffOp {
	slot := r.Intn(diffSlots)
	return diffOp{fmt.Sprintf("slot %d: fstat", slot), func(s *side) string {
		if s.fds[slot] < 0 {
			return "closed"
		}
		var st unix.Stat_t
		if err := unix.Fstat(s.fds[slot], &st); err != nil {
			return errno(err)
		}
		return statString(&st)
	}}
}

func genSlotFsync(r *diffGen) diffOp {
	slot := r.Intn(diffSlots)
	return diffOp{fmt.Sprintf("slot %d: fsync", slot), func(s *side) string {
		if s.fds[slot] < 0 {
			return "closed"
		}
		return errno(unix.Fsync(s.fds[slot]))
	}}
}

func genSlotClose(r *diffGen) diffOp {
	slot := r.Intn(diffSlots)
	return diffOp{fmt.Sprintf("slot %d: close", slot), func(s *side) string {
		if s.fds[slot] < 0 {
			return "closed"
		}
		err := unix.Close(s.fds[slot])
		s.fds[slot] = -1
		return errno(err)
	}}
}

func genXattr(r *diffGen) diffOp {
	p := r.path()
	name := "user." + diffNames[r.Intn(len(diffNames))]
	val := randData(r, r.Intn(100))
	switch r.Intn(4) {
	case 0:
		flags := []int{0, 0, unix.XATTR_CREATE, unix.XATTR_REPLACE}[r.Intn(4)]
		return diffOp{fmt.Sprintf("setxattr %s %s len %d flags %d", p, name, len(val), flags), func(s *side) string {
			return errno(unix.Setxattr(s.path(p), name, val, flags))
		}}
	case 1:
		return diffOp{fmt.Sprintf("getxattr %s %s", p, name), func(s *side) string {
			buf := make([]byte, 256)
			n, err := unix.Getxattr(s.path(p), name, buf)
			if err != nil {
				return errno(err)
			}
			return fmt.Sprintf("%x", buf[:n])
		}}
	case 2:
		return diffOp{fmt.Sprintf("removexattr %s %s", p, name), func(s *side) string {
			return errno(unix.Removexattr(s.path(p), name))
		}}
	default:
		return diffOp{"listxattr " + p, func(s *side) string {
			x, err := userXattrs(s.path(p))
			if err != nil {
				var e syscall.Errno
				if errors.As(err, &e) {
					return errno(e)
				}
				return err.Error()
			}
			return fmt.Sprint(x)
		}}
	}
}

// genMmap changes a file through a shared writable mapping of all of it
// (msync'd or not), unmaps it, and reads the file through a descriptor
// the mapping did not use, while the mapping's descriptor is still open.
func genMmap(r *diffGen) diffOp {
	p, at, n := r.file(), r.Intn(4<<20), 1+randSize(r)/4
	data := randData(r, n)
	sync := r.Intn(2) == 0
	rflags := unix.O_RDONLY
	if r.noReadOnlySlots {
		rflags = unix.O_RDWR // see noReadOnlySlots
	}
	return diffOp{fmt.Sprintf("mmap %s at %d mod size, len %d, msync %v", p, at, n, sync), func(s *side) string {
		fd, err := unix.Open(s.path(p), unix.O_RDWR, 0)
		if err != nil {
			return "open " + errno(err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return "fstat " + errno(err)
		}
		if st.Size == 0 {
			return "empty"
		}
		m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return "mmap " + errno(err)
		}
		copy(m[at%len(m):], data)
		serr := "none"
		if sync {
			serr = errno(unix.Msync(m, unix.MS_SYNC))
		}
		uerr := errno(unix.Munmap(m))
		rfd, err := unix.Open(s.path(p), rflags, 0)
		if err != nil {
			return "reopen " + errno(err)
		}
		defer unix.Close(rfd)
		return fmt.Sprintf("msync %s munmap %s %s", serr, uerr, preadAll(rfd))
	}}
}

func genFallocate(r *diffGen) diffOp {
	p, off, n := r.file(), int64(randSize(r)), int64(1+randSize(r))
	mode := []uint32{0, unix.FALLOC_FL_KEEP_SIZE}[r.Intn(2)]
	return diffOp{fmt.Sprintf("fallocate %s mode %d off %d len %d", p, mode, off, n), func(s *side) string {
		fd, err := unix.Open(s.path(p), unix.O_RDWR, 0)
		if err != nil {
			return "open " + errno(err)
		}
		ferr := unix.Fallocate(fd, mode, off, n)
		after := preadAll(fd)
		return fmt.Sprintf("fallocate %s %s close %s", errno(ferr), after, errno(unix.Close(fd)))
	}}
}

func genCopyRange(r *diffGen) diffOp {
	from, to := r.file(), r.file()
	off, n, at := int64(r.Intn(100<<10)), 1+r.Intn(80<<10), int64(r.Intn(100<<10))
	inFlags := unix.O_RDONLY
	if r.noReadOnlySlots {
		inFlags = unix.O_RDWR // see noReadOnlySlots
	}
	return diffOp{fmt.Sprintf("copy_file_range %s@%d -> %s@%d len %d", from, off, to, at, n), func(s *side) string {
		in, err := unix.Open(s.path(from), inFlags, 0)
		if err != nil {
			return "open in " + errno(err)
		}
		defer unix.Close(in)
		out, err := unix.Open(s.path(to), unix.O_WRONLY, 0)
		if err != nil {
			return "open out " + errno(err)
		}
		roff, woff := off, at
		copied, cerr := unix.CopyFileRange(in, &roff, out, &woff, n, 0)
		return fmt.Sprintf("copied %d %s close %s", copied, errno(cerr), errno(unix.Close(out)))
	}}
}

func genChown(r *diffGen) diffOp {
	p := r.path()
	uid, gid := []int{0, 1000, 65534}[r.Intn(3)], []int{0, 1000, 65534}[r.Intn(3)]
	return diffOp{fmt.Sprintf("lchown %s %d:%d", p, uid, gid), func(s *side) string {
		if err := unix.Lchown(s.path(p), uid, gid); err != nil {
			return errno(err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(s.path(p), &st); err != nil {
			return "lstat " + errno(err)
		}
		return statString(&st)
	}}
}

// TestShrink checks the differential test's shrinker on a known cause: a
// sequence fails when it holds both 13 and 71 with 13 first.
func TestShrink(t *testing.T) {
	seq := make([]int, 500)
	for i := range seq {
		seq[i] = i % 100
	}
	calls := 0
	fails := func(s []int) bool {
		calls++
		i := slices.Index(s, 13)
		return i >= 0 && slices.Contains(s[i:], 71)
	}
	got := shrink(seq, fails)
	if !slices.Equal(got, []int{13, 71}) {
		t.Fatalf("shrunk to %v, want [13 71]", got)
	}
	t.Logf("%d calls", calls)
}
