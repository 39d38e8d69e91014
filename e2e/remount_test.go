package e2e

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRemount writes a tree with every kind of content the engine stores
// differently (empty, inline-size, exactly at and just past the 64 KiB
// inline limit, pooled, sparse with holes and a tail beyond 4 GiB),
// symlinks, hard links, xattrs, permissions and mtimes; unmounts cleanly
// (SIGTERM, exit 0) and mounts again; and requires the same tree byte for
// byte: every file's sha256, size, permissions, mtime, link counts and
// hard-link groups, symlink targets, xattrs. It remounts twice so a tree
// that was itself recovered is recovered again. -short leaves out the
// file past 4 GiB (growing it costs the mount ~20 s here: O(size)).
func TestRemount(t *testing.T) {
	forEachTarget(t, mountOpts{}, func(t *testing.T, tg *target) {
		r := rand.New(rand.NewSource(1))
		timed(t, "write the tree", func() { writeRemountTree(t, tg.root, r) })
		o := snapOpts{mtime: true, dirLink: true, skip: func(rel string) bool { return rel == "huge.img" }}
		var before, after tree
		var err error
		timed(t, "snapshot", func() { before, err = snapshot(tg.root, o) })
		if err != nil {
			t.Fatal(err)
		}
		for round := 1; round <= 2; round++ {
			timed(t, "unmount and mount", func() { tg.remount(t) })
			timed(t, "snapshot", func() { after, err = snapshot(tg.root, o) })
			if err != nil {
				t.Fatalf("remount %d: %v", round, err)
			}
			if d := diffTrees(before, after, 40); len(d) > 0 {
				t.Fatalf("remount %d: tree differs from before the unmount:\n  %s", round, strings.Join(d, "\n  "))
			}
			checkSparse(t, tg.root)
		}
		t.Logf("%d entries identical across 2 remounts", len(before))
	})
}

// The sparse files: sparse.img is hashed with the rest of the tree;
// huge.img (past 4 GiB, too big to hash in a test) is left out of the
// snapshot and checked region by region.
const (
	sparseBlockAt = 16 << 20
	sparseSize    = 40<<20 + 12345
	hugeBlockAt   = 4<<30 + 4096
	hugeSize      = 5<<30 + 12345
)

// hugeBlock is the content written at hugeBlockAt.
var hugeBlock = randData(rand.New(rand.NewSource(2)), 8192)

func writeRemountTree(t *testing.T, root string, r *rand.Rand) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel string, size int, perm os.FileMode) {
		t.Helper()
		must(os.WriteFile(filepath.Join(root, rel), randData(r, size), perm))
		must(os.Chmod(filepath.Join(root, rel), perm)) // the umask applied to WriteFile
	}
	must(os.MkdirAll(filepath.Join(root, "src/deep/er/still"), 0o755))
	must(os.Mkdir(filepath.Join(root, "private"), 0o700))
	must(os.Mkdir(filepath.Join(root, "empty"), 0o755))
	write("empty.txt", 0, 0o644)
	write("small.txt", 100, 0o644)
	write("src/main.go", 3000, 0o640)
	write("src/deep/er/still/inline-edge", 64<<10, 0o600)
	write("src/deep/er/still/past-inline", 64<<10+1, 0o600)
	write("private/secret", 200, 0o400)
	write("tool.sh", 500, 0o755)
	must(os.Chmod(filepath.Join(root, "tool.sh"), 0o4755))
	write("large.bin", 3<<20+17, 0o644)
	for i := range 50 {
		write(filepath.Join("src", "f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+".dat"), r.Intn(20000), 0o644)
	}

	// Sparse files: a hole, a written block, a hole; huge.img's size lies
	// past 4 GiB.
	f, err := os.Create(filepath.Join(root, "sparse.img"))
	must(err)
	_, err = f.WriteAt(randData(r, 8192), sparseBlockAt)
	must(err)
	must(f.Truncate(sparseSize))
	must(f.Close())
	if !testing.Short() {
		timed(t, "create huge.img (sparse, 5 GiB)", func() {
			f, err = os.Create(filepath.Join(root, "huge.img"))
			must(err)
			_, err = f.WriteAt(hugeBlock, hugeBlockAt)
			must(err)
			must(f.Truncate(hugeSize))
			must(f.Close())
		})
	}

	// Symlinks: to a file, to a directory, dangling, absolute-looking.
	must(os.Symlink("small.txt", filepath.Join(root, "link-file")))
	must(os.Symlink("src/deep", filepath.Join(root, "link-dir")))
	must(os.Symlink("does/not/exist", filepath.Join(root, "link-dangling")))
	must(os.Symlink("/nonexistent/abs", filepath.Join(root, "src/link-abs")))

	// Hard links: three names of one large file, two of one inline file.
	must(os.Link(filepath.Join(root, "large.bin"), filepath.Join(root, "src/large-link")))
	must(os.Link(filepath.Join(root, "large.bin"), filepath.Join(root, "private/large-link2")))
	must(os.Link(filepath.Join(root, "small.txt"), filepath.Join(root, "small-link")))

	// Xattrs on a file and a directory, with binary values.
	must(unix.Setxattr(filepath.Join(root, "small.txt"), "user.mime", []byte("text/plain"), 0))
	must(unix.Setxattr(filepath.Join(root, "small.txt"), "user.bin", []byte{0, 1, 2, 255}, 0))
	must(unix.Setxattr(filepath.Join(root, "src"), "user.dir", randData(r, 300), 0))
	must(unix.Setxattr(filepath.Join(root, "large.bin"), "user.big", randData(r, 4000), 0))

	// Fixed mtimes (the rest keep the times of their writes).
	mt := time.Unix(1_700_000_000, 123456789)
	for _, p := range []string{"small.txt", "large.bin", "src/deep", "sparse.img"} {
		must(os.Chtimes(filepath.Join(root, p), mt, mt))
	}
}

// checkSparse checks huge.img region by region: its size past 4 GiB,
// zeros in the holes, the block written past 4 GiB.
func checkSparse(t *testing.T, root string) {
	t.Helper()
	if testing.Short() {
		return
	}
	f, err := os.Open(filepath.Join(root, "huge.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != hugeSize {
		t.Fatalf("huge.img: size %d, want %d", fi.Size(), hugeSize)
	}
	for _, off := range []int64{0, 1 << 30, hugeBlockAt - 4096, hugeBlockAt + 8192, hugeSize - 100} {
		buf := make([]byte, 100)
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatalf("huge.img: read at %d: %v", off, err)
		}
		for i, b := range buf {
			if b != 0 {
				t.Fatalf("huge.img: byte %d in a hole is %#x, want 0", off+int64(i), b)
			}
		}
	}
	buf := make([]byte, len(hugeBlock))
	if _, err := f.ReadAt(buf, hugeBlockAt); err != nil {
		t.Fatalf("huge.img: read at %d: %v", int64(hugeBlockAt), err)
	}
	if hashBytes(buf) != hashBytes(hugeBlock) {
		t.Fatalf("huge.img: the 8 KiB block at %d (past 4 GiB) differs from what was written", int64(hugeBlockAt))
	}
}
