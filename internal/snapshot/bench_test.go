package snapshot

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// The benchmarks share one workspace of benchFiles files on the OS file
// system, built once per process: 10 top directories x 100 directories x
// 100 files, each of 0 to 2 KiB (uniform, random bytes: 100 MB of inline
// content), as a source tree of small files. Set WSFS_BENCH_FILES to
// change the count.
var (
	benchOnce  sync.Once
	benchState struct {
		dir  string
		env  *env
		w    *workspace.Workspace
		dirs []workspace.Ino // the 1,000 leaf directories
		err  error
	}
)

func benchFiles() int {
	if s := os.Getenv("WSFS_BENCH_FILES"); s != "" {
		var n int
		fmt.Sscan(s, &n)
		return n
	}
	return 100_000
}

func benchWorkspace(b *testing.B) (*env, *workspace.Workspace, []workspace.Ino) {
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "wsfs-snapbench-")
		if err != nil {
			benchState.err = err
			return
		}
		benchState.dir = dir
		e := newEnv(b, vfs.Default, dir)
		opts := e.opts("w")
		opts.GroupRecords = 4096
		opts.GroupWindow = 100 * time.Millisecond
		w, err := workspace.Open(opts)
		if err != nil {
			benchState.err = err
			return
		}
		r := rand.New(rand.NewPCG(1, 2))
		n := benchFiles()
		perDir := 100
		var leaves []workspace.Ino
		start := time.Now()
		for i := 0; i < n; i += perDir {
			top := workspace.Ino(0)
			tn := fmt.Sprint("top", (i/perDir)%10)
			if a, err := w.Lookup(workspace.RootIno, tn); err == nil {
				top = a.Ino
			} else {
				top = must[workspace.Attr](b)(w.Mkdir(workspace.RootIno, tn, 0o755, me)).Ino
			}
			d := must[workspace.Attr](b)(w.Mkdir(top, fmt.Sprint("d", i/perDir), 0o755, me)).Ino
			leaves = append(leaves, d)
			for j := 0; j < perDir && i+j < n; j++ {
				data := make([]byte, r.IntN(2049))
				for k := range data {
					data[k] = byte(r.Uint32())
				}
				writeFile(b, w, d, fmt.Sprintf("file%03d.go", j), data)
			}
		}
		noErr(b, w.Sync())
		fmt.Fprintf(os.Stderr, "bench setup: %d files in %v\n", n, time.Since(start).Round(time.Millisecond))
		benchState.env, benchState.w, benchState.dirs = e, w, leaves
	})
	if benchState.err != nil {
		b.Fatal(benchState.err)
	}
	return benchState.env, benchState.w, benchState.dirs
}

// freshPool opens an empty pool in a new directory, so that a snapshot
// there is a first snapshot (every manifest new). The benchmark
// workspace's contents are all inline, so its manifests are all a
// snapshot needs.
func freshPool(b *testing.B, e *env) *pool.Pool {
	dir := filepath.Join(benchState.dir, fmt.Sprintf("pool-%d", time.Now().UnixNano()))
	noErr(b, os.MkdirAll(dir, 0o755))
	return must[*pool.Pool](b)(pool.Open(vfs.Default, dir, pool.Options{}))
}

// BenchmarkSnapshotFirst: a first snapshot of the whole workspace (every
// manifest written and synced), from the open workspace.
func BenchmarkSnapshotFirst(b *testing.B) {
	e, w, _ := benchWorkspace(b)
	var stats manifest.BuildStats
	for b.Loop() {
		b.StopTimer()
		p := freshPool(b, e)
		wsDir := filepath.Join(benchState.dir, fmt.Sprintf("cat-%d", time.Now().UnixNano()))
		b.StartTimer()
		noErr(b, w.StillTree(func(t *namespace.Tree, g uint64) error {
			var err error
			_, stats, err = Create(vfs.Default, wsDir, p, t, g, "", time.Now())
			return err
		}))
	}
	b.ReportMetric(float64(stats.Dirs), "dirs")
	b.ReportMetric(float64(stats.Bytes)/1e6, "MB-manifests")
}

