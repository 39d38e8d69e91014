package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "gc",
		summary: "remove pool objects no workspace references (daemons may keep serving)",
		run:     runGC,
	})
}

// runGC is `wsfs gc`: mark, then sweep, while daemons keep serving.
//
// It first makes sure it knows every workspace that uses the pool, or
// refuses (exit 3) before reading anything else: the host's markers must
// agree (internal/host, identity.go: STATE/wsfs-id, POOL/wsfs-id, the
// pool's record of every host that uses it), every host registered in the
// pool must have its marker in its state directory, and every workspace
// registered in the pool must have its directory (a missing directory is
// an unmounted or wrong state filesystem, not an empty host). A dedicated
// layout whose filesystem is not mounted is refused as well.
//
// Mark: for every workspace of every host of the pool, the objects its
// durable state references (newest checkpoint plus the committed groups
// after it; markDurable), read without the daemon's lock, and those of
// its snapshots (markAll says in which order, and why).
//
// Sweep (pool.Collect): objects not marked whose mtime is older than
// markStart-grace, where markStart is taken before the first state is
// read. Why no daemon loses an object it references or is about to:
//
//   - A reference that is durable when marking starts is marked: the
//     checkpoint and log reads see every group committed before they
//     began, and start over when a checkpoint deleted the segments after
//     the one read.
//   - A reference not yet durable is in a group not yet committed. Its
//     object was put (fresh mtime) or deduplicated against (Put protects
//     it: mtime set to now, then the name checked) when the reference was
//     made, at most a commit window before the group commits; a group that
//     waits for log space is drained again every second and the drain
//     protects objects older than a quarter of the minimum grace. So the
//     object's mtime is newer than markStart-grace, and it is kept.
//   - A dedup hit racing with the removal: the sweep moves the candidate
//     aside, then reads its mtime again, and puts it back if it changed;
//     Protect checks the name after setting the time and reports the
//     object missing otherwise, and Put then publishes its own copy. A
//     group never commits a missing object: the drain opens each one.
//
// The grace is at least pool.MinGrace (1 h); tests lower it with the
// hidden --test-grace, refused unless pool.TestMinGraceEnv is set.
func runGC(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "gc", "", `
Removes content objects that no workspace of the host references and whose
last use is older than --grace, stale temps in the pool's tmp/, and what an
interrupted 'wsfs rm' or 'wsfs fork' left in the state directory
(.tmp-rm-NAME, .tmp-fork-*); prints the bytes reclaimed. Daemons may keep serving: each workspace's durable
state (checkpoint and log) is read without its lock.

It refuses (exit 3) unless it positively knows every workspace that uses
the pool: the state and pool directories carry matching identity markers
(written when the first workspace is created; a host made by an older wsfs
gets them from one 'wsfs init'), and every workspace registered in the pool
has its state directory. Another gc running at the same time is refused
too.`)
	g.homeFlag(flags)
	grace := flags.Duration("grace", 24*time.Hour, fmt.Sprintf("keep unreferenced objects used more recently than this (at least %v)", pool.MinGrace))
	// Hidden: defined only when the test override is set, so that
	// production never sees (or accepts) it.
	var testGrace *time.Duration
	if os.Getenv(pool.TestMinGraceEnv) != "" {
		testGrace = flags.Duration("test-grace", 0, "tests only: a grace below the minimum, down to "+pool.TestMinGraceEnv)
	}
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usageError{fmt.Sprintf("gc takes no arguments, got %q", flags.Args())}
	}
	if testGrace != nil && *testGrace != 0 {
		*grace = *testGrace
	}
	if min := pool.EffectiveMinGrace(); *grace < min {
		return usageError{fmt.Sprintf("--grace %v is shorter than the minimum %v", *grace, min)}
	}
	h, err := openHostChecked(g.home, "")
	if err != nil {
		return err
	}
	if err := checkLayoutMounted(h); err != nil {
		return err
	}
	id, err := h.CheckIdentity()
	if err != nil {
		return identityError(err)
	}
	lg := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{Logger: lg})
	if err != nil {
		return fmt.Errorf("open pool %s: %w", h.PoolDir(), err)
	}
	hosts, err := host.PoolHosts(h.PoolDir())
	if err != nil {
		return err
	}

	// Which workspaces: every host of the pool, each checked.
	listAll := func() ([]gcWorkspace, error) {
		var all []gcWorkspace
		for _, ph := range hosts {
			other, ok, err := host.ReadIdentity(ph.StateDir)
			if err != nil {
				return nil, identityError(err)
			}
			if !ok || other.HostID != ph.ID || other.PoolID != id.PoolID {
				return nil, preconditionError{fmt.Errorf("pool %s is used by host %s with state directory %s, whose %s marker is %s: "+
					"gc cannot know that host's workspaces. Is its filesystem mounted? (`wsfs layout status` on that host)",
					h.PoolDir(), ph.ID, ph.StateDir, host.IDFile, describeMarker(other, ok, ph.ID, id.PoolID))}
			}
			present, unregistered, err := host.CheckRegistry(ph, h.PoolDir(), true)
			if err != nil {
				return nil, identityError(err)
			}
			for _, n := range unregistered {
				lg.Warn("gc: workspace directory was not in the pool's registry; registered it and marking it", "host", ph.ID, "workspace", n)
			}
			for _, n := range present {
				all = append(all, gcWorkspace{name: n, dir: filepath.Join(ph.StateDir, "workspaces", n)})
			}
		}
		return all, nil
	}
	all, err := listAll()
	if err != nil {
		return err
	}

	markStart := time.Now()
	referenced := make(map[objid.ID]struct{})
	n, err := markAll(vfs.Default, p, all, listAll, func(id objid.ID) { referenced[id] = struct{}{} })
	if err != nil {
		return err
	}
	st, err := p.Collect(func(id objid.ID) bool { _, ok := referenced[id]; return ok },
		pool.GCOptions{Grace: *grace, MarkStart: markStart})
	if errors.Is(err, pool.ErrGCRunning) {
		return preconditionError{err}
	}
	if err != nil {
		return err
	}
	// What a killed `wsfs rm` or `wsfs fork` left in this host's state.
	left, leftBytes, err := h.RemoveInterrupted(time.Minute)
	for _, p := range left {
		fmt.Fprintf(g.stdout, "wsfs gc: removed %s, left by an interrupted wsfs rm or fork\n", p)
	}
	if err != nil {
		return err
	}
	st.TempBytes += leftBytes
	fmt.Fprintf(g.stdout, "wsfs gc: %d workspaces (%d hosts) reference %d objects; scanned %d, removed %d and %d stale temps: reclaimed %s (%d bytes)",
		n, len(hosts), len(referenced), st.Scanned, st.Removed, st.TempsRemoved, humanBytes(st.Bytes+st.TempBytes), st.Bytes+st.TempBytes)
	if st.Kept > 0 || st.Restored > 0 {
		fmt.Fprintf(g.stdout, "; %d protected during the pass and kept, %d put back from an interrupted pass", st.Kept, st.Restored)
	}
	fmt.Fprintln(g.stdout)
	return nil
}

func describeMarker(m host.Identity, ok bool, wantHost, wantPool string) string {
	switch {
	case !ok:
		return "missing"
	case m.HostID != wantHost:
		return fmt.Sprintf("for host %s", m.HostID)
	default:
		return fmt.Sprintf("for pool %s, not %s", m.PoolID, wantPool)
	}
}
