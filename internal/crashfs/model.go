// Package crashfs is a test-support filesystem that simulates power loss:
// a pass-through FUSE mount over a backing directory that remembers what
// was made durable and, on a power cut, throws everything else away.
//
// Live view: every operation goes to the backing directory, so processes
// on the mount see an ordinary filesystem.
//
// Durable image: an inode-level model, kept beside the live view, of what a
// conservative ext4-like disk would hold after a power cut:
//
//   - fsync(file) makes the file's data, size and metadata (mode, mtime)
//     durable, but not its names: a new name is durable only once its
//     directory is synced.
//   - fdatasync(file) makes its data and size durable, not its mode or
//     times.
//   - fsync (or fdatasync) of a directory makes its current set of entries
//     durable: new names, removed names, the two halves of a rename within
//     it. A cross-directory rename needs both directories synced; with only
//     the destination synced the inode is durably under both names (as a
//     hard link; a directory is kept at its first name only), with only the
//     source synced it is durably under neither.
//   - An inode that becomes reachable through a synced entry but was never
//     synced itself is durable as created: a regular file empty, a
//     directory empty, a symlink with its target.
//   - sync_file_range, close, flush, rename, link: no durability at all.
//     (syncfs/sync are not modelled: wsfs's tests never call them.)
//   - Everything present in the backing directory at mount time is durable.
//
// A power cut (Cut) freezes the mount at once: every later mutation fails
// with EIO and nothing reaches the backing directory any more. It may then
// keep a random subset of the unsynced writes of durable files, and tear
// one of them at a 512-byte sector boundary, as a disk with a volatile
// cache may. Restore (after Unmount) replaces the backing directory by the
// durable image, so the next Mount serves exactly what survived.
//
// File data of the durable image lives in a shadow directory (one file per
// inode, updated incrementally from the written ranges on each sync); data
// present at mount time stays where it is, held by an open descriptor, and
// is kept by a hard link in the shadow directory (a name, not a held
// descriptor: a backing tree of any size mounts within the descriptor
// limit) and copied to the shadow only before its first modification.
package crashfs

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

// rootID is the inode id of the mount's root directory.
const rootID = 1

// maxKeptBytes bounds the memory holding the data of unsynced writes (for
// Cut's random subset); writes beyond it are still tracked, not kept.
const maxKeptBytes = 256 << 20

// span is one write since the last sync of its inode.
type span struct {
	off  int64
	len  int64
	data []byte // the bytes written, nil if over maxKeptBytes
}

// dnode is an inode of the durable image.
type dnode struct {
	kind     byte // 'f' file, 'd' directory, 'l' symlink, 's' socket, 'p' fifo
	perm     uint32
	mtime    *unix.Timespec // nil: not recorded (the rebuild's time is used)
	size     int64          // files: durable size
	shadow   bool           // files: the shadow file holds the durable data
	pristine string         // files: a hard link to the mount-time inode, unmodified so far ("" once copied)
	target   string         // symlinks
	entries  map[string]uint64
}

// lnode is what crashfs tracks of a live inode.
type lnode struct {
	kind     byte
	perm     uint32 // at creation
	target   string
	dirty    []span
	dirtyAll bool // truncated, allocated: the next sync copies the whole file
}

// model is the durable image plus the live tracking; FS.mu guards it.
type model struct {
	shadowDir string
	ids       map[uint64]uint64 // backing st_ino -> inode id
	next      uint64
	durable   map[uint64]*dnode
	live      map[uint64]*lnode
	keptBytes int64
}

func (m *model) shadowPath(id uint64) string {
	return filepath.Join(m.shadowDir, strconv.FormatUint(id, 10))
}

// created records a new live inode (create, mkdir, mknod, symlink): a
// fresh id, even if the backing filesystem reuses an inode number.
func (m *model) created(ino uint64, kind byte, perm uint32, target string) uint64 {
	m.next++
	id := m.next
	m.ids[ino] = id
	m.live[id] = &lnode{kind: kind, perm: perm, target: target}
	return id
}

// idOf returns the id of a live inode, registering it if crashfs has not
// seen it (it then counts as created now).
func (m *model) idOf(st *unix.Stat_t) uint64 {
	if id, ok := m.ids[st.Ino]; ok {
		return id
	}
	return m.created(st.Ino, kindOf(st.Mode), st.Mode&0o7777, "")
}

