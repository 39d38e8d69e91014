package manifest

import (
	"fmt"
	"sort"

	"wsfs/internal/namespace"
	"wsfs/internal/pool"
)

// Cache makes successive builds of one tree cost O(changed directories):
// it remembers every directory's manifest ID from the last Build and
// which directories name each non-directory inode, and is told (Touch)
// about every record applied to the tree since. Build then re-encodes
// only the directories a touched record can have changed — its Parent and
// NewParent, its inode if that is a directory, the directories naming its
// inode — and their ancestors, and reuses the cached ID of every other
// subtree without reading it.
//
// Invariant (the caller's): between two Builds, every record applied to
// the tree is passed to Touch, and the tree is still during Build. The
// caller serializes Touch and Build (package workspace: both under the
// lock of the durable shadow). After a failed Build the cache is invalid
// and the next Build is a full one. A manifest ID the cache hands out may
// name an object that was synced by an earlier snapshot only; the caller
// protects and syncs every directory ID of the result (DirIDs).
type Cache struct {
	valid   bool
	ids     map[namespace.Ino]pool.ID
	parents map[namespace.Ino]map[namespace.Ino]struct{} // non-directory -> directories naming it
	dirty   map[namespace.Ino]struct{}
}

// NewCache returns an empty (invalid) cache: its first Build is full.
func NewCache() *Cache {
	return &Cache{dirty: map[namespace.Ino]struct{}{}}
}

// Valid reports whether the next Build can be incremental.
func (c *Cache) Valid() bool { return c.valid }

// Invalidate makes the next Build a full one.
func (c *Cache) Invalidate() { c.valid = false }

// Touch records that r was applied to the tree.
func (c *Cache) Touch(r *namespace.Record) {
	for _, ino := range []namespace.Ino{r.Ino, r.Parent, r.NewParent, r.Replaced} {
		if ino != 0 {
			c.dirty[ino] = struct{}{}
		}
	}
}

// DirIDs calls fn with the manifest ID of every directory of the tree of
// the last successful Build.
func (c *Cache) DirIDs(fn func(pool.ID)) {
	for _, id := range c.ids {
		fn(id)
	}
}

// Build is manifest.Build with the cache: it returns the same root ID a
// full Build of t would, re-encoding only what changed since the last
// Build (all of it when the cache is invalid). Stats count the
// directories encoded.
func (c *Cache) Build(t *namespace.Tree, st Store) (pool.ID, BuildStats, error) {
	var stats BuildStats
	root := t.Get(namespace.RootIno)
	if root == nil {
		return pool.ID{}, stats, fmt.Errorf("manifest: tree has no root")
	}
	full := !c.valid
	c.valid = false // until this build succeeds
	rebuild := map[namespace.Ino]bool{}
	if full {
		c.ids = map[namespace.Ino]pool.ID{}
		c.parents = map[namespace.Ino]map[namespace.Ino]struct{}{}
	} else {
		markUp := func(d *namespace.Inode) {
			for d != nil && !rebuild[d.Ino] {
				rebuild[d.Ino] = true
				if d.Ino == namespace.RootIno {
					return
				}
				d = t.Get(d.Parent)
			}
		}
		live := func(ino namespace.Ino) *namespace.Inode {
			if n := t.Get(ino); n != nil && (n.Nlink > 0 || ino == namespace.RootIno) {
				return n
			}
			return nil
		}
		for ino := range c.dirty {
			if n := live(ino); n != nil && n.IsDir() {
				markUp(n)
			}
			for p := range c.parents[ino] {
				if d := live(p); d != nil && d.IsDir() {
					markUp(d)
				}
			}
			if live(ino) == nil {
				delete(c.parents, ino)
				delete(c.ids, ino)
			}
		}
	}
	var build func(dir *namespace.Inode, depth int) (pool.ID, error)
	build = func(dir *namespace.Inode, depth int) (pool.ID, error) {
		if !full && !rebuild[dir.Ino] {
			if id, ok := c.ids[dir.Ino]; ok {
				return id, nil
			}
		}
		if depth > 1<<16 {
			return pool.ID{}, fmt.Errorf("manifest: directory %d nested deeper than %d", dir.Ino, 1<<16)
		}
		names := make([]string, 0, len(dir.Entries))
		for name := range dir.Entries {
			names = append(names, name)
		}
		sort.Strings(names)
		entries := make([]Entry, len(names))
		for i, name := range names {
			ci := dir.Entries[name]
			ch := t.Get(ci)
			if ch == nil {
				return pool.ID{}, fmt.Errorf("manifest: entry %q of directory %d names missing inode %d", name, dir.Ino, ci)
			}
			entries[i] = EntryOf(name, ch)
			if ch.IsDir() {
				id, err := build(ch, depth+1)
				if err != nil {
					return id, err
				}
				entries[i].Dir = id
				continue
			}
			ps := c.parents[ci]
			if ps == nil {
				ps = map[namespace.Ino]struct{}{}
				c.parents[ci] = ps
			}
			ps[dir.Ino] = struct{}{}
		}
		b := EncodeDir(entries)
		stats.Dirs++
		stats.Entries += len(entries)
		stats.Bytes += len(b)
		id, err := st.Put(b)
		if err != nil {
			return id, err
		}
		c.ids[dir.Ino] = id
		return id, nil
	}
	rid, err := build(root, 0)
	if err != nil {
		return pool.ID{}, stats, err
	}
	r := &Root{NextIno: uint64(t.NextIno()), Entry: EntryOf("", root)}
	r.Entry.Dir = rid
	b := EncodeRoot(r)
	stats.Bytes += len(b)
	id, err := st.Put(b)
	if err != nil {
		return pool.ID{}, stats, err
	}
	if !full {
		// Directories removed since the last build may still be in ids
		// (a removed directory's record touched its parent, not always
		// its own number's absence); keep ids to the tree's directories.
		for ino := range c.ids {
			if n := t.Get(ino); n == nil || n.Nlink == 0 || !n.IsDir() {
				delete(c.ids, ino)
			}
		}
	}
	c.dirty = map[namespace.Ino]struct{}{}
	c.valid = true
	return id, stats, nil
}

// Seed is the state of a full build made outside the caller's lock, to be
// installed into a cache that has collected Touches since the tree was
// copied.
type Seed struct {
	ids     map[namespace.Ino]pool.ID
	parents map[namespace.Ino]map[namespace.Ino]struct{}
}

// BuildSeed does a full build of t without any cache's state: t is a copy
// of the tree taken when the cache that will Install the seed started
// collecting Touches.
func BuildSeed(t *namespace.Tree, st Store) (pool.ID, BuildStats, *Seed, error) {
	b := NewCache()
	id, stats, err := b.Build(t, st)
	if err != nil {
		return id, stats, nil, err
	}
	return id, stats, &Seed{ids: b.ids, parents: b.parents}, nil
}

// Install makes c valid with a seed's state; the Touches c collected since
// the seed's tree was copied stay dirty, so the next Build covers them.
func (c *Cache) Install(s *Seed) {
	c.ids, c.parents, c.valid = s.ids, s.parents, true
}
