// Package workspace is the engine facade of one workspace: it opens the
// workspace (recovery from the latest checkpoint plus the log), applies
// operations to the namespace, enqueues their records with the committer,
// keeps file content (inline, one pool object, or pooled chunks; dirty in
// memory until flushed),
// and gives fsync its barrier. The FUSE adapter (internal/fusefs) calls it;
// node ids there are the inode numbers here.
//
// # Operations
//
// Every mutating operation follows one path: lock the inodes it touches,
// validate (POSIX errors), reserve room in the committer's queue, build a
// namespace.Record, Apply it to the live tree, enqueue it in the reserved
// room — all while holding the locks, so the
// log order of dependent operations equals the order they were applied in.
// Replay applies the same records with the same Apply.
//
// # Lock order
//
// Locks are taken in this order, and never the other way round:
//
//  0. Workspace.gate: read-locked for the whole of every operation that
//     reads or changes the live tree (never twice by one goroutine: an
//     operation does not call another one), write-locked by ReplaceTree
//     (online restore, restore.go) and Close. Reads through an open
//     handle and waits for a commit do not take it.
//  1. Workspace.renameMu: only by renames whose two directories differ
//     (like the kernel's s_vfs_rename_mutex). Directory Parent fields change
//     only under it, so the "not into its own subtree" walk is safe.
//  2. namespace.Inode.Mu of every inode an operation touches, in increasing
//     inode number. An operation that must read a directory entry to learn
//     the inode number locks the directory, reads, and if the child's number
//     is lower, unlocks, locks both in order and re-checks the entry.
//  3. Leaf locks held only briefly inside other packages: the committer's
//     queue (Reserve may wait for queue space, which the flusher frees
//     without taking any inode lock; when the log's filesystem is full it
//     refuses instead of waiting), the pool. The namespace's inode
//     table and the sticky failure state take no lock (sync.Map, atomics).
//
// There is no global lock on the read path: GetAttr, Lookup and ReadAt take
// only the locks of the inodes they read, and never wait for a commit.
// ReadAt of pooled content holds the inode lock only to find the cached
// object file; the pread runs unlocked.
//
// The durable shadow (a second namespace holding exactly the state at the
// end of the last committed group) is owned by the committer's flusher
// goroutine after Open: only OnCommit touches it. Once CheckpointBytes of log
// have accumulated, OnCommit encodes it and a background goroutine writes
// the checkpoint; a later OnCommit (or Close) deletes the segments it covers.
//
// # Content
//
// Contents up to InlineMax travel inline in SetContent records; up to
// ChunkSize they are one pool object; larger ones are a list of ChunkSize
// pool objects (holes, all-zero chunks, have none). The record names the
// objects put for it (Objects: the drain syncs them before the log). Writes
// go to a per-inode dirty state shared by all handles (dirty.go): the whole
// content in memory while it fits one chunk, else only the chunks written,
// at most maxDirtyChunks of them in memory. Flush (close) publishes it,
// Fsync also waits for the commit. Published content is immutable: a write
// copies the chunks it touches first. Reads do not update atime.
//
// A flush that changes only a few bytes of pooled content (up to 64 spans
// and 64 KiB since the last flush, no chunk put meanwhile: a SQLite WAL
// append) logs those bytes in a WriteRange record instead of new chunk
// objects, and keeps the dirty content in memory as the copy of the
// published one; the published content is then its base plus ordered
// ranges (namespace.Content.Ranges), which reads overlay. Ranges are
// folded into chunks by a SetContent when they would exceed foldRanges or
// foldBytes, at the last close beyond foldClosedRanges/foldClosedBytes,
// and by any truncate. Checkpoints and snapshot manifests carry pending
// ranges (content kind 4), so both stay self-contained.
//
// # Kernel lookup counts
//
// Every call that returns an entry to the kernel — Lookup, Create, Mkdir,
// Mknod, Symlink, Link — counts one lookup of the returned inode; Forget
// gives them back. An inode whose last link is removed stays in memory
// (readable, writable, but no longer logged) while it has lookups or open
// handles, and disappears when both reach zero. GetAttr and ReadDir count
// nothing.
package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"wsfs/internal/commit"
	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
)

// Ino is an inode number; the FUSE node id.
type Ino uint64

// RootIno is the root directory.
const RootIno Ino = 1

// Timestamp is a file time: seconds of any int64 value and nanoseconds
// (see namespace.Timestamp).
type Timestamp = namespace.Timestamp

// TimestampOf is the timestamp of t.
func TimestampOf(t time.Time) Timestamp {
	return Timestamp{Sec: t.Unix(), Nsec: uint32(t.Nanosecond())}
}

