package workspace

import (
	"slices"
	"sort"
	"strings"
	"syscall"

	"wsfs/internal/namespace"
)

// live is the in-memory-only state of an inode (namespace.Inode.Aux),
// guarded by the inode's Mu.
type live struct {
	lookups uint64   // kernel lookup count
	opens   int      // open handles
	dirty   *dirty   // unflushed content shared by all handles; nil when clean
	obj     *objFile // cached object of clean content; nil if none
	// stale: the inode belongs to a tree that ReplaceTree replaced; its
	// handles fail with ESTALE.
	stale bool
}

func liveOf(n *namespace.Inode) *live {
	lv, _ := n.Aux.(*live)
	return lv
}

func liveFor(n *namespace.Inode) *live {
	lv, ok := n.Aux.(*live)
	if !ok {
		lv = &live{}
		n.Aux = lv
	}
	return lv
}

// errStale: the inode was dropped between finding it and locking it; to
// the caller it simply no longer exists.
var errStale = syscall.ENOENT

// lock1 locks inode ino and returns it; ENOENT if it does not exist.
func (w *Workspace) lock1(ino Ino) (*namespace.Inode, error) {
	n := w.tree.Get(namespace.Ino(ino))
	if n == nil {
		return nil, w.missing(namespace.Ino(ino))
	}
	n.Mu.Lock()
	if n.Dropped {
		n.Mu.Unlock()
		return nil, errStale
	}
	return n, nil
}

// lockSet holds the locks of several inodes, taken in increasing number.
type lockSet struct{ ns []*namespace.Inode }

func (l *lockSet) unlock() {
	for i := len(l.ns) - 1; i >= 0; i-- {
		l.ns[i].Mu.Unlock()
	}
	l.ns = nil
}

// get returns the locked inode numbered ino (nil if not in the set).
func (l *lockSet) get(ino namespace.Ino) *namespace.Inode {
	for _, n := range l.ns {
		if n.Ino == ino {
			return n
		}
	}
	return nil
}

// lockN locks the given inodes (0s and duplicates ignored) in increasing
// number. ENOENT if one does not exist (then nothing is held).
func (w *Workspace) lockN(inos ...namespace.Ino) (*lockSet, error) {
	s := make([]namespace.Ino, 0, len(inos))
	for _, i := range inos {
		if i != 0 {
			s = append(s, i)
		}
	}
	slices.Sort(s)
	s = slices.Compact(s)
	l := &lockSet{}
	for _, i := range s {
		n := w.tree.Get(i)
		if n == nil {
			l.unlock()
			return nil, w.missing(i)
		}
		n.Mu.Lock()
		l.ns = append(l.ns, n)
		if n.Dropped {
			l.unlock()
			return nil, errStale
		}
	}
	return l, nil
}

// checkName validates a directory entry name.
func checkName(name string) error {
	if len(name) > namespace.MaxNameLen {
		return syscall.ENAMETOOLONG
	}
	if name == "" || name == "." || name == ".." {
		return syscall.EINVAL
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return syscall.EINVAL
		}
	}
	return nil
}

// liveDir checks that a locked inode is a directory that still exists.
func liveDir(d *namespace.Inode) error {
	if !d.IsDir() {
		return syscall.ENOTDIR
	}
	if d.Nlink == 0 {
		return syscall.ENOENT
	}
	return nil
}

// lockDirEntry locks directory parent and the inode its entry name names,
// in inode order, and returns them (child nil if the name does not exist).
func (w *Workspace) lockDirEntry(parent Ino, name string) (*lockSet, *namespace.Inode, *namespace.Inode, error) {
	for {
		p, err := w.lock1(parent)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := liveDir(p); err != nil {
			p.Mu.Unlock()
			return nil, nil, nil, err
		}
		ci, ok := p.Entries[name]
		if !ok {
			return &lockSet{ns: []*namespace.Inode{p}}, p, nil, nil
		}
		if ci > p.Ino {
			c := w.tree.Get(ci)
			c.Mu.Lock()
			return &lockSet{ns: []*namespace.Inode{p, c}}, p, c, nil
		}
		p.Mu.Unlock()
		l, err := w.lockN(p.Ino, ci)
		if err != nil {
			continue // the child went away meanwhile: look again
		}
		if p.Entries[name] == ci && !p.Dropped {
			return l, p, l.get(ci), nil
		}
		l.unlock()
	}
}

