package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// MemFS is a strict in-memory FS that remembers what has been made durable,
// so that tests can ask what a power loss at any instant would leave.
//
// # Model
//
// The file system is a tree of inodes. A directory maps names to inodes; a
// regular file holds bytes; hard links are two entries naming one inode.
// Every inode has a current state (what reads see) and a durable state (what
// survives a crash):
//
//   - File data. File.Sync and File.SyncData copy the file's current bytes
//     (and therefore its size) to its durable bytes. Nothing else does:
//     Write, WriteAt, Truncate and the truncation done by Create change only
//     the current bytes. A file whose entry is durable but which was never
//     synced comes back empty.
//   - Directory entries. Sync (or SyncData) of a directory opened with
//     OpenDir copies its current name->inode map to its durable map. Nothing
//     else does. So a create, remove, link, or mkdir in dir D is durable only
//     once D is synced after it. A rename from directory A to directory B
//     changes both maps: syncing only B leaves the file under both names
//     after a crash (like a hard link), syncing only A leaves it under
//     neither, syncing both leaves it only under the new name. A rename
//     within one directory is durable when that directory is synced; before
//     that a crash reverts it (including the replaced target, which comes
//     back with its old inode).
//   - A new directory's existence is an entry in its parent: MkdirAll does
//     not sync, so a crash drops every directory whose parent was not synced
//     after its creation, and with it everything below.
//   - SyncFS makes the whole current tree durable (syncfs(2) semantics).
//   - The root directory always exists. Timestamps and permission bits are
//     not part of the model: a crash keeps their current values.
//
// CrashClone builds a new MemFS from the durable state reachable from the
// root through durable entries; files reachable only through non-durable
// entries are gone. Because durable maps are snapshots taken at different
// times, they can in rare rename sequences name one directory from two
// places; a directory cannot be hard linked, so CrashClone keeps the first
// occurrence in sorted depth-first order and drops the others.
//
// Paths are cleaned with filepath.Clean; absolute and relative paths both
// start at the root ("/a/b" and "a/b" are the same file). Symbolic links do
// not exist.
//
// All methods are safe for concurrent use. One mutex guards the tree and all
// inodes; the hook runs outside it.
type MemFS struct {
	mu struct {
		sync.Mutex
		root  *memNode
		locks map[string]bool // cleaned path -> held
	}
	hook    atomic.Pointer[func(op Op, path string)]
	hooking atomic.Int64 // calls of a hook running (SetHook waits for 0)
}

// memNode is an inode. All fields are guarded by MemFS.mu.
type memNode struct {
	isDir bool
	mode  os.FileMode // permission bits only
	mtime time.Time

	// Regular files. Invariant: data[:clean] == syncedData[:clean] and
	// clean <= min(len(data), len(syncedData)), so a sync copies only
	// data[clean:] (appending logs stay linear, not quadratic).
	data       []byte
	syncedData []byte
	clean      int

	// Directories.
	children       map[string]*memNode
	syncedChildren map[string]*memNode
}

var _ FS = (*MemFS)(nil)

// NewCrashableMem returns an empty MemFS holding only its root directory.
func NewCrashableMem() *MemFS {
	m := &MemFS{}
	m.mu.root = newDir(0o755)
	m.mu.locks = make(map[string]bool)
	return m
}

func newDir(perm os.FileMode) *memNode {
	return &memNode{
		isDir:          true,
		mode:           perm.Perm(),
		mtime:          time.Now(),
		children:       make(map[string]*memNode),
		syncedChildren: make(map[string]*memNode),
	}
}

func newFile(perm os.FileMode) *memNode {
	return &memNode{mode: perm.Perm(), mtime: time.Now()}
}

// SetHook installs fn to be called after every durability-relevant
// operation completes successfully: OpCreate, OpWrite, OpTruncate, OpSync,
// OpSyncData, OpRename, OpLink, OpRemove, OpMkdir, OpSyncFS. path is the
// affected path (the new name for Rename and Link). fn runs outside MemFS's
// lock, so it may call CrashClone or any other method; when several
// goroutines use the FS, hooks of concurrent operations may interleave.
// A nil fn removes the hook. SetHook returns once no call of the hook it
// replaced is running any more (calls the hook makes itself included), so
// that what a hook records can be read after SetHook(nil) without racing
// with a goroutine of the code under test still inside it.
func (m *MemFS) SetHook(fn func(op Op, path string)) {
	if fn == nil {
		m.hook.Store(nil)
	} else {
		m.hook.Store(&fn)
	}
	for m.hooking.Load() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
}

