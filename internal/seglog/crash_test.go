package seglog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"wsfs/internal/vfs"
)

// crashPoint is the durable state at one instant of a workload, and what
// had been acknowledged (Sync returned nil) by then.
type crashPoint struct {
	fs     *vfs.MemFS
	acked  uint64 // every group <= acked had a successful Sync
	desc   string
	reopen int
}

// TestCrashRecovery runs random workloads (appends, syncs, rollovers,
// DeleteThrough, reopen) on the crashable MemFS, takes a crash image after
// every durability-relevant operation, and checks that each image opens,
// without corruption, to a contiguous run of the appended groups that ends
// at or after the last acknowledged group.
func TestCrashRecovery(t *testing.T) {
	for seed := uint64(1); seed <= 24; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			groups := genGroups(seed+100, 60, 4, 120)
			opts := Options{SegmentSize: int64(200 + r.IntN(600))}
			mem := vfs.NewCrashableMem()
			const dir = "/ws/log"

			var points []crashPoint
			var acked uint64
			ops := 0
			mem.SetHook(func(op vfs.Op, path string) {
				ops++
				points = append(points, crashPoint{fs: mem.CrashClone(), acked: acked, desc: fmt.Sprintf("after op %d (%v %s)", ops, op, path)})
			})

			l, err := Open(mem, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			next := uint64(1)
			for next <= uint64(len(groups)) {
				switch x := r.IntN(10); {
				case x < 6:
					g, err := l.Append(groups[next-1])
					if err != nil || g != next {
						t.Fatalf("Append = %d, %v; want %d", g, err, next)
					}
					next++
				case x < 8:
					if err := l.Sync(); err != nil {
						t.Fatal(err)
					}
					acked = l.LastGroup()
				case x < 9:
					if err := l.DeleteThrough(uint64(r.IntN(int(acked) + 1))); err != nil {
						t.Fatal(err)
					}
				default:
					// Clean restart without crash: unsynced groups survive
					// in the running FS, and the log continues.
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					if l, err = Open(mem, dir, opts); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			acked = l.LastGroup()
			l.Close()
			mem.SetHook(nil)
			points = append(points, crashPoint{fs: mem.CrashClone(), acked: acked, desc: "at the end"})

			for _, p := range points {
				checkCrashImage(t, p, dir, opts, groups)
			}
			t.Logf("%d crash images checked", len(points))
		})
	}
}

func checkCrashImage(t *testing.T, p crashPoint, dir string, opts Options, groups [][][]byte) {
	t.Helper()
	l, err := Open(p.fs, dir, opts)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			t.Fatalf("crash %s: a crash image must never be corrupt: %v", p.desc, err)
		}
		t.Fatalf("crash %s: Open: %v", p.desc, err)
	}
	defer l.Close()
	if l.LastGroup() < p.acked {
		t.Fatalf("crash %s: recovered through group %d, but group %d was acknowledged", p.desc, l.LastGroup(), p.acked)
	}
	first := l.FirstGroup()
	got := replayAll(t, l, first-1)
	if uint64(len(got)) != l.LastGroup()-first+1 {
		t.Fatalf("crash %s: replayed %d groups from %d, LastGroup %d", p.desc, len(got), first, l.LastGroup())
	}
	if !equalGroups(got, groups[first-1:l.LastGroup()]) {
		t.Fatalf("crash %s: recovered groups differ from the appended ones", p.desc)
	}
	// A recovered log is writable and keeps numbering.
	if g, err := l.Append([][]byte{[]byte("after crash")}); err != nil || g != l.LastGroup() || g != uint64(len(got))+first {
		t.Fatalf("crash %s: Append after recovery = %d, %v", p.desc, g, err)
	}
	if err := l.Sync(); err != nil {
		t.Fatalf("crash %s: Sync after recovery: %v", p.desc, err)
	}
}
