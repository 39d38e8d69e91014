package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"wsfs/internal/manifest"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
)

// Damage is one problem Check found in a workspace's snapshots.
type Damage struct {
	Where string // the catalog entry's file, or the object's
	What  string
	Do    string
}

// CheckReport is what Check found.
type CheckReport struct {
	Snapshots  int // catalog entries
	Objects    int // distinct objects their trees reference
	Verified   int // of those, hashed (verify)
	NotFetched int // of those, not local but backed by the remote (notFetched)
	Damage     []Damage
}

// Check reads every catalog entry of the workspace in wsDir on its own
// (one damaged entry does not hide the others), loads each snapshot's
// manifests (which verifies their hashes) and checks that every content
// object they reference is in the pool (with verify: that its bytes hash
// to its name), and the same for the chunks of their agent state
// copies. It writes nothing and takes no lock. An object shared by
// several snapshots is checked once; a problem names the snapshots it
// affects. notFetched, if not nil, reports whether an object that is not
// local is one a lazy pull has not fetched yet and the remote holds (as
// workspace.CheckOptions.NotFetched): it is counted in NotFetched, not
// reported missing.
func Check(fsys vfs.FS, wsDir string, p *pool.Pool, verify bool, notFetched func(objid.ID) bool) (*CheckReport, error) {
	rep := &CheckReport{}
	names, err := fsys.List(Dir(wsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: list catalog: %w", err)
	}
	ws := filepath.Base(wsDir)
	var ids []uint64
	for _, n := range names {
		if id, ok := parseEntryName(n); ok {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	st := &manifest.PoolStore{Pool: p}
	visited := map[objid.ID]bool{}
	users := map[objid.ID][]string{} // content object -> snapshots
	agent := map[objid.ID]bool{}     // chunks of agent state copies
	var order []objid.ID
	for _, id := range ids {
		ref := fmt.Sprintf("%s@%d", ws, id)
		in, err := readEntry(fsys, wsDir, id)
		switch {
		case errors.Is(err, ErrNotFound):
			continue // removed meanwhile
		case errors.Is(err, ErrBadEntry):
			rep.Snapshots++
			rep.Damage = append(rep.Damage, Damage{
				Where: filepath.Join(Dir(wsDir), entryName(id)),
				What:  fmt.Sprintf("catalog entry of %s is damaged: %v", ref, errors.Unwrap(err)),
				Do:    fmt.Sprintf("the snapshot is lost unless a backup has this file (copy it back); otherwise remove the entry with `wsfs snapshot rm %s` (gc and prune refuse until then)", ref),
			})
			continue
		case err != nil:
			return nil, err
		}
		rep.Snapshots++
		err = manifest.ForEachObject(st, in.Root, visited, func(o objid.ID) {
			if _, seen := users[o]; !seen {
				order = append(order, o)
			}
			if u := users[o]; len(u) == 0 || u[len(u)-1] != ref {
				users[o] = append(u, ref)
			}
		})
		AgentObjects(in, func(o objid.ID) {
			if _, seen := users[o]; !seen {
				order = append(order, o)
			}
			agent[o] = true
			if u := users[o]; len(u) == 0 || u[len(u)-1] != ref {
				users[o] = append(u, ref)
			}
		})
		if err != nil {
			rep.Damage = append(rep.Damage, Damage{
				Where: filepath.Join(Dir(wsDir), entryName(id)),
				What:  fmt.Sprintf("the manifests of %s cannot be read: %v", ref, err),
				Do:    fmt.Sprintf("bring the pool object back from a backup; otherwise %s cannot be restored, forked or diffed: remove it with `wsfs snapshot rm %s` (gc refuses until then)", ref, ref),
			})
		}
	}
	rep.Objects = len(order)
	for _, o := range order {
		path := p.Path(o)
		what, do := "content of files in", "reading those files from a fork or restore gives EIO"
		if agent[o] {
			// (a chunk may also be some file's content: dedup)
			what, do = "a chunk of the agent state copy of", "restoring or forking those snapshots fails before changing anything"
		}
		if _, err := fsys.Stat(path); errors.Is(err, fs.ErrNotExist) {
			if notFetched != nil && notFetched(o) {
				rep.NotFetched++
				continue
			}
			rep.Damage = append(rep.Damage, Damage{Where: path,
				What: fmt.Sprintf("pool object %s, %s %s, is missing", o, what, joinRefs(users[o])),
				Do:   do + "; bring the object back from a backup (or write the same content again in any workspace), or remove the snapshots"})
			continue
		} else if err != nil {
			return nil, fmt.Errorf("snapshot: check object %s: %w", o, err)
		}
		if !verify {
			continue
		}
		f, err := p.Open(o)
		var co *pool.CorruptObjectError
		switch {
		case errors.As(err, &co):
			rep.Damage = append(rep.Damage, Damage{Where: path,
				What: fmt.Sprintf("pool object %s, %s %s, is corrupt: its bytes hash to %s", o, what, joinRefs(users[o]), co.Got),
				Do:   "write the original content again (a Put of the same bytes repairs the object for every workspace and snapshot), or bring it back from a backup"})
		case err != nil:
			return nil, err
		default:
			f.Close()
			rep.Verified++
		}
	}
	return rep, nil
}

func joinRefs(refs []string) string {
	const show = 5
	s := ""
	for i, r := range refs {
		if i == show {
			return s + fmt.Sprintf(" and %d more", len(refs)-show)
		}
		if i > 0 {
			s += ", "
		}
		s += r
	}
	return s
}