func (m *MemFS) notify(op Op, path string) {
	m.hooking.Add(1)
	defer m.hooking.Add(-1)
	if h := m.hook.Load(); h != nil {
		(*h)(op, path)
	}
}

// CrashClone returns a new MemFS holding exactly what a power loss at this
// instant would leave (see the model in the MemFS doc). The original keeps
// running unchanged. The clone has no hook and no locks, and its current
// and durable states are equal.
func (m *MemFS) CrashClone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &MemFS{}
	c.mu.locks = make(map[string]bool)
	files := make(map[*memNode]*memNode)
	dirs := make(map[*memNode]bool)
	c.mu.root = cloneDurable(m.mu.root, files, dirs)
	return c
}

func cloneDurable(n *memNode, files map[*memNode]*memNode, dirs map[*memNode]bool) *memNode {
	if !n.isDir {
		if c, ok := files[n]; ok {
			return c // hard link: share the clone
		}
		c := &memNode{mode: n.mode, mtime: n.mtime}
		c.data = slices.Clone(n.syncedData)
		c.syncedData = slices.Clone(n.syncedData)
		c.clean = len(c.data)
		files[n] = c
		return c
	}
	dirs[n] = true
	c := newDir(n.mode)
	c.mtime = n.mtime
	for _, name := range slices.Sorted(maps.Keys(n.syncedChildren)) {
		child := n.syncedChildren[name]
		if child.isDir && dirs[child] {
			continue // a directory named twice by stale snapshots; see MemFS doc
		}
		cc := cloneDurable(child, files, dirs)
		c.children[name] = cc
		c.syncedChildren[name] = cc
	}
	return c
}

// String describes the current tree, one path per line, with each file's
// size and durable size and a "*" on entries not yet durable in their
// directory. It is meant for test failure messages.
func (m *MemFS) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	var walk func(n *memNode, path string)
	walk = func(n *memNode, path string) {
		for _, name := range slices.Sorted(maps.Keys(n.children)) {
			c := n.children[name]
			mark := ""
			if n.syncedChildren[name] != c {
				mark = "*"
			}
			p := path + "/" + name
			if c.isDir {
				fmt.Fprintf(&b, "%s/%s\n", p, mark)
				walk(c, p)
			} else {
				fmt.Fprintf(&b, "%s%s size=%d synced=%d\n", p, mark, len(c.data), len(c.syncedData))
			}
		}
	}
	walk(m.mu.root, "")
	return b.String()
}

// split cleans name into its components; the root has none.
func split(name string) []string {
	p := filepath.Clean(name)
	p = strings.TrimLeft(p, "/")
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// walkLocked returns the node at name.
func (m *MemFS) walkLocked(op, name string) (*memNode, error) {
	n := m.mu.root
	for _, c := range split(name) {
		if !n.isDir {
			return nil, pathErr(op, name, syscall.ENOTDIR)
		}
		next, ok := n.children[c]
		if !ok {
			return nil, pathErr(op, name, syscall.ENOENT)
		}
		n = next
	}
	return n, nil
}

// parentLocked returns the directory that holds name and name's base. It
// fails for the root, which has no parent.
func (m *MemFS) parentLocked(op, name string) (*memNode, string, error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, "", pathErr(op, name, syscall.EBUSY)
	}
	dir, err := m.walkLocked(op, filepath.Join(parts[:len(parts)-1]...))
	if err != nil {
		return nil, "", pathErr(op, name, err.(*os.PathError).Err)
	}
	if !dir.isDir {
		return nil, "", pathErr(op, name, syscall.ENOTDIR)
	}
	return dir, parts[len(parts)-1], nil
}

func (m *MemFS) Create(name string) (File, error) {
	f, err := m.create(name, 0o666, false)
	if err != nil {
		return nil, err
	}
	m.notify(OpCreate, name)
	return f, nil
}

func (m *MemFS) CreateExcl(name string, perm os.FileMode) (File, error) {
	f, err := m.create(name, perm, true)
	if err != nil {
		return nil, err
	}
	m.notify(OpCreate, name)
	return f, nil
}

func (m *MemFS) create(name string, perm os.FileMode, excl bool) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked("open", name)
	if err != nil {
		return nil, err
	}
	n, ok := dir.children[base]
	switch {
	case ok && excl:
		return nil, pathErr("open", name, syscall.EEXIST)
	case ok && n.isDir:
		return nil, pathErr("open", name, syscall.EISDIR)
	case ok:
		n.setSize(0)
		n.mtime = time.Now()
	default:
		n = newFile(perm)
		dir.children[base] = n
		dir.mtime = n.mtime
	}
	return &memFile{fs: m, n: n, name: name, read: true, write: true}, nil
}

