package vfs

import (
	"errors"
	"io"
)

// LockAll takes fs.Lock on each name in order and returns one Closer that
// releases them all. If one fails, those already taken are released and
// its error is returned.
//
// A workspace is locked with LockAll(fs, DIR, DIR/lock): the directory is
// the lock that counts, since it cannot be removed while it holds the log,
// whereas a lock file can be deleted under a live daemon and a second
// daemon would then lock a fresh file and serve the same log. The file is
// still locked so that an older binary, which knows only the file, sees
// the workspace as served.
func LockAll(fs FS, names ...string) (io.Closer, error) {
	var held multiCloser
	for _, n := range names {
		l, err := fs.Lock(n)
		if err != nil {
			held.Close()
			return nil, err
		}
		held = append(held, l)
	}
	return held, nil
}

type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var errs []error
	for i := len(m) - 1; i >= 0; i-- {
		errs = append(errs, m[i].Close())
	}
	return errors.Join(errs...)
}
