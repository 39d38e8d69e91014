package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
)

// This file is wsfs fsck's engine: Check inspects a workspace's durable
// state (checkpoints, log, the tree they recover to, and the pool objects
// it references) without changing anything and without the workspace lock,
// so it also runs beside a serving daemon; Repair does the part of the fix
// that cannot lose more than is already lost, under the lock.

// ProblemKind classifies what Check found.
type ProblemKind string

// Problem kinds. Corrupt kinds are damage to data (wsfs fsck exits 4);
// the others are reports (a torn tail the next mount repairs, stale temps).
const (
	ProblemLog           ProblemKind = "log"            // damage in the segment log: the mount refuses
	ProblemReplay        ProblemKind = "replay"         // the log does not replay onto its checkpoint
	ProblemCheckpoint    ProblemKind = "checkpoint"     // a checkpoint that does not verify
	ProblemObjectMissing ProblemKind = "object-missing" // a referenced pool object is absent
	ProblemObjectCorrupt ProblemKind = "object-corrupt" // a referenced pool object does not hash to its name
	ProblemTornTail      ProblemKind = "torn-tail"      // an incomplete last group; the next mount drops it
	ProblemTemp          ProblemKind = "temp"           // a leftover temp file in the workspace directory
	// A pulled checkpoint not yet synced (seglog/unsynced.go): the next
	// open syncs it; a report, not damage.
	ProblemUnsyncedBase ProblemKind = "unsynced-base"
	// A pulled checkpoint a crash left missing or torn before it was
	// synced: nothing acknowledged was lost, the workspace must be pulled
	// again (never "repaired").
	ProblemTornBase ProblemKind = "torn-pulled-base"
)

// Corrupt reports whether k is damage to data (as opposed to a report).
func (k ProblemKind) Corrupt() bool {
	return k != ProblemTornTail && k != ProblemTemp && k != ProblemUnsyncedBase
}

// Problem is one thing Check found, with where it is, what it affects and
// what to do about it.
type Problem struct {
	Kind   ProblemKind
	Where  string   // file (segment, checkpoint, object, temp), with the offset for a segment
	Object objid.ID // for object problems
	Paths  []string
	What   string // what is wrong
	Do     string // what to do
	// Repairable: Repair can fix it without losing more data.
	Repairable bool

	cut  bool   // Repair: cut the log at the damage
	path string // Repair: the checkpoint or temp file
}

// Report is the result of Check.
type Report struct {
	Dir             string
	CheckpointGroup uint64 // the checkpoint recovery starts from (0: none)
	FirstGroup      uint64 // oldest group in the log
	LastGroup       uint64 // last complete group recovered (before any damage)
	Inodes, Files   int    // in the recovered tree
	Objects         int    // distinct pool objects referenced
	VerifiedObjects int    // of those, hashed (CheckOptions.VerifyData)
	NotFetched      int    // of those, not local but backed by the remote (CheckOptions.NotFetched)
	Problems        []Problem

	log *seglog.Log // the read-only log (for Repair's Cut)
}

// Corrupt reports whether the report holds damage to data.
func (r *Report) Corrupt() bool {
	for _, p := range r.Problems {
		if p.Kind.Corrupt() {
			return true
		}
	}
	return false
}

// CheckOptions configure Check and Repair.
type CheckOptions struct {
	FS   vfs.FS     // default vfs.Default
	Dir  string     // the workspace's state directory
	Pool *pool.Pool // the host's pool
	// VerifyData reads every referenced object and checks its hash;
	// otherwise only its presence is checked.
	VerifyData bool
	// NotFetched, if set, reports whether a referenced object that is not
	// local is one a lazy pull has not fetched yet and the remote holds
	// (see ship.FetchState): it is counted in Report.NotFetched, not
	// reported missing. Check never fetches.
	NotFetched func(objid.ID) bool
	// Shipped is the highest group the workspace's remote holds (its
	// shipper's status, ship.json; 0 without a remote tier), and Remote
	// names that remote. A cut of the log below it is not repairable: the
	// workspace would go on committing new groups under numbers the
	// remote already holds with other contents, so the remote's copy
	// would mix the two histories (and the shipper, which ships by group
	// number, would skip the new ones). The remote holds the groups the
	// cut would drop: the advice is to pull the workspace again.
	Shipped uint64
	Remote  string
}