// attrLocked returns the attributes of a locked inode, with unflushed
// content's size and times.
func attrLocked(n *namespace.Inode) Attr {
	a := Attr{Ino: Ino(n.Ino), Mode: n.Mode, Nlink: n.Nlink, Uid: n.Uid, Gid: n.Gid, Rdev: n.Rdev,
		Size: n.Size, Atime: n.Atime, Mtime: n.Mtime, Ctime: n.Ctime}
	if lv := liveOf(n); lv != nil && lv.dirty != nil {
		a.Size = uint64(lv.dirty.size)
		a.Mtime, a.Ctime = lv.dirty.mtime, namespace.FromNs(lv.dirty.ctime)
		a.Blocks = lv.dirty.blocks()
	} else {
		a.Blocks = contentBlocks(&n.Content, n.Size)
	}
	return a
}

// blocks512 is the number of 512-byte blocks that hold n bytes.
func blocks512(n int64) uint64 { return uint64(n+511) / 512 }

// contentBlocks is st_blocks of published content of the given size: the
// 512-byte blocks of the bytes actually stored. Hole chunks (zeros with no
// object) count nothing, so a sparse file reports what it occupies and du
// and cp --sparse see its holes; inline bytes and objects count whole.
// Content with pending ranges counts its base and, for a chunked base,
// every chunk a range touches that the base has as a hole or not at all;
// for an inline or object base, its growth past the base size.
func contentBlocks(c *namespace.Content, size uint64) uint64 {
	if c.Ranges != nil {
		base := c.Base()
		b := contentBlocks(&base, c.BaseSize)
		if !base.IsChunked() {
			return b + blocks512(int64(size-c.BaseSize))
		}
		shift := base.ChunkShift
		seen := map[uint64]bool{}
		for _, r := range c.Ranges {
			for i := r.Off >> shift; i <= (r.Off+uint64(len(r.Data))-1)>>shift; i++ {
				if seen[i] || i < uint64(len(base.Chunks)) && base.Chunks[i] != namespace.HoleChunk {
					continue
				}
				seen[i] = true
				b += blocks512(min(int64(size)-int64(i)<<shift, 1<<shift))
			}
		}
		return b
	}
	if !c.IsChunked() {
		return blocks512(int64(size))
	}
	var b uint64
	for i, id := range c.Chunks {
		if id != namespace.HoleChunk {
			b += blocks512(min(int64(size)-int64(i)<<c.ChunkShift, 1<<c.ChunkShift))
		}
	}
	return b
}

// countLookup counts one kernel lookup of a locked inode.
func countLookup(n *namespace.Inode) {
	liveFor(n).lookups++
	n.Pinned = true
}

// Lookup finds name in directory parent and counts a kernel lookup of it.
func (w *Workspace) Lookup(parent Ino, name string) (Attr, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	if len(name) > namespace.MaxNameLen {
		return Attr{}, wsErr("lookup", parent, name, syscall.ENAMETOOLONG)
	}
	p, err := w.lock1(parent)
	if err != nil {
		return Attr{}, wsErr("lookup", parent, name, err)
	}
	if err := liveDir(p); err != nil {
		p.Mu.Unlock()
		return Attr{}, wsErr("lookup", parent, name, err)
	}
	ci, ok := p.Entries[name]
	p.Mu.Unlock()
	if !ok {
		return Attr{}, wsErr("lookup", parent, name, syscall.ENOENT)
	}
	c, err := w.lock1(Ino(ci))
	if err != nil {
		return Attr{}, wsErr("lookup", parent, name, err)
	}
	defer c.Mu.Unlock()
	if c.Nlink == 0 {
		// Unlinked between the two locks.
		return Attr{}, wsErr("lookup", parent, name, syscall.ENOENT)
	}
	countLookup(c)
	return attrLocked(c), nil
}

