package seglog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"wsfs/internal/vfs"
)

// Checkpoint file format (version 1, frozen): a 36-byte header followed by
// the payload.
//
//	+----------+---------+---------+-------------+-------------+------------+
//	| magic    | version | group   | payload len | payload CRC | header CRC |
//	| 8 bytes  | u32     | u64     | u64         | u32         | u32        |
//	+----------+---------+---------+-------------+-------------+------------+
//	  "WSFSCKP1"   = 1     = name                  CRC-32C       CRC-32C of
//	                                                             bytes 0..31
//
// A checkpoint named <group %020d>.ckpt holds the state after applying
// every group up to and including group.
const (
	ckptMagic     = "WSFSCKP1"
	ckptVersion   = 1
	ckptHeaderLen = 36
)

func ckptName(group uint64) string { return fmt.Sprintf("%020d.ckpt", group) }

func parseCkptName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, ".ckpt")
	if !ok || len(base) != 20 {
		return 0, false
	}
	g, err := strconv.ParseUint(base, 10, 64)
	return g, err == nil
}

func encodeCkptHeader(group uint64, payload []byte) []byte {
	b := make([]byte, ckptHeaderLen)
	copy(b, ckptMagic)
	binary.LittleEndian.PutUint32(b[8:], ckptVersion)
	binary.LittleEndian.PutUint64(b[12:], group)
	binary.LittleEndian.PutUint64(b[20:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
	return b
}

// decodeCheckpoint verifies a checkpoint file's bytes and returns its
// payload (aliasing b).
func decodeCheckpoint(path string, group uint64, b []byte) ([]byte, error) {
	bad := func(off int64, format string, args ...any) error {
		return &CorruptError{Segment: path, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	if len(b) < ckptHeaderLen {
		return nil, bad(0, "checkpoint header incomplete: %d of %d bytes", len(b), ckptHeaderLen)
	}
	if crc32.Checksum(b[:32], castagnoli) != binary.LittleEndian.Uint32(b[32:]) {
		return nil, bad(0, "checkpoint header checksum mismatch")
	}
	if string(b[:8]) != ckptMagic {
		return nil, bad(0, "checkpoint magic %q, want %q", b[:8], ckptMagic)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != ckptVersion {
		return nil, bad(0, "checkpoint format version %d, this wsfs reads only version %d", v, ckptVersion)
	}
	if g := binary.LittleEndian.Uint64(b[12:]); g != group {
		return nil, bad(0, "checkpoint header says group %d, its name says %d", g, group)
	}
	if n := binary.LittleEndian.Uint64(b[20:]); n != uint64(len(b)-ckptHeaderLen) {
		return nil, bad(ckptHeaderLen, "checkpoint payload is %d bytes, header says %d", len(b)-ckptHeaderLen, n)
	}
	p := b[ckptHeaderLen:]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(b[28:]) {
		return nil, bad(ckptHeaderLen, "checkpoint payload checksum mismatch")
	}
	return p, nil
}

// listCheckpoints returns the group numbers of the checkpoints in dir,
// ascending. A missing dir holds none.
func listCheckpoints(fsys vfs.FS, dir string) ([]uint64, error) {
	return listGroups(fsys, dir, parseCkptName)
}

// listGroups returns the group numbers of the names in dir that parse
// accepts, ascending (List is sorted and the names are fixed-width). A
// missing dir holds none.
func listGroups(fsys vfs.FS, dir string, parse func(string) (uint64, bool)) ([]uint64, error) {
	names, err := fsys.List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("seglog: list checkpoints: %w", err)
	}
	var gs []uint64
	for _, n := range names {
		if g, ok := parse(n); ok {
			gs = append(gs, g)
		}
	}
	return gs, nil
}

// publishCheckpoint publishes payload as the checkpoint file of group in
// dir (temp file and rename, vfs.Publish), in one write of header and
// payload; sync says whether its data and entry are synced.
func publishCheckpoint(fsys vfs.FS, dir string, group uint64, payload []byte, sync bool) error {
	err := vfs.Publish(fsys, filepath.Join(dir, ckptName(group)), sync, func(f vfs.File) error {
		b := make([]byte, 0, ckptHeaderLen+len(payload))
		b = append(append(b, encodeCkptHeader(group, payload)...), payload...)
		n, err := f.Write(b)
		if err == nil && n != len(b) {
			err = io.ErrShortWrite
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("seglog: write checkpoint for group %d: %w", group, err)
	}
	return nil
}

// WriteCheckpoint durably publishes payload as the checkpoint for group in
// dir (created if missing): vfs.Publish with sync, so the file's data and
// its directory entry are durable when it returns. It then reads the file
// back and verifies it, and only then deletes the older checkpoints (and
// syncs dir). So at every instant at least one complete, synced checkpoint
// exists, and an older checkpoint is still on disk only if this call did
// not return nil.
//
// Ordering contract for callers: call Log.DeleteThrough(group) only after
// WriteCheckpoint(group) returned nil. Then the log always covers every
// checkpoint that is still present, which is what makes the fallback in
// ReadLatestCheckpoint safe (and Log.Replay checks coverage regardless).
func WriteCheckpoint(fsys vfs.FS, dir string, group uint64, payload []byte) error {
	if err := vfs.MkdirAllDurable(fsys, dir, vfs.PrivateDir); err != nil {
		return err
	}
	final := filepath.Join(dir, ckptName(group))
	if err := publishCheckpoint(fsys, dir, group, payload, true); err != nil {
		return err
	}
	b, err := vfs.ReadFile(fsys, final)
	if err != nil {
		return fmt.Errorf("seglog: verify checkpoint %s: %w", final, err)
	}
	if p, err := decodeCheckpoint(final, group, b); err != nil {
		return fmt.Errorf("seglog: verify checkpoint just written: %w", err)
	} else if !bytes.Equal(p, payload) {
		return fmt.Errorf("seglog: verify checkpoint %s: read back different bytes than written", final)
	}
	gs, err := listCheckpoints(fsys, dir)
	if err != nil {
		return err
	}
	removed := false
	for _, g := range gs {
		if g >= group {
			continue
		}
		if err := fsys.Remove(filepath.Join(dir, ckptName(g))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("seglog: delete older checkpoint: %w", err)
		}
		removed = true
	}
	if removed {
		if err := vfs.SyncDir(fsys, dir); err != nil {
			return fmt.Errorf("seglog: after deleting older checkpoints: %w", err)
		}
	}
	return nil
}

// ReadLatestCheckpoint returns the newest valid checkpoint in dir, or
// (0, nil, nil) if there is none (or dir does not exist).
//
// If the newest checkpoint is damaged, it falls back to the newest older
// one that verifies. Under WriteCheckpoint's ordering contract an older
// checkpoint survives only while the log still covers it; Log.Replay
// refuses with a *CorruptError if it does not. If no checkpoint verifies,
// the newest one's *CorruptError is returned.
//
// A pulled base checkpoint that a crash left missing or damaged before it
// was synced (its .unsynced marker is there, see unsynced.go) is an
// *UnsyncedBaseError instead: no fallback, no repair.
func ReadLatestCheckpoint(fsys vfs.FS, dir string) (uint64, []byte, error) {
	gs, err := listCheckpoints(fsys, dir)
	if err != nil {
		return 0, nil, err
	}
	if len(gs) == 0 {
		return 0, nil, checkUnsynced(fsys, dir, 0, false, nil)
	}
	var newestErr error
	for i := len(gs) - 1; i >= 0; i-- {
		path := filepath.Join(dir, ckptName(gs[i]))
		b, err := vfs.ReadFile(fsys, path)
		if err != nil {
			return 0, nil, fmt.Errorf("seglog: read checkpoint: %w", err)
		}
		p, err := decodeCheckpoint(path, gs[i], b)
		if err == nil {
			return gs[i], p, nil
		}
		if newestErr == nil {
			if uerr := checkUnsynced(fsys, dir, gs[i], true, err); uerr != nil {
				return 0, nil, uerr
			}
			newestErr = err
		}
	}
	return 0, nil, newestErr
}
