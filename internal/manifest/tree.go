package manifest

import (
	"fmt"
	"sort"
	"sync"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
)

// Store holds manifest objects by ID.
type Store interface {
	// Put stores data and returns its ID (objid.Sum(data)).
	Put(data []byte) (objid.ID, error)
	// Get returns the bytes of id, verified against it.
	Get(id objid.ID) ([]byte, error)
}

// PoolStore stores manifests as objects of a pool. Put publishes without
// syncing and remembers every ID it put (new or deduplicated); Sync makes
// all of them durable, as a drain does.
type PoolStore struct {
	Pool *pool.Pool
	mu   sync.Mutex
	put  []objid.ID
}

// Put publishes data as a pool object (not yet durable; see Sync).
func (s *PoolStore) Put(data []byte) (objid.ID, error) {
	id, _, err := s.Pool.Put(data)
	if err != nil {
		return id, err
	}
	s.mu.Lock()
	s.put = append(s.put, id)
	s.mu.Unlock()
	return id, nil
}

// Get reads and verifies object id.
func (s *PoolStore) Get(id objid.ID) ([]byte, error) { return s.Pool.ReadAll(id) }

// Reuse protects objects a build took from a cache instead of putting
// them (pool.Protect: GC's grace period starts again; an error wrapping
// *pool.MissingObjectError if one is gone) and adds them to the set Sync
// makes durable.
func (s *PoolStore) Reuse(ids []objid.ID) error {
	for _, id := range ids {
		if err := s.Pool.Protect(id); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.put = append(s.put, ids...)
	s.mu.Unlock()
	return nil
}

// ReuseRecent is Reuse for objects the caller protected (or put) a short
// while ago (well within the pool's minimum GC grace period, and within
// the time the pool trusts its own syncs): GC cannot remove them before
// the snapshot reusing them is published and marks them itself, so they
// are only checked to be there (pool.Check: an error wrapping
// *pool.MissingObjectError if one is gone), not protected again.
func (s *PoolStore) ReuseRecent(ids []objid.ID) error {
	for _, id := range ids {
		if err := s.Pool.Check(id); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.put = append(s.put, ids...)
	s.mu.Unlock()
	return nil
}

// Sync makes every object Put so far durable (fdatasync each, fsync their
// publication directories): new ones, and deduplicated ones that another
// process may have published without syncing.
func (s *PoolStore) Sync() error {
	s.mu.Lock()
	ids := append([]objid.ID(nil), s.put...)
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	return s.Pool.SyncObjects(ids, pool.DefaultSyncParallel)
}

// Put returns the IDs put so far.
func (s *PoolStore) PutIDs() []objid.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]objid.ID(nil), s.put...)
}

// MemStore keeps manifests in memory and falls back to Under (if set) for
// IDs it does not hold: diff builds the live tree's manifests here without
// writing them to the pool.
type MemStore struct {
	Under Store
	mu    sync.Mutex
	m     map[objid.ID][]byte
}

// Put keeps data in memory.
func (s *MemStore) Put(data []byte) (objid.ID, error) {
	id := objid.Sum(data)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[objid.ID][]byte{}
	}
	s.m[id] = data
	s.mu.Unlock()
	return id, nil
}

// Get returns what Put kept, else asks Under.
func (s *MemStore) Get(id objid.ID) ([]byte, error) {
	s.mu.Lock()
	b, ok := s.m[id]
	s.mu.Unlock()
	if ok {
		return b, nil
	}
	if s.Under != nil {
		return s.Under.Get(id)
	}
	return nil, fmt.Errorf("manifest: object %s not in the store", id)
}