// GetAttr returns the attributes of ino.
func (w *Workspace) GetAttr(ino Ino) (Attr, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	n, err := w.lock1(ino)
	if err != nil {
		return Attr{}, wsErr("getattr", ino, "", err)
	}
	defer n.Mu.Unlock()
	return attrLocked(n), nil
}

// SetAttr changes attributes. A Size truncates or extends the file and
// publishes the new content at once (one SetContent record).
func (w *Workspace) SetAttr(ino Ino, in SetAttrIn) (Attr, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	n, err := w.lock1(ino)
	if err != nil {
		return Attr{}, wsErr("setattr", ino, "", err)
	}
	defer n.Mu.Unlock()
	for _, t := range []*namespace.Timestamp{in.Atime, in.Mtime} {
		if t != nil && !t.Valid() {
			return Attr{}, wsErr("setattr", ino, "", syscall.EINVAL) // nothing else is unrepresentable
		}
	}
	persist := n.Nlink > 0
	if in.Size != nil {
		switch {
		case n.IsDir():
			return Attr{}, wsErr("truncate", ino, "", syscall.EISDIR)
		case !n.IsReg():
			return Attr{}, wsErr("truncate", ino, "", syscall.EINVAL)
		case *in.Size > namespace.MaxFileSize:
			return Attr{}, wsErr("truncate", ino, "", syscall.EFBIG)
		}
		if err := w.truncateLocked(n, int64(*in.Size)); err != nil {
			return Attr{}, wsErr("truncate", ino, "", err)
		}
	}
	rec := &namespace.Record{Op: namespace.OpSetAttr, Ino: n.Ino, Time: w.now()}
	if in.Mode != nil {
		rec.Mask |= namespace.AttrMode
		rec.Mode = *in.Mode & namespace.PermMask
	}
	if in.Uid != nil {
		rec.Mask |= namespace.AttrUid
		rec.Uid = *in.Uid
	}
	if in.Gid != nil {
		rec.Mask |= namespace.AttrGid
		rec.Gid = *in.Gid
	}
	if in.Atime != nil {
		rec.Mask |= namespace.AttrAtime
		rec.Atime = *in.Atime
	}
	if in.Mtime != nil {
		rec.Mask |= namespace.AttrMtime
		rec.Mtime = *in.Mtime
	}
	if rec.Mask != 0 {
		if err := w.record(rec, nil, persist); err != nil {
			return Attr{}, wsErr("setattr", ino, "", err)
		}
		if lv := liveOf(n); lv != nil && lv.dirty != nil {
			// Unflushed content keeps the times set now (cp -p, tar: write,
			// utimes, close): its SetContent record carries them.
			lv.dirty.ctime = rec.Time
			if in.Mtime != nil {
				lv.dirty.mtime = *in.Mtime
			}
		}
	}
	return attrLocked(n), nil
}

// create is Create, Mkdir, Mknod and Symlink.
func (w *Workspace) create(op string, parent Ino, name string, rec *namespace.Record, c Caller) (Attr, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	if err := checkName(name); err != nil {
		return Attr{}, wsErr(op, parent, name, err)
	}
	p, err := w.lock1(parent)
	if err != nil {
		return Attr{}, wsErr(op, parent, name, err)
	}
	defer p.Mu.Unlock()
	if err := liveDir(p); err != nil {
		return Attr{}, wsErr(op, parent, name, err)
	}
	if _, ok := p.Entries[name]; ok {
		return Attr{}, wsErr(op, parent, name, syscall.EEXIST)
	}
	rec.Parent, rec.Name = p.Ino, name
	rec.Uid, rec.Gid = c.Uid, c.Gid
	if p.Mode&syscall.S_ISGID != 0 {
		// BSD group semantics in a setgid directory.
		rec.Gid = p.Gid
		if rec.Op == namespace.OpMkdir {
			rec.Mode |= syscall.S_ISGID
		}
	}
	rec.Ino = w.tree.AllocIno()
	rec.Time = w.now()
	if err := w.record(rec, nil, true); err != nil {
		return Attr{}, wsErr(op, parent, name, err)
	}
	// The new inode's number is above every existing one, so locking it
	// while holding the parent keeps the order.
	n := w.tree.Get(rec.Ino)
	n.Mu.Lock()
	countLookup(n)
	a := attrLocked(n)
	n.Mu.Unlock()
	return a, nil
}

