package seglog

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"wsfs/internal/vfs"
	"wsfs/internal/vfs/errorfs"
)

// TestFaults injects one fault per case and checks that the log fails for
// good (a later call that the FS would let through still fails), and that
// the groups synced before the fault survive a reopen on the raw FS.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		// rule is armed after `synced` groups were appended and synced.
		rule func() *errorfs.Rule
		// failAt: "append" or "sync": which call of the next group sees the fault.
		failAt  string
		wantErr error
		segSize int64
	}{
		{"eio-on-syncdata", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSyncData, "*.seg", 1, syscall.EIO) }, "sync", syscall.EIO, 0},
		{"eio-on-write", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpWrite, "*.seg", 1, syscall.EIO) }, "append", syscall.EIO, 0},
		{"short-write-eio", func() *errorfs.Rule {
			return errorfs.OnNth(errorfs.OpWrite, "*.seg", 1, errorfs.Short(syscall.EIO))
		}, "append", syscall.EIO, 0},
		{"eio-on-dir-sync-at-rollover", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpSync, "log", 1, syscall.EIO) }, "append", syscall.EIO, 1},
		{"eio-on-create-at-rollover", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpCreate, "*.seg", 1, syscall.EIO) }, "append", syscall.EIO, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fsys, arm := armable(mem)
			dir := "/ws/log"
			opts := Options{SegmentSize: tc.segSize}
			groups := genGroups(20, 6, 3, 50)
			l := mustOpen(t, fsys, dir, opts)
			appendAll(t, l, 1, groups[:4], true)

			armed := arm(tc.rule())
			_, err := l.Append(groups[4])
			if tc.failAt == "sync" {
				if err != nil {
					t.Fatalf("Append: %v", err)
				}
				err = l.Sync()
			}
			if armed.Injected() != 1 {
				t.Fatalf("fault injected %d times, want 1", armed.Injected())
			}
			checkFailed(t, err, tc.wantErr)
			// The rule fires once only: the FS would now succeed, the log
			// must still refuse.
			_, err = l.Append(groups[5])
			checkFailed(t, err, tc.wantErr)
			checkFailed(t, l.Sync(), tc.wantErr)
			checkFailed(t, l.DeleteThrough(4), tc.wantErr)
			if err := l.Close(); err != nil {
				t.Fatalf("Close of a failed log: %v", err)
			}

			// What was synced before the fault is intact; the failed group
			// is either wholly there or wholly gone.
			arm(nil)
			l2 := mustOpen(t, mem, dir, opts)
			got := replayAll(t, l2, 0)
			if len(got) < 4 || !equalGroups(got, groups[:len(got)]) {
				t.Fatalf("after reopen: %d groups (or content differs), want the 4 synced ones first", len(got))
			}
		})
	}
}

// TestNoSpaceIsRetryable: a full filesystem during an append or a
// rollover leaves the log usable: Append returns a *NoSpaceError (wrapping
// the errno, not ErrFailed), keeps nothing of the group, and the same
// group appended again once there is space gets the next number and
// replays after a reopen with nothing in between.
func TestNoSpaceIsRetryable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rule    func() *errorfs.Rule
		errno   syscall.Errno
		segSize int64
	}{
		{"enospc-on-write", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpWrite, "*.seg", 1, syscall.ENOSPC) }, syscall.ENOSPC, 0},
		{"short-write-enospc", func() *errorfs.Rule {
			return errorfs.OnNth(errorfs.OpWrite, "*.seg", 1, errorfs.Short(syscall.ENOSPC))
		}, syscall.ENOSPC, 0},
		{"edquot-on-write", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpWrite, "*.seg", 1, syscall.EDQUOT) }, syscall.EDQUOT, 0},
		{"enospc-on-create-at-rollover", func() *errorfs.Rule { return errorfs.OnNth(errorfs.OpCreate, "*.seg", 1, syscall.ENOSPC) }, syscall.ENOSPC, 1},
		{"enospc-on-header-at-rollover", func() *errorfs.Rule {
			return errorfs.OnNth(errorfs.OpWrite, "*.seg", 1, errorfs.Short(syscall.ENOSPC))
		}, syscall.ENOSPC, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fsys, arm := armable(mem)
			dir := "/ws/log"
			opts := Options{SegmentSize: tc.segSize}
			groups := genGroups(22, 6, 3, 50)
			l := mustOpen(t, fsys, dir, opts)
			appendAll(t, l, 1, groups[:4], true)

			armed := arm(tc.rule())
			_, err := l.Append(groups[4])
			var ns *NoSpaceError
			if !errors.As(err, &ns) || !errors.Is(err, tc.errno) || errors.Is(err, ErrFailed) {
				t.Fatalf("Append on a full filesystem: %v; want a *NoSpaceError wrapping %v and not ErrFailed", err, tc.errno)
			}
			if armed.Injected() != 1 {
				t.Fatalf("fault injected %d times, want 1", armed.Injected())
			}
			if l.LastGroup() != 4 {
				t.Fatalf("LastGroup %d after a failed append, want 4", l.LastGroup())
			}
			// Space is back: the same group goes in as group 5.
			arm(nil)
			if g, err := l.Append(groups[4]); err != nil || g != 5 {
				t.Fatalf("retried Append = %d, %v; want group 5", g, err)
			}
			appendAll(t, l, 6, groups[5:6], true)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l2 := mustOpen(t, mem, dir, opts)
			if l2.Repaired() != nil {
				t.Errorf("reopen repaired a torn tail %+v: the failed append left bytes behind", *l2.Repaired())
			}
			if got := replayAll(t, l2, 0); !equalGroups(got, groups[:6]) {
				t.Fatalf("after reopen: %d groups (or content differs), want the 6 appended", len(got))
			}
		})
	}
}

