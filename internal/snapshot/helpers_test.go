package snapshot

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

var quiet = slog.New(slog.DiscardHandler)

// env is a host with a pool and workspaces on one FS.
type env struct {
	t    testing.TB
	fs   vfs.FS
	root string
	pool *pool.Pool
}

func newEnv(t testing.TB, fsys vfs.FS, root string) *env {
	t.Helper()
	for _, d := range []string{root, filepath.Join(root, "pool"), filepath.Join(root, "state", "workspaces")} {
		if err := fsys.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := vfs.SyncDir(fsys, filepath.Dir(d)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := pool.Open(fsys, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, fs: fsys, root: root, pool: p}
}

func memEnv(t testing.TB) *env { return newEnv(t, vfs.NewCrashableMem(), "/host") }

func (e *env) wsDir(name string) string { return filepath.Join(e.root, "state", "workspaces", name) }

func (e *env) opts(name string) workspace.Options {
	return workspace.Options{FS: e.fs, Dir: e.wsDir(name), Pool: e.pool, GroupWindow: time.Millisecond, Logger: quiet}
}

func (e *env) open(name string) *workspace.Workspace {
	e.t.Helper()
	w, err := workspace.Open(e.opts(name))
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var me = workspace.Caller{Uid: 1000, Gid: 1000}

// writeFile creates or truncates name in dir with data, and closes it.
func writeFile(t testing.TB, w *workspace.Workspace, dir workspace.Ino, name string, data []byte) workspace.Ino {
	t.Helper()
	a, err := w.Lookup(dir, name)
	if err != nil {
		a = must[workspace.Attr](t)(w.Create(dir, name, 0o644, me))
	}
	h := must[*workspace.Handle](t)(w.OpenFile(a.Ino, syscall.O_WRONLY|syscall.O_TRUNC))
	if len(data) > 0 {
		if n, err := h.WriteAt(data, 0); err != nil || n != len(data) {
			t.Fatalf("write %s: %d, %v", name, n, err)
		}
	}
	noErr(t, h.Flush())
	noErr(t, h.Release())
	return a.Ino
}

// view is a tree as the model sees it: path -> description, with inode
// numbers so that hard links and renames are visible.
type view map[string]ventry

type ventry struct {
	ino    uint64
	typ    byte
	perm   uint32
	uid    uint32
	data   string // regular files: the bytes; symlinks: the target
	xattrs string
}

func (v ventry) String() string {
	return fmt.Sprintf("ino=%d %c %04o uid=%d len=%d %q x=%s", v.ino, v.typ, v.perm, v.uid, len(v.data), trunc(v.data), v.xattrs)
}

func trunc(s string) string {
	if len(s) > 16 {
		return s[:16] + "..."
	}
	return s
}

// viewOfTree reads a namespace tree, with contents read from the pool.
func viewOfTree(t testing.TB, p *pool.Pool, tr *namespace.Tree) view {
	t.Helper()
	out := view{}
	var walk func(n *namespace.Inode, path string)
	walk = func(n *namespace.Inode, path string) {
		e := ventry{ino: uint64(n.Ino), typ: namespace.TypeChar(n.Mode), perm: n.Mode & namespace.PermMask, uid: n.Uid}
		switch {
		case n.IsReg():
			e.data = string(readContent(t, p, n))
		case n.Mode&namespace.S_IFMT == namespace.S_IFLNK:
			e.data = n.Target
		}
		var xs []string
		for k, v := range n.Xattrs {
			xs = append(xs, k+"="+string(v))
		}
		sort.Strings(xs)
		e.xattrs = strings.Join(xs, ";")
		out[path] = e
		for name, c := range n.Entries {
			walk(tr.Get(c), joinPath(path, name))
		}
	}
	walk(tr.Get(namespace.RootIno), "/")
	return out
}

func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

func readContent(t testing.TB, p *pool.Pool, n *namespace.Inode) []byte {
	t.Helper()
	c := &n.Content
	switch {
	case c.IsObject:
		return must[[]byte](t)(p.ReadAll(pool.ID(c.Object)))
	case c.IsChunked():
		var b []byte
		for i, id := range c.Chunks {
			size := min(n.Size-uint64(i)<<c.ChunkShift, 1<<c.ChunkShift)
			if id == namespace.HoleChunk {
				b = append(b, make([]byte, size)...)
				continue
			}
			b = append(b, must[[]byte](t)(p.ReadAll(pool.ID(id)))...)
		}
		return b
	}
	return c.Inline
}

func viewOfWorkspace(t testing.TB, p *pool.Pool, w *workspace.Workspace) view {
	t.Helper()
	var v view
	noErr(t, w.StillTree(func(tr *namespace.Tree, _ uint64) error {
		v = viewOfTree(t, p, tr)
		return nil
	}))
	return v
}

func viewOfSnapshot(t testing.TB, p *pool.Pool, in Info) view {
	t.Helper()
	tr, _, err := manifest.LoadTree(&manifest.PoolStore{Pool: p}, in.Root)
	noErr(t, err)
	return viewOfTree(t, p, tr)
}

// diffViews says how two views differ ("" if equal).
func diffViews(want, got view) string {
	var d []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			d = append(d, "missing "+p+": "+w.String())
		} else if g != w {
			d = append(d, "differs "+p+":\n  want "+w.String()+"\n  got  "+g.String())
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			d = append(d, "extra "+p+": "+g.String())
		}
	}
	sort.Strings(d)
	if len(d) > 8 {
		d = append(d[:8], fmt.Sprintf("... %d more", len(d)-8))
	}
	return strings.Join(d, "\n")
}

// modelDiff is the reference diff of two views, computed from scratch
// by the rules of manifest.Change (not by walking manifests).
func modelDiff(a, b view) []string {
	var out []string
	type pe struct {
		path string
		e    ventry
	}
	var removed, added []pe
	for p, x := range a {
		y, ok := b[p]
		switch {
		case !ok:
			removed = append(removed, pe{p, x})
		case x.typ != y.typ:
			removed = append(removed, pe{p, x})
			added = append(added, pe{p, y})
		case changed(x, y):
			out = append(out, fmt.Sprintf("M %s", p))
		}
	}
	for p, y := range b {
		if _, ok := a[p]; !ok {
			added = append(added, pe{p, y})
		}
	}
	sort.Slice(removed, func(i, j int) bool { return removed[i].path < removed[j].path })
	sort.Slice(added, func(i, j int) bool { return added[i].path < added[j].path })
	used := make([]bool, len(added))
	for _, r := range removed {
		paired := false
		for j, ad := range added {
			if !used[j] && ad.e.ino == r.e.ino {
				used[j] = true
				paired = true
				out = append(out, fmt.Sprintf("R %s <- %s modified=%v", ad.path, r.path, changed(r.e, ad.e)))
				break
			}
		}
		if !paired {
			out = append(out, fmt.Sprintf("D %s", r.path))
		}
	}
	for j, ad := range added {
		if !used[j] {
			out = append(out, fmt.Sprintf("A %s", ad.path))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		pi, pj := strings.Fields(out[i])[1], strings.Fields(out[j])[1]
		if pi != pj {
			return pi < pj
		}
		return out[i] < out[j]
	})
	return out
}

func changed(x, y ventry) bool {
	return x.perm != y.perm || x.uid != y.uid || x.data != y.data || x.xattrs != y.xattrs
}

// renderChanges prints manifest changes in modelDiff's form.
func renderChanges(cs []manifest.Change) []string {
	var out []string
	for _, c := range cs {
		switch c.Kind {
		case manifest.Renamed:
			out = append(out, fmt.Sprintf("R %s <- %s modified=%v", c.Path, c.OldPath, c.Modified))
		default:
			out = append(out, fmt.Sprintf("%c %s", c.Kind, c.Path))
		}
	}
	return out
}