// Mkdir creates a directory (mode: permission bits).
func (w *Workspace) Mkdir(parent Ino, name string, mode uint32, c Caller) (Attr, error) {
	return w.create("mkdir", parent, name, &namespace.Record{Op: namespace.OpMkdir, Mode: mode & namespace.PermMask}, c)
}

// Create creates a regular file; EEXIST if name exists.
func (w *Workspace) Create(parent Ino, name string, mode uint32, c Caller) (Attr, error) {
	return w.create("create", parent, name, &namespace.Record{Op: namespace.OpCreate, Mode: namespace.S_IFREG | mode&namespace.PermMask}, c)
}

// Mknod creates a regular file, fifo, socket or device node (mode holds
// the type; type 0 means a regular file).
func (w *Workspace) Mknod(parent Ino, name string, mode, rdev uint32, c Caller) (Attr, error) {
	switch mode & namespace.S_IFMT {
	case 0:
		mode |= namespace.S_IFREG
	case namespace.S_IFREG, namespace.S_IFIFO, namespace.S_IFSOCK, namespace.S_IFCHR, namespace.S_IFBLK:
	default:
		return Attr{}, wsErr("mknod", parent, name, syscall.EINVAL)
	}
	return w.create("mknod", parent, name, &namespace.Record{Op: namespace.OpCreate, Mode: mode & (namespace.S_IFMT | namespace.PermMask), Rdev: rdev}, c)
}

// Symlink creates a symbolic link to target.
func (w *Workspace) Symlink(parent Ino, name, target string, c Caller) (Attr, error) {
	if target == "" {
		return Attr{}, wsErr("symlink", parent, name, syscall.ENOENT)
	}
	if len(target) > namespace.MaxTarget {
		return Attr{}, wsErr("symlink", parent, name, syscall.ENAMETOOLONG)
	}
	return w.create("symlink", parent, name, &namespace.Record{Op: namespace.OpSymlink, Target: target}, c)
}

// Readlink returns a symlink's target.
func (w *Workspace) Readlink(ino Ino) (string, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	n, err := w.lock1(ino)
	if err != nil {
		return "", wsErr("readlink", ino, "", err)
	}
	defer n.Mu.Unlock()
	if n.Mode&namespace.S_IFMT != namespace.S_IFLNK {
		return "", wsErr("readlink", ino, "", syscall.EINVAL)
	}
	return n.Target, nil
}

// Link makes newName in newParent a hard link to ino, counting a lookup.
func (w *Workspace) Link(ino, newParent Ino, newName string) (Attr, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	if err := checkName(newName); err != nil {
		return Attr{}, wsErr("link", ino, newName, err)
	}
	l, err := w.lockN(namespace.Ino(ino), namespace.Ino(newParent))
	if err != nil {
		return Attr{}, wsErr("link", ino, newName, err)
	}
	defer l.unlock()
	n, p := l.get(namespace.Ino(ino)), l.get(namespace.Ino(newParent))
	switch {
	case n.IsDir():
		return Attr{}, wsErr("link", ino, newName, syscall.EPERM)
	case n.Nlink == 0:
		return Attr{}, wsErr("link", ino, newName, syscall.ENOENT)
	case n.Nlink >= maxLinks:
		return Attr{}, wsErr("link", ino, newName, syscall.EMLINK)
	}
	if err := liveDir(p); err != nil {
		return Attr{}, wsErr("link", ino, newName, err)
	}
	if _, ok := p.Entries[newName]; ok {
		return Attr{}, wsErr("link", ino, newName, syscall.EEXIST)
	}
	rec := &namespace.Record{Op: namespace.OpLink, Ino: n.Ino, Parent: p.Ino, Name: newName, Time: w.now()}
	if err := w.record(rec, nil, true); err != nil {
		return Attr{}, wsErr("link", ino, newName, err)
	}
	countLookup(n)
	return attrLocked(n), nil
}

