package fusefs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"wsfs/internal/workspace"
)

// TestStatus checks the error-to-status mapping on both of its paths: a
// bare errno (alone or directly in a *workspace.Error, read without
// errors.As) and an errno wrapped deeper, found by errors.Is/As.
func TestStatus(t *testing.T) {
	r := &rawFS{log: testLogger(t)}
	wsErr := func(err error) error { return &workspace.Error{Op: "lookup", Ino: 1, Name: "x", Err: err} }
	for _, c := range []struct {
		err  error
		want fuse.Status
	}{
		{nil, fuse.OK},
		{syscall.ENOENT, fuse.ENOENT},
		{wsErr(syscall.ENOENT), fuse.ENOENT},
		{wsErr(syscall.EEXIST), fuse.Status(syscall.EEXIST)},
		{wsErr(syscall.ENOSPC), fuse.Status(syscall.ENOSPC)},
		{wsErr(syscall.EIO), fuse.EIO},
		{wsErr(fmt.Errorf("log: %w", syscall.EDQUOT)), fuse.Status(syscall.EDQUOT)},
		{fmt.Errorf("deep: %w", wsErr(syscall.ENOTDIR)), fuse.Status(syscall.ENOTDIR)},
		{wsErr(errors.New("no errno")), fuse.EIO},
		{errors.New("no errno"), fuse.EIO},
	} {
		if got := r.status("op", c.err); got != c.want {
			t.Errorf("status(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
