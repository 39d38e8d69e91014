// Package snapshot keeps the catalog of a workspace's named snapshots and
// implements snapshot create, fork, restore and the object enumeration GC
// needs.
//
// A snapshot is a manifest root (package manifest) in the host's pool plus
// one catalog entry in STATE/workspaces/NAME/snapshots/:
//
//	snapshots/<id:%020d>.snap   one entry per snapshot (format below)
//	snapshots/last-id           the largest ID ever used, when that entry was removed
//	snapshots/lock              flock serializing catalog changes
//
// Entry format (frozen, versions 1 and 2; golden files
// testdata/entry-v1.golden, testdata/entry-v2.golden):
//
//	entry = magic:"WSFSSNP1" version:uvarint id:uvarint
//	        sec:zigzag nsec:uvarint group:uvarint root:[32]u8
//	        label:uvarint-length+bytes [agent] crc32c:u32le
//	agent = kind:u8 (1: copy) size:uvarint shift:u8 count:uvarint
//	        chunk:[32]u8*count                       (version 2 only)
//
// Version 1 entries (written before snapshots recorded the agent state,
// and still written for a snapshot without an agent database, so that
// older wsfs binaries read them) have no agent field: the snapshot
// records no agent state. A version 2 entry records a consistent copy of
// the agent state database (see AgentCopy): size bytes in pool objects
// of 1<<shift bytes each (the last one shorter).
//
// Invariants:
//   - An entry is published only after every object of its tree is durable
//     (the manifests synced by Create, the contents by the commits that
//     wrote them), and it is published durably (vfs.Publish with sync: temp,
//     fdatasync, rename, directory sync). So a snapshot exists exactly when
//     its entry does, and a Create that returned nil survives a crash.
//   - IDs are never reused within a workspace: a new ID is one above the
//     largest entry and above last-id, and Remove writes last-id durably
//     before it removes the largest entry.
//   - The snapshot's tree is the workspace's durable tree at the end of
//     Group: every operation completed before Create was called, and none
//     after (offline: nothing runs).
package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/vfs"
)

const (
	entryMagic    = "WSFSSNP1"
	entryVersion  = 1 // an entry without agent state
	entryVersion2 = 2 // an entry with an agent state copy
	agentKindCopy = 1
	entrySuffix   = ".snap"
	lastIDName    = "last-id"
	lockName      = "lock"
	// MaxLabel is the longest label, in bytes.
	MaxLabel = 256
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadEntry is wrapped by every catalog decoding error.
var ErrBadEntry = errors.New("malformed snapshot catalog entry")

// ErrNotFound is wrapped when a snapshot ID is not in the catalog.
var ErrNotFound = errors.New("no such snapshot")

// Info is one catalog entry.
type Info struct {
	ID    uint64
	Label string
	Time  time.Time // when it was taken (wall clock)
	Group uint64    // the workspace's last committed group it contains
	Root  objid.ID  // manifest root object
	// Agent is the copy of the agent state database taken with the tree
	// (nil: the snapshot records no agent state: the workspace had no
	// agent database, or an older wsfs took it).
	Agent *AgentCopy
}

// AgentCopy is a snapshot's copy of the agent state database: Size bytes,
// a whole SQLite database file, in the chunked content Content (every
// chunk a pool object of 1<<ChunkShift bytes, the last one shorter).
type AgentCopy struct {
	Size    uint64
	Content namespace.Content
}

// Dir is the catalog directory of the workspace in wsDir.
func Dir(wsDir string) string { return filepath.Join(wsDir, "snapshots") }

// ValidateLabel refuses a label that 'wsfs snapshot ls' could not print
// on one line: longer than MaxLabel bytes, not UTF-8, or holding a
// control character (a newline or tab would forge or shift rows).
func ValidateLabel(label string) error {
	if len(label) > MaxLabel {
		return fmt.Errorf("label of %d bytes (at most %d)", len(label), MaxLabel)
	}
	if !utf8.ValidString(label) {
		return fmt.Errorf("label %q is not UTF-8", label)
	}
	for _, r := range label {
		if unicode.IsControl(r) {
			return fmt.Errorf("label %q holds a control character (%U); use printable characters", label, r)
		}
	}
	return nil
}

// ValidateNewLabel is ValidateLabel for a snapshot being taken, which
// also refuses a label that 'wsfs pull --at' reads as something else: all
// digits (a snapshot ID), a duration ago ("2h") or an RFC 3339 time. No
// --at could select such a snapshot by its label. Entries written before
// keep theirs (ls prints them; pull --at selects them by ID).
func ValidateNewLabel(label string) error {
	if err := ValidateLabel(label); err != nil {
		return err
	}
	if label == "" {
		return nil
	}
	what := ""
	if strings.Trim(label, "0123456789") == "" {
		what = "a snapshot ID"
	} else if _, err := time.ParseDuration(label); err == nil {
		what = "a duration ago"
	} else if _, err := time.Parse(time.RFC3339Nano, label); err == nil {
		what = "a time"
	}
	if what != "" {
		return fmt.Errorf("label %q would be read by 'wsfs pull --at' as %s, never as this label; add a word (for example %q)", label, what, "at "+label)
	}
	return nil
}

func entryName(id uint64) string { return fmt.Sprintf("%020d%s", id, entrySuffix) }

func parseEntryName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, entrySuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil && id > 0
}