// Unlink removes a non-directory entry.
func (w *Workspace) Unlink(parent Ino, name string) error {
	return w.remove("unlink", namespace.OpUnlink, parent, name)
}

// Rmdir removes an empty directory (ENOTEMPTY otherwise).
func (w *Workspace) Rmdir(parent Ino, name string) error {
	return w.remove("rmdir", namespace.OpRmdir, parent, name)
}

func (w *Workspace) remove(op string, kind namespace.Op, parent Ino, name string) error {
	w.gate.RLock()
	defer w.gate.RUnlock()
	if name == "." {
		return wsErr(op, parent, name, syscall.EINVAL)
	}
	if name == ".." {
		return wsErr(op, parent, name, syscall.ENOTEMPTY)
	}
	if len(name) > namespace.MaxNameLen {
		return wsErr(op, parent, name, syscall.ENAMETOOLONG)
	}
	l, p, c, err := w.lockDirEntry(parent, name)
	if err != nil {
		return wsErr(op, parent, name, err)
	}
	defer l.unlock()
	switch {
	case c == nil:
		return wsErr(op, parent, name, syscall.ENOENT)
	case kind == namespace.OpUnlink && c.IsDir():
		return wsErr(op, parent, name, syscall.EISDIR)
	case kind == namespace.OpRmdir && !c.IsDir():
		return wsErr(op, parent, name, syscall.ENOTDIR)
	case kind == namespace.OpRmdir && len(c.Entries) > 0:
		return wsErr(op, parent, name, syscall.ENOTEMPTY)
	}
	rec := &namespace.Record{Op: kind, Parent: p.Ino, Name: name, Ino: c.Ino, Time: w.now()}
	if err := w.record(rec, nil, true); err != nil {
		return wsErr(op, parent, name, err)
	}
	w.afterUnlinkLocked(c)
	return nil
}

// afterUnlinkLocked releases what an inode that just lost a link no longer
// needs: if it left the table, its content state; if it is an open orphan,
// it keeps its dirty content for its handles.
func (w *Workspace) afterUnlinkLocked(n *namespace.Inode) {
	if n.Dropped {
		w.dropContentLocked(n, true)
	}
}

// Rename renames oldName in oldParent to newName in newParent. flags:
// RENAME_NOREPLACE, RENAME_EXCHANGE (unix values).
func (w *Workspace) Rename(oldParent Ino, oldName string, newParent Ino, newName string, flags uint32) error {
	w.gate.RLock()
	defer w.gate.RUnlock()
	const op = "rename"
	if flags&^(namespace.RenameNoReplace|namespace.RenameExchange) != 0 ||
		flags == namespace.RenameNoReplace|namespace.RenameExchange {
		return wsErr(op, oldParent, oldName, syscall.EINVAL)
	}
	for _, nm := range []string{oldName, newName} {
		if err := checkName(nm); err != nil {
			if nm == "." || nm == ".." {
				err = syscall.EBUSY
			}
			return wsErr(op, oldParent, nm, err)
		}
	}
	if oldParent != newParent {
		w.renameMu.Lock()
		defer w.renameMu.Unlock()
	}
	rl, err := w.lockRename(oldParent, oldName, newParent, newName)
	if err != nil {
		return err
	}
	defer rl.unlock()
	src, dst := rl.src, rl.dst
	if done, err := w.checkRename(rl, oldParent, oldName, newParent, newName, flags); done || err != nil {
		return err
	}
	rec := &namespace.Record{Op: namespace.OpRename, Parent: rl.oldDir.Ino, Name: oldName, NewParent: rl.newDir.Ino,
		NewName: newName, Flags: flags, Ino: src.Ino, Time: w.now()}
	if dst != nil {
		rec.Replaced = dst.Ino
	}
	if err := w.record(rec, nil, true); err != nil {
		return wsErr(op, oldParent, oldName, err)
	}
	if dst != nil {
		w.afterUnlinkLocked(dst)
	}
	return nil
}