// Attr are the attributes of an inode.
type Attr struct {
	Ino                 Ino
	Mode                uint32 // S_IFxxx | permission bits
	Nlink               uint32
	Uid, Gid, Rdev      uint32
	Size, Blocks        uint64 // Blocks in 512-byte units: the bytes stored (holes not counted)
	Atime, Mtime, Ctime namespace.Timestamp
}

// SetAttrIn says which attributes SetAttr changes (nil: unchanged).
type SetAttrIn struct {
	Mode, Uid, Gid *uint32              // Mode: permission bits only
	Size           *uint64              // truncate (or extend with zeros)
	Atime, Mtime   *namespace.Timestamp // any seconds; nanoseconds below 1e9 (else EINVAL)
}

// DirEntry is one entry of ReadDir.
type DirEntry struct {
	Name string
	Ino  Ino
	Mode uint32 // S_IFxxx bits (d_type); permission bits may be absent
}

// Caller is the identity creating an inode.
type Caller struct{ Uid, Gid uint32 }

// Defaults of Options.
const (
	DefaultGroupRecords = 512
	DefaultGroupWindow  = 50 * time.Millisecond
	// DefaultInlineMax: contents up to this size are stored inline in the
	// log record. A group of inline files costs one append and one
	// fdatasync of the log, against one fdatasync per object plus its
	// directory for pooled files; inline still wins at 64 KiB
	// (docs/benchmarks.md, "Engine micro-benchmarks"). Above it, contents
	// would also make
	// checkpoints (which carry inline bytes) and memory grow, and dedup
	// across workspaces only works for pooled contents. A full group of 512
	// records is at most 32 MiB of log.
	DefaultInlineMax = 64 << 10
	// DefaultChunkSize: content larger than this is stored as a list of
	// pool objects of this size (the last one shorter), so that a change
	// to a large file rewrites only the chunks it touches, at a cost that
	// does not grow with the file (docs/benchmarks.md, "Chunked content").
	// Smaller chunks mean longer
	// chunk lists in records (32 bytes per chunk: 32 KiB for 1 GiB) and
	// more objects per drain; larger ones, more bytes per small change.
	DefaultChunkSize = 1 << 20
	// DefaultCheckpointBytes: a checkpoint is written after this much log
	// since the last one, and the covered segments are deleted.
	DefaultCheckpointBytes = 64 << 20
	// maxLinks is the largest nlink Link creates (EMLINK above).
	maxLinks = 65000
)

// Options configure Open.
type Options struct {
	FS   vfs.FS     // holds Dir and the pool (the pool's own FS; default vfs.Default)
	Dir  string     // STATE/workspaces/NAME; holds log/, checkpoint/, lock
	Pool *pool.Pool // the host's content pool (required)

	GroupRecords    int           // records per group (default 512)
	GroupWindow     time.Duration // group window (default 50ms)
	Drain           commit.Drain  // drain mode (default entry; syncfs is the legacy pathology)
	SyncParallelism int           // object syncs in flight per drain (default 16)

	InlineMax       int   // content up to this many bytes goes inline in the log (default DefaultInlineMax)
	ChunkSize       int   // chunk size of large contents, a power of two (default DefaultChunkSize)
	CheckpointBytes int64 // checkpoint after this many log bytes (default DefaultCheckpointBytes)
	SegmentSize     int64 // log segment size (default seglog.DefaultSegmentSize)

	Clock    commit.Clock // time source for records and the committer (default system clock)
	Logger   *slog.Logger // default slog.Default()
	Observer commit.Observer
	// AfterFsync, if set, is called by every fsync (of a file or a
	// directory) once its barrier committed locally, with the last
	// committed group (the fsync's operations are in it or before it).
	// An error fails that fsync with EIO; the workspace goes on. The
	// daemon's remote fsync waits there for the remote tier.
	AfterFsync func(group uint64) error
	// AfterCommit, if set, is called on the committer's flusher after
	// each group is durable, before its waiters are released; it must not
	// block (the daemon signals the shipper's wake socket there).
	AfterCommit func(group uint64)
}

