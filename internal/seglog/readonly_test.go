package seglog

import (
	"bytes"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"wsfs/internal/vfs"
)

// readAll collects what ReadCommitted hands out.
func readAll(fsys vfs.FS, dir string, after uint64) (map[uint64][][]byte, uint64, error) {
	got := make(map[uint64][][]byte)
	last, err := ReadCommitted(fsys, dir, after, func(g uint64, recs [][]byte) error {
		cp := make([][]byte, len(recs))
		for i, r := range recs {
			cp[i] = bytes.Clone(r)
		}
		got[g] = cp
		return nil
	})
	return got, last, err
}

// TestReadCommitted: the read-only reader hands out exactly the complete
// groups after "after", skips a torn tail and a segment being created,
// reports a log that no longer covers "after" (segments deleted) and
// damage before a later commit as ErrChanged, reports what no writer
// leaves (a bad header with groups behind it, an only segment emptied or
// every segment gone while a checkpoint needs later groups) as a
// *CorruptError, and reads a missing directory as an empty log.
func TestReadCommitted(t *testing.T) {
	tests := []struct {
		name        string
		after       uint64
		damage      func(t *testing.T, fsys vfs.FS, dir string, l *Log)
		wantFirst   uint64 // first group handed out (0: none)
		wantLast    uint64
		wantChange  bool
		wantCorrupt bool // a *CorruptError: damage no writer leaves, even for a moment
	}{
		{name: "whole log", after: 0, wantFirst: 1, wantLast: 40},
		{name: "after a checkpoint", after: 25, wantFirst: 26, wantLast: 40},
		{name: "torn tail being written", after: 0, wantFirst: 1, wantLast: 40,
			damage: func(t *testing.T, fsys vfs.FS, dir string, l *Log) {
				appendBytes(t, fsys, lastSegment(t, fsys, dir), []byte{200, 0, 0, 0, 1, 2, 3, 4, 1, 9, 9})
			}},
		{name: "segments deleted past after", after: 3, wantChange: true,
			damage: func(t *testing.T, fsys vfs.FS, dir string, l *Log) {
				if err := l.DeleteThrough(30); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "segments deleted, after still covered", after: 35, wantFirst: 36, wantLast: 40,
			damage: func(t *testing.T, fsys vfs.FS, dir string, l *Log) {
				if err := l.DeleteThrough(30); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "damage before a later commit", after: 0, wantChange: true,
			damage: func(t *testing.T, fsys vfs.FS, dir string, l *Log) {
				seg := lastSegment(t, fsys, dir)
				b := readSeg(t, fsys, seg)
				b[segHeaderLen+frameHeaderLen] ^= 0xff // first frame's payload
				writeSeg(t, fsys, seg, b)
			}},
		{name: "next segment being created", after: 0, wantFirst: 1, wantLast: 40,
			damage: func(t *testing.T, fsys vfs.FS, dir string, l *Log) {
				last := lastSegment(t, fsys, dir)
				seq, _ := parseSegName(filepath.Base(last))
				// As rollover does: the runway is cut off before the
				// next segment is created.
				cut, err := fsys.OpenReadWrite(last)
				if err != nil {
					t.Fatal(err)
				}
				if err := cut.Truncate(l.segs[len(l.segs)-1].size); err != nil {
					t.Fatal(err)
				}
				cut.Close()
				f, err := fsys.Create(filepath.Join(dir, segName(seq+1)))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if _, err := f.Write(segHeader{seq: seq + 1, firstGroup: 41}.encode()[:20]); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "last segment's header damaged, groups behind it", after: 0, wantCorrupt: true,
			damage: func(t *testing.T, fsys vfs.FS, dir string, l *Log) {
				seg := lastSegment(t, fsys, dir)
				b := readSeg(t, fsys, seg)
				b[3] ^= 0xff
				writeSeg(t, fsys, seg, b)
			}},
		{name: "only segment emptied after a checkpoint", after: 40, wantCorrupt: true,
			damage: func(t *testing.T, fsys vfs.FS, dir string, l *Log) {
				if err := l.DeleteThrough(40); err != nil {
					t.Fatal(err)
				}
				f, err := fsys.OpenReadWrite(lastSegment(t, fsys, dir))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if err := f.Truncate(0); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "every segment removed after a checkpoint", after: 40, wantCorrupt: true,
			damage: func(t *testing.T, fsys vfs.FS, dir string, l *Log) {
				names, err := fsys.List(dir)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range names {
					if err := fsys.Remove(filepath.Join(dir, n)); err != nil {
						t.Fatal(err)
					}
				}
			}},
	}
	for _, fc := range fsCases {
		for _, tt := range tests {
			t.Run(fc.name+"/"+tt.name, func(t *testing.T) {
				fsys, dir := fc.new(t)
				l := mustOpen(t, fsys, dir, Options{SegmentSize: 2 << 10})
				groups := genGroups(7, 40, 3, 300)
				for _, g := range groups {
					if _, err := l.Append(g); err != nil {
						t.Fatal(err)
					}
				}
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				if tt.damage != nil {
					tt.damage(t, fsys, dir, l)
				}
				got, last, err := readAll(fsys, dir, tt.after)
				var ce *CorruptError
				if tt.wantCorrupt != errors.As(err, &ce) {
					t.Fatalf("err = %v, want a *CorruptError: %v", err, tt.wantCorrupt)
				} else if tt.wantCorrupt {
					return
				}
				if tt.wantChange {
					if !errors.Is(err, ErrChanged) {
						t.Fatalf("err = %v, want ErrChanged", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if last != tt.wantLast || len(got) != int(tt.wantLast-tt.wantFirst+1) {
					t.Fatalf("last %d, %d groups; want %d..%d", last, len(got), tt.wantFirst, tt.wantLast)
				}
				for g := tt.wantFirst; g <= tt.wantLast; g++ {
					want := groups[g-1]
					if len(got[g]) != len(want) {
						t.Fatalf("group %d: %d records, want %d", g, len(got[g]), len(want))
					}
					for i := range want {
						if !bytes.Equal(got[g][i], want[i]) {
							t.Fatalf("group %d record %d differs", g, i)
						}
					}
				}
			})
		}
	}
	t.Run("missing directory", func(t *testing.T) {
		if _, last, err := readAll(vfs.NewCrashableMem(), "/nope", 0); err != nil || last != 0 {
			t.Fatalf("missing dir: %d, %v", last, err)
		}
		if _, _, err := readAll(vfs.NewCrashableMem(), "/nope", 5); !errors.Is(err, ErrChanged) {
			t.Fatalf("missing dir after a checkpoint: %v, want ErrChanged", err)
		}
	})
}

// TestReadCommittedConcurrent: while a writer appends, syncs, rolls over
// and deletes old segments, every read either sees every group synced
// before it started (from "after" on, with the right contents) or says
// the log changed; it never hands out a wrong or partial group.
func TestReadCommittedConcurrent(t *testing.T) {
	fsys := vfs.Default
	dir := filepath.Join(t.TempDir(), "log")
	l := mustOpen(t, fsys, dir, Options{SegmentSize: 4 << 10})
	groups := genGroups(9, 600, 4, 200)
	var synced atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i, g := range groups {
			if _, err := l.Append(g); err != nil {
				t.Error(err)
				return
			}
			if err := l.Sync(); err != nil {
				t.Error(err)
				return
			}
			synced.Store(uint64(i + 1))
			if i%50 == 49 {
				if err := l.DeleteThrough(uint64(i - 20)); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	reads, changed := 0, 0
	for synced.Load() < uint64(len(groups)) && !t.Failed() {
		before := synced.Load()
		after := uint64(0)
		if before > 10 {
			after = before - 10
		}
		got, last, err := readAll(fsys, dir, after)
		reads++
		if errors.Is(err, ErrChanged) {
			changed++
			continue
		}
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		if last < before {
			t.Fatalf("read %d: last group %d, but %d were synced before it started", reads, last, before)
		}
		for g := after + 1; g <= last; g++ {
			want := groups[g-1]
			if len(got[g]) != len(want) {
				t.Fatalf("read %d: group %d has %d records, want %d", reads, g, len(got[g]), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[g][i], want[i]) {
					t.Fatalf("read %d: group %d record %d differs", reads, g, i)
				}
			}
		}
	}
	wg.Wait()
	t.Logf("%d reads during %d appends, %d saw the log change", reads, len(groups), changed)
	if reads < 5 {
		t.Errorf("only %d reads overlapped the writer", reads)
	}
}

func lastSegment(t *testing.T, fsys vfs.FS, dir string) string {
	t.Helper()
	names, err := fsys.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, n := range names {
		if _, ok := parseSegName(n); ok {
			last = n
		}
	}
	return filepath.Join(dir, last)
}

func readSeg(t *testing.T, fsys vfs.FS, path string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fsys, path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeSeg(t *testing.T, fsys vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fsys.OpenReadWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}

func appendBytes(t *testing.T, fsys vfs.FS, path string, extra []byte) {
	t.Helper()
	b := readSeg(t, fsys, path)
	writeSeg(t, fsys, path, append(b, extra...))
}
