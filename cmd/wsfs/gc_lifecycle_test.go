package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// gcLifecycleEnv makes TestGCUnderLoadLifecycle run its load for longer
// than the default (a Go duration, e.g. WSFS_GC_LIFECYCLE=5m).
const gcLifecycleEnv = "WSFS_GC_LIFECYCLE"

// lcSnap is a snapshot the lifecycle test took (or a restore took for it),
// with the model's copy of the tree at that moment.
type lcSnap struct {
	ref   string // NAME@ID
	files map[string][]byte
}

// lcWorkspace is one workspace of the lifecycle test: its daemon, mount and
// model (path relative to the root -> content; directories d0..d2 always
// exist), and its forks and snapshots.
type lcWorkspace struct {
	name, mp string
	d        *daemonProc
	files    map[string][]byte
	snaps    []lcSnap
	forks    []*lcWorkspace
	ops      map[string]int
}

// TestGCUnderLoadLifecycle is the "GC under load, real processes" proof of
// the lifecycle issue: three `wsfs mount` daemons serve workspaces that the
// test drives through their FUSE mounts (create, overwrite by temp +
// rename, delete, read back; inline and pooled contents, some shared
// between workspaces) and, in the same sequence per workspace, through
// `wsfs` processes: snapshot create (online, through the daemon), snapshot
// rm, fork (the fork is mounted by its own daemon, checked whole against
// its snapshot, written to and stopped; the oldest fork is removed with
// `wsfs rm` once a workspace has two) and offline restore (the daemon is
// stopped, `wsfs restore`, remounted and checked whole). Meanwhile `wsfs gc
// --test-grace 3s` runs in a loop as its own process. Every operation and
// pass must succeed. Afterwards, once the grace has passed, a last pass
// must leave exactly the referenced objects: the pool's objects and bytes
// equal the contents of every model (workspaces, forks, snapshots) plus
// the manifests reachable from every snapshot and every checkpoint that
// names a manifest root. Then every workspace and fork is remounted and
// every file compared by hash with its model (no file missing or extra),
// and every snapshot's tree is read through its manifests from the pool
// and compared the same way.
//
// The load runs 12 s by default; WSFS_GC_LIFECYCLE=5m runs it longer.
func TestGCUnderLoadLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts three workspaces and their forks with real daemons")
	}
	skipWithoutFUSE(t)
	load := 12 * time.Second
	if v := os.Getenv(gcLifecycleEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", gcLifecycleEnv, v, err)
		}
		load = d
	}
	const grace = 3 * time.Second
	dir := t.TempDir()
	env := []string{pool.TestMinGraceEnv + "=" + grace.String()}
	home := filepath.Join(dir, "home")
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), procCmdTimeout)
		defer cancel()
		cmd := wsfsCmd(ctx, args...)
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			err = fmt.Errorf("did not finish within %v: %w", procCmdTimeout, ctx.Err())
		}
		return string(out), err
	}
	if out, err := run("init", "--home", home); err != nil {
		t.Fatalf("init: %v %s", err, out)
	}
	shared := make([][]byte, 8)
	for i := range shared {
		shared[i] = randBytes(uint64(2000+i), 70_000+i*11_000)
	}
	wss := make([]*lcWorkspace, 3)
	for i := range wss {
		w := &lcWorkspace{name: fmt.Sprintf("ws-%d", i+1), files: map[string][]byte{}, ops: map[string]int{}}
		w.mp = filepath.Join(dir, "mnt-"+w.name)
		if out, err := run("create", "--home", home, w.name); err != nil {
			t.Fatalf("create %s: %v %s", w.name, err, out)
		}
		if err := os.Mkdir(w.mp, 0o755); err != nil {
			t.Fatal(err)
		}
		w.d = startNamedDaemon(t, home, w.name, w.mp, env)
		for _, sub := range []string{"d0", "d1", "d2"} {
			if err := os.Mkdir(filepath.Join(w.mp, sub), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fsyncDir(filepath.Join(w.mp, sub)); err != nil {
				t.Fatal(err)
			}
		}
		if err := fsyncDir(w.mp); err != nil {
			t.Fatal(err)
		}
		wss[i] = w
	}
	// serve starts a daemon of name on mp from any goroutine; one that is
	// not ready in time is sent SIGQUIT, so that its error carries the
	// daemon's goroutines.
	serve := func(name, mp string) (*daemonProc, error) {
		d := launchDaemon(t, home, name, mp, env)
		if err := d.waitReady(); err != nil {
			d.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-d.done:
			case <-time.After(procStopTimeout):
			}
			return nil, fmt.Errorf("mount %s: %w\n%s", name, err, d.out)
		}
		return d, nil
	}
	// checkDiff runs `wsfs diff --json A B` and compares it with the
	// models' diff: every path only in B added, only in A removed, in both
	// with other bytes modified (the workload renames only fresh temps,
	// so no path of one snapshot moves to another path in the other).
	checkDiff := func(a, b lcSnap) error {
		ctx, cancel := context.WithTimeout(context.Background(), procCmdTimeout)
		defer cancel()
		cmd := wsfsCmd(ctx, "diff", "--json", "--home", home, a.ref, b.ref)
		cmd.Env = append(cmd.Env, env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("diff %s %s: %v %s", a.ref, b.ref, err, stderr.String())
		}
		var changes []changeJSON
		if err := json.Unmarshal(out, &changes); err != nil {
			return fmt.Errorf("diff %s %s: %v in %q", a.ref, b.ref, err, out)
		}
		var got []string
		for _, c := range changes {
			got = append(got, c.Op+" "+c.Path)
		}
		want := modelFileDiff(a.files, b.files)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("wsfs diff %s %s printed %q; the models differ by %q", a.ref, b.ref, got, want)
		}
		return nil
	}
	refRE := regexp.MustCompile(`(?m)^(\S+@\d+)$`)
	undoRE := regexp.MustCompile(`the state it replaced is (\S+@\d+)`)

	// step does one random operation on w; an error ends w's sequence.
	step := func(w *lcWorkspace, r *rand.Rand, k int) error {
		name := fmt.Sprintf("d%d/f%d", r.IntN(3), r.IntN(8))
		path := filepath.Join(w.mp, name)
		switch x := r.IntN(100); {
		case x < 50: // create or overwrite: inline, shared pooled or unique pooled
			var data []byte
			switch r.IntN(3) {
			case 0:
				data = randBytes(uint64(len(w.name))<<40|uint64(k)<<8|1, 1+r.IntN(8_000))
			case 1:
				data = shared[r.IntN(len(shared))]
			default:
				data = randBytes(uint64(w.name[3])<<40|uint64(k)<<8|2, workspace.DefaultInlineMax+1+r.IntN(100_000))
			}
			if err := replaceFile(filepath.Dir(path), filepath.Base(path), data); err != nil {
				return err
			}
			w.files[name] = data
			w.ops["write"]++
		case x < 67: // delete
			if _, ok := w.files[name]; !ok {
				return nil
			}
			if err := os.Remove(path); err != nil {
				return err
			}
			if err := fsyncDir(filepath.Dir(path)); err != nil {
				return err
			}
			delete(w.files, name)
			w.ops["delete"]++
		case x < 78: // read back
			if want, ok := w.files[name]; ok {
				got, err := os.ReadFile(path)
				if err != nil || !bytes.Equal(got, want) {
					return fmt.Errorf("read %s during gc: %d bytes (%v), want %d", name, len(got), err, len(want))
				}
				w.ops["read"]++
			}
		case x < 80: // diff two snapshots (the workspace is served)
			if len(w.snaps) < 2 {
				return nil
			}
			a, b := w.snaps[r.IntN(len(w.snaps))], w.snaps[r.IntN(len(w.snaps))]
			if err := checkDiff(a, b); err != nil {
				return err
			}
			w.ops["diff"]++
		case x < 89: // snapshot, online through the daemon
			out, err := run("snapshot", "create", "--home", home, w.name)
			m := refRE.FindStringSubmatch(out)
			if err != nil || m == nil {
				return fmt.Errorf("snapshot create: %v %s", err, out)
			}
			w.snaps = append(w.snaps, lcSnap{ref: m[1], files: maps.Clone(w.files)})
			w.ops["snapshot"]++
		case x < 92: // snapshot rm: what only it referenced becomes garbage
			if len(w.snaps) < 3 {
				return nil
			}
			j := r.IntN(len(w.snaps))
			if out, err := run("snapshot", "rm", "--home", home, w.snaps[j].ref); err != nil {
				return fmt.Errorf("snapshot rm %s: %v %s", w.snaps[j].ref, err, out)
			}
			w.snaps = slices.Delete(w.snaps, j, j+1)
			w.ops["snapshot rm"]++
		case x < 96: // fork, mount the fork, check it, change it; rm the oldest
			var err error
			if len(w.snaps) == 0 {
				return nil
			}
			if len(w.forks) == 2 {
				if out, err := run("rm", "--home", home, w.forks[0].name); err != nil {
					return fmt.Errorf("rm %s: %v %s", w.forks[0].name, err, out)
				}
				w.forks = w.forks[1:]
				w.ops["rm fork"]++
			}
			s := w.snaps[r.IntN(len(w.snaps))]
			f := &lcWorkspace{name: fmt.Sprintf("%s-f%d", w.name, k), files: maps.Clone(s.files)}
			if out, err := run("fork", "--home", home, s.ref, f.name); err != nil {
				return fmt.Errorf("fork %s %s: %v %s", s.ref, f.name, err, out)
			}
			f.mp = filepath.Join(dir, "mnt-"+f.name)
			if err := os.Mkdir(f.mp, 0o755); err != nil {
				return err
			}
			if f.d, err = serve(f.name, f.mp); err != nil {
				return err
			}
			if err := checkTree(f.mp, f.files); err != nil {
				return fmt.Errorf("fork %s of %s: %w", f.name, s.ref, err)
			}
			data := randBytes(uint64(k)<<8|3, workspace.DefaultInlineMax+1+r.IntN(50_000))
			if err := replaceFile(filepath.Join(f.mp, "d0"), "fork-only", data); err != nil {
				return err
			}
			f.files["d0/fork-only"] = data
			if code, _ := f.d.stop(syscall.SIGTERM); code != 0 {
				return fmt.Errorf("fork daemon %s exited %d: %s", f.name, code, f.d.out)
			}
			w.forks = append(w.forks, f)
			w.ops["fork"]++
		default: // offline restore: stop, restore, remount, check
			if len(w.snaps) == 0 {
				return nil
			}
			s := w.snaps[r.IntN(len(w.snaps))]
			if code, _ := w.d.stop(syscall.SIGTERM); code != 0 {
				return fmt.Errorf("daemon exited %d: %s", code, w.d.out)
			}
			out, err := run("restore", "--home", home, s.ref)
			m := undoRE.FindStringSubmatch(out)
			if err != nil || m == nil {
				return fmt.Errorf("restore %s: %v %s", s.ref, err, out)
			}
			w.snaps = append(w.snaps, lcSnap{ref: m[1], files: w.files})
			w.files = maps.Clone(s.files)
			if w.d, err = serve(w.name, w.mp); err != nil {
				return err
			}
			if err := checkTree(w.mp, w.files); err != nil {
				return fmt.Errorf("after restore to %s: %w", s.ref, err)
			}
			w.ops["restore"]++
		}
		return nil
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, w := range wss {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 8))
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := step(w, r, k); err != nil {
					t.Errorf("%s: step %d: %v", w.name, k, err)
					return
				}
			}
		})
	}
	passes := 0
	var reclaimed int64
	reclaimedRE := regexp.MustCompile(`\((\d+) bytes\)`)
	for deadline := time.Now().Add(load); time.Now().Before(deadline) && !t.Failed(); passes++ {
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
	for _, w := range wss {
		if w.d == nil {
			continue // its remount failed (reported): nothing serves it
		}
		if code, _ := w.d.stop(syscall.SIGTERM); code != 0 {
			t.Errorf("%s: daemon exited %d: %s", w.name, code, w.d.out)
		}
	}
	for _, w := range wss {
		t.Logf("%s: ops %v, %d snapshots kept, %d forks kept", w.name, w.ops, len(w.snaps), len(w.forks))
	}
	if t.Failed() {
		return
	}
	all := slices.Clone(wss)
	for _, w := range wss {
		all = append(all, w.forks...)
	}

	// Quiet now: after the grace, one pass leaves exactly what is referenced.
	time.Sleep(grace + 500*time.Millisecond)
	objDir, tmpDir := filepath.Join(home, "pool", "objects"), filepath.Join(home, "pool", "tmp")
	beforeObjs, beforeBytes := poolUsage(t, objDir)
	_, beforeTemps := poolUsage(t, tmpDir) // gc's count includes stale temps
	out, err := run("gc", "--home", home, "--test-grace", grace.String())
	if err != nil {
		t.Fatalf("final gc: %v %s", err, out)
	}
	m := reclaimedRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("final gc printed no byte count: %s", out)
	}
	last, _ := strconv.ParseInt(m[1], 10, 64)
	afterObjs, afterBytes := poolUsage(t, objDir)
	if tmp, _ := os.ReadDir(tmpDir); len(tmp) != 0 {
		t.Errorf("%d temps left in the pool after the last pass", len(tmp))
	}
	t.Logf("%d gc passes under load reclaimed %d bytes; before the last pass the pool held %d objects (%d bytes), after it %d (%d bytes)",
		passes, reclaimed, len(beforeObjs), beforeBytes, len(afterObjs), afterBytes)
	if reclaimed == 0 {
		t.Errorf("nothing reclaimed while the daemons served")
	}
	if beforeBytes+beforeTemps-afterBytes != last {
		t.Errorf("the last pass says it reclaimed %d bytes; the pool shrank by %d", last, beforeBytes+beforeTemps-afterBytes)
	}

	p, err := pool.Open(vfs.Default, filepath.Join(home, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := &manifest.PoolStore{Pool: p}
	want := map[objid.ID]int64{} // referenced object -> its size
	addFiles := func(files map[string][]byte) {
		for _, data := range files {
			if len(data) > workspace.DefaultInlineMax {
				want[objid.Sum(data)] = int64(len(data))
			}
		}
	}
	var snaps int
	for _, w := range wss {
		for _, s := range w.snaps {
			_, id, err := parseSnapshotRef(s.ref)
			if err != nil {
				t.Fatal(err)
			}
			in, err := snapshot.Get(vfs.Default, filepath.Join(home, "state", "workspaces", w.name), id)
			if err != nil {
				t.Fatalf("%s: %v", s.ref, err)
			}
			got, err := readManifestTree(st, in.Root, want)
			if err != nil {
				t.Fatalf("%s: %v", s.ref, err)
			}
			if err := sameFiles(got, s.files); err != nil {
				t.Errorf("snapshot %s read through its manifests: %v", s.ref, err)
			}
			addFiles(s.files)
			snaps++
		}
	}
	for _, w := range all {
		addFiles(w.files)
		_, payload, err := seglog.ReadLatestCheckpoint(vfs.Default, filepath.Join(home, "state", "workspaces", w.name, "checkpoint"))
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if payload != nil && manifest.IsRef(payload) {
			root, _, err := manifest.DecodeRef(payload)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := readManifestTree(st, root, want); err != nil {
				t.Fatalf("%s: checkpoint's manifests: %v", w.name, err)
			}
		}
	}
	var wantBytes int64
	for id, n := range want {
		wantBytes += n
		if _, ok := afterObjs[id]; !ok {
			t.Errorf("referenced object %s is missing after gc", id)
		}
	}
	for id := range afterObjs {
		if _, ok := want[id]; !ok {
			t.Errorf("unreferenced object %s left after the last pass", id)
		}
	}
	if afterBytes != wantBytes {
		t.Errorf("the pool holds %d bytes after the last pass; the referenced objects are %d bytes", afterBytes, wantBytes)
	}

	diffs := 0
	for _, w := range wss {
		for i := 1; i < len(w.snaps); i++ {
			if err := checkDiff(w.snaps[i-1], w.snaps[i]); err != nil {
				t.Error(err)
			}
			diffs++
		}
	}
	for _, w := range all {
		d := startNamedDaemon(t, home, w.name, w.mp, env)
		if err := checkTree(w.mp, w.files); err != nil {
			t.Errorf("%s after gc and remount: %v", w.name, err)
		}
		if code, _ := d.stop(syscall.SIGTERM); code != 0 {
			t.Errorf("%s: daemon exited %d: %s", w.name, code, d.out)
		}
	}
	t.Logf("verified %d workspaces and forks, %d snapshots, %d diffs of adjacent snapshots; %d referenced objects (%d bytes), 0 missing", len(all), snaps, diffs, len(want), wantBytes)
}

// poolUsage returns the bytes of the files under dir and, for the pool's
// objects directory, each object with its size.
func poolUsage(t *testing.T, dir string) (map[objid.ID]int64, int64) {
	t.Helper()
	objs := map[objid.ID]int64{}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		total += fi.Size()
		if filepath.Base(dir) != "objects" {
			return nil
		}
		id, err := objid.Parse(d.Name())
		if err != nil {
			return fmt.Errorf("%s in the pool: %w", path, err)
		}
		objs[id] = fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs, total
}

// readManifestTree reads the tree named by manifest root id from st: the
// regular files by path (relative, slash-separated) with their contents,
// read from the pool (inline contents from their manifest). It adds every
// manifest object and content object it reads to objs with its size.
func readManifestTree(st *manifest.PoolStore, root objid.ID, objs map[objid.ID]int64) (map[string][]byte, error) {
	files := map[string][]byte{}
	read := func(id objid.ID) ([]byte, error) {
		b, err := st.Get(id)
		if err == nil {
			objs[id] = int64(len(b))
		}
		return b, err
	}
	if _, err := read(root); err != nil {
		return nil, err
	}
	r, err := manifest.ReadRoot(st, root)
	if err != nil {
		return nil, err
	}
	var walk func(prefix string, mid objid.ID) error
	walk = func(prefix string, mid objid.ID) error {
		if _, err := read(mid); err != nil {
			return err
		}
		es, err := manifest.ReadDir(st, mid)
		if err != nil {
			return err
		}
		for _, e := range es {
			path := prefix + e.Name
			switch {
			case e.IsDir():
				if err := walk(path+"/", e.Dir); err != nil {
					return err
				}
			case e.IsReg():
				c := e.Content
				switch {
				case c.IsObject:
					b, err := read(c.Object)
					if err != nil {
						return fmt.Errorf("%s: %w", path, err)
					}
					files[path] = b
				case c.IsChunked():
					return fmt.Errorf("%s: chunked content (the test writes none)", path)
				default:
					files[path] = bytes.Clone(c.Inline)
				}
			}
		}
		return nil
	}
	if err := walk("", r.Entry.Dir); err != nil {
		return nil, err
	}
	return files, nil
}

// modelFileDiff is what `wsfs diff --json` of two snapshots with these
// files must print, as sorted "op /path" lines.
func modelFileDiff(a, b map[string][]byte) []string {
	var out []string
	for path, x := range a {
		y, ok := b[path]
		switch {
		case !ok:
			out = append(out, "removed /"+path)
		case !bytes.Equal(x, y):
			out = append(out, "modified /"+path)
		}
	}
	for path := range b {
		if _, ok := a[path]; !ok {
			out = append(out, "added /"+path)
		}
	}
	slices.Sort(out)
	return out
}

// checkTree compares the regular files under mp with want (paths relative
// to mp, slash-separated): the same names, and contents with the same hash.
func checkTree(mp string, want map[string][]byte) error {
	got := map[string][]byte{}
	err := filepath.WalkDir(mp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mp, path)
		got[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return err
	}
	return sameFiles(got, want)
}

// sameFiles compares two path -> content maps by content hash, naming
// every difference.
func sameFiles(got, want map[string][]byte) error {
	var diffs []string
	for path, w := range want {
		g, ok := got[path]
		switch {
		case !ok:
			diffs = append(diffs, path+" missing")
		case objid.Sum(g) != objid.Sum(w):
			diffs = append(diffs, fmt.Sprintf("%s: %d bytes hash %s, want %d bytes hash %s", path, len(g), objid.Sum(g), len(w), objid.Sum(w)))
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			diffs = append(diffs, path+" extra")
		}
	}
	if diffs != nil {
		slices.Sort(diffs)
		return fmt.Errorf("%d differences: %s", len(diffs), strings.Join(diffs, "; "))
	}
	return nil
}