// Stats describe the workspace for `wsfs status` and metrics.
type Stats struct {
	CommittedGroup  uint64    // the last committed group
	CommittedAt     time.Time // when it committed (zero before the first commit of this process)
	Pending         int       // records enqueued and not yet durable
	Failed          error     // non-nil once the workspace has failed for good
	Stalled         error     // non-nil while commits wait for space on the log's filesystem
	Inodes          int       // inodes in memory (open orphans included)
	CheckpointGroup uint64    // group of the last checkpoint (0: none)
	// CheckpointErr is the last checkpoint failure (checkpoints stopped or
	// failing: the log keeps growing, nothing is lost); nil once one works.
	CheckpointErr error
	// File content published since Open, in bytes: inline in log records,
	// as new pool objects, and as pool objects that already existed.
	// Bytes of range records count as inline.
	BytesInline, BytesPooled, BytesDeduped uint64
	// RangeRecords and RangeFolds count, since Open, the flushes logged as
	// WriteRange records and the SetContent records that folded pending
	// ranges into new chunks.
	RangeRecords, RangeFolds uint64
}

// Workspace is an open workspace. All methods are safe for concurrent use.
type Workspace struct {
	opts  Options
	fs    vfs.FS
	pool  *pool.Pool
	lg    *slog.Logger
	clock commit.Clock
	lock  io.Closer
	log   *seglog.Log
	com   *commit.Committer
	// base is the background sync of a pulled, unsynced base checkpoint
	// (nil: the checkpoint is durable). Invariant (seglog/unsynced.go):
	// nothing is acknowledged before base.Wait returned nil: the log's
	// Sync, barrier, Sync and Close wait for it first.
	base  *seglog.BaseSync
	tree  *namespace.Tree
	bytes byteCounters
	shift uint8 // log2(opts.ChunkSize): new chunked contents use it

	renameMu sync.Mutex
	// gate is read-locked by every operation that reads or changes the
	// live tree (all but reads of open handles and waits for commits), and
	// write-locked by ReplaceTree (online restore) and Close: while it is
	// held no operation is in flight, so the tree can be swapped whole.
	gate sync.RWMutex
	// staleBelow: after ReplaceTree, every inode number below it belongs
	// to a replaced tree (ESTALE); 0 before the first ReplaceTree.
	staleBelow atomic.Uint64

	// Owned by the committer's flusher goroutine (OnCommit) after Open,
	// and by Close once the flusher has exited.
	shadow *namespace.Tree
	// shadowMu guards shadow and shadowGroup against DurableTree, which
	// clones the shadow from another goroutine (durable.go).
	shadowMu sync.Mutex
	// shadowRec (guarded by shadowMu) is the Record onCommit decodes each
	// committed record into before applying it to shadow, reused: Apply
	// and snapCache.Touch keep nothing of it but copies (its slices
	// alias the record's bytes, not the Record).
	shadowRec   namespace.Record
	shadowGroup uint64 // the group the shadow is at the end of
	// snapCache (guarded by shadowMu) is told every record applied to the
	// shadow, for DurableManifest; nil until its first call.
	snapCache *manifest.Cache
	snapMu    sync.Mutex // serializes DurableManifest
	// protectedAt (guarded by snapMu) is when DurableManifest last put or
	// protected each directory manifest of its previous build.
	protectedAt map[objid.ID]time.Time
	sinceCkpt   int64
	shadowErr   error
	ckpt        struct {
		running bool            // a checkpoint write is in flight
		done    chan ckptResult // its result (capacity 1)
	}
	// ckptMu serializes checkpoint writes; ckptEpoch (changed under it and
	// shadowMu) counts tree replacements, so that a background checkpoint
	// of a replaced shadow is not written over ReplaceTree's.
	ckptMu    sync.Mutex
	ckptEpoch uint64

	// The manifest root the checkpoint read at Open named (fork, restore),
	// or the one ReplaceTree published, whose manifests ForEachObject also
	// lists; set by Open and by ReplaceTree (under the gate).
	manifestRoot    objid.ID
	hasManifestRoot bool

	failed  atomic.Pointer[ioError] // sticky: set when a commit fails
	closed  atomic.Bool             // set by Close before the committer closes
	ckptGrp atomic.Uint64           // group of the last checkpoint
	ckptErr atomic.Pointer[error]   // last checkpoint failure, nil after a success

	closeMu struct {
		sync.Mutex
		done bool
		err  error
	}
}

// Error is the error of every Workspace method: the operation, the inode
// and name it was about, and the cause, which wraps a syscall.Errno (the
// FUSE adapter maps it with errors.As).
type Error struct {
	Op   string
	Ino  Ino
	Name string
	Err  error
}

