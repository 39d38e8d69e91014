// Package namespace is the in-memory tree of a workspace and the log
// records that change it.
//
// A Tree holds inodes (regular files, directories, symlinks, fifos, sockets,
// device nodes), their attributes, directory entries, hard links and
// extended attributes. File content is either inline bytes or a pool object
// (objid.ID + size); inline slices are immutable once published and may be
// shared between trees and with the log record they were decoded from.
//
// Invariants:
//   - Apply(record) is the only way the persistent state of a tree changes,
//     both for live operations and during log replay, and it is
//     deterministic: the same records applied to the same tree give the same
//     tree. Timestamps come from the record, never from a clock.
//   - Inode numbers are never reused: NextIno is one more than the largest
//     number ever seen. The root is inode 1 and always a directory.
//   - An inode whose last link goes away (nlink 0) is dropped at once unless
//     it is Pinned (live only: open handles or kernel lookups); a pinned
//     orphan stays until Release. Orphans are never persisted: checkpoints
//     and replay never contain them.
//   - Directory nlink is 2 + number of subdirectories; the root's parent is
//     itself.
//
// Concurrency: the inode table (the map from number to *Inode and NextIno)
// is a sync.Map and an atomic counter, so Get takes no lock at all.
// The fields of an Inode are NOT locked by this package: the caller (package
// workspace) locks Inode.Mu of every inode a record touches before Apply and
// before reading fields. A tree used by a single goroutine (replay, the
// durable shadow) needs no locking.
package namespace

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
)

// Ino is an inode number.
type Ino uint64

// RootIno is the root directory's inode number.
const RootIno Ino = 1

// File type bits of Mode (Linux values).
const (
	S_IFMT   = syscall.S_IFMT
	S_IFREG  = syscall.S_IFREG
	S_IFDIR  = syscall.S_IFDIR
	S_IFLNK  = syscall.S_IFLNK
	S_IFIFO  = syscall.S_IFIFO
	S_IFSOCK = syscall.S_IFSOCK
	S_IFCHR  = syscall.S_IFCHR
	S_IFBLK  = syscall.S_IFBLK
	PermMask = 07777
)

// Inode is one file system object. See the package doc for who locks it.
type Inode struct {
	// Mu is the per-inode lock. Package namespace never takes it; package
	// workspace holds it while reading fields or applying records that
	// touch this inode.
	Mu sync.Mutex

	Ino                 Ino
	Mode                uint32 // S_IFxxx | permission bits
	Nlink               uint32
	Uid, Gid, Rdev      uint32
	Size                uint64
	Atime, Mtime, Ctime Timestamp
	Content             Content
	Target              string         // symlinks
	Parent              Ino            // directories: the directory holding this one
	Entries             map[string]Ino // directories
	Xattrs              map[string][]byte

	// Pinned keeps an inode with nlink 0 in the table (live trees only:
	// open handles, kernel lookups). Set by the caller under Mu.
	Pinned bool
	// Dropped is set when the inode leaves the table; a caller that found
	// the inode by number and then locked it must re-check it.
	Dropped bool
	// Aux belongs to the caller (workspace: dirty content, cached files).
	Aux any
}

// IsDir reports whether the inode is a directory.
func (n *Inode) IsDir() bool { return n.Mode&S_IFMT == S_IFDIR }

// IsReg reports whether the inode is a regular file.
func (n *Inode) IsReg() bool { return n.Mode&S_IFMT == S_IFREG }

// Tree is a namespace. The zero value is not usable; call New.
type Tree struct {
	// inodes maps Ino to *Inode. A sync.Map: lookups by number take no
	// lock, so the read path has no tree-wide lock at all.
	inodes  sync.Map
	count   atomic.Int64  // entries in inodes
	nextIno atomic.Uint64 // the next number AllocIno returns
}

