package workspace

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestCheckpointAndSegmentDeletion writes enough log to trigger several
// checkpoints with small segments, then checks that checkpoints exist, the
// first segments are gone, and a reopen (checkpoint + replay) gives the
// same tree; then a second round on top of the recovered state.
func TestCheckpointAndSegmentDeletion(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		smallLimits(e)
		e.opts.CheckpointBytes = 4 << 10
		e.opts.SegmentSize = 2 << 10
		logDir := filepath.Join(e.opts.Dir, "log")
		ckDir := filepath.Join(e.opts.Dir, "checkpoint")
		var want string
		for round := range 2 {
			w := e.open()
			if round > 0 {
				if got := dumpOf(w); got != want {
					t.Fatalf("round %d: reopened tree differs:\n%s\nwant:\n%s", round, got, want)
				}
			}
			d := A(t)(w.Mkdir(RootIno, fmt.Sprintf("r%d", round), 0o755, me))
			for i := range 200 {
				writeFile(t, w, d.Ino, fmt.Sprintf("f%03d", i%50), pattern(20+i%150, uint64(i)))
				if i%7 == 0 {
					noErr(t, w.Sync())
				}
				if i%11 == 0 && i > 50 {
					noErr(t, w.Unlink(d.Ino, fmt.Sprintf("f%03d", i%50)))
				}
			}
			noErr(t, w.Sync())
			st := w.Stats()
			if st.CheckpointGroup == 0 || st.Failed != nil || st.Pending != 0 {
				t.Fatalf("stats %+v: want a checkpoint, no failure, nothing pending", st)
			}
			want = dumpOf(w)
			noErr(t, w.Close())
			ck, err := e.fs.List(ckDir)
			noErr(t, err)
			segs, err := e.fs.List(logDir)
			noErr(t, err)
			if len(ck) == 0 || len(segs) == 0 || segs[0] == "00000000000000000001.seg" {
				t.Fatalf("checkpoints %v, segments %v: want checkpoints and the first segments deleted", ck, segs)
			}
		}
		w := e.open()
		defer w.Close()
		if got := dumpOf(w); got != want {
			t.Fatalf("final reopen differs:\n%s\nwant:\n%s", got, want)
		}
	})
}
