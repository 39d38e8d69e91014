package seglog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"

	"wsfs/internal/vfs"
)

// Unsynced base checkpoints.
//
// A pull (internal/ship) restores a workspace from its remote as one
// checkpoint (its base) plus an empty log that continues after it. The
// base of a large workspace is tens of megabytes; syncing it before the
// mount would cost most of the time to the first read. So the pull writes
// it with WriteUnsyncedCheckpoint, which does not sync its data, and
// leaves beside it the marker <group %020d>.unsynced, which is durable
// (file and directory entry synced, mode 0600) before the checkpoint's
// directory entry is.
//
// Invariant: nothing is acknowledged before the pulled base is durable.
// The first process that opens the workspace (the daemon's mount, or an
// offline tool opening it through internal/workspace) calls StartBaseSync:
// in the background it syncs the checkpoint file and its directory, then
// removes the marker and syncs the directory again. Until that has
// finished, no acknowledgement is given: Log.Sync (which every commit of a
// group goes through) first waits for it (Options.Base), and so does the
// workspace's fsync barrier (also when nothing is pending) and its Close.
// Reads do not wait: the base is in the page cache.
//
// A failed base sync is sticky (BaseSync.Wait returns it forever; the Log
// fails for good), so every later fsync reports it (EIO): after a failed
// fsync the kernel may have dropped the pages, and a retry proves nothing.
//
// After a crash before the base sync, the checkpoint may be missing, cut
// short or zero-filled, while the marker says why: that is not damage to
// repair, since nothing acknowledged depended on it and the remote still
// holds the state. ReadLatestCheckpoint then returns an *UnsyncedBaseError
// (the CLI: exit 4, naming `wsfs rm` and `wsfs pull`). A base that
// verifies despite the crash is used, and synced again by the next
// StartBaseSync.

const unsyncedSuffix = ".unsynced"

// UnsyncedName is the name of the marker of an unsynced base checkpoint
// of group.
func UnsyncedName(group uint64) string { return fmt.Sprintf("%020d%s", group, unsyncedSuffix) }

func parseUnsyncedName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, unsyncedSuffix)
	if !ok {
		return 0, false
	}
	return parseCkptName(base + ".ckpt")
}

// WriteUnsyncedCheckpoint writes payload as the checkpoint of group in dir
// (created if missing) without syncing the checkpoint's data: first the
// marker UnsyncedName(group), holding origin (where the state can be
// pulled from again, for the error message after a crash), published and
// synced with its directory entry; then the checkpoint (temp and rename,
// no sync); then dir is synced, so both entries are durable. Until
// StartBaseSync has finished, nothing built on it may be acknowledged
// (see the invariant above). dir must hold no other checkpoint.
func WriteUnsyncedCheckpoint(fsys vfs.FS, dir string, group uint64, payload []byte, origin string) error {
	if err := vfs.MkdirAllDurable(fsys, dir, vfs.PrivateDir); err != nil {
		return err
	}
	if gs, err := listCheckpoints(fsys, dir); err != nil {
		return err
	} else if len(gs) > 0 {
		return fmt.Errorf("seglog: an unsynced checkpoint goes into an empty directory; %s holds the checkpoint of group %d", dir, gs[len(gs)-1])
	}
	if err := vfs.Publish(fsys, filepath.Join(dir, UnsyncedName(group)), true, func(f vfs.File) error {
		_, err := io.WriteString(f, origin+"\n")
		return err
	}); err != nil {
		return fmt.Errorf("seglog: write the unsynced-checkpoint marker of group %d: %w", group, err)
	}
	if err := publishCheckpoint(fsys, dir, group, payload, false); err != nil {
		return err
	}
	return vfs.SyncDir(fsys, dir)
}

// UnsyncedBaseError reports a pulled base checkpoint that a crash left
// missing or damaged before it was synced (its marker still exists). It
// is not corruption: nothing acknowledged was built on it, and the remote
// still holds the state. Error's text names the commands with the
// placeholder NAME, which callers that know the workspace replace.
type UnsyncedBaseError struct {
	Checkpoint string // the checkpoint's path
	Group      uint64
	Origin     string // the remote it was pulled from (the marker's text; "" if unknown)
	Reason     string // what is wrong with it
}

// PullFrom is the --from argument that pulls the workspace again: the
// recorded origin quoted for a POSIX shell (an s3:// URL holds '&' and
// '?'), or REMOTE when none was recorded.
func (e *UnsyncedBaseError) PullFrom() string {
	if e.Origin == "" {
		return "REMOTE"
	}
	return "'" + strings.ReplaceAll(e.Origin, "'", `'\''`) + "'"
}

func (e *UnsyncedBaseError) Error() string {
	from := e.PullFrom()
	return fmt.Sprintf("seglog: the pulled checkpoint %s (group %d) %s: the host stopped before it was synced (its marker %s is still there). "+
		"This is not corruption: nothing was acknowledged before that sync, and the remote still holds the workspace. "+
		"Remove the local copy and pull it again: `wsfs rm NAME`, then `wsfs pull NAME --from %s`",
		e.Checkpoint, e.Group, e.Reason, UnsyncedName(e.Group), from)
}