// New returns a tree holding only the root directory with the given
// permission bits, owner and times (all its times are set to time).
func New(perm, uid, gid uint32, time int64) *Tree {
	t := &Tree{}
	t.nextIno.Store(uint64(RootIno + 1))
	t.insert(&Inode{
		Ino: RootIno, Mode: S_IFDIR | perm&PermMask, Nlink: 2, Uid: uid, Gid: gid,
		Atime: FromNs(time), Mtime: FromNs(time), Ctime: FromNs(time), Parent: RootIno, Entries: map[string]Ino{},
	})
	return t
}

// Get returns the inode numbered ino, or nil if it is not in the table.
func (t *Tree) Get(ino Ino) *Inode {
	if v, ok := t.inodes.Load(ino); ok {
		return v.(*Inode)
	}
	return nil
}

// Inodes returns a snapshot of the inode table (orphans included), in no
// particular order.
func (t *Tree) Inodes() []*Inode {
	out := make([]*Inode, 0, t.count.Load())
	t.inodes.Range(func(_, v any) bool {
		out = append(out, v.(*Inode))
		return true
	})
	return out
}

// Len returns the number of inodes in the table (orphans included).
func (t *Tree) Len() int { return int(t.count.Load()) }

// AllocIno reserves a fresh inode number for a record about to be built.
func (t *Tree) AllocIno() Ino { return Ino(t.nextIno.Add(1) - 1) }

// NextIno returns the number AllocIno would return next.
func (t *Tree) NextIno() Ino { return Ino(t.nextIno.Load()) }

func (t *Tree) insert(n *Inode) {
	t.inodes.Store(n.Ino, n)
	t.count.Add(1)
	for {
		next := t.nextIno.Load()
		if uint64(n.Ino) < next || t.nextIno.CompareAndSwap(next, uint64(n.Ino)+1) {
			return
		}
	}
}

func (t *Tree) remove(n *Inode) {
	t.inodes.Delete(n.Ino)
	t.count.Add(-1)
	n.Dropped = true
}

// Release drops n if it is an unpinned orphan (nlink 0). The caller holds
// n.Mu and has just cleared n.Pinned. It reports whether n was dropped.
func (t *Tree) Release(n *Inode) bool {
	if n.Nlink == 0 && !n.Pinned && !n.Dropped && n.Ino != RootIno {
		t.remove(n)
		return true
	}
	return false
}

// ApplyError is returned by Apply when a record does not fit the tree (a
// log that does not belong to this checkpoint, or a bug). Errno says which
// POSIX condition failed.
type ApplyError struct {
	Op     Op
	Ino    Ino
	Reason string
	Errno  syscall.Errno
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("namespace: %s record (ino %d) does not apply: %s", e.Op, e.Ino, e.Reason)
}

func (e *ApplyError) Unwrap() error { return e.Errno }