// renameLocks are the inodes a rename holds locked: both directories, the
// source and the entry it replaces (dst nil if newName is free).
type renameLocks struct {
	*lockSet
	oldDir, newDir, src, dst *namespace.Inode
}

// lockRename locks both directories, the source and the destination entry
// of a rename in inode order. The entries can only be read with the
// directories locked, so it reads them, unlocks, locks all four in order,
// and starts over if an entry changed meanwhile (as lockDirEntry does for
// one). The caller holds renameMu if the directories differ.
func (w *Workspace) lockRename(oldParent Ino, oldName string, newParent Ino, newName string) (*renameLocks, error) {
	const op = "rename"
	for {
		pl, err := w.lockN(namespace.Ino(oldParent), namespace.Ino(newParent))
		if err != nil {
			return nil, wsErr(op, oldParent, oldName, err)
		}
		a, b := pl.get(namespace.Ino(oldParent)), pl.get(namespace.Ino(newParent))
		if err := liveDir(a); err != nil {
			pl.unlock()
			return nil, wsErr(op, oldParent, oldName, err)
		}
		if err := liveDir(b); err != nil {
			pl.unlock()
			return nil, wsErr(op, newParent, newName, err)
		}
		si, ok := a.Entries[oldName]
		if !ok {
			pl.unlock()
			return nil, wsErr(op, oldParent, oldName, syscall.ENOENT)
		}
		di := b.Entries[newName]
		pl.unlock()
		l, err := w.lockN(namespace.Ino(oldParent), namespace.Ino(newParent), si, di)
		if err != nil {
			continue // an inode went away meanwhile: look again
		}
		rl := &renameLocks{lockSet: l, oldDir: l.get(namespace.Ino(oldParent)), newDir: l.get(namespace.Ino(newParent))}
		if rl.oldDir.Nlink > 0 && rl.newDir.Nlink > 0 && rl.oldDir.Entries[oldName] == si && rl.newDir.Entries[newName] == di {
			rl.src = l.get(si)
			if di != 0 {
				rl.dst = l.get(di)
			}
			return rl, nil
		}
		l.unlock()
	}
}

// checkRename applies POSIX's rules to a locked rename: it returns the
// error the rename fails with, or done when there is nothing to do (two
// names of one inode).
func (w *Workspace) checkRename(rl *renameLocks, oldParent Ino, oldName string, newParent Ino, newName string, flags uint32) (done bool, err error) {
	const op = "rename"
	src, dst := rl.src, rl.dst
	switch {
	case dst != nil && flags&namespace.RenameNoReplace != 0:
		return false, wsErr(op, newParent, newName, syscall.EEXIST)
	case dst == nil && flags&namespace.RenameExchange != 0:
		return false, wsErr(op, newParent, newName, syscall.ENOENT)
	case dst == src:
		return true, nil // two names of one inode (or one name): POSIX says do nothing
	}
	if dst != nil && flags&namespace.RenameExchange == 0 {
		switch {
		case src.IsDir() && !dst.IsDir():
			return false, wsErr(op, newParent, newName, syscall.ENOTDIR)
		case !src.IsDir() && dst.IsDir():
			return false, wsErr(op, newParent, newName, syscall.EISDIR)
		case dst.IsDir() && len(dst.Entries) > 0:
			return false, wsErr(op, newParent, newName, syscall.ENOTEMPTY)
		}
	}
	if rl.oldDir != rl.newDir {
		// renameMu is held: Parent fields are stable.
		if src.IsDir() && w.isAncestor(src.Ino, rl.newDir.Ino) {
			return false, wsErr(op, oldParent, oldName, syscall.EINVAL)
		}
		if dst != nil && dst.IsDir() && flags&namespace.RenameExchange != 0 && w.isAncestor(dst.Ino, rl.oldDir.Ino) {
			return false, wsErr(op, newParent, newName, syscall.EINVAL)
		}
	}
	return false, nil
}