func (m *MemFS) open(name string, write, wantDir bool) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walkLocked("open", name)
	if err != nil {
		return nil, err
	}
	if wantDir && !n.isDir {
		return nil, pathErr("open", name, syscall.ENOTDIR)
	}
	if write && n.isDir {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	return &memFile{fs: m, n: n, name: name, read: true, write: write}, nil
}

func (m *MemFS) Open(name string) (File, error) { return m.open(name, false, false) }

func (m *MemFS) OpenReadWrite(name string) (File, error) { return m.open(name, true, false) }

func (m *MemFS) OpenDir(name string) (File, error) { return m.open(name, false, true) }

func (m *MemFS) Link(oldname, newname string) error {
	if err := m.link(oldname, newname); err != nil {
		return err
	}
	m.notify(OpLink, newname)
	return nil
}

func (m *MemFS) link(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err} }
	n, err := m.walkLocked("link", oldname)
	if err != nil {
		return lerr(err.(*os.PathError).Err)
	}
	if n.isDir {
		return lerr(syscall.EPERM)
	}
	dir, base, err := m.parentLocked("link", newname)
	if err != nil {
		return lerr(err.(*os.PathError).Err)
	}
	if _, ok := dir.children[base]; ok {
		return lerr(syscall.EEXIST)
	}
	dir.children[base] = n
	dir.mtime = time.Now()
	return nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	if err := m.rename(oldname, newname); err != nil {
		return err
	}
	m.notify(OpRename, newname)
	return nil
}

func (m *MemFS) rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err} }
	odir, obase, err := m.parentLocked("rename", oldname)
	if err != nil {
		return lerr(err.(*os.PathError).Err)
	}
	n, ok := odir.children[obase]
	if !ok {
		return lerr(syscall.ENOENT)
	}
	ndir, nbase, err := m.parentLocked("rename", newname)
	if err != nil {
		return lerr(err.(*os.PathError).Err)
	}
	if old, ok := ndir.children[nbase]; ok {
		if old == n {
			return nil // POSIX: same inode, nothing happens
		}
		switch {
		case n.isDir && !old.isDir:
			return lerr(syscall.ENOTDIR)
		case !n.isDir && old.isDir:
			return lerr(syscall.EISDIR)
		case old.isDir && len(old.children) > 0:
			return lerr(syscall.ENOTEMPTY)
		}
	}
	if n.isDir {
		// Refuse to move a directory into its own subtree.
		op, np := split(oldname), split(newname)
		if len(np) > len(op) && slices.Equal(np[:len(op)], op) {
			return lerr(syscall.EINVAL)
		}
	}
	delete(odir.children, obase)
	ndir.children[nbase] = n
	now := time.Now()
	odir.mtime, ndir.mtime = now, now
	return nil
}

func (m *MemFS) Remove(name string) error {
	if err := m.remove(name); err != nil {
		return err
	}
	m.notify(OpRemove, name)
	return nil
}

func (m *MemFS) remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked("remove", name)
	if err != nil {
		return err
	}
	n, ok := dir.children[base]
	if !ok {
		return pathErr("remove", name, syscall.ENOENT)
	}
	if n.isDir && len(n.children) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(dir.children, base)
	dir.mtime = time.Now()
	return nil
}

// RemoveAll removes name and everything below it. A missing name is not an
// error (as os.RemoveAll). Like a recursive unlink on a real file system, it
// changes only current entries: each removal is durable when its directory
// is synced.
func (m *MemFS) RemoveAll(name string) error {
	removed, err := m.removeAll(name)
	if err != nil {
		return err
	}
	if removed {
		m.notify(OpRemove, name)
	}
	return nil
}

func (m *MemFS) removeAll(name string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.parentLocked("removeall", name)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok && pe.Err == syscall.ENOENT {
			return false, nil
		}
		return false, err
	}
	if _, ok := dir.children[base]; !ok {
		return false, nil
	}
	delete(dir.children, base)
	dir.mtime = time.Now()
	return true, nil
}

func (m *MemFS) MkdirAll(name string, perm os.FileMode) error {
	created, err := m.mkdirAll(name, perm)
	if err != nil {
		return err
	}
	if created {
		m.notify(OpMkdir, name)
	}
	return nil
}