// Apply performs r on the tree. On error the tree is unchanged.
func (t *Tree) Apply(r *Record) error {
	bad := func(errno syscall.Errno, format string, args ...any) error {
		return &ApplyError{Op: r.Op, Ino: r.Ino, Reason: fmt.Sprintf(format, args...), Errno: errno}
	}
	dir := func(ino Ino) (*Inode, error) {
		d := t.Get(ino)
		if d == nil || d.Nlink == 0 {
			return nil, bad(syscall.ENOENT, "directory %d does not exist", ino)
		}
		if !d.IsDir() {
			return nil, bad(syscall.ENOTDIR, "inode %d is not a directory", ino)
		}
		return d, nil
	}
	validName := func(name string) error {
		if name == "" || name == "." || name == ".." || len(name) > MaxNameLen {
			return bad(syscall.EINVAL, "invalid name %q", name)
		}
		for i := 0; i < len(name); i++ {
			if name[i] == '/' || name[i] == 0 {
				return bad(syscall.EINVAL, "invalid name %q", name)
			}
		}
		return nil
	}
	switch r.Op {
	case OpCreate, OpMkdir, OpSymlink:
		p, err := dir(r.Parent)
		if err != nil {
			return err
		}
		if err := validName(r.Name); err != nil {
			return err
		}
		if _, ok := p.Entries[r.Name]; ok {
			return bad(syscall.EEXIST, "%q exists in directory %d", r.Name, r.Parent)
		}
		if r.Ino <= RootIno || t.Get(r.Ino) != nil {
			return bad(syscall.EEXIST, "inode %d already exists", r.Ino)
		}
		n := &Inode{Ino: r.Ino, Nlink: 1, Uid: r.Uid, Gid: r.Gid, Atime: FromNs(r.Time), Mtime: FromNs(r.Time), Ctime: FromNs(r.Time)}
		switch r.Op {
		case OpCreate:
			switch r.Mode & S_IFMT {
			case S_IFREG, S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK:
			default:
				return bad(syscall.EINVAL, "create with file type %#o", r.Mode&S_IFMT)
			}
			n.Mode = r.Mode & (S_IFMT | PermMask)
			n.Rdev = r.Rdev
		case OpMkdir:
			n.Mode = S_IFDIR | r.Mode&PermMask
			n.Nlink = 2
			n.Parent = p.Ino
			n.Entries = map[string]Ino{}
		case OpSymlink:
			if r.Target == "" {
				return bad(syscall.ENOENT, "empty symlink target")
			}
			n.Mode = S_IFLNK | 0o777
			n.Target = r.Target
			n.Size = uint64(len(r.Target))
		}
		t.insert(n)
		p.Entries[r.Name] = n.Ino
		if n.IsDir() {
			p.Nlink++
		}
		p.Mtime, p.Ctime = FromNs(r.Time), FromNs(r.Time)
		return nil

	case OpLink:
		p, err := dir(r.Parent)
		if err != nil {
			return err
		}
		if err := validName(r.Name); err != nil {
			return err
		}
		n := t.Get(r.Ino)
		if n == nil || n.Nlink == 0 {
			return bad(syscall.ENOENT, "inode %d does not exist", r.Ino)
		}
		if n.IsDir() {
			return bad(syscall.EPERM, "hard link to directory %d", r.Ino)
		}
		if _, ok := p.Entries[r.Name]; ok {
			return bad(syscall.EEXIST, "%q exists in directory %d", r.Name, r.Parent)
		}
		p.Entries[r.Name] = n.Ino
		n.Nlink++
		n.Ctime = FromNs(r.Time)
		p.Mtime, p.Ctime = FromNs(r.Time), FromNs(r.Time)
		return nil

	case OpUnlink, OpRmdir:
		p, err := dir(r.Parent)
		if err != nil {
			return err
		}
		ino, ok := p.Entries[r.Name]
		if !ok {
			return bad(syscall.ENOENT, "%q not in directory %d", r.Name, r.Parent)
		}
		if ino != r.Ino {
			return bad(syscall.ESTALE, "%q in directory %d is inode %d, record says %d", r.Name, r.Parent, ino, r.Ino)
		}
		n := t.Get(ino)
		if n == nil {
			return bad(syscall.EIO, "entry %q of directory %d names missing inode %d", r.Name, r.Parent, ino)
		}
		if r.Op == OpRmdir {
			if !n.IsDir() {
				return bad(syscall.ENOTDIR, "rmdir of non-directory %d", ino)
			}
			if len(n.Entries) != 0 {
				return bad(syscall.ENOTEMPTY, "rmdir of non-empty directory %d", ino)
			}
		} else if n.IsDir() {
			return bad(syscall.EISDIR, "unlink of directory %d", ino)
		}
		delete(p.Entries, r.Name)
		p.Mtime, p.Ctime = FromNs(r.Time), FromNs(r.Time)
		t.unlinkInode(p, n, r.Time)
		return nil

	case OpRename:
		return t.applyRename(r, dir, validName, bad)

	case OpSetAttr:
		n := t.Get(r.Ino)
		if n == nil {
			return bad(syscall.ENOENT, "inode %d does not exist", r.Ino)
		}
		if r.Mask&AttrAtime != 0 && !r.Atime.Valid() || r.Mask&AttrMtime != 0 && !r.Mtime.Valid() {
			return bad(syscall.EINVAL, "inode %d: time with %d/%d nanoseconds", r.Ino, r.Atime.Nsec, r.Mtime.Nsec)
		}
		if r.Mask&AttrMode != 0 {
			n.Mode = n.Mode&S_IFMT | r.Mode&PermMask
		}
		if r.Mask&AttrUid != 0 {
			n.Uid = r.Uid
		}
		if r.Mask&AttrGid != 0 {
			n.Gid = r.Gid
		}
		if r.Mask&AttrAtime != 0 {
			n.Atime = r.Atime
		}
		if r.Mask&AttrMtime != 0 {
			n.Mtime = r.Mtime
		}
		n.Ctime = FromNs(r.Time)
		return nil

	case OpSetContent:
		n := t.Get(r.Ino)
		if n == nil {
			return bad(syscall.ENOENT, "inode %d does not exist", r.Ino)
		}
		if !n.IsReg() {
			return bad(syscall.EINVAL, "content for non-regular inode %d", r.Ino)
		}
		if !r.Mtime.Valid() {
			return bad(syscall.EINVAL, "inode %d: mtime with %d nanoseconds", r.Ino, r.Mtime.Nsec)
		}
		if err := r.Content.Validate(r.Size); err != nil {
			return bad(syscall.EINVAL, "inode %d: %v", r.Ino, err)
		}
		n.Content = r.Content
		n.Size = r.Size
		n.Mtime = r.Mtime
		n.Ctime = FromNs(r.Time)
		return nil

	case OpWriteRange:
		n := t.Get(r.Ino)
		if n == nil {
			return bad(syscall.ENOENT, "inode %d does not exist", r.Ino)
		}
		if !n.IsReg() {
			return bad(syscall.EINVAL, "range for non-regular inode %d", r.Ino)
		}
		if r.Size < n.Size {
			return bad(syscall.EINVAL, "inode %d: range record shrinks size %d to %d", r.Ino, n.Size, r.Size)
		}
		c := n.Content
		if c.Ranges == nil {
			c.BaseSize = n.Size
		}
		c.Ranges = append(append(make([]Range, 0, len(c.Ranges)+len(r.Content.Ranges)), c.Ranges...), r.Content.Ranges...)
		if err := c.Validate(r.Size); err != nil {
			return bad(syscall.EINVAL, "inode %d: %v", r.Ino, err)
		}
		n.Content = c
		n.Size = r.Size
		n.Mtime = r.Mtime
		n.Ctime = FromNs(r.Time)
		return nil

	case OpSetXattr, OpRemoveXattr:
		n := t.Get(r.Ino)
		if n == nil {
			return bad(syscall.ENOENT, "inode %d does not exist", r.Ino)
		}
		if r.Op == OpSetXattr {
			if n.Xattrs == nil {
				n.Xattrs = map[string][]byte{}
			}
			n.Xattrs[r.Name] = r.Value
		} else {
			if _, ok := n.Xattrs[r.Name]; !ok {
				return bad(syscall.ENODATA, "no xattr %q", r.Name)
			}
			delete(n.Xattrs, r.Name)
			if len(n.Xattrs) == 0 {
				n.Xattrs = nil
			}
		}
		n.Ctime = FromNs(r.Time)
		return nil
	}
	return bad(syscall.EINVAL, "unknown op")
}

