package fusefs

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDifferential applies one random sequence of operations to the mount
// and to a directory of the host file system and requires the same outcome
// (the same errno) for every operation and the same tree at the end, and
// again after a remount. Names come from a small set so that operations
// collide: renames over existing names, removes of non-empty directories,
// links to directories, and so on.
func TestDifferential(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { differential(t, seed, Options{}) })
	}
	t.Run("writeback", func(t *testing.T) { differential(t, 3, Options{Writeback: true}) })
	t.Run("passthrough", func(t *testing.T) { differential(t, 4, Options{Passthrough: true}) })
}

func differential(t *testing.T, seed uint64, opts Options) {
	e := newEnv(t, opts)
	native := t.TempDir()
	rng := rand.New(rand.NewPCG(seed, 2))
	names := []string{"a", "b", "c", "d", "d", "d/e", "d/f", "d/g/h", "g", "d/g", "g/x"}
	pick := func() string { return names[rng.IntN(len(names))] }
	const steps = 3000
	outcomes := map[string]int{}
	for i := range steps {
		op, a, b := rng.IntN(12), pick(), pick()
		data := pattern(rng.IntN(3)*rng.IntN(70000), byte(i))
		off := int64(rng.IntN(9000))
		mode := uint32(0o600 + rng.IntN(0o177))
		apply := func(root string) error {
			pa, pb := filepath.Join(root, a), filepath.Join(root, b)
			switch op {
			case 0:
				return os.WriteFile(pa, data, 0o644)
			case 1:
				f, err := os.OpenFile(pa, os.O_WRONLY, 0)
				if err != nil {
					return err
				}
				_, err = f.WriteAt(data, off)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			case 2:
				return os.Truncate(pa, off)
			case 3:
				return os.Rename(pa, pb)
			case 4:
				return syscall.Unlink(pa)
			case 5:
				return syscall.Mkdir(pa, mode|0o700)
			case 6:
				return syscall.Rmdir(pa)
			case 7:
				return os.Link(pa, pb)
			case 8:
				return os.Symlink(b, pa)
			case 9:
				return syscall.Chmod(pa, mode)
			case 10:
				return unix.Renameat2(unix.AT_FDCWD, pa, unix.AT_FDCWD, pb, unix.RENAME_EXCHANGE)
			default:
				return unix.Renameat2(unix.AT_FDCWD, pa, unix.AT_FDCWD, pb, unix.RENAME_NOREPLACE)
			}
		}
		want, got := errnoName(apply(native)), errnoName(apply(e.mnt))
		if want != got {
			t.Fatalf("step %d: op %d (%s, %s): native %s, wsfs %s", i, op, a, b, want, got)
		}
		outcomes[want]++
	}
	compare := func(when string) {
		t.Helper()
		wantTree, gotTree := diffTree(t, native), diffTree(t, e.mnt)
		for k, v := range wantTree {
			if gotTree[k] != v {
				t.Errorf("%s: %s: native %q, wsfs %q", when, k, v, gotTree[k])
			}
		}
		for k, v := range gotTree {
			if _, ok := wantTree[k]; !ok {
				t.Errorf("%s: %s only on wsfs: %q", when, k, v)
			}
		}
	}
	t.Logf("outcomes: %v", outcomes)
	if outcomes["ok"] < steps/10 {
		t.Fatalf("only %d of %d operations succeeded: the sequence exercises too little", outcomes["ok"], steps)
	}
	compare("after the sequence")
	e.remount()
	compare("after a remount")
}

// errnoName reduces an error to its errno for comparison.
func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return "non-errno: " + err.Error()
}

// diffTree describes every path under root by type, permission bits, link
// count, size, content hash or link target: what both file systems must
// agree on (not inode numbers, owners or times).
func diffTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v", st.Mode())
		switch {
		case st.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" nlink=%d size=%d content=%x", st.Sys().(*syscall.Stat_t).Nlink, len(b), sha(b))
		case st.Mode()&os.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + tgt
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sha(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:8]
}