// armable wraps mem in an errorfs whose rule arm sets (nil: none), so
// that a test arms a fault between operations; arm returns the rule.
func armable(mem vfs.FS) (vfs.FS, func(*errorfs.Rule) *errorfs.Rule) {
	var armed atomic.Pointer[errorfs.Rule]
	fsys := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op vfs.Op, path string) error {
		if r := armed.Load(); r != nil {
			return r.MaybeError(op, path)
		}
		return nil
	}))
	return fsys, func(r *errorfs.Rule) *errorfs.Rule { armed.Store(r); return r }
}

func checkFailed(t *testing.T, err, cause error) {
	t.Helper()
	if err == nil {
		t.Fatal("call on a failed log succeeded")
	}
	if !errors.Is(err, ErrFailed) || !errors.Is(err, cause) {
		t.Fatalf("error %v: want it to wrap ErrFailed and %v", err, cause)
	}
	if !strings.Contains(err.Error(), "reopen") {
		t.Fatalf("error %q does not say what to do", err)
	}
}

// TestFaultDuringRepair: if the truncate of a torn tail cannot be synced,
// Open fails (it does not claim a repair it could not make durable).
func TestFaultDuringRepair(t *testing.T) {
	groups := genGroups(21, 3, 2, 40)
	segs, _, _, _ := buildLog(t, 0, groups)
	segs[0] = segs[0][:len(segs[0])-3]
	mem, dir := memLog(t, segs)
	rule := errorfs.Always(errorfs.OpSyncData, "*.seg", syscall.EIO)
	if _, err := Open(errorfs.Wrap(mem, rule), dir, Options{}); !errors.Is(err, syscall.EIO) || rule.Injected() == 0 {
		t.Fatalf("Open with failing repair sync = %v, want EIO", err)
	}
	// The failed attempt may already have truncated (not durably); a
	// reopen on a healthy FS ends up with the two complete groups either way.
	l := mustOpen(t, mem, dir, Options{})
	if got := replayAll(t, l, 0); !equalGroups(got, groups[:2]) {
		t.Fatalf("after repair on a healthy FS: %d groups, want 2", len(got))
	}
}

func TestCheckpointFault(t *testing.T) {
	mem := vfs.NewCrashableMem()
	if err := WriteCheckpoint(mem, "/ckpt", 10, []byte("ten")); err != nil {
		t.Fatal(err)
	}
	rule := errorfs.OnNth(errorfs.OpSyncData, "", 1, syscall.EIO)
	if err := WriteCheckpoint(errorfs.Wrap(mem, rule), "/ckpt", 20, []byte("twenty")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WriteCheckpoint with failing sync = %v, want EIO", err)
	}
	g, p, err := ReadLatestCheckpoint(mem, "/ckpt")
	if err != nil || g != 10 || string(p) != "ten" {
		t.Fatalf("after failed checkpoint write: %d %q %v, want the previous one", g, p, err)
	}
}
