package workspace

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
)

// The crash test runs randomized single-threaded workloads on a crashable
// MemFS. A hook takes a CrashClone at every sync, rename, link and remove
// (the moments whose effect a power loss can cut off). After the workload,
// each clone is recovered with Open and its tree compared with an
// independent model of the workload (a tree of paths and contents), which
// was snapshotted after every operation that changes durable state. The
// contract (README, durability clauses 2 and 3): the recovered tree equals
// the model after some prefix of the operations, and that prefix includes
// every operation before the last fsync that had returned success when the
// clone was taken. Every pooled content the recovered tree names must be
// in the clone's pool and verify.

// mnode is a model inode; hard links share one.
type mnode struct {
	dir     bool
	kids    map[string]*mnode
	sym     string
	perm    uint32
	content []byte
	dirty   []byte // unflushed writes (shared by the inode's handles)
	isDirty bool
	ino     Ino
	xattrs  map[string]string
}

type model struct {
	root *mnode
	uid  uint32
	gid  uint32
}

func newModel() *model {
	return &model{root: &mnode{dir: true, kids: map[string]*mnode{}, perm: 0o755, ino: RootIno},
		uid: uint32(os.Getuid()), gid: uint32(os.Getgid())}
}

// render gives the model in namespace.DumpString form.
func (m *model) render() string {
	var out []namespace.DumpEntry
	first := map[*mnode]string{}
	nlink := map[*mnode]uint32{}
	var count func(n *mnode)
	count = func(n *mnode) {
		for _, k := range n.kids {
			nlink[k]++
			if k.dir {
				count(k)
			}
		}
	}
	count(m.root)
	var walk func(n *mnode, path string)
	walk = func(n *mnode, path string) {
		e := namespace.DumpEntry{Path: path, Perm: n.perm, Uid: me.Uid, Gid: me.Gid, Nlink: nlink[n]}
		switch {
		case n.dir:
			e.Type = 'd'
			e.Nlink = 2
			for _, k := range n.kids {
				if k.dir {
					e.Nlink++
				}
			}
		case n.sym != "":
			e.Type, e.Target, e.Perm = 'l', n.sym, 0o777
		default:
			e.Type, e.Size = 'f', uint64(len(n.content))
			id := objid.Sum(n.content)
			e.Content = hex.EncodeToString(id[:])
			if e.Nlink > 1 {
				if p, ok := first[n]; ok {
					e.LinkOf = p
				} else {
					first[n] = path
				}
			}
		}
		if n == m.root {
			e.Uid, e.Gid = m.uid, m.gid
		}
		if len(n.xattrs) > 0 {
			keys := make([]string, 0, len(n.xattrs))
			for k := range n.xattrs {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				e.Xattrs += fmt.Sprintf("%s=%x;", k, n.xattrs[k])
			}
		}
		out = append(out, e)
		names := make([]string, 0, len(n.kids))
		for k := range n.kids {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			p := "/" + k
			if path != "/" {
				p = path + "/" + k
			}
			walk(n.kids[k], p)
		}
	}
	walk(m.root, "/")
	return namespace.DumpString(out)
}

// place is a directory entry of the model.
type place struct {
	dir  *mnode
	name string
}

func (m *model) all() (dirs []*mnode, entries []place) {
	var walk func(n *mnode)
	walk = func(n *mnode) {
		dirs = append(dirs, n)
		names := make([]string, 0, len(n.kids))
		for k := range n.kids {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			entries = append(entries, place{n, k})
			if n.kids[k].dir {
				walk(n.kids[k])
			}
		}
	}
	walk(m.root)
	return dirs, entries
}

func isUnder(n, anc *mnode) bool {
	if n == anc {
		return true
	}
	for _, k := range anc.kids {
		if k.dir && isUnder(n, k) {
			return true
		}
	}
	return false
}

type clonePoint struct {
	fs    *vfs.MemFS
	acked int // index of the last snapshot covered by a successful fsync
	op    vfs.Op
	path  string
}

// rangeRecords and rangeFolds total the workloads' Stats (coverage of
// range records).
var rangeRecords, rangeFolds atomic.Uint64