// isAncestor reports whether directory anc is d or one of d's ancestors.
// The caller holds renameMu.
func (w *Workspace) isAncestor(anc, d namespace.Ino) bool {
	for x := d; ; {
		if x == anc {
			return true
		}
		if x == namespace.RootIno {
			return false
		}
		n := w.tree.Get(x)
		if n == nil {
			return false
		}
		x = n.Parent
	}
}

// ReadDir returns the entries of dir, sorted by name (without "." and
// "..", which the adapter adds). It is a snapshot: later changes do not
// affect it.
func (w *Workspace) ReadDir(dir Ino) ([]DirEntry, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	d, err := w.lock1(dir)
	if err != nil {
		return nil, wsErr("readdir", dir, "", err)
	}
	if !d.IsDir() {
		d.Mu.Unlock()
		return nil, wsErr("readdir", dir, "", syscall.ENOTDIR)
	}
	out := make([]DirEntry, 0, len(d.Entries))
	for name, ino := range d.Entries {
		out = append(out, DirEntry{Name: name, Ino: Ino(ino)})
	}
	d.Mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	// The type bits never change, but Mode is written under the child's
	// lock (chmod), so read it under that lock, one child at a time.
	k := 0
	for _, e := range out {
		c, err := w.lock1(e.Ino)
		if err != nil {
			continue // removed since the snapshot
		}
		e.Mode = c.Mode & namespace.S_IFMT
		c.Mu.Unlock()
		out[k] = e
		k++
	}
	return out[:k], nil
}

// Forget gives back nlookup kernel lookups of ino.
func (w *Workspace) Forget(ino Ino, nlookup uint64) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	if ino == RootIno {
		return
	}
	n, err := w.lock1(ino)
	if err != nil {
		return
	}
	defer n.Mu.Unlock()
	lv := liveFor(n)
	lv.lookups -= min(lv.lookups, nlookup)
	w.unpinLocked(n)
}

// unpinLocked recomputes n.Pinned and drops n if it became an unpinned
// orphan.
func (w *Workspace) unpinLocked(n *namespace.Inode) {
	lv := liveFor(n)
	n.Pinned = lv.lookups > 0 || lv.opens > 0
	if w.tree.Release(n) {
		w.dropContentLocked(n, true)
	}
}

// Xattr flags (Linux values).
const (
	xattrCreate  = 1
	xattrReplace = 2
)

// maxXattrList bounds the names of one inode's attributes, each counted
// with its terminating NUL as listxattr(2) returns them: XATTR_LIST_MAX.
// The kernel cannot return a longer list (listxattr fails with E2BIG, for
// every caller and for good), so SetXattr refuses a new name that would
// make the list longer with ENOSPC, as ext4 does when an inode's
// attributes are full.
const maxXattrList = 1 << 16

// xattrNamespaceErr checks an attribute name's namespace as Linux does:
// only "user.", "trusted." and "security." attributes are stored; any other
// prefix (an unknown namespace such as "bogus.", or "system.", whose
// attributes are the kernel's own: ACLs) gives EOPNOTSUPP. For set,
// security.capability also gives EOPNOTSUPP: file capabilities are not
// supported (the mount hides the attribute from the kernel's exec and
// write paths, see fusefs IgnoreSecurityLabels), so storing it would be a
// success that does nothing. A name that is only a prefix ("user.") is
// EINVAL, as the kernel answers for a filesystem whose handlers it
// resolves itself (over FUSE the whole name reaches the daemon).
func xattrNamespaceErr(name string, set bool) error {
	switch {
	case name == "user." || name == "trusted." || name == "security.":
		return syscall.EINVAL
	case set && name == "security.capability":
		return syscall.EOPNOTSUPP
	case strings.HasPrefix(name, "user."), strings.HasPrefix(name, "trusted."), strings.HasPrefix(name, "security."):
		return nil
	}
	return syscall.EOPNOTSUPP
}

