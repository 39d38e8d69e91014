package host

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"wsfs/internal/testenv"
)

// hangingRoot is a FUSE root whose GETATTR blocks until release is closed:
// a daemon that has stopped answering.
type hangingRoot struct {
	gofs.Inode
	hang    chan struct{}
	release chan struct{}
	once    sync.Once
}

var _ gofs.NodeGetattrer = (*hangingRoot)(nil)

func (r *hangingRoot) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	select {
	case <-r.hang:
		<-r.release
	default:
	}
	out.Mode = syscall.S_IFDIR | 0o755
	return 0
}

// TestChecksDoNotTouchOtherMounts: the on-a-wsfs-mount checks of init,
// create and mount compare the mount table's points as strings. Found by
// the power-cut test: one hung daemon on the machine made every `wsfs
// init` of every other host hang in a lookup of its mount point.
func TestChecksDoNotTouchOtherMounts(t *testing.T) {
	testenv.RequireFUSE(t)
	mnt := filepath.Join(t.TempDir(), "hung")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	root := &hangingRoot{hang: make(chan struct{}), release: make(chan struct{})}
	zero := time.Duration(0)
	srv, err := gofs.Mount(mnt, root, &gofs.Options{
		AttrTimeout: &zero, EntryTimeout: &zero,
		MountOptions: fuse.MountOptions{FsName: "hung-test", DisableXAttrs: true},
	})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		root.once.Do(func() { close(root.release) })
		if err := srv.Unmount(); err != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	close(root.hang) // from now on the daemon does not answer

	home := filepath.Join(t.TempDir(), "h")
	h, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- CheckHomeNotOnWsfs(home, []string{mnt}) }()
	go func() { done <- h.CheckNotOnWsfs([]string{mnt}) }()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("a host beside a hung mount: %v", err)
			}
		case <-time.After(20 * time.Second):
			root.once.Do(func() { close(root.release) }) // let the stuck lookup return
			t.Fatal("the check looked up the hung mount point (blocked for 20 s)")
		}
	}
	// And a HOME below a mount is still refused, by its path (resolving
	// that HOME looks into the mount: let the daemon answer again).
	root.once.Do(func() { close(root.release) })
	if err := CheckHomeNotOnWsfs(filepath.Join(mnt, "home"), []string{mnt}); err == nil {
		t.Fatal("a HOME below a wsfs mount point was accepted")
	}
}