func (e *Error) Error() string {
	s := "workspace: " + e.Op
	if e.Ino != 0 {
		s += fmt.Sprintf(" inode %d", e.Ino)
	}
	if e.Name != "" {
		s += fmt.Sprintf(" %q", e.Name)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

func wsErr(op string, ino Ino, name string, err error) error {
	if err == nil {
		return nil
	}
	if _, bare := err.(syscall.Errno); !bare { // the common case (ENOENT of a lookup) skips errors.As
		var we *Error
		if errors.As(err, &we) {
			return err
		}
	}
	return &Error{Op: op, Ino: ino, Name: name, Err: errno(err)}
}

// errno returns err if it carries a syscall.Errno, else err marked as EIO:
// the one classification of engine errors (wsErr wraps its result in an
// *Error; paths that return below an operation use it directly).
func errno(err error) error {
	if err == nil {
		return nil
	}
	if _, bare := err.(syscall.Errno); bare {
		return err
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return err
	}
	return &ioError{err}
}

// ioError marks an I/O failure without an errno of its own as EIO.
type ioError struct{ err error }

func (e *ioError) Error() string   { return e.err.Error() }
func (e *ioError) Unwrap() []error { return []error{syscall.EIO, e.err} }

// Lock takes the workspace lock of dir: the one a daemon holds while it
// serves the workspace, and every offline change (fsck --repair, restore,
// rm) takes before it writes. The directory itself is the lock that
// counts (a lock file can be deleted under a live daemon); the lock file
// DIR/lock is locked too, for older binaries (see vfs.LockAll). It fails
// with an error wrapping vfs.ErrLocked while another holder has it.
func Lock(fsys vfs.FS, dir string) (io.Closer, error) {
	return vfs.LockAll(fsys, dir, filepath.Join(dir, "lock"))
}

// Open opens the workspace in opts.Dir, creating it if empty: it takes the
// workspace lock, loads the latest checkpoint, replays the log after it
// (a torn tail is repaired by seglog and logged), and starts the committer.
// Errors from seglog (*seglog.CorruptError) and namespace are returned
// wrapped, unchanged, so that the CLI can explain them.
func Open(opts Options) (*Workspace, error) {
	opts, shift, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Workspace{opts: opts, fs: opts.FS, pool: opts.Pool, clock: opts.Clock, shift: shift,
		lg: opts.Logger.With("dir", opts.Dir)}
	w.ckpt.done = make(chan ckptResult, 1)
	if err := vfs.MkdirAllDurable(w.fs, opts.Dir, vfs.PrivateDir); err != nil {
		return nil, fmt.Errorf("workspace: create %s: %w", opts.Dir, err)
	}
	lk, err := Lock(w.fs, opts.Dir)
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return nil, fmt.Errorf("workspace %s is served by another wsfs daemon; stop that daemon first: %w", opts.Dir, err)
		}
		return nil, fmt.Errorf("workspace: lock %s: %w", opts.Dir, err)
	}
	w.lock = lk
	fresh, err := w.recover()
	if err != nil {
		if w.log != nil {
			w.log.Close()
		}
		_ = w.base.Wait() // not past the lock
		lk.Close()
		return nil, err
	}
	w.com = commit.New(w.log, w.pool, commit.Options{
		MaxRecords: opts.GroupRecords, Window: opts.GroupWindow, Drain: opts.Drain,
		// Sync pooled contents as they are published, so an fsync waits
		// for little more than the log (see commit.Options.EarlyDrain).
		EarlyDrain:      true,
		SyncParallelism: opts.SyncParallelism, Clock: opts.Clock, Logger: w.lg,
		Observer: opts.Observer, OnCommit: w.onCommit,
		StateSyncFS: func() error { return w.fs.SyncFS(opts.Dir) },
	})
	if fresh {
		if err := w.recordRoot(); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// withDefaults validates o and fills in its defaults; it also returns the
// chunk shift.
func (o Options) withDefaults() (Options, uint8, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Pool == nil {
		return o, 0, errors.New("workspace: Options.Pool is required")
	}
	if o.Dir == "" {
		return o, 0, errors.New("workspace: Options.Dir is required")
	}
	if o.InlineMax <= 0 {
		o.InlineMax = DefaultInlineMax
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = DefaultChunkSize
	}
	shift := bits.TrailingZeros(uint(o.ChunkSize))
	if o.ChunkSize != 1<<shift || shift < namespace.MinChunkShift || shift > namespace.MaxChunkShift {
		return o, 0, fmt.Errorf("workspace: chunk size %d is not a power of two between %d and %d", o.ChunkSize, 1<<namespace.MinChunkShift, 1<<namespace.MaxChunkShift)
	}
	if o.CheckpointBytes <= 0 {
		o.CheckpointBytes = DefaultCheckpointBytes
	}
	if err := o.Drain.Valid(); err != nil {
		return o, 0, fmt.Errorf("workspace: %w", err)
	}
	if o.Clock == nil {
		o.Clock = commit.SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, uint8(shift), nil
}

// ErrReplay is wrapped by the error of Open (and of gc's own replay) when
// a committed record, whose checksum verified, does not apply to the tree
// recovered so far: the checkpoint the log continues is missing or is not
// the one it follows (after a restore or fork the log's earlier groups
// describe an older tree). Corrupt state: wsfs fsck names it.
var ErrReplay = errors.New("a committed record does not apply to the recovered tree")

// recover rebuilds the tree and its durable shadow from the latest
// checkpoint and the log after it, and opens the log (w.log, set also on
// error so the caller can close it). It reports whether the workspace is
// new (no checkpoint, no group).
func (w *Workspace) recover() (fresh bool, err error) {
	dir := w.opts.Dir
	ckGroup, payload, err := seglog.ReadLatestCheckpoint(w.fs, w.ckptDir())
	if err != nil {
		return false, fmt.Errorf("workspace %s: read checkpoint: %w", dir, err)
	}
	if payload != nil {
		if w.tree, w.shadow, err = w.decodeCheckpoint(payload); err != nil {
			return false, fmt.Errorf("workspace %s: checkpoint of group %d: %w", dir, ckGroup, err)
		}
		w.ckptGrp.Store(ckGroup)
		// A pulled checkpoint not yet synced: sync it now, in the
		// background, so that reads need not wait for it.
		if w.base, err = seglog.StartBaseSync(w.fs, w.ckptDir(), w.lg); err != nil {
			return false, fmt.Errorf("workspace %s: %w", dir, err)
		}
	} else {
		// The root of a new workspace belongs to the daemon's user; the
		// first record (recordRoot) says so durably, with its times.
		uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
		w.tree = namespace.New(0o755, uid, gid, 0)
		w.shadow = namespace.New(0o755, uid, gid, 0)
	}
	w.log, err = seglog.Open(w.fs, filepath.Join(dir, "log"), seglog.Options{SegmentSize: w.opts.SegmentSize, Logger: w.lg, Base: w.base, Checkpoint: ckGroup})
	if err != nil {
		return false, fmt.Errorf("workspace %s: open log: %w", dir, err)
	}
	w.shadowGroup = w.log.LastGroup()
	// seglog.Open has logged a torn-tail repair (Warn) through w.lg.
	replayed := 0
	err = w.log.Replay(ckGroup, func(group uint64, records [][]byte) error {
		for i, data := range records {
			rec, err := namespace.DecodeRecord(data)
			if err == nil {
				// Decoded bytes alias the whole segment buffer; copy them so
				// that a surviving inline file does not pin a segment in
				// memory. Both trees share the copy.
				rec.Content.Inline = bytes.Clone(rec.Content.Inline)
				for i := range rec.Content.Ranges {
					rec.Content.Ranges[i].Data = bytes.Clone(rec.Content.Ranges[i].Data)
				}
				rec.Value = bytes.Clone(rec.Value)
				if err = w.tree.Apply(rec); err == nil {
					err = w.shadow.Apply(rec)
				}
			}
			if err != nil {
				return fmt.Errorf("replay group %d record %d: %w (%w)", group, i, err, ErrReplay)
			}
			w.sinceCkpt += int64(len(data))
			replayed++
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("workspace %s: %w", dir, err)
	}
	w.lg.Debug("recovered", "checkpoint_group", ckGroup, "last_group", w.log.LastGroup(), "records_replayed", replayed, "inodes", w.tree.Len())
	return payload == nil && w.log.LastGroup() == 0, nil
}

// recordRoot records a new workspace's root: its owner and times are a
// record like any other change.
func (w *Workspace) recordRoot() error {
	root := w.tree.Get(namespace.RootIno)
	now := w.now()
	root.Mu.Lock()
	defer root.Mu.Unlock()
	return w.record(&namespace.Record{Op: namespace.OpSetAttr, Ino: namespace.RootIno,
		Mask: namespace.AttrMode | namespace.AttrUid | namespace.AttrGid | namespace.AttrAtime | namespace.AttrMtime,
		Mode: 0o755, Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), Atime: namespace.FromNs(now), Mtime: namespace.FromNs(now), Time: now}, nil, true)
}

func (w *Workspace) ckptDir() string { return filepath.Join(w.opts.Dir, "checkpoint") }

func (w *Workspace) now() int64 { return w.clock.Now().UnixNano() }

// onCommit runs on the committer's flusher goroutine after each durable
// group: it applies the group to the durable shadow and, once enough log has
// accumulated, starts a checkpoint of the shadow; a finished checkpoint's
// covered segments are deleted here (the log is single-goroutine and the
// flusher is its goroutine).
func (w *Workspace) onCommit(group uint64, recs []commit.Record) {
	if w.opts.AfterCommit != nil {
		w.opts.AfterCommit(group)
	}
	w.reapCheckpoint(false)
	w.shadowMu.Lock()
	defer w.shadowMu.Unlock()
	w.shadowGroup = group
	if w.shadowErr != nil {
		return
	}
	rec := &w.shadowRec
	for i, r := range recs {
		err := rec.Decode(r.Data)
		if err == nil {
			err = w.shadow.Apply(rec)
		}
		if err == nil && w.snapCache != nil {
			w.snapCache.Touch(rec)
		}
		if err != nil {
			w.shadowErr = fmt.Errorf("durable shadow: group %d record %d: %w", group, i, err)
			w.lg.Error("the durable shadow no longer follows the log; checkpoints stop (the log still holds everything; restart to recover)", "err", w.shadowErr)
			w.ckptErr.Store(&w.shadowErr)
			return
		}
		w.sinceCkpt += int64(len(r.Data))
	}
	if w.sinceCkpt >= w.opts.CheckpointBytes && !w.ckpt.running {
		w.startCheckpoint(group)
	}
}

// ckptResult is the outcome of a checkpoint write.
type ckptResult struct {
	group      uint64
	err        error
	superseded bool // not written: ReplaceTree wrote a newer tree meanwhile
}

// startCheckpoint encodes the shadow (in memory, on the flusher) and writes
// it as the checkpoint of group in the background, so that the synced
// write of a large checkpoint does not hold up commits. Flusher only.
func (w *Workspace) startCheckpoint(group uint64) {
	w.sinceCkpt = 0
	payload := w.shadow.EncodeCheckpoint()
	epoch := w.ckptEpoch // under shadowMu (onCommit holds it)
	w.ckpt.running = true
	go func() {
		w.ckptMu.Lock()
		defer w.ckptMu.Unlock()
		if epoch != w.ckptEpoch {
			w.ckpt.done <- ckptResult{group: group, superseded: true}
			return
		}
		w.ckpt.done <- ckptResult{group: group, err: seglog.WriteCheckpoint(w.fs, w.ckptDir(), group, payload)}
	}()
}

// reapCheckpoint collects a finished checkpoint write (waiting for it if
// wait) and, if it succeeded, deletes the log segments it covers: only
// after WriteCheckpoint returned nil, and on the log's own goroutine (the
// flusher, or Close after the flusher has exited).
func (w *Workspace) reapCheckpoint(wait bool) {
	if !w.ckpt.running {
		return
	}
	var res ckptResult
	if wait {
		res = <-w.ckpt.done
	} else {
		select {
		case res = <-w.ckpt.done:
		default:
			return
		}
	}
	w.ckpt.running = false
	if res.superseded {
		return
	}
	if res.err != nil {
		w.lg.Error("checkpoint failed; the log keeps growing until one succeeds", "group", res.group, "err", res.err)
		w.ckptErr.Store(&res.err)
		return
	}
	w.ckptErr.Store(nil)
	w.ckptGrp.Store(res.group)
	if err := w.log.DeleteThrough(res.group); err != nil {
		w.lg.Error("deleting log segments covered by a checkpoint failed", "group", res.group, "err", err)
		w.ckptErr.Store(&err)
	}
}

// usable returns the sticky failure, or an EIO error after Close. Lock
// free: every mutating operation calls it.
func (w *Workspace) usable() error {
	if f := w.failed.Load(); f != nil {
		return f
	}
	if w.closed.Load() {
		return &ioError{errors.New("workspace is closed")}
	}
	return nil
}

// setFailed makes the workspace fail every later mutation with err (EIO).
func (w *Workspace) setFailed(err error) {
	f := &ioError{fmt.Errorf("workspace failed; remount to recover what is durable: %w", err)}
	if w.failed.CompareAndSwap(nil, f) {
		w.lg.Error("workspace failed", "err", err)
	}
}

// record applies rec to the live tree and, if persist, enqueues it. The
// caller holds the Mu of every inode rec touches. The record is applied as
// decoded from its own encoding, exactly as replay will apply it, and its
// inline content shares the encoded buffer with the committer and the
// durable shadow.
func (w *Workspace) record(rec *namespace.Record, objs []objid.ID, persist bool) error {
	if err := w.usable(); err != nil {
		return err
	}
	var slot *commit.Slot
	if persist {
		// Reserve the record's place in the queue before changing
		// anything: when the log's filesystem is full and the queue too,
		// Reserve refuses (ENOSPC) instead of waiting until space is
		// freed.
		var err error
		if slot, err = w.com.Reserve(); err != nil {
			var full *commit.LogFullError
			if errors.As(err, &full) {
				return err
			}
			w.setFailed(err)
			return w.usable()
		}
	}
	data := rec.Encode(nil)
	dec, err := namespace.DecodeRecord(data)
	if err != nil {
		panic(fmt.Sprintf("workspace: a record does not decode from its own encoding: %v", err))
	}
	if err := w.tree.Apply(dec); err != nil {
		// Validation let through something Apply refuses: a bug, but the
		// tree is unchanged, so the operation simply fails.
		w.lg.Error("record refused by the namespace after validation", "op", rec.Op, "err", err)
		if persist {
			slot.Cancel()
		}
		return err
	}
	if !persist {
		return nil
	}
	if _, err := slot.Enqueue(commit.Record{Data: data, Objects: objs}); err != nil {
		// The live tree now holds a change the log will never have: the
		// workspace cannot continue.
		w.setFailed(err)
		return w.usable()
	}
	return nil
}

// Close flushes dirty file content, commits everything pending, and releases
// the workspace lock. Nothing unsynced is reported as written: a commit
// failure is returned.
func (w *Workspace) Close() error {
	w.gate.Lock()
	defer w.gate.Unlock()
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	if w.closeMu.done {
		return w.closeMu.err
	}
	errs := w.flushAllLocked()
	w.closed.Store(true)
	if err := w.com.Close(); err != nil {
		errs = append(errs, err)
	}
	// The flusher has exited: finish its checkpoint, if one is in flight.
	w.reapCheckpoint(true)
	// Nothing committed, yet a clean close still says the pulled base is
	// durable (and must not leave its sync running past the lock).
	if err := w.base.Wait(); err != nil {
		errs = append(errs, err)
	}
	if err := w.log.Close(); err != nil {
		errs = append(errs, err)
	}
	for _, n := range w.tree.Inodes() {
		n.Mu.Lock()
		w.dropContentLocked(n, true)
		n.Mu.Unlock()
	}
	if err := w.lock.Close(); err != nil {
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if err != nil {
		err = wsErr("close", 0, "", err)
	}
	w.closeMu.done, w.closeMu.err = true, err
	return err
}

// Stats returns a snapshot of the workspace's commit state.
func (w *Workspace) Stats() Stats {
	w.gate.RLock()
	defer w.gate.RUnlock()
	cs := w.com.Stats()
	s := Stats{CommittedGroup: cs.LastGroup, CommittedAt: cs.LastCommit, Pending: cs.Pending,
		Failed: cs.Failed, Stalled: cs.Stalled, Inodes: w.tree.Len(), CheckpointGroup: w.ckptGrp.Load(),
		BytesInline: w.bytes.inline.Load(), BytesPooled: w.bytes.pooled.Load(), BytesDeduped: w.bytes.deduped.Load(),
		RangeRecords: w.bytes.ranges.Load(), RangeFolds: w.bytes.folds.Load()}
	if f := w.failed.Load(); s.Failed == nil && f != nil {
		s.Failed = f
	}
	if e := w.ckptErr.Load(); e != nil {
		s.CheckpointErr = *e
	}
	return s
}

// Sync returns once every operation completed before the call is durable
// (dirty content of open files is not an operation until Flush).
func (w *Workspace) Sync() error {
	if err := w.usable(); err != nil {
		return wsErr("sync", 0, "", err)
	}
	if err := w.base.Wait(); err != nil {
		return wsErr("sync", 0, "", err)
	}
	return wsErr("sync", 0, "", w.com.Barrier(context.Background()))
}

// Fsync flushes the inode's dirty content, if any, and then returns once
// every operation completed before the call is durable (fsync of a
// directory or of a file; EIO on failure, never a false success).
func (w *Workspace) Fsync(ino Ino) error {
	w.gate.RLock()
	n, err := w.lock1(ino)
	if err != nil {
		w.gate.RUnlock()
		return wsErr("fsync", ino, "", err)
	}
	if lv := liveOf(n); lv != nil && lv.dirty != nil {
		err = w.flushLocked(n)
	}
	n.Mu.Unlock()
	w.gate.RUnlock()
	if err != nil {
		return wsErr("fsync", ino, "", err)
	}
	return wsErr("fsync", ino, "", w.barrier())
}

func (w *Workspace) barrier() error {
	if err := w.usable(); err != nil {
		return err
	}
	// Also when nothing is pending: an fsync of a file no one changed
	// since the pull vouches for the pulled base.
	if err := w.base.Wait(); err != nil {
		return err
	}
	if err := w.com.Barrier(context.Background()); err != nil {
		return err
	}
	if w.opts.AfterFsync != nil {
		if err := w.opts.AfterFsync(w.com.Stats().LastGroup); err != nil {
			return &ioError{err}
		}
	}
	return nil
}

// Fail makes the workspace fail every later mutation and fsync with err
// (EIO), for good: how its server stops acknowledging writes it can no
// longer stand behind (a lease lost to another host). What committed
// before stays durable.
func (w *Workspace) Fail(err error) { w.setFailed(err) }

// StatFS reports the capacity of the pool's filesystem. (The pool does not
// expose its vfs.FS; the workspace's FS is asked about the pool directory,
// which is the same thing whenever both are vfs.Default or one MemFS.)
func (w *Workspace) StatFS() (vfs.StatFS, error) {
	st, err := w.fs.Statfs(w.pool.Dir())
	return st, wsErr("statfs", 0, "", err)
}

// Dump describes the live tree canonically (see namespace.DumpEntry), with
// each file's content named by the pool ID of its whole bytes, whatever its
// form (chunked contents are read). Dirty unflushed content is not
// included. It needs the workspace to be still (tests, the crash oracle).
func (w *Workspace) Dump() []namespace.DumpEntry {
	w.gate.RLock()
	defer w.gate.RUnlock()
	return w.tree.Dump(w.contentID)
}

// contentID is the pool ID of n's published content; for content that
// cannot be read, an ID of all 0xff bytes (which no content has in a
// test's model).
func (w *Workspace) contentID(n *namespace.Inode) objid.ID {
	c := &n.Content
	switch {
	case c.Ranges != nil:
		b := make([]byte, n.Size)
		if k, err := w.readPublished(n, c, int64(n.Size), b, 0); err != nil || k != len(b) {
			var bad objid.ID
			for i := range bad {
				bad[i] = 0xff
			}
			return bad
		}
		return objid.Sum(b)
	case c.IsObject:
		return c.Object
	case !c.IsChunked():
		return objid.Sum(c.Inline)
	}
	h := objid.NewHasher()
	for i, id := range c.Chunks {
		size := min(n.Size-uint64(i)<<c.ChunkShift, 1<<c.ChunkShift)
		if id == namespace.HoleChunk {
			h.Write(make([]byte, size))
			continue
		}
		b, err := w.pool.ReadAll(id)
		if err != nil || uint64(len(b)) != size {
			var bad objid.ID
			for i := range bad {
				bad[i] = 0xff
			}
			return bad
		}
		h.Write(b)
	}
	return h.Sum()
}

// ForEachObject calls fn for every pool object the live tree references,
// for pool garbage collection. Objects only the durable state still
// references (replaced by an operation whose group has not committed yet)
// are not listed: GC's grace period, far longer than a commit window,
// covers them. A workspace opened from a manifest-reference checkpoint
// (fork, restore) also lists that tree's manifests and contents, which the
// checkpoint still needs until a newer one replaces it.
func (w *Workspace) ForEachObject(fn func(objid.ID)) {
	w.gate.RLock()
	defer w.gate.RUnlock()
	for _, n := range w.tree.Inodes() {
		n.Mu.Lock()
		c := n.Content
		n.Mu.Unlock()
		c.Objects(func(id objid.ID) { fn(id) })
	}
	w.forEachManifestObject(fn)
}

// flushAllLocked publishes the dirty content of every linked inode (as
// each one's last close would) and returns the failures, one per inode.
// The caller holds the operation gate exclusively (Close, ReplaceTree), so
// no operation changes an inode meanwhile.
//
// Each error names the file whose data could not be published (the first
// of its paths, or its inode number), so that an operator facing a full
// disk knows which file holds the data a restore or an unmount waits for.
func (w *Workspace) flushAllLocked() []error {
	var errs []error
	var failed []namespace.Ino
	for _, n := range w.tree.Inodes() {
		n.Mu.Lock()
		if lv := liveOf(n); lv != nil && lv.dirty != nil && n.Nlink > 0 && !n.Dropped {
			if err := w.flushLocked(n); err != nil {
				errs = append(errs, err)
				failed = append(failed, n.Ino)
			}
		}
		n.Mu.Unlock()
	}
	if len(errs) > 0 {
		paths := pathsOf(w.tree) // the gate is held exclusively: the tree is still
		for i, ino := range failed {
			name := fmt.Sprintf("inode %d", ino)
			if p := paths[ino]; len(p) > 0 {
				name = p[0]
			}
			errs[i] = fmt.Errorf("the data written to %s could not be saved (free space on the pool's filesystem, or remove or truncate the file, and try again): %w", name, errs[i])
		}
	}
	return errs
}
