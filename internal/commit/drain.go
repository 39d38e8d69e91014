package commit

import "fmt"

// Drain selects what a group makes durable before its records are appended
// to the log.
type Drain int

const (
	// DrainEntry, the default, syncs only what the group needs: every pool
	// object its records reference (new or deduplicated: a deduplicated object
	// may have been published by another process and not be durable yet) and
	// their publication directories, then the log. Its cost is proportional
	// to the group, not to the dirty pages of the filesystem.
	DrainEntry Drain = iota
	// DrainSyncFS is the legacy drain, kept opt-in so that the stress harness
	// can reproduce the pathology it causes: one syncfs(2) of the pool
	// filesystem and one of the state filesystem per group, then the log.
	// syncfs flushes every dirty page of the whole filesystem, so daemons
	// sharing a filesystem pay for each other's (and any neighbour's) writes.
	DrainSyncFS
)

// ParseDrain parses the names String returns: "entry" or "syncfs".
func ParseDrain(s string) (Drain, error) {
	switch s {
	case "entry":
		return DrainEntry, nil
	case "syncfs":
		return DrainSyncFS, nil
	}
	return 0, fmt.Errorf("commit: unknown drain mode %q: want \"entry\" (sync the group's own objects, the default) or \"syncfs\" (legacy: syncfs of the pool and state filesystems)", s)
}

// Valid returns nil for a drain mode New accepts, else an error naming it.
func (d Drain) Valid() error {
	if d != DrainEntry && d != DrainSyncFS {
		return fmt.Errorf("commit: unknown drain mode %d (use commit.ParseDrain)", int(d))
	}
	return nil
}

// String returns "entry" or "syncfs" (or "Drain(n)" for an invalid value).
func (d Drain) String() string {
	switch d {
	case DrainEntry:
		return "entry"
	case DrainSyncFS:
		return "syncfs"
	}
	return fmt.Sprintf("Drain(%d)", int(d))
}
