package e2e

import (
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand"
	"path"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// The kill workload is a deterministic function of its seed: killGen draws
// each op from the model of the tree so far (so every op is valid and must
// succeed until the daemon dies), and the model after any prefix of the op
// list is obtained by replaying it.
//
// Every op changes the tree with one mutating system call, so a crash shows
// it whole or not at all, except create (open O_CREAT|O_EXCL, write, close),
// whose file may appear with a prefix of its content (see the checker).
// In-place writes and appends stay inside one 4 KiB page, so they reach the
// daemon as one WRITE request even through the page cache.

// killOp is one op of the workload; paths are relative to the round's
// directory.
type killOp struct {
	i      int
	kind   string // create write append truncate rename exchange link unlink mkdir rmdir symlink chmod setxattr rmxattr
	path   string
	path2  string // rename/link destination, exchange's other path
	data   []byte // create/write/append content, setxattr value
	xname  string // setxattr/rmxattr: the attribute
	off    int64  // write offset
	size   int64  // truncate size
	mode   uint32 // create/mkdir/chmod
	target string // symlink target
	fsync  string // after the op: fsync this path ("" none, "." the round dir)
}

func (op killOp) String() string {
	s := fmt.Sprintf("op %d: %s %s", op.i, op.kind, op.path)
	switch op.kind {
	case "rename", "link":
		s += " -> " + op.path2
	case "exchange":
		s += " <-> " + op.path2
	case "setxattr":
		s += fmt.Sprintf(" %s len %d", op.xname, len(op.data))
	case "rmxattr":
		s += " " + op.xname
	case "create", "append":
		s += fmt.Sprintf(" len %d", len(op.data))
	case "write":
		s += fmt.Sprintf(" off %d len %d", op.off, len(op.data))
	case "truncate":
		s += fmt.Sprintf(" size %d", op.size)
	case "mkdir", "chmod":
		s += fmt.Sprintf(" mode %#o", op.mode)
	case "symlink":
		s += " target " + op.target
	}
	if op.fsync != "" {
		s += " + fsync " + op.fsync
	}
	return s
}

// exec performs op with *at system calls relative to dirfd, so that after
// the daemon dies every call fails (ENOTCONN) instead of resolving on the
// directory under the mount point.
func (op killOp) exec(dirfd int) error {
	var err error
	switch op.kind {
	case "create":
		err = writeFileAt(dirfd, op.path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, op.mode, op.data, -1)
	case "write":
		err = writeFileAt(dirfd, op.path, unix.O_WRONLY, 0, op.data, op.off)
	case "append":
		err = writeFileAt(dirfd, op.path, unix.O_WRONLY|unix.O_APPEND, 0, op.data, -1)
	case "truncate":
		var fd int
		if fd, err = unix.Openat(dirfd, op.path, unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			err = unix.Ftruncate(fd, op.size)
			if cerr := unix.Close(fd); err == nil {
				err = cerr
			}
		}
	case "rename":
		err = unix.Renameat(dirfd, op.path, dirfd, op.path2)
	case "link":
		err = unix.Linkat(dirfd, op.path, dirfd, op.path2, 0)
	case "unlink":
		err = unix.Unlinkat(dirfd, op.path, 0)
	case "rmdir":
		err = unix.Unlinkat(dirfd, op.path, unix.AT_REMOVEDIR)
	case "mkdir":
		err = unix.Mkdirat(dirfd, op.path, op.mode)
	case "symlink":
		err = unix.Symlinkat(op.target, dirfd, op.path)
	case "chmod":
		err = unix.Fchmodat(dirfd, op.path, op.mode, 0)
	case "exchange":
		err = unix.Renameat2(dirfd, op.path, dirfd, op.path2, unix.RENAME_EXCHANGE)
	case "setxattr", "rmxattr":
		var fd int
		if fd, err = unix.Openat(dirfd, op.path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			if op.kind == "setxattr" {
				err = unix.Fsetxattr(fd, op.xname, op.data, 0)
			} else {
				err = unix.Fremovexattr(fd, op.xname)
			}
			if cerr := unix.Close(fd); err == nil {
				err = cerr
			}
		}
	default:
		panic("unknown kill op " + op.kind)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op.kind, err)
	}
	return nil
}

