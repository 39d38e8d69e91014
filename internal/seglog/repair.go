package seglog

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"wsfs/internal/vfs"
)

// CheckpointFile is one checkpoint file found by ListCheckpoints.
type CheckpointFile struct {
	Group   uint64
	Path    string
	Payload []byte // nil unless it verifies
	Err     error  // why it does not verify (a *CorruptError), or nil
}

// ListCheckpoints reads and verifies every checkpoint in dir, oldest
// first, without changing anything (for wsfs fsck). A missing dir holds
// none. The error is for a failure to list or read, not for damage.
func ListCheckpoints(fsys vfs.FS, dir string) ([]CheckpointFile, error) {
	gs, err := listCheckpoints(fsys, dir)
	if err != nil {
		return nil, err
	}
	out := make([]CheckpointFile, 0, len(gs))
	for _, g := range gs {
		path := filepath.Join(dir, ckptName(g))
		b, err := vfs.ReadFile(fsys, path)
		if err != nil {
			return nil, fmt.Errorf("seglog: read checkpoint: %w", err)
		}
		p, derr := decodeCheckpoint(path, g, b)
		out = append(out, CheckpointFile{Group: g, Path: path, Payload: p, Err: derr})
	}
	return out, nil
}

// CutReport says what Cut did.
type CutReport struct {
	Saved     []string // copies written into the save directory
	Truncated string   // segment truncated ("" if none)
	TruncAt   int64    // its new length
	Removed   []string // segments removed (after their copies were saved)
	Created   string   // fresh segment created ("" if none)
	LastGroup uint64   // the log's last group afterwards
}