func (m *model) lnode(id uint64) *lnode {
	ln := m.live[id]
	if ln == nil {
		ln = &lnode{kind: 'f'}
		m.live[id] = ln
	}
	return ln
}

func kindOf(mode uint32) byte {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return 'd'
	case unix.S_IFLNK:
		return 'l'
	case unix.S_IFSOCK:
		return 's'
	case unix.S_IFIFO:
		return 'p'
	default:
		return 'f'
	}
}

// load makes the model of a backing directory: everything in it is
// durable, file data pristine (hard-linked into the shadow directory).
func (m *model) load(backing string) error {
	var st unix.Stat_t
	if err := unix.Lstat(backing, &st); err != nil {
		return err
	}
	m.ids[st.Ino] = rootID
	m.next = rootID
	m.durable[rootID] = &dnode{kind: 'd', perm: st.Mode & 0o7777, mtime: ts(st.Mtim), entries: map[string]uint64{}}
	m.live[rootID] = &lnode{kind: 'd', perm: st.Mode & 0o7777}
	var walk func(dir string, dn *dnode) error
	walk = func(dir string, dn *dnode) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			if id, ok := m.ids[st.Ino]; ok { // a hard link
				dn.entries[e.Name()] = id
				continue
			}
			kind := kindOf(st.Mode)
			var target string
			if kind == 'l' {
				if target, err = os.Readlink(p); err != nil {
					return err
				}
			}
			id := m.created(st.Ino, kind, st.Mode&0o7777, target)
			c := &dnode{kind: kind, perm: st.Mode & 0o7777, mtime: ts(st.Mtim), target: target}
			m.durable[id] = c
			dn.entries[e.Name()] = id
			switch kind {
			case 'f':
				c.pristine, c.size = m.pristinePath(id), st.Size
				if err := os.Link(p, c.pristine); err != nil {
					return fmt.Errorf("keep the mount-time data of %s (the shadow directory must be on the backing directory's filesystem): %w", p, err)
				}
			case 'd':
				c.entries = map[string]uint64{}
				if err := walk(p, c); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(backing, m.durable[rootID])
}

func ts(t unix.Timespec) *unix.Timespec { return &t }

// cow copies the pristine data of a durable file to its shadow before the
// live file is first modified.
func (m *model) cow(id uint64) error {
	dn := m.durable[id]
	if dn == nil || dn.kind != 'f' || dn.pristine == "" {
		return nil
	}
	if err := copyFile(m.shadowPath(id), dn.pristine, dn.size, os.O_TRUNC); err != nil {
		return fmt.Errorf("crashfs: copy-on-write of inode %d: %w", id, err)
	}
	os.Remove(dn.pristine)
	dn.pristine, dn.shadow = "", true
	return nil
}

// wrote records a write to a live file (after it reached the backing file).
func (m *model) wrote(id uint64, off int64, data []byte) {
	ln := m.lnode(id)
	s := span{off: off, len: int64(len(data))}
	if m.keptBytes+int64(len(data)) <= maxKeptBytes {
		s.data = append([]byte(nil), data...)
		m.keptBytes += int64(len(data))
	}
	ln.dirty = append(ln.dirty, s)
}

// changedAll records a change of a live file that is not a plain write
// (truncate, fallocate): the next sync copies the whole file.
func (m *model) changedAll(id uint64) {
	ln := m.lnode(id)
	ln.dirtyAll = true
	m.clearDirty(ln)
}

func (m *model) clearDirty(ln *lnode) {
	for _, s := range ln.dirty {
		m.keptBytes -= int64(len(s.data))
	}
	ln.dirty = nil
}

// syncFile makes the live file open as live durable: data and size, and
// with !datasync its mode and mtime.
func (m *model) syncFile(id uint64, live *os.File, datasync bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(live.Fd()), &st); err != nil {
		return err
	}
	ln := m.lnode(id)
	dn := m.durable[id]
	if dn == nil {
		dn = &dnode{kind: 'f', perm: ln.perm}
		m.durable[id] = dn
	}
	if err := m.cow(id); err != nil {
		return err
	}
	if !dn.shadow || ln.dirtyAll {
		dst, err := os.OpenFile(m.shadowPath(id), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(dst, io.NewSectionReader(live, 0, st.Size))
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("crashfs: sync of inode %d: %w", id, err)
		}
		dn.shadow = true
	} else {
		dst, err := os.OpenFile(m.shadowPath(id), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		buf := make([]byte, 0, 128<<10)
		for _, s := range ln.dirty {
			end := min(s.off+s.len, st.Size)
			for off := s.off; off < end; {
				n := min(end-off, int64(cap(buf)))
				b := buf[:n]
				if _, err = live.ReadAt(b, off); err != nil {
					break
				}
				if _, err = dst.WriteAt(b, off); err != nil {
					break
				}
				off += n
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			err = dst.Truncate(st.Size)
		}
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("crashfs: sync of inode %d: %w", id, err)
		}
	}
	dn.size = st.Size
	ln.dirtyAll = false
	m.clearDirty(ln)
	if !datasync {
		dn.perm, dn.mtime = st.Mode&0o7777, ts(st.Mtim)
	}
	return nil
}

// syncDir makes the entries of the live directory at path durable (and,
// as an fsync does, the directory's own mode and mtime).
func (m *model) syncDir(id uint64, path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	dn := m.durable[id]
	if dn == nil {
		dn = &dnode{kind: 'd', perm: m.lnode(id).perm}
		m.durable[id] = dn
	}
	entries := map[string]uint64{}
	for _, e := range ents {
		var cst unix.Stat_t
		if err := unix.Lstat(filepath.Join(path, e.Name()), &cst); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return err
		}
		cid := m.idOf(&cst)
		entries[e.Name()] = cid
		if m.durable[cid] == nil {
			ln := m.lnode(cid)
			c := &dnode{kind: ln.kind, perm: ln.perm, target: ln.target}
			if c.kind == 'd' {
				c.entries = map[string]uint64{}
			}
			if c.kind == 'l' && c.target == "" {
				c.target, _ = os.Readlink(filepath.Join(path, e.Name()))
			}
			m.durable[cid] = c
		}
	}
	dn.entries = entries
	dn.perm, dn.mtime = st.Mode&0o7777, ts(st.Mtim)
	return nil
}