// Check inspects the workspace in opts.Dir and reports every problem it
// finds; it writes nothing, so it may run while a daemon serves the
// workspace (a daemon deleting segments or checkpoints meanwhile makes it
// retry, a few times). Problems name the segment and offset, checkpoint
// or object, and the affected files by path; the error is for failures
// to read, not for damage found.
func Check(opts CheckOptions) (*Report, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	var err error
	var prev *Report
	for try := 0; try < 6; try++ {
		var rep *Report
		rep, err = check(opts)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// A serving daemon published a checkpoint and deleted what it
			// covers between our listing and our read: look again.
			continue
		case err != nil || !rep.Corrupt():
			return rep, err
		case prev != nil && sameProblems(prev, rep):
			return rep, nil
		}
		// Damage is reported only once two checks in a row agree: without
		// the lock, a daemon may checkpoint and delete segments between
		// our reading the checkpoints and the log, which would look like
		// a log that no longer covers its checkpoint.
		prev = rep
	}
	if prev != nil {
		return prev, nil
	}
	return nil, fmt.Errorf("workspace: check %s: the state kept changing underneath (a busy daemon?): %w", opts.Dir, err)
}

// sameProblems reports whether two reports found the same problems.
func sameProblems(a, b *Report) bool {
	if len(a.Problems) != len(b.Problems) {
		return false
	}
	for i := range a.Problems {
		if a.Problems[i].Kind != b.Problems[i].Kind || a.Problems[i].Where != b.Problems[i].Where {
			return false
		}
	}
	return true
}

