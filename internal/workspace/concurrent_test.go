package workspace

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"wsfs/internal/namespace"
)

// TestConcurrentOps runs goroutines that create, write, read, rename
// (within and across two shared directories, directories too), link,
// unlink and fsync at the same time. Run with -race. Afterwards the tree
// must be consistent, and a reopen must give the same tree.
func TestConcurrentOps(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		smallLimits(e)
		w := e.open()
		x := A(t)(w.Mkdir(RootIno, "x", 0o755, me))
		y := A(t)(w.Mkdir(RootIno, "y", 0o755, me))
		dirs := []Ino{x.Ino, y.Ino}
		const workers, ops = 6, 150
		var wg sync.WaitGroup
		errc := make(chan error, workers)
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 3))
				fail := func(op string, err error) bool {
					// Races between workers make ENOENT, EEXIST, ENOTEMPTY,
					// ENOTDIR, EISDIR and EINVAL legitimate; anything else is not.
					var errno syscall.Errno
					if err == nil || errors.As(err, &errno) && (errno == syscall.ENOENT || errno == syscall.EEXIST ||
						errno == syscall.ENOTEMPTY || errno == syscall.ENOTDIR || errno == syscall.EISDIR || errno == syscall.EINVAL) {
						return false
					}
					errc <- fmt.Errorf("worker %d %s: %w", g, op, err)
					return true
				}
				for i := range ops {
					d := dirs[r.IntN(2)]
					name := fmt.Sprintf("n%d", r.IntN(8))
					switch r.IntN(9) {
					case 0:
						a, err := w.Create(d, name, 0o644, me)
						if fail("create", err) {
							return
						}
						if err == nil {
							h, err := w.OpenFile(a.Ino, syscall.O_RDWR)
							if fail("open", err) {
								return
							}
							if err == nil {
								_, err = h.WriteAt(pattern(r.IntN(3000), uint64(i)), 0)
								fail("write", err)
								fail("release", h.Release())
							}
						}
					case 1:
						_, err := w.Mkdir(d, name, 0o755, me)
						fail("mkdir", err)
					case 2:
						fail("rename", w.Rename(d, name, dirs[r.IntN(2)], fmt.Sprintf("n%d", r.IntN(8)), 0))
					case 3:
						fail("unlink", w.Unlink(d, name))
					case 4:
						fail("rmdir", w.Rmdir(d, name))
					case 5:
						a, err := w.Lookup(d, name)
						if err == nil {
							_, err = w.Link(a.Ino, dirs[r.IntN(2)], fmt.Sprintf("n%d", r.IntN(8)))
							if errors.Is(err, syscall.EPERM) {
								err = nil // a directory
							}
						}
						fail("link", err)
					case 6:
						a, err := w.Lookup(d, name)
						if err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFREG {
							h, err := w.OpenFile(a.Ino, syscall.O_RDONLY)
							if err == nil {
								buf := make([]byte, 4096)
								_, err = h.ReadAt(buf, 0)
								fail("read", err)
								fail("release", h.Release())
							}
						}
						_, err = w.ReadDir(d)
						fail("readdir", err)
					case 7:
						fail("fsync", w.Fsync(d))
					case 8:
						// Cross-directory rename of the shared directories'
						// subdirectories into each other exercises the
						// ancestor check under the rename mutex.
						a, err := w.Lookup(d, name)
						if err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
							fail("rename dir", w.Rename(d, name, a.Ino, "self", 0))
							fail("rename dir", w.Rename(d, name, dirs[r.IntN(2)], "moved", 0))
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Error(err)
		}
		if err := w.tree.Check(); err != nil {
			t.Fatal(err)
		}
		want := dumpOf(w)
		// Once everything is committed, the durable shadow (built only from
		// committed records, in OnCommit) must equal the live tree. Barrier
		// returns after OnCommit of the last group, so reading it is safe.
		noErr(t, w.Sync())
		if got := namespace.DumpString(w.shadow.Dump(w.contentID)); got != want {
			t.Fatalf("durable shadow differs from the live tree:\n%s\nwant:\n%s", got, want)
		}
		noErr(t, w.Close())
		w = e.open()
		defer w.Close()
		if got := dumpOf(w); got != want {
			t.Fatalf("reopen differs:\n%s\nwant:\n%s", got, want)
		}
	})
}