// crashRun runs one workload and returns its snapshots and crash clones.
func crashRun(t *testing.T, seed uint64, nops int) (snaps []string, points []clonePoint) {
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem, "/host")
	e.opts.InlineMax = 64
	e.opts.ChunkSize = 256
	e.opts.GroupRecords = 4
	e.opts.GroupWindow = 200 * time.Microsecond
	if seed%2 == 0 {
		// Checkpoints and segment deletion in the middle of the workload.
		e.opts.CheckpointBytes = 3000
		e.opts.SegmentSize = 1500
	}
	w := e.open()
	m := newModel()
	var mu sync.Mutex
	var acked atomic.Int64
	snaps = []string{m.render()}
	mem.SetHook(func(op vfs.Op, path string) {
		switch op {
		case vfs.OpSync, vfs.OpSyncData, vfs.OpRename, vfs.OpLink, vfs.OpRemove:
		default:
			return
		}
		// Read before cloning: an fsync acknowledged before this instant
		// synced before the clone, so the clone must hold it. (Read after,
		// it could count an fsync completed meanwhile by another goroutine:
		// hooks also run on the flusher and the checkpoint writer.)
		a := int(acked.Load())
		c := mem.CrashClone()
		mu.Lock()
		points = append(points, clonePoint{fs: c, acked: a, op: op, path: path})
		mu.Unlock()
	})
	snap := func() { snaps = append(snaps, m.render()) }
	r := rand.New(rand.NewPCG(seed, 7))
	handles := map[*Handle]*mnode{}
	var names = []string{"a", "b", "c", "d", "e", "f"}
	randData := func() []byte {
		var n int
		switch r.IntN(5) {
		case 0:
			n = r.IntN(20)
		case 1:
			n = 30 + r.IntN(60) // around InlineMax
		case 2:
			n = 100 + r.IntN(200) // one object, or chunked past ChunkSize
		case 3:
			n = 300 + r.IntN(700) // chunked
		default:
			n = 1000 + r.IntN(2500) // more chunks than stay in memory
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return b
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("seed %d: %s: %v", seed, what, err)
		}
	}
	mwrite := func(n *mnode, off int, data []byte) {
		if len(data) == 0 {
			return // write(2) of nothing changes nothing, not even the size
		}
		if !n.isDirty {
			n.dirty, n.isDirty = append([]byte(nil), n.content...), true
		}
		if end := off + len(data); end > len(n.dirty) {
			n.dirty = append(n.dirty, make([]byte, end-len(n.dirty))...)
		}
		copy(n.dirty[off:], data)
	}
	reachable := func(n *mnode) bool {
		_, ents := m.all()
		for _, p := range ents {
			if p.dir.kids[p.name] == n {
				return true
			}
		}
		return false
	}
	mflush := func(n *mnode) bool {
		if !n.isDirty || !reachable(n) {
			return false
		}
		n.content, n.dirty, n.isDirty = n.dirty, nil, false
		return true
	}
	for i := 0; i < nops; i++ {
		dirs, ents := m.all()
		var files []place
		for _, p := range ents {
			if k := p.dir.kids[p.name]; !k.dir && k.sym == "" {
				files = append(files, p)
			}
		}
		dir := dirs[r.IntN(len(dirs))]
		name := names[r.IntN(len(names))]
		_, exists := dir.kids[name]
		switch op := r.IntN(100); {
		case op < 10 && !exists && len(dirs) < 12: // mkdir
			a, err := w.Mkdir(dir.ino, name, 0o755, me)
			check("mkdir", err)
			dir.kids[name] = &mnode{dir: true, kids: map[string]*mnode{}, perm: 0o755, ino: a.Ino}
			snap()
		case op < 25 && !exists: // create, write, close
			a, err := w.Create(dir.ino, name, 0o644, me)
			check("create", err)
			n := &mnode{perm: 0o644, ino: a.Ino}
			dir.kids[name] = n
			snap()
			h, err := w.OpenFile(a.Ino, syscall.O_WRONLY)
			check("open", err)
			data := randData()
			_, err = h.WriteAt(data, 0)
			check("write", err)
			mwrite(n, 0, data)
			check("flush", h.Flush())
			check("release", h.Release())
			if mflush(n) {
				snap()
			}
		case op < 35 && len(files) > 0: // overwrite part of a file, maybe via a long-lived handle
			p := files[r.IntN(len(files))]
			n := p.dir.kids[p.name]
			var h *Handle
			for hh, hn := range handles {
				if hn == n {
					h = hh
				}
			}
			if h == nil {
				var err error
				h, err = w.OpenFile(n.ino, syscall.O_RDWR)
				check("open", err)
				handles[h] = n
			}
			size := len(n.content)
			if n.isDirty {
				size = len(n.dirty)
			}
			off := r.IntN(size + 50)
			data := randData()
			if r.IntN(2) == 0 {
				// A small write at or near the end (a WAL append): a
				// range record when the file is pooled.
				off = max(0, size-r.IntN(16))
				data = data[:min(len(data), 1+r.IntN(40))]
			}
			_, err := h.WriteAt(data, int64(off))
			check("write", err)
			mwrite(n, off, data)
		case op < 45 && len(handles) > 0: // close a handle (flush)
			for h, n := range handles {
				delete(handles, h)
				check("flush", h.Flush())
				check("release", h.Release())
				if mflush(n) {
					snap()
				}
				break
			}
		case op < 50 && len(files) > 0: // truncate
			p := files[r.IntN(len(files))]
			n := p.dir.kids[p.name]
			size := uint64(r.IntN(400))
			_, err := w.SetAttr(n.ino, SetAttrIn{Size: &size})
			check("truncate", err)
			if !n.isDirty {
				n.dirty, n.isDirty = append([]byte(nil), n.content...), true
			}
			nd := make([]byte, size)
			copy(nd, n.dirty)
			n.dirty = nd
			mflush(n)
			snap()
		case op < 60 && len(ents) > 0: // rename
			src := ents[r.IntN(len(ents))]
			sn := src.dir.kids[src.name]
			if sn.dir && isUnder(dir, sn) {
				continue
			}
			if dn, ok := dir.kids[name]; ok {
				if dn == sn || dn.dir != sn.dir || (dn.dir && len(dn.kids) > 0) {
					continue
				}
			}
			check("rename", w.Rename(src.dir.ino, src.name, dir.ino, name, 0))
			delete(src.dir.kids, src.name)
			dir.kids[name] = sn
			snap()
		case op < 62 && len(ents) > 1: // RENAME_EXCHANGE of two entries
			a, b := ents[r.IntN(len(ents))], ents[r.IntN(len(ents))]
			an, bn := a.dir.kids[a.name], b.dir.kids[b.name]
			if an == bn || (an.dir && isUnder(b.dir, an)) || (bn.dir && isUnder(a.dir, bn)) {
				continue
			}
			check("exchange", w.Rename(a.dir.ino, a.name, b.dir.ino, b.name, 2 /* RENAME_EXCHANGE */))
			a.dir.kids[a.name], b.dir.kids[b.name] = bn, an
			snap()
		case op < 65 && len(files) > 0 && !exists: // link
			p := files[r.IntN(len(files))]
			n := p.dir.kids[p.name]
			_, err := w.Link(n.ino, dir.ino, name)
			check("link", err)
			dir.kids[name] = n
			snap()
		case op < 73 && len(ents) > 0: // unlink or rmdir
			p := ents[r.IntN(len(ents))]
			n := p.dir.kids[p.name]
			if n.dir {
				if len(n.kids) > 0 {
					continue
				}
				check("rmdir", w.Rmdir(p.dir.ino, p.name))
			} else {
				check("unlink", w.Unlink(p.dir.ino, p.name))
			}
			delete(p.dir.kids, p.name)
			snap()
		case op < 76 && !exists: // symlink
			a, err := w.Symlink(dir.ino, name, "target-"+name, me)
			check("symlink", err)
			dir.kids[name] = &mnode{sym: "target-" + name, ino: a.Ino}
			snap()
		case op < 80 && len(ents) > 0: // chmod
			p := ents[r.IntN(len(ents))]
			n := p.dir.kids[p.name]
			if n.sym != "" {
				continue
			}
			perm := uint32(0o600 + r.IntN(0o100))
			_, err := w.SetAttr(n.ino, SetAttrIn{Mode: &perm})
			check("chmod", err)
			n.perm = perm
			snap()
		case op < 84 && len(ents) > 0: // set or remove an xattr
			p := ents[r.IntN(len(ents))]
			n := p.dir.kids[p.name]
			name := "user." + names[r.IntN(3)]
			if _, ok := n.xattrs[name]; ok && r.IntN(2) == 0 {
				check("removexattr", w.RemoveXattr(n.ino, name))
				delete(n.xattrs, name)
			} else {
				v := fmt.Sprintf("v%d", r.IntN(100))
				check("setxattr", w.SetXattr(n.ino, name, []byte(v), 0))
				if n.xattrs == nil {
					n.xattrs = map[string]string{}
				}
				n.xattrs[name] = v
			}
			snap()
		case op < 87 && len(files) > 0: // rewrite with O_TRUNC
			p := files[r.IntN(len(files))]
			n := p.dir.kids[p.name]
			h, err := w.OpenFile(n.ino, syscall.O_WRONLY|syscall.O_TRUNC)
			check("open O_TRUNC", err)
			// The truncation is a content change of its own, and it
			// discards unflushed writes of other handles too.
			n.content, n.dirty, n.isDirty = nil, nil, false
			snap()
			data := randData()
			_, err = h.WriteAt(data, 0)
			check("write", err)
			mwrite(n, 0, data)
			check("flush", h.Flush()) // close(2): the kernel flushes, then releases
			check("release", h.Release())
			if mflush(n) {
				snap()
			}
		case op < 93: // fsync: a file through a handle, a directory, or the workspace
			switch {
			case len(handles) > 0 && r.IntN(2) == 0:
				for h, n := range handles {
					check("fsync", h.Fsync(false))
					if mflush(n) {
						snap()
					}
					break
				}
			case r.IntN(2) == 0:
				check("fsync dir", w.Fsync(dir.ino))
			default:
				check("sync", w.Sync())
			}
			acked.Store(int64(len(snaps) - 1))
		}
	}
	for h, n := range handles {
		check("release", h.Release())
		if mflush(n) {
			snap()
		}
	}
	st := w.Stats()
	rangeRecords.Add(st.RangeRecords)
	rangeFolds.Add(st.RangeFolds)
	check("close", w.Close())
	acked.Store(int64(len(snaps) - 1))
	// Close committed everything: the final state must be there.
	final := mem.CrashClone()
	mem.SetHook(nil)
	points = append(points, clonePoint{fs: final, acked: len(snaps) - 1, op: 0, path: "after Close"})
	if seed%2 == 0 {
		// Make sure the checkpoint path was exercised, not skipped.
		ck, _ := final.List("/host/state/workspaces/w/checkpoint")
		segs, _ := final.List("/host/state/workspaces/w/log")
		if len(ck) == 0 || len(segs) == 0 || segs[0] == "00000000000000000001.seg" {
			t.Fatalf("seed %d: expected checkpoints and deleted segments, have checkpoints %v, segments %v", seed, ck, segs)
		}
	}
	return snaps, points
}