func check(opts CheckOptions) (*Report, error) {
	rep := &Report{Dir: opts.Dir}
	add := func(p Problem) { rep.Problems = append(rep.Problems, p) }
	ckDir, logDir := filepath.Join(opts.Dir, "checkpoint"), filepath.Join(opts.Dir, "log")

	// A pulled base checkpoint not yet synced: a report if it verifies,
	// the one problem there is if a crash tore it.
	if g, ok, err := seglog.UnsyncedBase(opts.FS, ckDir); err != nil {
		return nil, err
	} else if ok {
		_, _, err := seglog.ReadLatestCheckpoint(opts.FS, ckDir)
		var ue *seglog.UnsyncedBaseError
		switch {
		case errors.As(err, &ue):
			add(Problem{Kind: ProblemTornBase, Where: ue.Checkpoint,
				What: fmt.Sprintf("the pulled checkpoint of group %d %s: the host stopped before it was synced (its marker %s is still there); this is not corruption",
					ue.Group, ue.Reason, seglog.UnsyncedName(ue.Group)),
				Do: fmt.Sprintf("nothing acknowledged was lost and the remote still holds the workspace: wsfs rm NAME, then wsfs pull NAME --from %s (fsck --repair will not touch it)", ue.PullFrom())})
			return rep, nil
		case err != nil:
			return nil, err
		}
		add(Problem{Kind: ProblemUnsyncedBase, Where: filepath.Join(ckDir, seglog.UnsyncedName(g)), Repairable: true, path: ckDir,
			What: fmt.Sprintf("the checkpoint of group %d was pulled and is not yet known durable (a mount syncs it before it acknowledges anything)", g),
			Do:   "nothing: the next mount syncs it (wsfs fsck --repair syncs it now)"})
	}

	// Checkpoints: recovery uses the newest one that verifies.
	cks, err := seglog.ListCheckpoints(opts.FS, ckDir)
	if err != nil {
		return nil, err
	}
	var tree *namespace.Tree
	var damagedCkpts []seglog.CheckpointFile
	var damagedRef *seglog.CheckpointFile // a fork's or restore's base that cannot be loaded
	for i := len(cks) - 1; i >= 0 && tree == nil; i-- {
		c := cks[i]
		if c.Err == nil {
			// A manifest-reference checkpoint (fork, restore) is loaded
			// from the pool, as recovery does.
			t, derr := DecodeCheckpointPayload(opts.Pool, c.Payload)
			if derr == nil {
				tree, rep.CheckpointGroup = t, c.Group
				continue
			}
			c.Err = derr
			if manifest.IsRef(c.Payload) {
				damagedRef = &c
				break
			}
		}
		damagedCkpts = append(damagedCkpts, c)
	}
	if damagedRef != nil {
		// The tree the log continues from lives only in the snapshot's
		// manifests: no older checkpoint or replay can stand in for it.
		add(Problem{Kind: ProblemCheckpoint, Where: damagedRef.Path, path: damagedRef.Path,
			What: "the checkpoint names a snapshot's manifest tree (the workspace was forked or restored from it) that cannot be loaded: " + damagedRef.Err.Error(),
			Do:   "bring the missing or damaged pool objects back (from a backup, or the host the snapshot came from); fsck --repair will not touch this checkpoint"})
		return rep, nil
	}
	if tree == nil {
		tree = namespace.New(0o755, uint32(os.Getuid()), uint32(os.Getgid()), 0)
	}

	// The log, read-only.
	l, err := seglog.OpenReadOnly(opts.FS, logDir)
	if err != nil {
		return nil, err
	}
	rep.log = l
	rep.FirstGroup = l.FirstGroup()
	var lost [][]byte // records of groups the damage drops
	// The damaged checkpoints whose removal is offered as a repair because
	// the log replays without them (indexes into rep.Problems): if the
	// replay below fails, it does not, and the offer is withdrawn.
	type removableCkpt struct {
		i   int    // index into rep.Problems
		err string // what is wrong with the checkpoint itself
	}
	var removable []removableCkpt
	for _, c := range damagedCkpts {
		p := Problem{Kind: ProblemCheckpoint, Where: c.Path, What: c.Err.Error(), path: c.Path}
		switch {
		case rep.CheckpointGroup > 0 && rep.CheckpointGroup+1 >= rep.FirstGroup:
			p.What += fmt.Sprintf("; recovery uses the older checkpoint of group %d and replays the log from there, so nothing is lost", rep.CheckpointGroup)
			p.Do = "wsfs fsck --repair removes the damaged checkpoint (after saving a copy)"
			p.Repairable = true
		case rep.CheckpointGroup == 0 && rep.FirstGroup == 1:
			p.What += "; the log still holds every group from the first, so recovery can replay it all without a checkpoint"
			p.Do = "wsfs fsck --repair removes the damaged checkpoint (after saving a copy)"
			p.Repairable = true
		default:
			p.What += fmt.Sprintf("; the log starts at group %d and no intact checkpoint covers the groups before it, so the state before group %d is gone", rep.FirstGroup, rep.FirstGroup)
			p.Do = "restore the workspace's state directory from a backup; fsck cannot rebuild a lost checkpoint"
		}
		if p.Repairable {
			removable = append(removable, removableCkpt{len(rep.Problems), c.Err.Error()})
		}
		add(p)
	}
	if d := l.Damage(); d != nil {
		p := Problem{Kind: ProblemLog, Where: fmt.Sprintf("%s offset %d", d.Segment, d.Offset), What: d.Reason, cut: true, Repairable: true}
		if l.LastGroup() >= rep.CheckpointGroup {
			p.What += fmt.Sprintf("; the groups up to %d before the damage are intact, groups from %d on are lost", l.LastGroup(), l.LastGroup()+1)
			p.Do = fmt.Sprintf("wsfs fsck --repair saves a copy of the damaged segment and every later one, truncates the log after group %d and the workspace mounts with every group before the damage; files changed by later groups come back as they were at group %d",
				l.LastGroup(), l.LastGroup())
		} else {
			p.What += fmt.Sprintf("; every group before the damage is covered by the checkpoint of group %d, the groups after it are lost", rep.CheckpointGroup)
			p.Do = fmt.Sprintf("wsfs fsck --repair saves a copy of the segments and starts the log afresh after the checkpoint's group %d; the workspace mounts as it was at that group", rep.CheckpointGroup)
		}
		add(shippedBeyondCut(p, opts, max(l.LastGroup(), rep.CheckpointGroup)))
	}
	if l.Damage() != nil {
		lost = l.LostRecords()
	}
	if t := l.Repaired(); t != nil {
		add(Problem{Kind: ProblemTornTail, Where: fmt.Sprintf("%s offset %d", t.Segment, t.Offset),
			What: fmt.Sprintf("an incomplete last group (%d bytes, %d intact records, cut short or zeroed as a crash during an unsynced append leaves it)", t.DroppedBytes, t.DroppedRecords),
			Do:   "nothing: the next mount drops it (it was never acknowledged, unless the storage lost synced data)"})
	}

	// Replay onto the checkpoint.
	rep.LastGroup = rep.CheckpointGroup
	if l.Damage() == nil && l.LastGroup() < rep.CheckpointGroup {
		add(shippedBeyondCut(Problem{Kind: ProblemReplay, Where: logDir, cut: true, Repairable: true,
			What: fmt.Sprintf("the log ends at group %d, before the checkpoint of group %d (segments were removed or moved aside): the mount refuses", l.LastGroup(), rep.CheckpointGroup),
			Do:   fmt.Sprintf("wsfs fsck --repair saves a copy of the segments and starts the log afresh after group %d; the workspace mounts as the checkpoint holds it", rep.CheckpointGroup)},
			opts, rep.CheckpointGroup))
	} else if len(damagedCkpts) > 0 && rep.CheckpointGroup+1 < rep.FirstGroup {
		// Already reported: without the damaged checkpoint the log cannot
		// be replayed (its first groups are gone).
	} else if l.LastGroup() >= rep.CheckpointGroup {
		err = l.Replay(rep.CheckpointGroup, func(group uint64, records [][]byte) error {
			for i, data := range records {
				rec, err := namespace.DecodeRecord(data)
				if err == nil {
					rec.Content.Inline = bytes.Clone(rec.Content.Inline)
					rec.Value = bytes.Clone(rec.Value)
					err = tree.Apply(rec)
				}
				if err != nil {
					return &replayError{group: group, record: i, err: err}
				}
			}
			rep.LastGroup = group
			return nil
		})
		var re *replayError
		var ce *seglog.CorruptError
		switch {
		case errors.As(err, &re) && len(removable) > 0:
			// Replayed without the damaged checkpoint(s), and the log
			// does not rebuild what they held: a restore or fork
			// replaced the tree at a checkpoint, so later records apply
			// to that tree. Removing the checkpoint would repair nothing.
			for _, r := range removable {
				p := &rep.Problems[r.i]
				p.What = r.err + fmt.Sprintf("; the log does not replay without it (group %d record %d does not apply: %v): "+
					"the workspace was restored or forked at a later group, and only this checkpoint holds that tree", re.group, re.record, re.err)
				p.Do = "put the checkpoint back from a backup (fsck --repair leaves it in place); a snapshot of the workspace that holds the state you need can also come back as a new workspace: wsfs fork NAME@ID NEW"
				p.Repairable = false
			}
		case errors.As(err, &re):
			add(Problem{Kind: ProblemReplay, Where: fmt.Sprintf("%s group %d record %d", logDir, re.group, re.record),
				What: fmt.Sprintf("the record does not apply to the tree recovered so far: %v", re.err),
				Do:   fmt.Sprintf("restore from a backup; the state through group %d is intact (a checksum-valid record that does not apply is a bug or a log from another workspace)", re.group-1)})
		case errors.As(err, &ce) && l.Damage() == nil:
			add(Problem{Kind: ProblemReplay, Where: fmt.Sprintf("%s offset %d", ce.Segment, ce.Offset), What: ce.Reason,
				Do: "restore the workspace's state directory from a backup"})
		case err != nil && !errors.As(err, &ce):
			return nil, err
		}
	}

	// References: every object of the recovered tree must be in the pool.
	paths := pathsOf(tree)
	if len(lost) > 0 {
		for i := range rep.Problems {
			if rep.Problems[i].Kind == ProblemLog {
				rep.Problems[i].Paths = lostPaths(lost, paths)
			}
		}
	}
	byObject := map[objid.ID][]namespace.Ino{}
	for _, n := range tree.Inodes() {
		if n.Nlink == 0 {
			continue
		}
		rep.Inodes++
		if !n.IsReg() {
			continue
		}
		rep.Files++
		n.Content.Objects(func(id objid.ID) {
			byObject[id] = append(byObject[id], n.Ino)
		})
	}
	ids := make([]objid.ID, 0, len(byObject))
	for id := range byObject {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i][:], ids[j][:]) < 0 })
	rep.Objects = len(ids)
	for _, id := range ids {
		var affected []string
		for _, ino := range byObject[id] {
			affected = append(affected, paths[ino]...)
		}
		sort.Strings(affected)
		affected = compactStrings(affected)
		path := opts.Pool.Path(id)
		fi, serr := opts.FS.Stat(path)
		switch {
		case errors.Is(serr, fs.ErrNotExist) && opts.NotFetched != nil && opts.NotFetched(id):
			rep.NotFetched++
			continue
		case errors.Is(serr, fs.ErrNotExist):
			add(Problem{Kind: ProblemObjectMissing, Where: path, Object: id, Paths: affected,
				What: fmt.Sprintf("pool object %s is missing", id),
				Do:   "the mount still works and reading these files gives EIO; restore them from a backup (or rewrite them), or delete them"})
			continue
		case serr != nil:
			return nil, fmt.Errorf("workspace: check object %s: %w", id, serr)
		case !fi.Mode().IsRegular():
			add(Problem{Kind: ProblemObjectCorrupt, Where: path, Object: id, Paths: affected,
				What: fmt.Sprintf("pool object %s is not a file (%s)", id, fi.Mode().Type()),
				Do:   "move it out of the pool (wsfs did not make it); the mount still works and reading these files gives EIO; then write the original content again (a Put of the same bytes recreates the object for every workspace), restore the files from a backup, or delete them"})
			continue
		}
		if !opts.VerifyData {
			continue
		}
		f, oerr := opts.Pool.Open(id)
		var co *pool.CorruptObjectError
		switch {
		case errors.As(oerr, &co):
			add(Problem{Kind: ProblemObjectCorrupt, Where: path, Object: id, Paths: affected,
				What: fmt.Sprintf("pool object %s is corrupt: its bytes hash to %s", id, co.Got),
				Do:   "the mount still works and reading these files gives EIO; write the original content again (a Put of the same bytes repairs the object for every workspace), restore the files from a backup, or delete them"})
		case oerr != nil:
			return nil, oerr
		default:
			f.Close()
			rep.VerifiedObjects++
		}
	}

	// Temps left by a publication (vfs.Publish) that did not finish, in
	// the workspace's directories: also the snapshot catalog's (a catalog
	// entry is published there) and the agent state's (a snapshot's copy
	// of the database is made there as .tmp-cut-*, as large as the
	// database, and stays behind when the process is killed mid-copy).
	// The names are the snapshot and agentstate packages' (which import
	// this one).
	for _, d := range []string{opts.Dir, logDir, ckDir, filepath.Join(opts.Dir, "snapshots"), filepath.Join(opts.Dir, "agent")} {
		names, err := opts.FS.List(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if strings.HasPrefix(n, ".tmp-") {
				p := filepath.Join(d, n)
				add(Problem{Kind: ProblemTemp, Where: p, path: p, Repairable: true,
					What: "a temp file left by an interrupted publication (it is not part of the state)",
					Do:   "wsfs fsck --repair removes it (it does so only while no daemon serves the workspace)"})
			}
		}
	}
	return rep, nil
}

