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

	"wsfs/internal/objid"
	"wsfs/internal/pool"
)

// stopOK stops d with SIGTERM and reports an exit other than 0.
func stopOK(t *testing.T, d *daemonProc) {
	t.Helper()
	if code, _ := d.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("daemon at %s exited with %d:\n%s", d.mp, code, d.out)
	}
}

// TestGCUnderLoadProcesses is TestGCUnderLoad with real processes: three
// `wsfs mount` daemons serve FUSE mounts that the test writes through
// (replace by temp + fsync + rename + directory fsync, unlink, read back)
// while `wsfs gc --test-grace 3s` runs in a loop as its own process. Every
// operation and pass must succeed; after the daemons stop and the grace
// has passed, a last pass leaves exactly the referenced objects, and a
// remount reads every file back.
func TestGCUnderLoadProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts three workspaces with real daemons")
	}
	skipWithoutFUSE(t)
	const grace = 3 * time.Second
	dir := t.TempDir()
	env := []string{pool.TestMinGraceEnv + "=" + grace.String()}
	home := filepath.Join(dir, "home")
	run := func(args ...string) (string, error) {
		cmd := wsfsCmd(context.Background(), args...)
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	names := []string{"ws-1", "ws-2", "ws-3"}
	if out, err := run("init", "--home", home); err != nil {
		t.Fatalf("init: %v %s", err, out)
	}
	for _, n := range names {
		if out, err := run("create", "--home", home, n); err != nil {
			t.Fatalf("create: %v %s", err, out)
		}
	}
	shared := make([][]byte, 8)
	for i := range shared {
		shared[i] = randBytes(uint64(1000+i), 70_000+i*11_000)
	}
	mounts := make([]string, len(names))
	daemons := make([]*daemonProc, len(names))
	for i, n := range names {
		mounts[i] = filepath.Join(dir, "mnt-"+n)
		os.MkdirAll(mounts[i], 0o755)
		daemons[i] = startNamedDaemon(t, home, n, mounts[i], env)
	}

	models := make([]map[string][]byte, len(names))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range names {
		models[i] = make(map[string][]byte)
		wg.Go(func() {
			mp, m := mounts[i], models[i]
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("f%d", r.IntN(10))
				path := filepath.Join(mp, name)
				switch x := r.IntN(10); {
				case x < 5:
					data := shared[r.IntN(len(shared))]
					if r.IntN(2) == 0 {
						data = randBytes(uint64(i)<<32|uint64(k), 66_000+r.IntN(100_000))
					}
					if err := replaceFile(mp, name, data); err != nil {
						t.Errorf("%s: %v", names[i], err)
						return
					}
					m[name] = data
				case x < 7:
					if _, ok := m[name]; !ok {
						continue
					}
					if err := os.Remove(path); err != nil {
						t.Errorf("%s: %v", names[i], err)
						return
					}
					if err := fsyncDir(mp); err != nil {
						t.Errorf("%s: %v", names[i], err)
						return
					}
					delete(m, name)
				default:
					if want, ok := m[name]; ok {
						got, err := os.ReadFile(path)
						if err != nil || !bytes.Equal(got, want) {
							t.Errorf("%s: read %s during gc: %d bytes, %v", names[i], name, len(got), err)
							return
						}
					}
				}
			}
		})
	}
	passes := 0
	var reclaimed int64
	reclaimedRE := regexp.MustCompile(`\((\d+) bytes\)`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !t.Failed(); passes++ {
		out, err := run("gc", "--home", home, "--test-grace", grace.String())
		if err != nil {
			t.Errorf("gc pass %d: %v\n%s", passes, err, out)
			break
		}
		if m := reclaimedRE.FindStringSubmatch(out); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			reclaimed += n
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, d := range daemons {
		stopOK(t, d)
	}
	if t.Failed() {
		return
	}
	time.Sleep(grace + 500*time.Millisecond)
	out, err := run("gc", "--home", home, "--test-grace", grace.String())
	if err != nil {
		t.Fatalf("final gc: %v %s", err, out)
	}
	t.Logf("%d passes under load reclaimed %d bytes; final pass: %s", passes, reclaimed, out)
	if reclaimed == 0 {
		t.Errorf("nothing reclaimed while the daemons served")
	}
	want := make(map[string]bool)
	for _, m := range models {
		for _, data := range m {
			want[objid.Sum(data).String()] = true
		}
	}
	have := 0
	filepath.WalkDir(filepath.Join(home, "pool", "objects"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			have++
			if !want[d.Name()] {
				t.Errorf("unreferenced object left: %s", d.Name())
			}
		}
		return err
	})
	if have != len(want) {
		t.Errorf("%d objects in the pool, %d referenced", have, len(want))
	}
	for i, n := range names {
		d := startNamedDaemon(t, home, n, mounts[i], env)
		for name, data := range models[i] {
			got, err := os.ReadFile(filepath.Join(mounts[i], name))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s/%s after remount: %d bytes, %v", n, name, len(got), err)
			}
		}
		stopOK(t, d)
	}
}

// replaceFile writes data to a temp in dir, fsyncs it, renames it to name
// and fsyncs dir.
func replaceFile(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return fsyncDir(dir)
}

func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