// recoverDump opens a crash clone and returns its dump, checking every
// pooled content it references.
func recoverDump(fs *vfs.MemFS) (string, error) {
	p, err := pool.Open(fs, "/host/pool", pool.Options{})
	if err != nil {
		return "", fmt.Errorf("open pool: %w", err)
	}
	w, err := Open(Options{FS: fs, Dir: "/host/state/workspaces/w", Pool: p, Logger: quiet})
	if err != nil {
		return "", fmt.Errorf("recover: %w", err)
	}
	defer w.Close()
	for _, n := range w.tree.Inodes() {
		if n.IsReg() && n.Content.IsObject {
			if _, err := p.ReadAll(n.Content.Object); err != nil {
				return "", fmt.Errorf("inode %d: content object: %w", n.Ino, err)
			}
		}
	}
	if err := w.tree.Check(); err != nil {
		return "", err
	}
	return dumpOf(w), nil
}

func TestCrashPrefixConsistency(t *testing.T) {
	seeds, nops := 16, 200
	if testing.Short() {
		seeds = 2
	}
	// WSFS_CRASH_SEEDS=N runs N seeds instead (a longer hunt).
	if v, err := strconv.Atoi(os.Getenv("WSFS_CRASH_SEEDS")); err == nil && v > 0 {
		seeds = v
	}
	total, violations := 0, 0
	for s := 0; s < seeds; s++ {
		seed := uint64(s + 1)
		snaps, points := crashRun(t, seed, nops)
		for i, cp := range points {
			total++
			got, err := recoverDump(cp.fs)
			if err != nil {
				violations++
				if violations > 5 {
					continue // counted; the first five are detailed
				}
				t.Errorf("seed %d crash point %d (after %v %s): %v", seed, i, cp.op, cp.path, err)
				continue
			}
			match := -1
			for k := len(snaps) - 1; k >= cp.acked; k-- {
				if snaps[k] == got {
					match = k
					break
				}
			}
			if match < 0 {
				violations++
				if violations > 5 {
					continue
				}
				older := -1
				for k := cp.acked - 1; k >= 0; k-- {
					if snaps[k] == got {
						older = k
						break
					}
				}
				t.Errorf("seed %d crash point %d (after %v %s): recovered tree matches no state at or after the last acknowledged fsync (snapshot %d of %d; matches older snapshot %d)\nrecovered:\n%s\nacked state:\n%s",
					seed, i, cp.op, cp.path, cp.acked, len(snaps), older, got, snaps[cp.acked])
			}
		}
	}
	t.Logf("range records: %d, range folds: %d", rangeRecords.Load(), rangeFolds.Load())
	if rangeRecords.Load() == 0 && !testing.Short() {
		t.Errorf("the workload logged no range records")
	}
	t.Logf("crash points: %d, violations: %d", total, violations)
	fmt.Printf("crash points: %d, violations: %d\n", total, violations)
	if total < 1000 && !testing.Short() {
		t.Errorf("only %d crash points; the test promises at least 1000", total)
	}
}