func (m *MemFS) mkdirAll(name string, perm os.FileMode) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.mu.root
	created := false
	for _, c := range split(name) {
		next, ok := n.children[c]
		if !ok {
			next = newDir(perm)
			n.children[c] = next
			n.mtime = next.mtime
			created = true
		} else if !next.isDir {
			return false, pathErr("mkdir", name, syscall.ENOTDIR)
		}
		n = next
	}
	return created, nil
}

func (m *MemFS) List(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walkLocked("open", dir)
	if err != nil {
		return nil, err
	}
	if !n.isDir {
		return nil, pathErr("readdirent", dir, syscall.ENOTDIR)
	}
	return slices.Sorted(maps.Keys(n.children)), nil
}

func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walkLocked("stat", name)
	if err != nil {
		return nil, err
	}
	return n.infoLocked(name), nil
}

func (m *MemFS) Chtimes(name string, atime, mtime time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.walkLocked("chtimes", name)
	if err != nil {
		return err
	}
	n.mtime = mtime
	return nil
}

// Lock creates name if missing (like the OS implementation; the entry is
// not synced; an existing directory is locked as it is) and holds an in-process lock on its cleaned path until the
// returned Closer is closed. A second Lock fails with an error wrapping
// ErrLocked.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	l, created, err := m.lock(name)
	if err != nil {
		return nil, err
	}
	if created {
		m.notify(OpCreate, name)
	}
	return l, nil
}

func (m *MemFS) lock(name string) (_ io.Closer, created bool, _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := filepath.Clean("/" + name)
	dir, base, err := m.parentLocked("lock", name)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	_, ok := dir.children[base] // an existing directory is locked itself, as on the OS
	if m.mu.locks[key] {
		return nil, false, fmt.Errorf("lock %s: %w (held by another Lock call in this process; close it first)", name, ErrLocked)
	}
	if !ok {
		dir.children[base] = newFile(0o644)
	}
	m.mu.locks[key] = true
	return &memLock{fs: m, key: key}, !ok, nil
}

type memLock struct {
	fs     *MemFS
	key    string
	closed atomic.Bool
}

func (l *memLock) Close() error {
	if l.closed.Swap(true) {
		return pathErr("close", l.key, os.ErrClosed)
	}
	l.fs.mu.Lock()
	delete(l.fs.mu.locks, l.key)
	l.fs.mu.Unlock()
	return nil
}

// SyncFS makes the whole current tree durable: every reachable file's data
// and every reachable directory's entries.
func (m *MemFS) SyncFS(name string) error {
	m.mu.Lock()
	if _, err := m.walkLocked("syncfs", name); err != nil {
		m.mu.Unlock()
		return err
	}
	var walk func(n *memNode)
	walk = func(n *memNode) {
		if !n.isDir {
			n.syncData()
			return
		}
		n.syncedChildren = maps.Clone(n.children)
		for _, c := range n.children {
			walk(c)
		}
	}
	walk(m.mu.root)
	m.mu.Unlock()
	m.notify(OpSyncFS, name)
	return nil
}

// Statfs reports a fixed, large capacity (1 TiB in 4 KiB blocks, half
// free); MemFS never runs out of space (use errorfs for ENOSPC).
func (m *MemFS) Statfs(name string) (StatFS, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.walkLocked("statfs", name); err != nil {
		return StatFS{}, err
	}
	const blocks = 1 << 28
	return StatFS{
		BlockSize: 4096, Blocks: blocks, BlocksFree: blocks / 2, BlocksAvail: blocks / 2,
		Files: 1 << 30, FilesFree: 1 << 29,
	}, nil
}

func (n *memNode) infoLocked(name string) os.FileInfo {
	fi := &memInfo{name: filepath.Base(name), mode: n.mode, mtime: n.mtime}
	if n.isDir {
		fi.mode |= fs.ModeDir
	} else {
		fi.size = int64(len(n.data))
	}
	return fi
}

type memInfo struct {
	name  string
	size  int64
	mode  os.FileMode
	mtime time.Time
}

func (fi *memInfo) Name() string       { return fi.name }
func (fi *memInfo) Size() int64        { return fi.size }
func (fi *memInfo) Mode() os.FileMode  { return fi.mode }
func (fi *memInfo) ModTime() time.Time { return fi.mtime }
func (fi *memInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi *memInfo) Sys() any           { return nil }

// memFile is an open MemFS file. The inode is guarded by fs.mu; the offset
// by mu. A file stays usable after its name is removed (as on POSIX).
type memFile struct {
	fs          *MemFS
	n           *memNode
	name        string
	read, write bool

	mu     sync.Mutex
	pos    int64
	closed bool
}

var _ File = (*memFile)(nil)