// Cut repairs the damage that OpenReadOnly found in l (l.Damage() != nil),
// or a log that ends before the checkpoint recovery starts from (after
// segments were moved away by hand), by dropping everything from the
// damage on, after saving a copy of every
// segment it changes or removes into saveDir (created; the copies are
// synced before anything is changed). covered is the group of the
// checkpoint recovery will start from (0 if none).
//
//   - If the complete groups before the damage reach covered, the segment
//     holding the damage is truncated to the end of its last complete group
//     (or, if nothing of it is good, removed) and every later segment is
//     removed: the log then ends at the last group before the damage.
//   - Otherwise every group before the damage is covered by the checkpoint
//     (a log that ended there could not be replayed onto it): every segment
//     is removed and a fresh, empty segment starting at group covered+1
//     created, numbered above all existing ones.
//
// Either way nothing that was readable before the damage is lost. The
// caller must hold the workspace lock (no daemon appending). Cut syncs
// every change and the directory; on error, the copies in saveDir are
// intact and a second Cut can be run after a new OpenReadOnly.
func (l *Log) Cut(saveDir string, covered uint64) (*CutReport, error) {
	if !l.readOnly || l.damage == nil && l.LastGroup() >= covered {
		return nil, errors.New("seglog: Cut needs a log opened with OpenReadOnly that found damage, or that ends before the checkpoint")
	}
	present, err := listSegments(l.fs, l.dir)
	if err != nil {
		return nil, err
	}
	rep := &CutReport{}
	keepThrough := uint64(0) // segments with seq <= keepThrough stay
	var trunc *segInfo
	fresh := false
	if len(l.segs) > 0 && l.LastGroup() >= covered {
		last := l.segs[len(l.segs)-1]
		keepThrough = last.seq
		trunc = &last
	} else {
		fresh = true
	}
	if err := vfs.MkdirAllDurable(l.fs, saveDir, vfs.PrivateDir); err != nil {
		return nil, err
	}
	var change []uint64 // segments to copy: the truncated one and the removed ones
	maxSeq := uint64(0)
	for _, seq := range present {
		maxSeq = max(maxSeq, seq)
		if seq > keepThrough || trunc != nil && seq == trunc.seq {
			change = append(change, seq)
		}
	}
	for _, seq := range change {
		src, dst := filepath.Join(l.dir, segName(seq)), filepath.Join(saveDir, segName(seq))
		if err := copyFile(l.fs, src, dst); err != nil {
			return rep, err
		}
		rep.Saved = append(rep.Saved, dst)
	}
	if err := vfs.SyncDir(l.fs, saveDir); err != nil {
		return rep, fmt.Errorf("seglog: make saved copies durable: %w", err)
	}
	if trunc != nil {
		f, err := l.fs.OpenReadWrite(trunc.path)
		if err != nil {
			return rep, fmt.Errorf("seglog: open %s to truncate: %w", trunc.path, err)
		}
		st, err := f.Stat()
		if err == nil && st.Size() != trunc.size {
			if err = f.Truncate(trunc.size); err == nil {
				err = f.SyncData()
			}
			rep.Truncated, rep.TruncAt = trunc.path, trunc.size
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return rep, fmt.Errorf("seglog: truncate %s to %d: %w", trunc.path, trunc.size, err)
		}
		rep.LastGroup = trunc.last
	}
	// Remove from the newest down, so that a crash in between leaves a
	// contiguous run of segments.
	for i := len(change) - 1; i >= 0; i-- {
		seq := change[i]
		if trunc != nil && seq == trunc.seq {
			continue
		}
		p := filepath.Join(l.dir, segName(seq))
		if err := l.fs.Remove(p); err != nil {
			return rep, fmt.Errorf("seglog: remove %s: %w", p, err)
		}
		rep.Removed = append(rep.Removed, p)
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return rep, fmt.Errorf("seglog: after removing %s: %w", p, err)
		}
	}
	if fresh {
		n := &Log{fs: l.fs, dir: l.dir, logger: l.logger}
		// Numbered above every segment there was, and never 1: segment 1
		// must start at group 1, a later one starts where its header says.
		if err := n.createSegment(max(maxSeq, 1)+1, covered+1); err != nil {
			return rep, err
		}
		rep.Created = n.segs[0].path
		rep.LastGroup = covered
		if err := n.active.Close(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// copyFile copies src to dst (created exclusively) and syncs dst.
func copyFile(fsys vfs.FS, src, dst string) error {
	b, err := vfs.ReadFile(fsys, src)
	if err != nil {
		return fmt.Errorf("seglog: read %s to save a copy: %w", src, err)
	}
	f, err := fsys.CreateExcl(dst, vfs.PrivateFile)
	if err != nil {
		return fmt.Errorf("seglog: save a copy of %s: %w", src, err)
	}
	n, err := f.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = f.SyncData()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("seglog: save a copy of %s as %s: %w", src, dst, err)
	}
	return nil
}

// RemoveCheckpoint removes the checkpoint file path after saving a copy
// into saveDir, and syncs its directory (wsfs fsck --repair of a damaged
// checkpoint: recovery then starts from an older one, or from the log).
func RemoveCheckpoint(fsys vfs.FS, path, saveDir string) (saved string, err error) {
	if err := vfs.MkdirAllDurable(fsys, saveDir, vfs.PrivateDir); err != nil {
		return "", err
	}
	saved = filepath.Join(saveDir, filepath.Base(path))
	if err := copyFile(fsys, path, saved); err != nil {
		return "", err
	}
	if err := vfs.SyncDir(fsys, saveDir); err != nil {
		return "", err
	}
	if err := fsys.Remove(path); err != nil {
		return saved, fmt.Errorf("seglog: remove checkpoint %s: %w", path, err)
	}
	return saved, vfs.SyncDir(fsys, filepath.Dir(path))
}

// LostRecords returns the data records that lie at or after the damage
// OpenReadOnly found and still verify: the records of the incomplete group
// before the damage, every checksum-valid data frame found byte by byte
// after it in the damaged segment, and the data frames of the segments
// after it (as far as they parse). They belong to groups that recovery
// drops; wsfs fsck decodes them to name the files those groups changed.
// The list can be incomplete (records inside damaged bytes are unknown)
// and, for frames found by search, can include a frame that was never a
// record; it is for reporting only. nil if there is no damage.
func (l *Log) LostRecords() [][]byte {
	d := l.damage
	if d == nil {
		return nil
	}
	var out [][]byte
	scanFrom := func(buf []byte, from int64) {
		for off := from; off+frameHeaderLen <= int64(len(buf)); {
			f, ok, _ := parseFrame(buf[off:])
			if !ok {
				off++
				continue
			}
			if f.typ == typeData {
				out = append(out, f.payload)
			}
			off += int64(f.size)
		}
	}
	seq, ok := parseSegName(filepath.Base(d.Segment))
	if !ok {
		return nil
	}
	if buf, err := vfs.ReadFile(l.fs, d.Segment); err == nil {
		scanFrom(buf, max(d.GroupEnd, segHeaderLen))
	}
	present, err := listSegments(l.fs, l.dir)
	if err != nil {
		return out
	}
	for _, s := range present {
		if s <= seq {
			continue
		}
		if buf, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, segName(s))); err == nil {
			scanFrom(buf, segHeaderLen)
		}
	}
	return out
}