// lostPaths names the files that the records of lost groups changed, as
// paths in the recovered tree (a new name: its directory's path and the
// name). Records that do not decode are skipped.
func lostPaths(lost [][]byte, paths map[namespace.Ino][]string) []string {
	set := map[string]bool{}
	name := func(dir namespace.Ino, n string) {
		for _, p := range paths[dir] {
			set[strings.TrimSuffix(p, "/")+"/"+n] = true
		}
		if len(paths[dir]) == 0 {
			set[fmt.Sprintf("(inode %d)/%s", dir, n)] = true
		}
	}
	var recs []*namespace.Record
	for _, data := range lost {
		if r, err := namespace.DecodeRecord(data); err == nil {
			recs = append(recs, r)
		}
	}
	// Inodes the lost groups created are named by their create record.
	created := map[namespace.Ino]bool{}
	for _, r := range recs {
		switch r.Op {
		case namespace.OpCreate, namespace.OpMkdir, namespace.OpSymlink:
			created[r.Ino] = true
		}
	}
	ino := func(i namespace.Ino) {
		for _, p := range paths[i] {
			set[p] = true
		}
		if len(paths[i]) == 0 && i != 0 && !created[i] {
			set[fmt.Sprintf("(inode %d)", i)] = true
		}
	}
	for _, r := range recs {
		switch r.Op {
		case namespace.OpCreate, namespace.OpMkdir, namespace.OpSymlink, namespace.OpLink,
			namespace.OpUnlink, namespace.OpRmdir:
			name(r.Parent, r.Name)
		case namespace.OpRename:
			name(r.Parent, r.Name)
			name(r.NewParent, r.NewName)
		default:
			ino(r.Ino)
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

type replayError struct {
	group  uint64
	record int
	err    error
}

func (e *replayError) Error() string {
	return fmt.Sprintf("replay group %d record %d: %v", e.group, e.record, e.err)
}

// pathsOf returns every path of every linked inode of a still tree.
func pathsOf(t *namespace.Tree) map[namespace.Ino][]string {
	out := map[namespace.Ino][]string{namespace.RootIno: {"/"}}
	var walk func(dir *namespace.Inode, prefix string)
	walk = func(dir *namespace.Inode, prefix string) {
		for name, c := range dir.Entries {
			p := prefix + "/" + name
			out[c] = append(out[c], p)
			if n := t.Get(c); n != nil && n.IsDir() {
				walk(n, p)
			}
		}
	}
	walk(t.Get(namespace.RootIno), "")
	return out
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// shippedBeyondCut returns p, a cut of the log after group last, made
// not repairable when the remote holds groups past last (see
// CheckOptions.Shipped): the workspace is pulled again instead, which
// loses nothing that was shipped.
func shippedBeyondCut(p Problem, opts CheckOptions, last uint64) Problem {
	if opts.Shipped <= last {
		return p
	}
	remote := opts.Remote
	if remote == "" {
		remote = "the remote"
	}
	p.Repairable = false
	p.What += fmt.Sprintf("; %s holds every group through %d, so a cut after group %d would drop groups the remote has, and the workspace would then commit new groups under their numbers (the remote's copy would mix both histories)", remote, opts.Shipped, last)
	p.Do = fmt.Sprintf("do not repair the local copy (fsck --repair will not touch it): pull the workspace again, which brings back every group through %d: stop its daemon and shipper, then wsfs rm NAME, then wsfs pull NAME", opts.Shipped)
	return p
}

// Repair fixes what rep found that can be fixed without losing more data,
// and returns what it did, one line each. It takes the workspace lock
// (failing with an error wrapping vfs.ErrLocked while a daemon serves the
// workspace) and saves a copy of every log segment and checkpoint it
// changes or removes into saveDir first:
//
//   - damage in the log: the log is cut at the damage (seglog.Log.Cut);
//   - a damaged checkpoint, when recovery does not need it: removed;
//   - temps: removed;
//   - a pulled checkpoint not yet synced: synced (its marker removed).
//
// Missing or corrupt objects are left as they are: the mount works and
// reading the affected files gives EIO (the report names them); the
// content can only come back from a backup or a rewrite. Run Check again
// afterwards to confirm.
func Repair(opts CheckOptions, rep *Report, saveDir string) ([]string, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	lk, err := Lock(opts.FS, opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("workspace: repair %s: %w", opts.Dir, err)
	}
	defer lk.Close()
	// The report may be older than the lock: check again under it.
	if rep, err = check(opts); err != nil {
		return nil, err
	}
	var did []string
	for _, p := range rep.Problems {
		if !p.Repairable {
			continue
		}
		switch {
		case p.cut:
			cr, err := rep.log.Cut(filepath.Join(saveDir, "log"), rep.CheckpointGroup)
			if err != nil {
				return did, fmt.Errorf("workspace: cut the log of %s at the damage: %w", opts.Dir, err)
			}
			for _, s := range cr.Saved {
				did = append(did, "saved a copy of a segment as "+s)
			}
			if cr.Truncated != "" {
				did = append(did, fmt.Sprintf("truncated %s to %d bytes (the log now ends at group %d)", cr.Truncated, cr.TruncAt, cr.LastGroup))
			}
			for _, s := range cr.Removed {
				did = append(did, "removed segment "+s+" (from the damage on; its copy is saved)")
			}
			if cr.Created != "" {
				did = append(did, fmt.Sprintf("created %s: an empty log continuing after the checkpoint's group %d", cr.Created, cr.LastGroup))
			}
		case p.Kind == ProblemCheckpoint:
			saved, err := seglog.RemoveCheckpoint(opts.FS, p.path, filepath.Join(saveDir, "checkpoint"))
			if err != nil {
				return did, err
			}
			did = append(did, fmt.Sprintf("removed the damaged checkpoint %s (copy saved as %s)", p.path, saved))
		case p.Kind == ProblemUnsyncedBase:
			if err := seglog.SyncUnsyncedBase(opts.FS, p.path); err != nil {
				return did, err
			}
			did = append(did, "synced the pulled checkpoint and removed its marker "+p.Where)
		case p.Kind == ProblemTemp:
			if err := opts.FS.Remove(p.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return did, fmt.Errorf("workspace: remove temp %s: %w", p.path, err)
			}
			if err := vfs.SyncDir(opts.FS, filepath.Dir(p.path)); err != nil {
				return did, err
			}
			did = append(did, "removed stale temp "+p.path)
		}
	}
	return did, nil
}