// unsyncedMarkers returns the groups of the markers in dir, ascending.
func unsyncedMarkers(fsys vfs.FS, dir string) ([]uint64, error) {
	return listGroups(fsys, dir, parseUnsyncedName)
}

// checkUnsynced returns an *UnsyncedBaseError if the newest marker in dir
// is at least as new as every checkpoint there and its checkpoint is
// missing or does not verify (damage is the decode error, nil when it
// was not read: the checkpoint is missing). Older markers are stale
// (a newer checkpoint was written synced) and ignored.
func checkUnsynced(fsys vfs.FS, dir string, newest uint64, have bool, damage error) error {
	ms, err := unsyncedMarkers(fsys, dir)
	if err != nil || len(ms) == 0 {
		return err
	}
	m := ms[len(ms)-1]
	if have && m < newest {
		return nil
	}
	e := &UnsyncedBaseError{Checkpoint: filepath.Join(dir, ckptName(m)), Group: m, Reason: "is missing"}
	if have && m == newest {
		if damage == nil {
			return nil
		}
		e.Reason = "does not verify (" + damage.Error() + ")"
		var ce *CorruptError
		if errors.As(damage, &ce) {
			e.Reason = fmt.Sprintf("does not verify (offset %d: %s)", ce.Offset, ce.Reason)
		}
	}
	if b, err := vfs.ReadFile(fsys, filepath.Join(dir, UnsyncedName(m))); err == nil {
		e.Origin = strings.TrimSpace(string(b))
	}
	return e
}

// UnsyncedBase reports the marker of an unsynced base checkpoint in dir,
// for wsfs fsck: ok is false when there is none (or only stale ones).
func UnsyncedBase(fsys vfs.FS, dir string) (group uint64, ok bool, err error) {
	ms, err := unsyncedMarkers(fsys, dir)
	if err != nil || len(ms) == 0 {
		return 0, false, err
	}
	gs, err := listCheckpoints(fsys, dir)
	if err != nil {
		return 0, false, err
	}
	m := ms[len(ms)-1]
	if len(gs) > 0 && gs[len(gs)-1] > m {
		return 0, false, nil
	}
	return m, true, nil
}

// BaseSync is the background sync of an unsynced base checkpoint (see
// the invariant above). A nil *BaseSync is a base that is durable.
type BaseSync struct {
	group uint64
	done  chan struct{}
	err   error // set before done is closed
}

// StartBaseSync starts making the unsynced base checkpoint in dir durable,
// if its marker is there (else it returns nil, nil): in a goroutine it
// syncs the checkpoint file, then dir, then removes every marker and syncs
// dir again. The caller must hold the workspace lock, must have read the
// checkpoint (ReadLatestCheckpoint verified it), and must make every
// acknowledgement wait for Wait.
func StartBaseSync(fsys vfs.FS, dir string, lg *slog.Logger) (*BaseSync, error) {
	g, ok, err := UnsyncedBase(fsys, dir)
	if err != nil || !ok {
		return nil, err
	}
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	b := &BaseSync{group: g, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		if b.err = syncBase(fsys, dir, g); b.err != nil {
			lg.Error("the pulled checkpoint could not be made durable; every fsync fails until the workspace is reopened", "group", g, "err", b.err)
		}
	}()
	return b, nil
}

// syncBase makes checkpoint g in dir durable and removes the markers.
func syncBase(fsys vfs.FS, dir string, g uint64) error {
	path := filepath.Join(dir, ckptName(g))
	f, err := fsys.Open(path)
	if err != nil {
		return fmt.Errorf("seglog: sync the pulled checkpoint: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = vfs.SyncDir(fsys, dir)
	}
	if err != nil {
		return fmt.Errorf("seglog: sync the pulled checkpoint %s: %w", path, err)
	}
	ms, err := unsyncedMarkers(fsys, dir)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := fsys.Remove(filepath.Join(dir, UnsyncedName(m))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("seglog: remove the marker of the pulled checkpoint, now synced: %w", err)
		}
	}
	if err := vfs.SyncDir(fsys, dir); err != nil {
		return fmt.Errorf("seglog: remove the marker of the pulled checkpoint, now synced: %w", err)
	}
	return nil
}

// Wait returns once the base is durable, with the sync's error (the same
// one on every call). A nil b returns nil at once.
func (b *BaseSync) Wait() error {
	if b == nil {
		return nil
	}
	<-b.done
	return b.err
}

// Group is the base checkpoint's group (0 for a nil b).
func (b *BaseSync) Group() uint64 {
	if b == nil {
		return 0
	}
	return b.group
}

// SyncUnsyncedBase makes the unsynced base in dir durable now (StartBaseSync
// and Wait), for offline tools that change nothing else (wsfs fsck --repair).
func SyncUnsyncedBase(fsys vfs.FS, dir string) error {
	b, err := StartBaseSync(fsys, dir, nil)
	if err != nil {
		return err
	}
	return b.Wait()
}