// unlinkInode drops one link of n, which was an entry of directory p.
func (t *Tree) unlinkInode(p, n *Inode, time int64) {
	if n.IsDir() {
		p.Nlink--
		n.Nlink = 0
	} else {
		n.Nlink--
	}
	n.Ctime = FromNs(time)
	t.Release(n)
}

func (t *Tree) applyRename(r *Record, dir func(Ino) (*Inode, error), validName func(string) error,
	bad func(syscall.Errno, string, ...any) error) error {
	if r.Flags&^(RenameNoReplace|RenameExchange) != 0 || r.Flags == RenameNoReplace|RenameExchange {
		return bad(syscall.EINVAL, "rename flags %#x", r.Flags)
	}
	op, err := dir(r.Parent)
	if err != nil {
		return err
	}
	np, err := dir(r.NewParent)
	if err != nil {
		return err
	}
	if err := validName(r.NewName); err != nil {
		return err
	}
	srcIno, ok := op.Entries[r.Name]
	if !ok || srcIno != r.Ino {
		return bad(syscall.ENOENT, "source %q of directory %d is not inode %d", r.Name, r.Parent, r.Ino)
	}
	dstIno, exists := np.Entries[r.NewName]
	if !exists {
		dstIno = 0
	}
	if dstIno != r.Replaced {
		return bad(syscall.ESTALE, "destination %q of directory %d is inode %d, record says %d", r.NewName, r.NewParent, dstIno, r.Replaced)
	}
	if srcIno == dstIno {
		return bad(syscall.EINVAL, "rename of inode %d onto itself is not recorded", srcIno)
	}
	src := t.Get(srcIno)
	if src == nil {
		return bad(syscall.EIO, "source inode %d missing", srcIno)
	}
	var dst *Inode
	if dstIno != 0 {
		if dst = t.Get(dstIno); dst == nil {
			return bad(syscall.EIO, "destination inode %d missing", dstIno)
		}
	}
	// A directory must not move into its own subtree.
	under := func(d *Inode, anc Ino) bool {
		for x := d; ; {
			if x.Ino == anc {
				return true
			}
			if x.Ino == RootIno {
				return false
			}
			if x = t.Get(x.Parent); x == nil {
				return false
			}
		}
	}
	// A rename within one directory cannot create a cycle, and skipping the
	// walk there means only cross-directory renames read Parent fields of
	// other inodes (package workspace serializes those with a mutex).
	cross := op != np
	if cross && src.IsDir() && under(np, src.Ino) {
		return bad(syscall.EINVAL, "directory %d would move into its own subtree", src.Ino)
	}
	if r.Flags&RenameExchange != 0 {
		if dst == nil {
			return bad(syscall.ENOENT, "exchange with missing destination")
		}
		if cross && dst.IsDir() && under(op, dst.Ino) {
			return bad(syscall.EINVAL, "directory %d would move into its own subtree", dst.Ino)
		}
		op.Entries[r.Name] = dst.Ino
		np.Entries[r.NewName] = src.Ino
		if op != np {
			if src.IsDir() {
				src.Parent = np.Ino
				op.Nlink--
				np.Nlink++
			}
			if dst.IsDir() {
				dst.Parent = op.Ino
				np.Nlink--
				op.Nlink++
			}
		}
		src.Ctime, dst.Ctime = FromNs(r.Time), FromNs(r.Time)
		op.Mtime, op.Ctime, np.Mtime, np.Ctime = FromNs(r.Time), FromNs(r.Time), FromNs(r.Time), FromNs(r.Time)
		return nil
	}
	if dst != nil {
		if r.Flags&RenameNoReplace != 0 {
			return bad(syscall.EEXIST, "destination exists and RENAME_NOREPLACE")
		}
		switch {
		case src.IsDir() && !dst.IsDir():
			return bad(syscall.ENOTDIR, "directory over non-directory")
		case !src.IsDir() && dst.IsDir():
			return bad(syscall.EISDIR, "non-directory over directory")
		case dst.IsDir() && len(dst.Entries) != 0:
			return bad(syscall.ENOTEMPTY, "destination directory not empty")
		}
	}
	delete(op.Entries, r.Name)
	if dst != nil {
		delete(np.Entries, r.NewName)
		t.unlinkInode(np, dst, r.Time)
	}
	np.Entries[r.NewName] = src.Ino
	if src.IsDir() && op != np {
		src.Parent = np.Ino
		op.Nlink--
		np.Nlink++
	}
	src.Ctime = FromNs(r.Time)
	op.Mtime, op.Ctime, np.Mtime, np.Ctime = FromNs(r.Time), FromNs(r.Time), FromNs(r.Time), FromNs(r.Time)
	return nil
}