// CutOptions choose what a power cut keeps of the unsynced writes.
type CutOptions struct {
	// Rand draws the kept writes; nil keeps none.
	Rand *rand.Rand
	// Keep is the probability that one unsynced write of a durable file
	// reaches the disk anyway.
	Keep float64
	// Tear: one of the kept writes reaches the disk only up to a random
	// 512-byte sector boundary.
	Tear bool
}

// CutStats say what a cut kept.
type CutStats struct {
	Unsynced int // unsynced writes of durable files
	Kept     int
	Torn     bool
}

// keepUnsynced applies the random subset of unsynced writes to the image.
func (m *model) keepUnsynced(o CutOptions) (CutStats, error) {
	var cs CutStats
	if o.Rand == nil {
		return cs, nil
	}
	ids := make([]uint64, 0, len(m.live))
	for id := range m.live {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	type pick struct {
		id uint64
		s  span
	}
	var picks []pick
	for _, id := range ids {
		ln, dn := m.live[id], m.durable[id]
		if dn == nil || dn.kind != 'f' || ln.dirtyAll {
			continue
		}
		for _, s := range ln.dirty {
			if s.data == nil {
				continue
			}
			cs.Unsynced++
			if o.Rand.Float64() < o.Keep {
				picks = append(picks, pick{id, s})
			}
		}
	}
	torn := -1
	if o.Tear && len(picks) > 0 {
		torn = o.Rand.Intn(len(picks))
	}
	for i, p := range picks {
		if err := m.cow(p.id); err != nil {
			return cs, err
		}
		dn := m.durable[p.id]
		data := p.s.data
		if i == torn {
			// Sectors are counted from the file's start.
			first := (p.s.off + 511) / 512 * 512
			var cuts []int64
			for b := first; b < p.s.off+p.s.len; b += 512 {
				cuts = append(cuts, b-p.s.off)
			}
			n := int64(0)
			if len(cuts) > 0 {
				n = cuts[o.Rand.Intn(len(cuts))]
			}
			data = data[:n]
			cs.Torn = true
		}
		f, err := os.OpenFile(m.shadowPath(p.id), os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			return cs, err
		}
		if !dn.shadow {
			err = f.Truncate(dn.size)
		}
		if err == nil {
			_, err = f.WriteAt(data, p.s.off)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return cs, err
		}
		dn.shadow = true
		dn.size = max(dn.size, p.s.off+int64(len(data)))
		cs.Kept++
	}
	return cs, nil
}

// RestoreStats say what a restore wrote.
type RestoreStats struct {
	Files, Dirs, Links, Others int
	DupDirs                    int // directories durable under two names, kept at the first
}

// restore writes the durable image to a new directory and swaps it in for
// backing.
func (m *model) restore(backing string) (RestoreStats, error) {
	var rs RestoreStats
	next := backing + ".crashfs-next"
	old := backing + ".crashfs-old"
	os.RemoveAll(next)
	os.RemoveAll(old)
	if err := os.Mkdir(next, 0o700); err != nil {
		return rs, err
	}
	placed := map[uint64]string{rootID: next}
	order := []uint64{rootID}
	type item struct {
		id   uint64
		path string
	}
	queue := []item{{rootID, next}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		dn := m.durable[it.id]
		names := make([]string, 0, len(dn.entries))
		for name := range dn.entries {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			cid := dn.entries[name]
			c := m.durable[cid]
			p := filepath.Join(it.path, name)
			if prev, ok := placed[cid]; ok {
				if c.kind == 'd' {
					rs.DupDirs++
					continue
				}
				if err := os.Link(prev, p); err != nil {
					return rs, err
				}
				rs.Links++
				continue
			}
			var err error
			switch c.kind {
			case 'f':
				err = m.materialize(cid, c, p)
				rs.Files++
			case 'd':
				err = os.Mkdir(p, 0o700)
				queue = append(queue, item{cid, p})
				rs.Dirs++
			case 'l':
				err = os.Symlink(c.target, p)
				rs.Others++
			case 's':
				err = unix.Mknod(p, unix.S_IFSOCK|c.perm, 0)
				rs.Others++
			case 'p':
				err = unix.Mkfifo(p, c.perm)
				rs.Others++
			}
			if err != nil {
				return rs, fmt.Errorf("crashfs: restore %s: %w", p, err)
			}
			placed[cid] = p
			order = append(order, cid)
		}
	}
	// Modes and times last, deepest first: creating entries changes a
	// directory's mtime, and a read-only directory takes no entries.
	for i := len(order) - 1; i >= 0; i-- {
		id := order[i]
		c, p := m.durable[id], placed[id]
		if c.kind == 'l' {
			continue
		}
		if err := os.Chmod(p, os.FileMode(c.perm&0o777)|modeBits(c.perm)); err != nil {
			return rs, err
		}
		if c.mtime != nil {
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{*c.mtime, *c.mtime}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return rs, err
			}
		}
	}
	if err := os.Rename(backing, old); err != nil {
		return rs, err
	}
	if err := os.Rename(next, backing); err != nil {
		return rs, err
	}
	m.close()
	return rs, os.RemoveAll(old)
}

