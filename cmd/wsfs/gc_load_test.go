package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// TestGCUnderLoad is lifecycle issue item 6 and hardening item 17: `wsfs
// gc` runs in a loop (test grace 3 s) while three served workspaces create,
// replace (temp + rename), delete and read pooled files, with contents
// shared between them (dedup across workspaces) and with frequent
// checkpoints and segment deletions. Every write and read must succeed
// (a missing object would fail a drain or a read with EIO), every gc pass
// must succeed, and afterwards every file of every workspace reads back
// from a fresh open; once the writers stop and the grace has passed, one
// more pass leaves exactly the referenced objects in the pool.
func TestGCUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 15 s")
	}
	const grace = 3 * time.Second
	t.Setenv(pool.TestMinGraceEnv, grace.String())
	ctx := context.Background()
	home := newHost(t)
	for _, n := range []string{"ws-2", "ws-3"} {
		if code, out := wsfsRun(ctx, "create", "--home", home, n); code != 0 {
			t.Fatalf("create %s: %d %s", n, code, out)
		}
	}
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"ws", "ws-2", "ws-3"}
	shared := make([][]byte, 10)
	for i := range shared {
		shared[i] = randBytes(uint64(i), 70_000+i*9_000)
	}

	type model struct {
		mu    sync.Mutex
		files map[string][]byte
	}
	models := make([]*model, len(names))
	wss := make([]*workspace.Workspace, len(names))
	for i, n := range names {
		p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{}) // one pool per "daemon"
		if err != nil {
			t.Fatal(err)
		}
		wss[i], err = workspace.Open(workspace.Options{Dir: h.WorkspaceDir(n), Pool: p,
			CheckpointBytes: 4 << 10, SegmentSize: 2 << 10, GroupWindow: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		models[i] = &model{files: make(map[string][]byte)}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops [3]int
	for i := range names {
		wg.Go(func() {
			ws, m := wss[i], models[i]
			r := rand.New(rand.NewPCG(uint64(i), 42))
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("f%d", r.IntN(12))
				switch x := r.IntN(10); {
				case x < 5: // replace name with shared or unique content
					var data []byte
					if r.IntN(2) == 0 {
						data = shared[r.IntN(len(shared))]
					} else {
						data = randBytes(uint64(i)<<32|uint64(k), 66_000+r.IntN(100_000))
					}
					tmp := fmt.Sprintf(".tmp%d", k)
					if err := putFile(ws, tmp, data); err != nil {
						t.Errorf("%s: write %s: %v", names[i], tmp, err)
						return
					}
					if err := ws.Rename(workspace.RootIno, tmp, workspace.RootIno, name, 0); err != nil {
						t.Errorf("%s: rename: %v", names[i], err)
						return
					}
					if err := ws.Sync(); err != nil {
						t.Errorf("%s: sync after rename: %v", names[i], err)
						return
					}
					m.mu.Lock()
					m.files[name] = data
					m.mu.Unlock()
				case x < 7: // delete
					m.mu.Lock()
					_, ok := m.files[name]
					m.mu.Unlock()
					if !ok {
						continue
					}
					if err := ws.Unlink(workspace.RootIno, name); err != nil {
						t.Errorf("%s: unlink: %v", names[i], err)
						return
					}
					if err := ws.Sync(); err != nil {
						t.Errorf("%s: sync after unlink: %v", names[i], err)
						return
					}
					m.mu.Lock()
					delete(m.files, name)
					m.mu.Unlock()
				default: // read back
					m.mu.Lock()
					want, ok := m.files[name]
					m.mu.Unlock()
					if !ok {
						continue
					}
					if err := checkFile(ws, name, want); err != nil {
						t.Errorf("%s: read during gc: %v", names[i], err)
						return
					}
				}
				ops[i]++
			}
		})
	}

	reclaimedRE := regexp.MustCompile(`\((\d+) bytes\)`)
	var passes int
	var reclaimed int64
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) && !t.Failed() {
		code, out := wsfsRun(ctx, "gc", "--home", home, "--test-grace", grace.String())
		if code != 0 {
			t.Errorf("gc pass %d under load: exit %d, %s", passes, code, out)
			break
		}
		if m := reclaimedRE.FindStringSubmatch(out); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			reclaimed += n
		}
		passes++
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, ws := range wss {
		if err := ws.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d gc passes reclaimed %d bytes under load; writer ops %v", passes, reclaimed, ops)
	if t.Failed() {
		return
	}
	if passes < 5 || reclaimed == 0 {
		t.Errorf("%d passes reclaimed %d bytes; want several passes reclaiming something", passes, reclaimed)
	}

	// Quiet now: after the grace, one pass leaves only what is referenced.
	time.Sleep(grace + 500*time.Millisecond)
	if code, out := wsfsRun(ctx, "gc", "--home", home, "--test-grace", grace.String()); code != 0 {
		t.Fatalf("final gc: exit %d, %s", code, out)
	}
	want := make(map[pool.ID]bool)
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		ws, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir(n), Pool: p})
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range models[i].files {
			if err := checkFile(ws, name, data); err != nil {
				t.Errorf("%s after gc and remount: %v", n, err)
			}
			want[pool.Sum(data)] = true
		}
		if err := ws.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var have int
	filepath.WalkDir(filepath.Join(h.PoolDir(), "objects"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			have++
			id, perr := pool.ParseID(d.Name())
			if perr != nil || !want[id] {
				t.Errorf("unreferenced object left after the final pass: %s", d.Name())
			}
		}
		return err
	})
	if have != len(want) {
		t.Errorf("%d objects in the pool, %d referenced", have, len(want))
	}
	if tmp, _ := os.ReadDir(filepath.Join(h.PoolDir(), "tmp")); len(tmp) != 0 {
		t.Errorf("%d temps left in the pool", len(tmp))
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// putFile creates name with data and fsyncs it.
func putFile(ws *workspace.Workspace, name string, data []byte) error {
	a, err := ws.Create(workspace.RootIno, name, 0o644, workspace.Caller{})
	if err != nil {
		return err
	}
	fh, err := ws.OpenFile(a.Ino, syscall.O_WRONLY)
	if err != nil {
		return err
	}
	defer fh.Release()
	if _, err := fh.WriteAt(data, 0); err != nil {
		return err
	}
	return fh.Fsync(false)
}

// checkFile reads name and compares it with want.
func checkFile(ws *workspace.Workspace, name string, want []byte) error {
	a, err := ws.Lookup(workspace.RootIno, name)
	if err != nil {
		return err
	}
	fh, err := ws.OpenFile(a.Ino, syscall.O_RDONLY)
	if err != nil {
		return err
	}
	defer fh.Release()
	got := make([]byte, len(want)+1)
	n, err := fh.ReadAt(got, 0)
	if n != len(want) || !bytes.Equal(got[:n], want) {
		return fmt.Errorf("%s: read %d bytes (%v), want %d equal bytes", name, n, err, len(want))
	}
	return nil
}