// fsyncAt opens rel under dirfd and fsyncs it.
func fsyncAt(dirfd int, rel string) error {
	fd, err := unix.Openat(dirfd, rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open for fsync: %w", err)
	}
	err = unix.Fsync(fd)
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		return fmt.Errorf("close after fsync: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return nil
}

// writeFileAt opens rel, writes data (at off, or at the current offset if
// off < 0) and closes.
func writeFileAt(dirfd int, rel string, flags int, mode uint32, data []byte, off int64) error {
	fd, err := unix.Openat(dirfd, rel, flags|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	for len(data) > 0 && err == nil {
		var n int
		if off >= 0 {
			n, err = unix.Pwrite(fd, data, off)
			off += int64(n)
		} else {
			n, err = unix.Write(fd, data)
		}
		if err == nil {
			data = data[n:]
		}
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// bigFile is the size from which a create is "big": chunked content, five
// or six of the engine's 1 MiB chunks.
// The generator keeps at most one big file per round, as every round's
// check hashes every earlier round again.
const bigFile = 4<<20 + 1

// hasBig reports whether the model holds a file of at least bigFile bytes.
func (m *kmodel) hasBig() bool {
	for _, n := range m.nodes {
		if n.kind == 'f' && len(n.file.data) >= bigFile {
			return true
		}
	}
	return false
}

// kfile is a regular file's inode; hard links share it.
type kfile struct {
	data   []byte
	mode   uint32
	xattrs map[string]string // user.* attributes, hex values (nil: none)
}

// knode is one name in the model.
type knode struct {
	kind   byte // 'f' 'd' 'l'
	file   *kfile
	mode   uint32            // directories
	target string            // symlinks
	xattrs map[string]string // directories, as kfile.xattrs
}

// xattrsOf returns the attribute map of the node at p (its file's for a
// regular file), made if create is set and there is none.
func (m *kmodel) xattrsOf(p string, create bool) *map[string]string {
	n := m.nodes[p]
	x := &n.xattrs
	if n.kind == 'f' {
		x = &n.file.xattrs
	}
	if *x == nil && create {
		*x = map[string]string{}
	}
	return x
}

// kmodel is the expected tree of a round's directory ("." is the round
// directory itself, mode 0755).
type kmodel struct {
	nodes map[string]*knode
}

func newKModel() *kmodel {
	return &kmodel{nodes: map[string]*knode{".": {kind: 'd', mode: 0o755}}}
}

// sorted returns the paths of nodes of kind k, sorted (choices must not
// depend on map order).
func (m *kmodel) sorted(k byte) []string {
	var out []string
	for p, n := range m.nodes {
		if n.kind == k {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (m *kmodel) isEmptyDir(p string) bool {
	for q := range m.nodes {
		if q != p && under(q, p) {
			return false
		}
	}
	return true
}

// under reports whether q lies strictly below directory p.
func under(q, p string) bool {
	if p == "." {
		return q != "."
	}
	return strings.HasPrefix(q, p+"/")
}

// apply changes the model as op changes the tree.
func (m *kmodel) apply(op killOp) {
	switch op.kind {
	case "create":
		m.nodes[op.path] = &knode{kind: 'f', file: &kfile{data: append([]byte(nil), op.data...), mode: op.mode}}
	case "write":
		f := m.nodes[op.path].file
		if end := op.off + int64(len(op.data)); end > int64(len(f.data)) {
			f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
		}
		copy(f.data[op.off:], op.data)
	case "append":
		f := m.nodes[op.path].file
		f.data = append(f.data, op.data...)
	case "truncate":
		f := m.nodes[op.path].file
		if op.size <= int64(len(f.data)) {
			f.data = f.data[:op.size]
		} else {
			f.data = append(f.data, make([]byte, op.size-int64(len(f.data)))...)
		}
	case "rename":
		moved := map[string]*knode{}
		for q, n := range m.nodes {
			if q == op.path || under(q, op.path) {
				moved[op.path2+q[len(op.path):]] = n
				delete(m.nodes, q)
			}
		}
		for q, n := range moved {
			m.nodes[q] = n
		}
	case "exchange":
		moved := map[string]*knode{}
		for q, n := range m.nodes {
			switch {
			case q == op.path || under(q, op.path):
				moved[op.path2+q[len(op.path):]] = n
				delete(m.nodes, q)
			case q == op.path2 || under(q, op.path2):
				moved[op.path+q[len(op.path2):]] = n
				delete(m.nodes, q)
			}
		}
		for q, n := range moved {
			m.nodes[q] = n
		}
	case "setxattr":
		(*m.xattrsOf(op.path, true))[op.xname] = hex.EncodeToString(op.data)
	case "rmxattr":
		x := m.xattrsOf(op.path, false)
		delete(*x, op.xname)
		if len(*x) == 0 {
			*x = nil
		}
	case "link":
		m.nodes[op.path2] = &knode{kind: 'f', file: m.nodes[op.path].file}
	case "unlink", "rmdir":
		delete(m.nodes, op.path)
	case "mkdir":
		m.nodes[op.path] = &knode{kind: 'd', mode: op.mode}
	case "symlink":
		m.nodes[op.path] = &knode{kind: 'l', target: op.target}
	case "chmod":
		if n := m.nodes[op.path]; n.kind == 'f' {
			n.file.mode = op.mode
		} else {
			n.mode = op.mode
		}
	}
}

// tree renders the model as a snapshot (with directory link counts).
func (m *kmodel) tree() tree {
	t := tree{}
	links := map[*kfile][]string{}
	for p, n := range m.nodes {
		switch n.kind {
		case 'f':
			links[n.file] = append(links[n.file], p)
		case 'd':
			nl := uint64(2)
			for q, c := range m.nodes {
				if c.kind == 'd' && q != "." && path.Dir(q) == p {
					nl++
				}
			}
			t[p] = entry{Type: 'd', Perm: n.mode, Nlink: nl, Xattrs: maps.Clone(n.xattrs)}
		case 'l':
			t[p] = entry{Type: 'l', Size: int64(len(n.target)), Target: n.target, Nlink: 1}
		}
	}
	for f, paths := range links {
		sort.Strings(paths)
		for _, p := range paths {
			t[p] = entry{Type: 'f', Perm: f.mode, Size: int64(len(f.data)), Hash: hashBytes(f.data),
				Nlink: uint64(len(paths)), Links: paths[0], Xattrs: maps.Clone(f.xattrs)}
		}
	}
	return t
}

// killGen draws the workload's ops from the model of the tree so far.
type killGen struct {
	r         *rand.Rand
	m         *kmodel
	n         int
	nextFsync int // op index of the next fsync
}

func newKillGen(seed int64) *killGen {
	g := &killGen{r: rand.New(rand.NewSource(seed)), m: newKModel()}
	g.nextFsync = 1 + g.r.Intn(8)
	return g
}

// next returns the next op and applies it to the generator's model.
func (g *killGen) next() killOp {
	r, m := g.r, g.m
	op := killOp{i: g.n}
	g.n++
	files, dirs := m.sorted('f'), m.sorted('d')
	newName := func() string {
		return path.Join(dirs[r.Intn(len(dirs))], fmt.Sprintf("n%d", op.i))
	}
	pick := func(ps []string) string { return ps[r.Intn(len(ps))] }
	weights := []struct {
		kind string
		w    int
	}{
		{"create", 25}, {"write", 15}, {"append", 10}, {"truncate", 5}, {"rename", 10},
		{"renamedir", 3}, {"unlink", 8}, {"mkdir", 6}, {"rmdir", 3}, {"link", 4},
		{"symlink", 4}, {"chmod", 4}, {"exchange", 3}, {"setxattr", 4},
	}
	if len(files) > 40 {
		weights[6].w = 40 // keep the tree small: unlink more
	}
	if len(dirs) > 12 {
		weights[7].w = 0
	}
	total := 0
	for _, w := range weights {
		total += w.w
	}
	x, kind := r.Intn(total), ""
	for _, w := range weights {
		if x < w.w {
			kind = w.kind
			break
		}
		x -= w.w
	}
	if len(files) == 0 && kind != "mkdir" && kind != "symlink" && kind != "renamedir" {
		kind = "create"
	}
	var emptyDirs, movable []string
	for _, d := range dirs {
		if d != "." {
			movable = append(movable, d)
			if m.isEmptyDir(d) {
				emptyDirs = append(emptyDirs, d)
			}
		}
	}
	if (kind == "rmdir" && len(emptyDirs) == 0) || (kind == "renamedir" && len(movable) == 0) {
		kind = "mkdir"
	}
	fsyncParent := func(p string) string { return path.Dir(p) }

	switch kind {
	case "create":
		op.kind, op.path = "create", newName()
		op.mode = []uint32{0o644, 0o600, 0o755}[r.Intn(3)]
		size := r.Intn(8 << 10)
		switch x := r.Intn(100); {
		case x < 10:
			size = 60<<10 + r.Intn(100<<10) // around and past the inline limit
		case x == 10 && !m.hasBig():
			size = bigFile + r.Intn(1<<20) // chunked content
		}
		op.data = randData(r, size)
		op.fsync = op.path
	case "write":
		op.kind, op.path = "write", pick(files)
		size := int64(len(m.nodes[op.path].file.data))
		page := r.Int63n(size/4096 + 2) // may start past the end: a hole
		in := r.Int63n(4096)
		op.off = page*4096 + in
		op.data = randData(r, 1+r.Intn(int(4096-in)))
		op.fsync = op.path
	case "append":
		op.kind, op.path = "append", pick(files)
		size := len(m.nodes[op.path].file.data)
		op.data = randData(r, 1+r.Intn(4096-size%4096))
		op.fsync = op.path
	case "truncate":
		op.kind, op.path = "truncate", pick(files)
		op.size = r.Int63n(int64(len(m.nodes[op.path].file.data)) + 20000)
		op.fsync = op.path
	case "rename":
		op.kind, op.path = "rename", pick(files)
		op.path2 = newName()
		// Sometimes over an existing file (a different inode: renaming
		// onto another name of the same inode is a no-op in POSIX).
		if r.Intn(3) == 0 {
			for _, c := range files {
				if m.nodes[c].file != m.nodes[op.path].file && r.Intn(3) == 0 {
					op.path2 = c
					break
				}
			}
		}
		op.fsync = fsyncParent(op.path2)
	case "renamedir":
		op.kind, op.path = "rename", pick(movable)
		var dst []string
		for _, d := range dirs {
			if d != op.path && !under(d, op.path) {
				dst = append(dst, d)
			}
		}
		op.path2 = path.Join(pick(dst), fmt.Sprintf("n%d", op.i))
		op.fsync = fsyncParent(op.path2)
	case "unlink":
		var victims []string
		victims = append(victims, files...)
		victims = append(victims, m.sorted('l')...)
		op.kind, op.path = "unlink", pick(victims)
		op.fsync = fsyncParent(op.path)
	case "mkdir":
		op.kind, op.path = "mkdir", newName()
		op.mode = []uint32{0o755, 0o700}[r.Intn(2)]
		op.fsync = op.path
	case "rmdir":
		op.kind, op.path = "rmdir", pick(emptyDirs)
		op.fsync = fsyncParent(op.path)
	case "link":
		op.kind, op.path, op.path2 = "link", pick(files), newName()
		op.fsync = op.path2
	case "symlink":
		op.kind, op.path = "symlink", newName()
		op.target = fmt.Sprintf("target-%d/%s", op.i, strings.Repeat("x", r.Intn(40)))
		op.fsync = fsyncParent(op.path)
	case "exchange":
		// Two entries of which neither holds the other: files, or
		// directories other than the round's.
		all := append(append([]string(nil), files...), movable...)
		op.kind, op.path = "exchange", pick(all)
		// Only exchanges that change the tree (not two names of one
		// file, not two equal empty directories): every op must show.
		var other []string
		before := m.tree()
		for _, q := range all {
			if q != op.path && !under(q, op.path) && !under(op.path, q) {
				c := &kmodel{nodes: maps.Clone(m.nodes)}
				c.apply(killOp{kind: "exchange", path: op.path, path2: q})
				if !maps.EqualFunc(before, c.tree(), func(a, b entry) bool { return a.diff(b) == "" }) {
					other = append(other, q)
				}
			}
		}
		if len(other) == 0 {
			op.kind, op.path = "mkdir", newName() // nothing to exchange with
			op.mode = 0o755
			op.fsync = op.path
			break
		}
		op.path2 = pick(other)
		op.fsync = fsyncParent(op.path2)
	case "setxattr":
		all := append(append([]string(nil), files...), movable...)
		op.kind, op.path = "setxattr", pick(all)
		op.xname = []string{"user.a", "user.b"}[r.Intn(2)]
		xs := *m.xattrsOf(op.path, false)
		old, ok := xs[op.xname]
		switch {
		case len(xs) > 0 && r.Intn(3) == 0:
			op.kind, op.xname = "rmxattr", slices.Sorted(maps.Keys(xs))[0]
		default:
			op.data = randData(r, r.Intn(200))
			if ok && hex.EncodeToString(op.data) == old {
				op.data = append(op.data, 1) // a change, so that it shows
			}
		}
		op.fsync = op.path
	case "chmod":
		all := append(append([]string(nil), files...), movable...)
		if len(all) == 0 {
			all = files
		}
		op.kind, op.path = "chmod", pick(all)
		if m.nodes[op.path].kind == 'd' {
			op.mode = []uint32{0o755, 0o700, 0o711}[r.Intn(3)]
		} else {
			op.mode = []uint32{0o644, 0o600, 0o755, 0o700, 0o444}[r.Intn(5)]
		}
		op.fsync = op.path
	}
	if op.i == g.nextFsync {
		g.nextFsync = op.i + 1 + g.r.Intn(8)
	} else {
		op.fsync = ""
	}
	m.apply(op)
	return op
}