// GetXattr returns the value of an extended attribute (ENODATA if absent,
// EOPNOTSUPP for a namespace wsfs does not store).
func (w *Workspace) GetXattr(ino Ino, name string) ([]byte, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	if err := xattrNamespaceErr(name, false); err != nil {
		return nil, wsErr("getxattr", ino, name, err)
	}
	n, err := w.lock1(ino)
	if err != nil {
		return nil, wsErr("getxattr", ino, name, err)
	}
	defer n.Mu.Unlock()
	v, ok := n.Xattrs[name]
	if !ok {
		return nil, wsErr("getxattr", ino, name, syscall.ENODATA)
	}
	return slices.Clone(v), nil
}

// SetXattr sets an extended attribute. flags: XATTR_CREATE (EEXIST if
// present), XATTR_REPLACE (ENODATA if absent). A name outside the stored
// namespaces, or security.capability, gives EOPNOTSUPP (xattrNamespaceErr).
func (w *Workspace) SetXattr(ino Ino, name string, value []byte, flags uint32) error {
	w.gate.RLock()
	defer w.gate.RUnlock()
	switch {
	case name == "":
		return wsErr("setxattr", ino, name, syscall.EINVAL)
	case xattrNamespaceErr(name, true) != nil:
		return wsErr("setxattr", ino, name, xattrNamespaceErr(name, true))
	case len(name) > namespace.MaxNameLen:
		return wsErr("setxattr", ino, name, syscall.ERANGE)
	case len(value) > namespace.MaxXattrVal:
		return wsErr("setxattr", ino, name, syscall.E2BIG)
	case flags&^(xattrCreate|xattrReplace) != 0:
		return wsErr("setxattr", ino, name, syscall.EINVAL)
	}
	n, err := w.lock1(ino)
	if err != nil {
		return wsErr("setxattr", ino, name, err)
	}
	defer n.Mu.Unlock()
	_, exists := n.Xattrs[name]
	if flags&xattrCreate != 0 && exists {
		return wsErr("setxattr", ino, name, syscall.EEXIST)
	}
	if flags&xattrReplace != 0 && !exists {
		return wsErr("setxattr", ino, name, syscall.ENODATA)
	}
	if !exists && xattrListLen(n.Xattrs)+len(name)+1 > maxXattrList {
		return wsErr("setxattr", ino, name, syscall.ENOSPC)
	}
	rec := &namespace.Record{Op: namespace.OpSetXattr, Ino: n.Ino, Name: name, Value: value, Time: w.now()}
	return wsErr("setxattr", ino, name, w.record(rec, nil, n.Nlink > 0))
}

// xattrListLen is the length of the list listxattr(2) returns for xs.
func xattrListLen(xs map[string][]byte) int {
	l := 0
	for k := range xs {
		l += len(k) + 1
	}
	return l
}

// ListXattr returns the names of the extended attributes, sorted.
func (w *Workspace) ListXattr(ino Ino) ([]string, error) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	n, err := w.lock1(ino)
	if err != nil {
		return nil, wsErr("listxattr", ino, "", err)
	}
	defer n.Mu.Unlock()
	names := make([]string, 0, len(n.Xattrs))
	for k := range n.Xattrs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names, nil
}

// RemoveXattr removes an extended attribute (ENODATA if absent,
// EOPNOTSUPP for a namespace wsfs does not store).
func (w *Workspace) RemoveXattr(ino Ino, name string) error {
	w.gate.RLock()
	defer w.gate.RUnlock()
	if err := xattrNamespaceErr(name, false); err != nil {
		return wsErr("removexattr", ino, name, err)
	}
	n, err := w.lock1(ino)
	if err != nil {
		return wsErr("removexattr", ino, name, err)
	}
	defer n.Mu.Unlock()
	if _, ok := n.Xattrs[name]; !ok {
		return wsErr("removexattr", ino, name, syscall.ENODATA)
	}
	rec := &namespace.Record{Op: namespace.OpRemoveXattr, Ino: n.Ino, Name: name, Time: w.now()}
	return wsErr("removexattr", ino, name, w.record(rec, nil, n.Nlink > 0))
}