// BenchmarkSnapshotAfter10Changes: 10 files changed (in 10 directories)
// since the previous snapshot; the timed part is the snapshot.
func BenchmarkSnapshotAfter10Changes(b *testing.B) {
	e, w, dirs := benchWorkspace(b)
	wsDir := e.wsDir("w")
	take := func() {
		noErr(b, w.StillTree(func(t *namespace.Tree, g uint64) error {
			_, _, err := Create(vfs.Default, wsDir, e.pool, t, g, "", time.Now())
			return err
		}))
	}
	take()
	r := rand.New(rand.NewPCG(3, 4))
	for b.Loop() {
		b.StopTimer()
		for i := 0; i < 10; i++ {
			d := dirs[r.IntN(len(dirs))]
			writeFile(b, w, d, fmt.Sprintf("file%03d.go", r.IntN(100)), []byte(fmt.Sprint("changed ", r.Uint64())))
		}
		noErr(b, w.Sync())
		b.StartTimer()
		take()
	}
}

// BenchmarkSnapshotServingAfter10Changes: the daemon's path
// (CreateServing: commit, copy of the durable tree, build, sync) with 10
// files changed since the previous snapshot.
func BenchmarkSnapshotServingAfter10Changes(b *testing.B) {
	e, w, dirs := benchWorkspace(b)
	wsDir := e.wsDir("w")
	_, _, err := CreateServing(w, vfs.Default, wsDir, e.pool, "", time.Now())
	noErr(b, err)
	r := rand.New(rand.NewPCG(7, 8))
	var took []time.Duration
	for b.Loop() {
		b.StopTimer()
		for i := 0; i < 10; i++ {
			writeFile(b, w, dirs[r.IntN(len(dirs))], fmt.Sprintf("file%03d.go", r.IntN(100)), []byte(fmt.Sprint("changed ", r.Uint64())))
		}
		b.StartTimer()
		start := time.Now()
		_, _, err := CreateServing(w, vfs.Default, wsDir, e.pool, "", time.Now())
		took = append(took, time.Since(start))
		noErr(b, err)
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkDurableTreeCopy: the part of an online snapshot that commits
// wait for (the copy of the durable shadow under its lock).
func BenchmarkDurableTreeCopy(b *testing.B) {
	_, w, _ := benchWorkspace(b)
	for b.Loop() {
		noErr(b, w.DurableTree(func(*namespace.Tree, uint64) error { return nil }))
	}
}

// BenchmarkBuildOnly: encoding and hashing every manifest into memory,
// without the pool (the CPU part of a snapshot, and what diff against the
// live tree pays).
func BenchmarkBuildOnly(b *testing.B) {
	_, w, _ := benchWorkspace(b)
	for b.Loop() {
		noErr(b, w.StillTree(func(t *namespace.Tree, g uint64) error {
			_, _, err := manifest.Build(t, &manifest.MemStore{})
			return err
		}))
	}
}

// BenchmarkFork: a new workspace from a snapshot of the whole workspace.
func BenchmarkFork(b *testing.B) {
	e, w, _ := benchWorkspace(b)
	var in Info
	noErr(b, w.StillTree(func(t *namespace.Tree, g uint64) error {
		var err error
		in, _, err = Create(vfs.Default, e.wsDir("w"), e.pool, t, g, "", time.Now())
		return err
	}))
	i := 0
	for b.Loop() {
		i++
		must[Info](b)(Fork(vfs.Default, e.pool, e.wsDir("w"), in.ID, e.wsDir(fmt.Sprint("fork", i, "-", time.Now().UnixNano()))))
	}
}

// BenchmarkOpenForked: opening (recovering) a fork, which a mount pays.
func BenchmarkOpenForked(b *testing.B) {
	e, w, _ := benchWorkspace(b)
	var in Info
	noErr(b, w.StillTree(func(t *namespace.Tree, g uint64) error {
		var err error
		in, _, err = Create(vfs.Default, e.wsDir("w"), e.pool, t, g, "", time.Now())
		return err
	}))
	name := fmt.Sprint("openfork-", time.Now().UnixNano())
	must[Info](b)(Fork(vfs.Default, e.pool, e.wsDir("w"), in.ID, e.wsDir(name)))
	for b.Loop() {
		fw := must[*workspace.Workspace](b)(workspace.Open(e.opts(name)))
		noErr(b, fw.Close())
	}
}

// BenchmarkOpenOrigin: opening (recovering) the benchmark workspace itself
// from its ordinary checkpoint and log, for comparison with
// BenchmarkOpenForked.
func BenchmarkOpenOrigin(b *testing.B) {
	e, w, _ := benchWorkspace(b)
	noErr(b, w.Close())
	defer func() { benchState.w = must[*workspace.Workspace](b)(workspace.Open(e.opts("w"))) }()
	for b.Loop() {
		ow := must[*workspace.Workspace](b)(workspace.Open(e.opts("w")))
		noErr(b, ow.Close())
	}
}

// BenchmarkSmallContentsAsObjects measures the alternative to keeping
// inline contents in their directory's manifest: one pool object per
// small file, published and synced (what a first snapshot would pay per
// file). Compare with BenchmarkSnapshotFirst per file.
func BenchmarkSmallContentsAsObjects(b *testing.B) {
	const n = 2000
	r := rand.New(rand.NewPCG(5, 6))
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		p := must[*pool.Pool](b)(pool.Open(vfs.Default, dir, pool.Options{}))
		blobs := make([][]byte, n)
		for i := range blobs {
			blobs[i] = make([]byte, r.IntN(2049))
			for k := range blobs[i] {
				blobs[i][k] = byte(r.Uint32())
			}
		}
		b.StartTimer()
		ids := make([]objid.ID, n)
		for i, d := range blobs {
			ids[i] = must[objid.ID](b)(func() (objid.ID, error) { id, _, err := p.Put(d); return id, err }())
		}
		noErr(b, p.SyncObjects(ids, pool.DefaultSyncParallel))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "us/file")
}

// BenchmarkProtectTree measures what a restore pays to keep its
// snapshot's objects from a gc pass that misses both the new checkpoint
// and the snapshot's entry (protectTree: one utimensat and one stat per
// object), on a tree of 5,000 pooled files in 50 directories, against
// the load and check of the same tree that every restore does anyway.
func BenchmarkProtectTree(b *testing.B) {
	const dirs, perDir = 50, 100
	e := newEnv(b, vfs.Default, b.TempDir())
	opts := e.opts("w")
	opts.InlineMax = 1 // every content a pool object
	opts.GroupRecords = 4096
	w := must[*workspace.Workspace](b)(workspace.Open(opts))
	for d := range dirs {
		di := must[workspace.Attr](b)(w.Mkdir(workspace.RootIno, fmt.Sprint("d", d), 0o755, me)).Ino
		for f := range perDir {
			writeFile(b, w, di, fmt.Sprint("f", f), []byte(fmt.Sprint("content ", d, " ", f)))
		}
	}
	noErr(b, w.Close())
	in, _, err := CreateOffline(opts, "", time.Now())
	noErr(b, err)
	objects := 0
	noErr(b, manifest.ForEachObject(&manifest.PoolStore{Pool: e.pool}, in.Root, nil, func(objid.ID) { objects++ }))
	b.Run("protect", func(b *testing.B) {
		for b.Loop() {
			noErr(b, protectTree(e.pool, in.Root))
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*objects), "us/object")
	})
	// The load and check of the same tree, which every restore does before.
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			_, _, err := manifest.LoadTree(&manifest.PoolStore{Pool: e.pool}, in.Root)
			noErr(b, err)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*objects), "us/object")
	})
}