func modeBits(perm uint32) os.FileMode {
	var m os.FileMode
	if perm&unix.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if perm&unix.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if perm&unix.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}

// materialize writes the durable data of file id at p.
func (m *model) materialize(id uint64, c *dnode, p string) error {
	switch {
	case c.shadow:
		if err := os.Rename(m.shadowPath(id), p); err != nil {
			return err
		}
		return os.Truncate(p, c.size)
	case c.pristine != "":
		// The mount-time inode, never modified: link it back in (its
		// shadow-directory name keeps it), else copy it.
		if err := os.Link(c.pristine, p); err == nil {
			return nil
		}
		return copyFile(p, c.pristine, c.size, os.O_EXCL)
	default:
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if err == nil && c.size > 0 {
			err = f.Truncate(c.size)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
}

// close drops the pristine links (the shadow directory goes with them).
func (m *model) close() {
	for _, dn := range m.durable {
		if dn.pristine != "" {
			os.Remove(dn.pristine)
			dn.pristine = ""
		}
	}
}

// pristinePath is where the mount-time inode of file id is kept.
func (m *model) pristinePath(id uint64) string {
	return filepath.Join(m.shadowDir, "pristine-"+strconv.FormatUint(id, 10))
}

// copyFile copies the first size bytes of src to a new file dst (flag:
// os.O_TRUNC to replace dst, os.O_EXCL to refuse an existing one).
func copyFile(dst, src string, size int64, flag int) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|flag, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.NewSectionReader(in, 0, size))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
