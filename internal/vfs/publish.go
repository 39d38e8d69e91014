package vfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// TempPrefix starts the base name of every temporary file Publish creates.
// Recovery and GC code may delete leftover names with this prefix: a temp is
// never referenced by anything until it has been renamed away.
const TempPrefix = ".tmp-"

// Publish writes the file final atomically: it creates a unique temp
// <dir of final>/.tmp-<random> with CreateExcl (mode 0600: what wsfs
// publishes is private to its user), calls write(f), and then
//
//   - if sync: SyncData the temp (its data and size become durable),
//   - closes it,
//   - renames it to final (replacing any existing final),
//   - if sync: syncs the directory, so the new entry is durable.
//
// With sync=false durability is left to the caller (pool objects: the
// drain syncs them later). Readers never observe a partially written final.
//
// On any error the temp is removed and the error names the path and step.
// When the failing step is the directory sync, final is already in place
// (visible) but not known to be durable; the caller must treat the
// publication as failed and must not retry the sync as proof.
func Publish(fsys FS, final string, sync bool, write func(f File) error) error {
	dir := filepath.Dir(final)
	var tmp string
	var f File
	for range 10 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("publish %s: random temp name: %w", final, err)
		}
		tmp = filepath.Join(dir, TempPrefix+hex.EncodeToString(b[:]))
		var err error
		f, err = fsys.CreateExcl(tmp, PrivateFile)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("publish %s: create temp: %w", final, err)
		}
		f = nil
	}
	if f == nil {
		return fmt.Errorf("publish %s: could not create a unique temp in %s after 10 tries", final, dir)
	}
	fail := func(step string, err error) error {
		if f != nil {
			_ = f.Close()
		}
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("publish %s: %s: %w (and removing temp %s failed: %v)", final, step, err, tmp, rerr)
		}
		return fmt.Errorf("publish %s: %s: %w", final, step, err)
	}
	if err := write(f); err != nil {
		return fail("write", err)
	}
	if sync {
		if err := f.SyncData(); err != nil {
			return fail("syncdata temp", err)
		}
	}
	err := f.Close()
	f = nil
	if err != nil {
		return fail("close temp", err)
	}
	if err := fsys.Rename(tmp, final); err != nil {
		return fail("rename temp into place", err)
	}
	if sync {
		if err := SyncDir(fsys, dir); err != nil {
			return fmt.Errorf("publish %s: %w", final, err)
		}
	}
	return nil
}

// SyncDir opens dir and syncs it, making its entries (creates, renames,
// removes, links in it) durable.
func SyncDir(fsys FS, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return fmt.Errorf("sync dir %s: %w", dir, serr)
	}
	if cerr != nil {
		return fmt.Errorf("sync dir %s: close: %w", dir, cerr)
	}
	return nil
}

// MkdirAllDurable creates dir and any missing parents with perm, and syncs
// the parent of every directory it created (deepest first), so that the
// whole new chain survives a crash: MkdirAll alone syncs nothing, and a
// directory whose entry is lost loses every synced file in it. An existing
// dir is left as it is.
func MkdirAllDurable(fsys FS, dir string, perm os.FileMode) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("create directory %s: %w", dir, err)
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	for _, d := range missing {
		if err := SyncDir(fsys, filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// ReadFile reads the whole file at path (shorter than its size at open if
// it shrank meanwhile). Anything but a regular file at path is a
// NotRegularError.
func ReadFile(fsys FS, path string) ([]byte, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	buf := make([]byte, st.Size())
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}