func (f *memFile) check(op string, write bool) error {
	if f.closed {
		return pathErr(op, f.name, os.ErrClosed)
	}
	if f.n.isDir && (op == "read" || op == "write" || op == "truncate") {
		return pathErr(op, f.name, syscall.EISDIR)
	}
	if write && !f.write {
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

func (f *memFile) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.readAt("read", p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.readAt("read", p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// readAt reads like pread(2): a short count at end of file, io.EOF only when
// nothing was read. f.mu must be held.
func (f *memFile) readAt(op string, p []byte, off int64) (int, error) {
	if f.closed {
		return 0, pathErr(op, f.name, os.ErrClosed)
	}
	if off < 0 {
		return 0, pathErr(op, f.name, syscall.EINVAL)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.n.isDir {
		return 0, pathErr(op, f.name, syscall.EISDIR)
	}
	if off >= int64(len(f.n.data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	return copy(p, f.n.data[off:]), nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	n, err := f.writeAt(p, f.pos)
	f.pos += int64(n)
	f.mu.Unlock()
	if err == nil {
		f.fs.notify(OpWrite, f.name)
	}
	return n, err
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	n, err := f.writeAt(p, off)
	f.mu.Unlock()
	if err == nil {
		f.fs.notify(OpWrite, f.name)
	}
	return n, err
}

// writeAt needs f.mu held (for closed).
func (f *memFile) writeAt(p []byte, off int64) (int, error) {
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	end := off + int64(len(p))
	if end > int64(len(f.n.data)) {
		f.n.setSize(end)
	}
	f.n.clean = min(f.n.clean, int(off))
	copy(f.n.data[off:], p)
	f.n.mtime = time.Now()
	return len(p), nil
}

// setSize truncates or zero-extends a file's current data to size bytes.
func (n *memNode) setSize(size int64) {
	old := len(n.data)
	switch {
	case size < int64(old):
		clear(n.data[size:]) // a later extension must read zeros, not old bytes
		n.data = n.data[:size]
		n.clean = min(n.clean, int(size))
	case size > int64(old):
		n.data = slices.Grow(n.data, int(size)-old)[:size]
		clear(n.data[old:])
		n.clean = min(n.clean, old)
	}
}

// syncData makes the current data durable, copying only what changed since
// the last sync.
func (n *memNode) syncData() {
	n.syncedData = append(n.syncedData[:n.clean], n.data[n.clean:]...)
	n.clean = len(n.data)
}

func (f *memFile) Seek(offset int64, whence int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, pathErr("seek", f.name, os.ErrClosed)
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.pos
	case io.SeekEnd:
		f.fs.mu.Lock()
		base = int64(len(f.n.data))
		f.fs.mu.Unlock()
	default:
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	if base+offset < 0 {
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	f.pos = base + offset
	return f.pos, nil
}

func (f *memFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, pathErr("stat", f.name, os.ErrClosed)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.n.infoLocked(f.name), nil
}

// Sync makes the file's data durable, or for a directory its entries.
func (f *memFile) Sync() error { return f.sync("sync", OpSync) }

// SyncData is Sync: the model has no metadata beyond size, which SyncData
// persists as fdatasync(2) does.
func (f *memFile) SyncData() error { return f.sync("fdatasync", OpSyncData) }

func (f *memFile) sync(op string, kind Op) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return pathErr(op, f.name, os.ErrClosed)
	}
	f.fs.mu.Lock()
	if f.n.isDir {
		f.n.syncedChildren = maps.Clone(f.n.children)
	} else {
		f.n.syncData()
	}
	f.fs.mu.Unlock()
	f.mu.Unlock()
	f.fs.notify(kind, f.name)
	return nil
}

// StartWriteback does nothing but check that the file is open: the model
// has no page cache to write back, and a hint is not a sync, so what a
// crash keeps (CrashClone) is unchanged. It is not reported to the hook,
// which sees only durability-relevant operations.
func (f *memFile) StartWriteback() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return pathErr("sync_file_range", f.name, os.ErrClosed)
	}
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.mu.Lock()
	err := f.truncate(size)
	f.mu.Unlock()
	if err == nil {
		f.fs.notify(OpTruncate, f.name)
	}
	return err
}

func (f *memFile) truncate(size int64) error {
	if err := f.check("truncate", false); err != nil {
		return err
	}
	if !f.write || size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.n.setSize(size)
	f.n.mtime = time.Now()
	return nil
}

// Fd returns ^uintptr(0): a MemFS file has no OS descriptor.
func (f *memFile) Fd() uintptr { return ^uintptr(0) }