// EncodeEntry returns the catalog entry bytes of in.
func EncodeEntry(in Info) []byte {
	b := []byte(entryMagic)
	if in.Agent != nil {
		b = binary.AppendUvarint(b, entryVersion2)
	} else {
		b = binary.AppendUvarint(b, entryVersion)
	}
	b = binary.AppendUvarint(b, in.ID)
	b = binary.AppendVarint(b, in.Time.Unix())
	b = binary.AppendUvarint(b, uint64(in.Time.Nanosecond()))
	b = binary.AppendUvarint(b, in.Group)
	b = append(b, in.Root[:]...)
	b = binary.AppendUvarint(b, uint64(len(in.Label)))
	b = append(b, in.Label...)
	if a := in.Agent; a != nil {
		b = append(b, agentKindCopy)
		b = binary.AppendUvarint(b, a.Size)
		b = append(b, a.Content.ChunkShift)
		b = binary.AppendUvarint(b, uint64(len(a.Content.Chunks)))
		for _, c := range a.Content.Chunks {
			b = append(b, c[:]...)
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// DecodeEntry decodes a catalog entry; it never panics.
func DecodeEntry(data []byte) (Info, error) {
	var in Info
	fail := func(format string, args ...any) (Info, error) {
		return Info{}, fmt.Errorf("%w: %s", ErrBadEntry, fmt.Sprintf(format, args...))
	}
	if len(data) < len(entryMagic)+4 || string(data[:len(entryMagic)]) != entryMagic {
		return fail("bad magic")
	}
	body := data[:len(data)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(data[len(data)-4:]); got != want {
		return fail("checksum mismatch (crc32c %08x, stored %08x)", got, want)
	}
	b := body[len(entryMagic):]
	var bad bool
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	version := uv()
	if !bad && version != entryVersion && version != entryVersion2 {
		return fail("version %d, this wsfs reads versions %d and %d", version, entryVersion, entryVersion2)
	}
	in.ID = uv()
	sec, n := binary.Varint(b)
	if n <= 0 {
		return fail("truncated time")
	}
	b = b[n:]
	nsec := uv()
	in.Group = uv()
	if bad || nsec >= 1e9 || len(b) < 32 {
		return fail("truncated or out-of-range fields")
	}
	in.Time = time.Unix(sec, int64(nsec))
	copy(in.Root[:], b)
	b = b[32:]
	ln := uv()
	if bad || ln > MaxLabel || ln > uint64(len(b)) || (version == entryVersion && ln != uint64(len(b))) {
		return fail("label of %d bytes with %d left", ln, len(b))
	}
	in.Label = string(b[:ln])
	b = b[ln:]
	if version == entryVersion2 {
		if len(b) < 1 || b[0] != agentKindCopy {
			return fail("version 2 entry without an agent state copy")
		}
		b = b[1:]
		a := &AgentCopy{Size: uv()}
		if bad || len(b) < 1 {
			return fail("truncated agent state copy")
		}
		a.Content.ChunkShift = b[0]
		b = b[1:]
		n := uv()
		if bad || n == 0 || n != uint64(len(b))/32 || uint64(len(b))%32 != 0 {
			return fail("agent state copy of %d chunks with %d bytes left", n, len(b))
		}
		a.Content.Chunks = make([]objid.ID, n)
		for i := range a.Content.Chunks {
			copy(a.Content.Chunks[i][:], b[32*i:])
		}
		if err := a.Content.Validate(a.Size); err != nil {
			return fail("agent state copy: %v", err)
		}
		in.Agent = a
	}
	if in.ID == 0 {
		return fail("id 0")
	}
	return in, nil
}

// List returns the catalog sorted by ID (empty if there is none). A
// damaged entry is an error naming its file (wrapping ErrBadEntry).
func List(fsys vfs.FS, wsDir string) ([]Info, error) {
	names, err := fsys.List(Dir(wsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: list catalog: %w", err)
	}
	var out []Info
	for _, name := range names {
		id, ok := parseEntryName(name)
		if !ok {
			continue
		}
		in, err := readEntry(fsys, wsDir, id)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the directory was listed
		}
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func readEntry(fsys vfs.FS, wsDir string, id uint64) (Info, error) {
	path := filepath.Join(Dir(wsDir), entryName(id))
	b, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("%w %d in %s", ErrNotFound, id, wsDir)
	}
	var nr *vfs.NotRegularError
	if errors.As(err, &nr) {
		// Not an entry at all (a directory made by hand or by a bad
		// restore): damaged like a torn one, and removed the same way.
		err = fmt.Errorf("%w: %s, not a catalog entry file", ErrBadEntry, nr.Kind())
	} else if err != nil {
		return Info{}, fmt.Errorf("snapshot: read %s: %w", path, err)
	}
	var in Info
	if err == nil {
		in, err = DecodeEntry(b)
	}
	if err == nil && in.ID != id {
		err = fmt.Errorf("%w: holds id %d", ErrBadEntry, in.ID)
	}
	if err != nil {
		return Info{}, fmt.Errorf("snapshot: %s: %w (the snapshot is lost unless a backup has this file; remove the damaged entry with `wsfs snapshot rm %s@%d`)",
			path, err, filepath.Base(wsDir), id)
	}
	return in, nil
}

// Get returns snapshot id of the workspace in wsDir (an error wrapping
// ErrNotFound if there is none).
func Get(fsys vfs.FS, wsDir string, id uint64) (Info, error) { return readEntry(fsys, wsDir, id) }

// catalogLockWait bounds how long lockCatalog waits for another holder
// of the catalog lock. Every holder keeps it for one catalog change (an
// entry published or removed, a prune, an import): milliseconds. A
// variable so that tests can shorten it.
var catalogLockWait = 10 * time.Second

// lockCatalog creates the catalog directory durably and takes its lock,
// waiting (up to catalogLockWait) while another process or Lock call
// holds it: catalog changes of concurrent commands (a snapshot taken by
// a daemon or a restore while `wsfs snapshot rm` or `prune` runs)
// serialise instead of failing. After the wait the error wraps
// vfs.ErrLocked and names the holder.
func lockCatalog(fsys vfs.FS, wsDir string) (io.Closer, error) {
	if err := vfs.MkdirAllDurable(fsys, Dir(wsDir), vfs.PrivateDir); err != nil {
		return nil, fmt.Errorf("snapshot: create catalog: %w", err)
	}
	deadline := time.Now().Add(catalogLockWait)
	delay := time.Millisecond
	for {
		l, err := fsys.Lock(filepath.Join(Dir(wsDir), lockName))
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, vfs.ErrLocked) {
			return nil, fmt.Errorf("snapshot: lock catalog of %s: %w", wsDir, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("snapshot: the catalog of %s stayed locked for %v (a snapshot create, rm, prune or pull of it that is stuck?): %w",
				wsDir, catalogLockWait, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// nextID returns the ID a new entry gets. The catalog lock is held.
func nextID(fsys vfs.FS, wsDir string) (uint64, error) {
	names, err := fsys.List(Dir(wsDir))
	if err != nil {
		return 0, fmt.Errorf("snapshot: list catalog: %w", err)
	}
	var max uint64
	for _, name := range names {
		if id, ok := parseEntryName(name); ok && id > max {
			max = id
		}
	}
	b, err := vfs.ReadFile(fsys, filepath.Join(Dir(wsDir), lastIDName))
	switch {
	case err == nil:
		v, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if perr != nil {
			return 0, fmt.Errorf("snapshot: %s: %w", filepath.Join(Dir(wsDir), lastIDName), perr)
		}
		if v > max {
			max = v
		}
	case !errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("snapshot: read last-id: %w", err)
	}
	return max + 1, nil
}

// publish adds entry in to the catalog durably. The catalog lock is held.
func publish(fsys vfs.FS, wsDir string, in Info) error {
	b := EncodeEntry(in)
	return vfs.Publish(fsys, filepath.Join(Dir(wsDir), entryName(in.ID)), true, func(f vfs.File) error {
		_, err := f.Write(b)
		return err
	})
}

// Remove deletes snapshot id from the catalog, durably. Its objects stay
// in the pool until GC finds nothing else referencing them.
func Remove(fsys vfs.FS, wsDir string, id uint64) error {
	l, err := lockCatalog(fsys, wsDir)
	if err != nil {
		return err
	}
	defer l.Close()
	return removeLocked(fsys, wsDir, id)
}

func removeLocked(fsys vfs.FS, wsDir string, id uint64) error {
	// A damaged entry is removed like any other: it is the way out of a
	// catalog that List (and so gc, prune) refuses.
	if _, err := readEntry(fsys, wsDir, id); err != nil && !errors.Is(err, ErrBadEntry) {
		return err
	}
	next, err := nextID(fsys, wsDir)
	if err != nil {
		return err
	}
	if id == next-1 {
		// The largest ID: remember it first, so that it is never handed
		// out again (a crash between the two steps leaves both, which is
		// fine).
		if err := vfs.Publish(fsys, filepath.Join(Dir(wsDir), lastIDName), true, func(f vfs.File) error {
			_, err := fmt.Fprintf(f, "%d\n", id)
			return err
		}); err != nil {
			return fmt.Errorf("snapshot: remove %d: %w", id, err)
		}
	}
	if err := fsys.Remove(filepath.Join(Dir(wsDir), entryName(id))); err != nil {
		return fmt.Errorf("snapshot: remove %d: %w", id, err)
	}
	if err := vfs.SyncDir(fsys, Dir(wsDir)); err != nil {
		return fmt.Errorf("snapshot: remove %d: %w", id, err)
	}
	return nil
}

// Retention says which snapshots Prune keeps: a snapshot is kept if it is
// one of the KeepLast newest (by ID), or younger than KeepWithin at now.
// Zero values keep nothing by that rule; Prune refuses a Retention that
// keeps nothing at all (both zero), so that a typo cannot wipe a catalog.
type Retention struct {
	KeepLast   int
	KeepWithin time.Duration
}

// Prune removes the snapshots the retention rule does not keep and
// returns them.
func Prune(fsys vfs.FS, wsDir string, r Retention, now time.Time) ([]Info, error) {
	if r.KeepLast <= 0 && r.KeepWithin <= 0 {
		return nil, errors.New("snapshot: prune needs --keep-last or --keep-within (refusing to remove every snapshot)")
	}
	l, err := lockCatalog(fsys, wsDir)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	all, err := List(fsys, wsDir)
	if err != nil {
		return nil, err
	}
	var removed []Info
	for i, in := range all {
		newest := len(all) - i // 1 for the newest
		if (r.KeepLast > 0 && newest <= r.KeepLast) || (r.KeepWithin > 0 && now.Sub(in.Time) < r.KeepWithin) {
			continue
		}
		if err := removeLocked(fsys, wsDir, in.ID); err != nil {
			return removed, err
		}
		removed = append(removed, in)
	}
	return removed, nil
}

// ParseRef splits "NAME@ID" into the workspace name and the snapshot ID.
func ParseRef(ref string) (name string, id uint64, err error) {
	name, s, ok := strings.Cut(ref, "@")
	if !ok || name == "" || s == "" {
		return "", 0, fmt.Errorf("%q is not NAME@ID", ref)
	}
	id, err = strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return "", 0, fmt.Errorf("%q: snapshot ID %q is not a positive number", ref, s)
	}
	return name, id, nil
}

// IDs returns the IDs of the catalog's entries, ascending, from one
// directory listing (no entry is read): a cheap way to notice a change.
func IDs(fsys vfs.FS, wsDir string) ([]uint64, error) {
	names, err := fsys.List(Dir(wsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: list catalog: %w", err)
	}
	var out []uint64
	for _, name := range names {
		if id, ok := parseEntryName(name); ok {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// EntryName is the file name of entry id in the catalog directory (and
// its key suffix in a remote tier).
func EntryName(id uint64) string { return entryName(id) }

// Import adds entry in (shipped from another host, its objects already
// durable in the local pool) to the catalog of the workspace in wsDir
// durably, keeping its ID; an entry of that ID must not exist. The
// catalog's last-id is raised to at least lastID, so that no ID the
// workspace ever used elsewhere is handed out again.
func Import(fsys vfs.FS, wsDir string, in Info, lastID uint64) error {
	l, err := lockCatalog(fsys, wsDir)
	if err != nil {
		return err
	}
	defer l.Close()
	if _, err := fsys.Stat(filepath.Join(Dir(wsDir), entryName(in.ID))); err == nil {
		return fmt.Errorf("snapshot: import %d: the catalog of %s has that ID already", in.ID, wsDir)
	}
	next, err := nextID(fsys, wsDir)
	if err != nil {
		return err
	}
	if lastID >= next {
		if err := vfs.Publish(fsys, filepath.Join(Dir(wsDir), lastIDName), true, func(f vfs.File) error {
			_, err := fmt.Fprintf(f, "%d\n", lastID)
			return err
		}); err != nil {
			return fmt.Errorf("snapshot: import %d: %w", in.ID, err)
		}
	}
	return publish(fsys, wsDir, in)
}

// LastID returns the largest ID the catalog ever used (entries and
// last-id), 0 for none. It reads without the catalog lock.
func LastID(fsys vfs.FS, wsDir string) (uint64, error) {
	if _, err := fsys.Stat(Dir(wsDir)); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	n, err := nextID(fsys, wsDir)
	return n - 1, err
}
