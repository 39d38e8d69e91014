package pool

import (
	"errors"
	"fmt"
	"io/fs"
)

// Check reports whether object id is in the pool: nil, or an error
// wrapping *MissingObjectError if it is not (one stat; unlike Protect it
// neither changes the object's mtime nor verifies its bytes).
func (p *Pool) Check(id ID) error {
	path := p.Path(id)
	if _, err := p.fs.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &MissingObjectError{ID: id, Path: path, Err: err}
		}
		return fmt.Errorf("pool: check object %s: %w", id, err)
	}
	return nil
}

// Has reports whether object id exists locally: Check as a boolean
// (nothing fetched or verified).
func (p *Pool) Has(id ID) (bool, error) {
	err := p.Check(id)
	if _, missing := errors.AsType[*MissingObjectError](err); missing {
		return false, nil
	}
	return err == nil, err
}
