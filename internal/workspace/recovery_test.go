package workspace

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"wsfs/internal/seglog"
)

// segments returns the workspace's log segments, oldest first, with the
// bytes of their complete groups (the active one's file goes on with its
// runway of zeros).
func segments(t *testing.T, e *env) []seglog.SegmentInfo {
	t.Helper()
	l, err := seglog.OpenReadOnly(e.fs, filepath.Join(e.opts.Dir, "log"))
	noErr(t, err)
	defer l.Close()
	return l.Segments()
}

// fillLog writes ten files, each in its own synced group.
func fillLog(t *testing.T, e *env) {
	w := e.open()
	for i := range 10 {
		writeFile(t, w, RootIno, fmt.Sprintf("f%d", i), []byte(fmt.Sprintf("content %d", i)))
		noErr(t, w.Sync())
	}
	noErr(t, w.Close())
}

// TestTornTailRepaired cuts the last group short, as a crash in the middle
// of an append leaves it: Open repairs it and every earlier group is there.
func TestTornTailRepaired(t *testing.T) {
	e := diskEnv(t)
	fillLog(t, e)
	segs := segments(t, e)
	last := segs[len(segs)-1]
	f, err := e.fs.OpenReadWrite(last.Path)
	noErr(t, err)
	noErr(t, f.Truncate(last.Size-3))
	noErr(t, f.Close())
	w := e.open()
	defer w.Close()
	for i := range 9 {
		eq(t, readAll(t, w, lookupPath(t, w, fmt.Sprintf("f%d", i)).Ino), []byte(fmt.Sprintf("content %d", i)), "file before the torn group")
	}
}

// TestCorruptLogRefused damages a group that is not the last: Open must
// refuse with the *seglog.CorruptError (never silently drop synced groups).
func TestCorruptLogRefused(t *testing.T) {
	e := diskEnv(t)
	e.damaged = true // the test corrupts a group
	fillLog(t, e)
	seg := segments(t, e)[0]
	f, err := e.fs.OpenReadWrite(seg.Path)
	noErr(t, err)
	b := make([]byte, 1)
	off := seg.Size / 3
	_, err = f.ReadAt(b, off)
	noErr(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, off)
	noErr(t, err)
	noErr(t, f.Close())
	_, err = Open(e.opts)
	var ce *seglog.CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("Open of a corrupt log: %v, want a *seglog.CorruptError", err)
	}
	// The failed Open released the lock.
	_, err = Open(e.opts)
	if !errors.As(err, &ce) {
		t.Fatalf("second Open: %v", err)
	}
}
