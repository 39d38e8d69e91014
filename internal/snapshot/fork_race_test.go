package snapshot

import (
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
	"wsfs/internal/workspace"
)

// TestForkNameTaken: a workspace of the fork's new name appears while the
// fork runs (here: just before its rename of the new directory into
// place): an empty directory, as `wsfs create` of the same name makes, or
// a complete fork from another snapshot. The fork refuses with an error
// wrapping fs.ErrExist, leaves the other workspace as it was and removes
// its temp: before, it replaced the empty directory (both commands
// reported success for one name) and failed on the other with a bare
// "directory not empty".
func TestForkNameTaken(t *testing.T) {
	for _, other := range []string{"created", "forked"} {
		t.Run(other, func(t *testing.T) {
			var once sync.Once
			var e *env
			var target string
			fsys := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
				if op == vfs.OpRename && path == target {
					once.Do(func() {
						if other == "created" {
							noErr(t, vfs.MkdirAllDurable(vfs.Default, target, vfs.PrivateDir))
						} else {
							must[Info](t)(Fork(vfs.Default, e.pool, e.wsDir("w"), 1, target))
						}
					})
				}
				return nil
			}))
			e = newEnv(t, fsys, t.TempDir())
			target = e.wsDir("f")
			w := e.open("w")
			writeFile(t, w, workspace.RootIno, "a", []byte("a"))
			noErr(t, w.Close())
			for range 2 { // 1 for the other fork, 2 for this one
				_, _, err := CreateOffline(e.opts("w"), "", time.Now())
				noErr(t, err)
			}
			_, err := Fork(fsys, e.pool, e.wsDir("w"), 2, target)
			if !errors.Is(err, fs.ErrExist) {
				t.Fatalf("fork onto a name taken meanwhile: %v, want an error wrapping fs.ErrExist", err)
			}
			after, _ := vfs.Default.List(target)
			if other == "created" && len(after) != 0 {
				t.Fatalf("the created workspace holds %v after the refused fork", after)
			}
			if other == "forked" {
				_, payload, err := seglog.ReadLatestCheckpoint(vfs.Default, filepath.Join(target, "checkpoint"))
				noErr(t, err)
				got, _, err := manifest.DecodeRef(payload)
				noErr(t, err)
				if want := must[Info](t)(Get(vfs.Default, e.wsDir("w"), 1)).Root; got != want {
					t.Fatalf("the other fork's checkpoint names %s, want snapshot 1's root %s", got, want)
				}
			}
			names, _ := vfs.Default.List(filepath.Dir(target))
			for _, n := range names {
				if strings.HasPrefix(n, vfs.TempPrefix) {
					t.Fatalf("refused fork left %s", n)
				}
			}
		})
	}
}

// TestCatalogLockWaits: a snapshot taken while another command holds the
// catalog lock for its few milliseconds (`wsfs snapshot rm`, `prune`)
// waits for it instead of failing: before, a snapshot create or an
// online restore through the daemon racing a `snapshot rm` failed with
// exit 1 and "stop it first". Here the holder lets go when the snapshot
// tries the lock a second time.
func TestCatalogLockWaits(t *testing.T) {
	var tries int
	var held io.Closer
	var mu sync.Mutex
	var e *env
	fsys := errorfs.Wrap(vfs.NewCrashableMem(), errorfs.InjectorFunc(func(op vfs.Op, path string) error {
		if op == vfs.OpLock && e != nil && path == filepath.Join(Dir(e.wsDir("w")), lockName) {
			mu.Lock()
			defer mu.Unlock()
			if tries++; tries == 2 && held != nil {
				noErr(t, held.Close())
				held = nil
			}
		}
		return nil
	}))
	e = newEnv(t, fsys, "/host")
	w := e.open("w")
	writeFile(t, w, workspace.RootIno, "a", []byte("a"))
	noErr(t, w.Close())
	l, err := lockCatalog(fsys, e.wsDir("w"))
	noErr(t, err)
	mu.Lock()
	held, tries = l, 0
	mu.Unlock()
	in, _, err := CreateOffline(e.opts("w"), "", time.Now())
	if err != nil {
		t.Fatalf("snapshot while the catalog lock was held briefly: %v", err)
	}
	if in.ID != 1 || tries < 2 {
		t.Fatalf("snapshot %d after %d tries of the lock, want 1 after at least 2", in.ID, tries)
	}
}