// Len is the number of objects kept in memory.
func (s *MemStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// BuildStats describe one Build.
type BuildStats struct {
	Dirs    int // directory manifests encoded
	Entries int // entries in them
	Bytes   int // bytes of manifests encoded (root included)
}

// EntryOf describes inode n under name as a manifest entry (Dir left zero
// for directories). n must be still (its Mu held or the tree not shared).
// Inline content and xattr values are shared with n (both are immutable).
func EntryOf(name string, n *namespace.Inode) Entry {
	e := Entry{Name: name, Ino: uint64(n.Ino), Mode: n.Mode, Nlink: n.Nlink, Uid: n.Uid, Gid: n.Gid,
		Rdev: n.Rdev, Size: n.Size, Atime: n.Atime, Mtime: n.Mtime, Ctime: n.Ctime}
	if len(n.Xattrs) > 0 {
		e.Xattrs = make([]Xattr, 0, len(n.Xattrs))
		for k, v := range n.Xattrs {
			e.Xattrs = append(e.Xattrs, Xattr{Name: k, Value: v})
		}
		sort.Slice(e.Xattrs, func(i, j int) bool { return e.Xattrs[i].Name < e.Xattrs[j].Name })
	}
	switch {
	case n.IsReg():
		e.Content = n.Content
	case n.Mode&namespace.S_IFMT == namespace.S_IFLNK:
		e.Target = n.Target
	case n.IsDir():
		// A directory's size is not part of the tree (the namespace keeps
		// 0); keep whatever it holds so that a round trip is exact.
	}
	return e
}

// Build encodes every directory of t as a manifest, puts them and the root
// object into st, and returns the root's ID: the tree's ID. t must be
// still for the whole call (an offline workspace, or a tree owned by the
// caller). Cost: every directory is encoded and hashed; objects that
// already exist are only protected (see pool.Put), so the new bytes
// written are those of the changed directories.
func Build(t *namespace.Tree, st Store) (objid.ID, BuildStats, error) {
	return NewCache().Build(t, st)
}

// ReadRoot gets and decodes root object id.
func ReadRoot(st Store, id objid.ID) (*Root, error) {
	b, err := st.Get(id)
	if err != nil {
		return nil, fmt.Errorf("manifest: root %s: %w", id, err)
	}
	r, err := DecodeRoot(b)
	if err != nil {
		return nil, fmt.Errorf("manifest: root %s: %w", id, err)
	}
	return r, nil
}

// ReadDir gets and decodes directory manifest id.
func ReadDir(st Store, id objid.ID) ([]Entry, error) {
	b, err := st.Get(id)
	if err != nil {
		return nil, fmt.Errorf("manifest: directory %s: %w", id, err)
	}
	es, err := DecodeDir(b)
	if err != nil {
		return nil, fmt.Errorf("manifest: directory %s: %w", id, err)
	}
	return es, nil
}

func inodeOf(e *Entry) *namespace.Inode {
	n := &namespace.Inode{Ino: namespace.Ino(e.Ino), Mode: e.Mode, Nlink: e.Nlink, Uid: e.Uid, Gid: e.Gid,
		Rdev: e.Rdev, Size: e.Size, Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime,
		Content: e.Content, Target: e.Target}
	if len(e.Xattrs) > 0 {
		n.Xattrs = make(map[string][]byte, len(e.Xattrs))
		for _, x := range e.Xattrs {
			n.Xattrs[x.Name] = x.Value
		}
	}
	if e.IsDir() {
		n.Entries = map[string]namespace.Ino{}
	}
	return n
}

// sameInode reports whether two entries naming one inode (hard links)
// agree on everything but the name.
func sameInode(a, b *Entry) bool {
	return string(EncodeDir([]Entry{{Name: "x", Ino: a.Ino, Mode: a.Mode, Nlink: a.Nlink, Uid: a.Uid, Gid: a.Gid, Rdev: a.Rdev,
		Size: a.Size, Atime: a.Atime, Mtime: a.Mtime, Ctime: a.Ctime, Xattrs: a.Xattrs, Content: a.Content, Target: a.Target}})) ==
		string(EncodeDir([]Entry{{Name: "x", Ino: b.Ino, Mode: b.Mode, Nlink: b.Nlink, Uid: b.Uid, Gid: b.Gid, Rdev: b.Rdev,
			Size: b.Size, Atime: b.Atime, Mtime: b.Mtime, Ctime: b.Ctime, Xattrs: b.Xattrs, Content: b.Content, Target: b.Target}}))
}

// LoadTree reads the tree named by root object id into a namespace tree
// (inode numbers, times and contents as they were; contents stay pool
// references or inline bytes, nothing is copied). The result passes the
// namespace's structural checks; a manifest set that does not form a tree
// (hard links that disagree, a directory named twice, wrong nlink counts)
// is an error wrapping ErrBadManifest.
func LoadTree(st Store, id objid.ID) (*namespace.Tree, *Root, error) {
	return LoadTreeMin(st, id, 0)
}

// LoadTreeMin is LoadTree with the tree's next inode number raised to at
// least minNext (a restore must never hand out an inode number the
// workspace used before).
func LoadTreeMin(st Store, id objid.ID, minNext namespace.Ino) (*namespace.Tree, *Root, error) {
	r, err := ReadRoot(st, id)
	if err != nil {
		return nil, nil, err
	}
	inodes := map[namespace.Ino]*namespace.Inode{}
	seen := map[namespace.Ino]*Entry{}
	root := inodeOf(&r.Entry)
	inodes[namespace.RootIno] = root
	var load func(dir *namespace.Inode, mid objid.ID) error
	load = func(dir *namespace.Inode, mid objid.ID) error {
		es, err := ReadDir(st, mid)
		if err != nil {
			return err
		}
		for i := range es {
			e := &es[i]
			ino := namespace.Ino(e.Ino)
			if ino >= namespace.Ino(r.NextIno) {
				return fmt.Errorf("manifest: %w: entry %q has inode %d, not below next inode %d", ErrBadManifest, e.Name, ino, r.NextIno)
			}
			dir.Entries[e.Name] = ino
			if prev, ok := seen[ino]; ok {
				if e.IsDir() || !sameInode(prev, e) {
					return fmt.Errorf("manifest: %w: inode %d appears twice with different attributes (or is a directory)", ErrBadManifest, ino)
				}
				continue
			}
			seen[ino] = e
			n := inodeOf(e)
			inodes[ino] = n
			if e.IsDir() {
				if err := load(n, e.Dir); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := load(root, r.Entry.Dir); err != nil {
		return nil, nil, err
	}
	t, err := namespace.FromInodes(inodes, max(namespace.Ino(r.NextIno), minNext))
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: %w: %v", ErrBadManifest, err)
	}
	return t, r, nil
}

// ForEachObject calls fn for the root object id, every directory manifest
// of its tree and every content object its files reference (holes
// excluded). Subtrees whose manifest ID is in visited are skipped (their
// objects were listed already); visited gains every manifest ID walked.
// Pass nil to walk everything.
func ForEachObject(st Store, id objid.ID, visited map[objid.ID]bool, fn func(objid.ID)) error {
	if visited == nil {
		visited = map[objid.ID]bool{}
	}
	if visited[id] {
		return nil
	}
	r, err := ReadRoot(st, id)
	if err != nil {
		return err
	}
	visited[id] = true
	fn(id)
	var walk func(mid objid.ID) error
	walk = func(mid objid.ID) error {
		if visited[mid] {
			return nil
		}
		es, err := ReadDir(st, mid)
		if err != nil {
			return err
		}
		visited[mid] = true
		fn(mid)
		for i := range es {
			e := &es[i]
			switch {
			case e.IsDir():
				if err := walk(e.Dir); err != nil {
					return err
				}
			case e.IsReg():
				e.Content.Objects(func(o objid.ID) { fn(o) })
			}
		}
		return nil
	}
	return walk(r.Entry.Dir)
}
