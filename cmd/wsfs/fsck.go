package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/remote"
	"wsfs/internal/ship"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

func init() {
	register(command{
		name:    "fsck",
		summary: "check workspaces' logs, checkpoints and pool references; --repair what can be repaired",
		run:     runFsck,
	})
}

func runFsck(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "fsck", "[NAME...]", `
Checks each workspace NAME (default: every workspace of the host): the
frames and groups of its segment log, its checkpoints, the tree they
recover to, that every file's content resolves to a pool object (with
--verify-data: that each object's bytes hash to its name), and leftover
temps. Each problem is printed with the workspace, the segment and offset
or the object, the files it affects, and what to do.

The check writes nothing and runs beside a serving daemon without its lock
(a daemon that checkpoints meanwhile makes it look again).

--repair does only what cannot lose more data, and prints what it did:
it cuts the log at damage (saving a copy of every segment it truncates or
removes under STATE/workspaces/NAME/fsck/TIME/ first), removes a damaged
checkpoint that recovery does not need (copy saved too) and stale temps.
Files whose pool object is missing or corrupt are listed: the mount works,
reading them gives EIO, and their content can only come back from a
backup or by writing it again. --repair needs the workspace unserved
(stop its daemon; exit 3 otherwise) and checks again afterwards.

Exit codes: 0 no damage (or all of it repaired), 1 the check itself
failed, 3 --repair of a served workspace, 4 damage found (and not
repaired).`)
	g.homeFlag(flags)
	verify := flags.Bool("verify-data", false, "read every referenced pool object and check its hash (reads the whole pool share of each workspace)")
	repair := flags.Bool("repair", false, "repair what can be repaired without losing more data (needs the workspace unserved)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	names := flags.Args()
	for _, n := range names {
		if err := host.ValidateName(n); err != nil {
			return usageError{err.Error()}
		}
	}
	h, err := openHostChecked(g.home, "")
	if err != nil {
		return err
	}
	if len(names) == 0 {
		if names, err = h.Workspaces(); err != nil {
			return err
		}
	} else {
		for _, n := range names {
			if _, err := openHostChecked(g.home, n); err != nil {
				return err
			}
		}
	}
	p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{})
	if err != nil {
		return fmt.Errorf("open pool %s: %w", h.PoolDir(), err)
	}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	var corrupt, served []string
	var failed []error
	for _, name := range names {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res, err := fsckOne(g.stdout, h, p, name, *verify, *repair, stamp)
		switch {
		case err != nil:
			fmt.Fprintf(g.stdout, "%s: check failed: %v\n", name, err)
			failed = append(failed, fmt.Errorf("%s: %w", name, err))
		case res == fsckServed:
			served = append(served, name)
		case res == fsckCorrupt:
			corrupt = append(corrupt, name)
		}
	}
	switch {
	case len(failed) > 0:
		return errors.Join(failed...)
	case len(served) > 0:
		return preconditionError{fmt.Errorf("not repaired: %s served by a daemon (the check above ran read-only); stop the daemon and run wsfs fsck --repair %s again",
			strings.Join(served, ", "), strings.Join(served, " "))}
	case len(corrupt) > 0:
		return corruptError{fmt.Errorf("damage found in %s (see above)", strings.Join(corrupt, ", "))}
	}
	return nil
}

type fsckResult int

const (
	fsckOK fsckResult = iota
	fsckCorrupt
	fsckServed // damage that --repair could fix, but a daemon serves it
)

// fsckOne checks (and with repair, repairs) one workspace, printing the
// report to w.
func fsckOne(w io.Writer, h *host.Host, p *pool.Pool, name string, verify, repair bool, stamp string) (fsckResult, error) {
	opts := workspace.CheckOptions{Dir: h.WorkspaceDir(name), Pool: p, VerifyData: verify}
	notFetched, remoteName, err := fsckNotFetched(h, name)
	if err != nil {
		return 0, err
	}
	opts.NotFetched = notFetched
	// What the remote holds: a repair must not cut the log below it.
	if st, err := ship.ReadStatus(opts.Dir); err == nil {
		opts.Shipped, opts.Remote = st.Shipped, st.Remote
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("read the shipper's status of %s (what the remote holds): %w", name, err)
	}
	// Whether a daemon serves it, for the report only: from the mount
	// table, not by trying the lock (that would make a daemon starting at
	// this instant fail). Repair takes the lock and finds out for sure.
	mps, _ := fusefs.Mounts(h.MountName(name))
	locked := len(mps) > 0
	rep, err := workspace.Check(opts)
	if err != nil {
		return 0, err
	}
	printReport(w, name, rep, locked)
	if rep.NotFetched > 0 {
		fmt.Fprintf(w, "%s: note: %d objects not yet fetched from %s (pulled lazily: they are fetched on first read and by the daemon's prefetch; not damage)\n",
			name, rep.NotFetched, remoteName)
	}
	snaps, err := snapshot.Check(vfs.Default, opts.Dir, p, verify, opts.NotFetched)
	if err != nil {
		return 0, fmt.Errorf("snapshots: %w", err)
	}
	printSnapshotReport(w, name, snaps)
	if len(snaps.Damage) > 0 {
		if repair {
			fmt.Fprintf(w, "%s: --repair does not touch snapshots; see the advice above\n", name)
		}
		if res, err := fsckWorkspace(w, h, opts, rep, repair, stamp); err != nil || res == fsckServed {
			return res, err
		}
		return fsckCorrupt, nil
	}
	return fsckWorkspace(w, h, opts, rep, repair, stamp)
}

// printSnapshotReport prints what snapshot.Check found, as printReport.
func printSnapshotReport(w io.Writer, name string, rep *snapshot.CheckReport) {
	if rep.Snapshots == 0 {
		return
	}
	state := "ok"
	if len(rep.Damage) > 0 {
		state = "DAMAGED"
	}
	verified := ""
	if rep.Verified > 0 {
		verified = fmt.Sprintf(", %d verified", rep.Verified)
	}
	if rep.NotFetched > 0 {
		verified += fmt.Sprintf(", %d not yet fetched (pulled lazily; not damage)", rep.NotFetched)
	}
	fmt.Fprintf(w, "%s: snapshots %s: %d snapshots, %d objects%s\n", name, state, rep.Snapshots, rep.Objects, verified)
	for _, d := range rep.Damage {
		fmt.Fprintf(w, "%s: DAMAGE snapshot: %s\n  %s\n  to do: %s\n", name, d.Where, d.What, d.Do)
	}
}

// fsckWorkspace finishes fsckOne for the workspace's own log and
// checkpoints (rep), repairing them if asked.
func fsckWorkspace(w io.Writer, h *host.Host, opts workspace.CheckOptions, rep *workspace.Report, repair bool, stamp string) (fsckResult, error) {
	name := filepath.Base(opts.Dir)
	if !repair {
		if rep.Corrupt() {
			return fsckCorrupt, nil
		}
		return fsckOK, nil
	}
	if !needsRepair(rep) {
		if rep.Corrupt() {
			fmt.Fprintf(w, "%s: nothing --repair can do; see the advice above\n", name)
			return fsckCorrupt, nil
		}
		return fsckOK, nil
	}
	saveDir := filepath.Join(h.WorkspaceDir(name), "fsck", stamp)
	did, err := workspace.Repair(opts, rep, saveDir)
	for _, d := range did {
		fmt.Fprintf(w, "%s: repair: %s\n", name, d)
	}
	if errors.Is(err, vfs.ErrLocked) {
		fmt.Fprintf(w, "%s: served by a daemon (it holds the workspace lock): not repaired; the check above ran read-only\n", name)
		return fsckServed, nil
	}
	if err != nil {
		return 0, err
	}
	if len(did) > 0 {
		fmt.Fprintf(w, "%s: saved copies are in %s\n", name, saveDir)
	}
	after, err := workspace.Check(opts)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(w, "%s: after repair:\n", name)
	printReport(w, name, after, false)
	if after.Corrupt() {
		return fsckCorrupt, nil
	}
	return fsckOK, nil
}

func needsRepair(rep *workspace.Report) bool {
	for _, p := range rep.Problems {
		if p.Repairable {
			return true
		}
	}
	return false
}

func printReport(w io.Writer, name string, rep *workspace.Report, served bool) {
	mode := ""
	if served {
		mode = " (served by a daemon: checked read-only, without its lock)"
	}
	state := "ok"
	if rep.Corrupt() {
		state = "DAMAGED"
	}
	verified := ""
	if rep.VerifiedObjects > 0 {
		verified = fmt.Sprintf(", %d verified", rep.VerifiedObjects)
	}
	fmt.Fprintf(w, "%s: %s: checkpoint group %d, log groups %d..%d, %d inodes, %d files, %d objects%s%s\n",
		name, state, rep.CheckpointGroup, rep.FirstGroup, rep.LastGroup, rep.Inodes, rep.Files, rep.Objects, verified, mode)
	for _, p := range rep.Problems {
		level := "note"
		if p.Kind.Corrupt() {
			level = "DAMAGE"
		}
		fmt.Fprintf(w, "%s: %s %s: %s\n  %s\n", name, level, p.Kind, p.Where, p.What)
		if len(p.Paths) > 0 {
			const show = 20
			list := p.Paths
			more := ""
			if len(list) > show {
				list, more = list[:show], fmt.Sprintf(" and %d more", len(p.Paths)-show)
			}
			fmt.Fprintf(w, "  affected files: %s%s\n", strings.Join(list, " "), more)
		}
		do := strings.ReplaceAll(p.Do, "wsfs fsck --repair", "wsfs fsck --repair "+name)
		do = strings.NewReplacer("wsfs rm NAME", "wsfs rm "+name, "wsfs pull NAME", "wsfs pull "+name).Replace(do)
		fmt.Fprintf(w, "  to do: %s\n", do)
	}
}

// fsckNotFetched returns, for a workspace pulled lazily (ship.FetchState),
// the CheckOptions.NotFetched of its objects: listed in the pull and
// present in the remote (a HEAD each, bounded in time; an object the
// remote does not have either is missing). nil for other workspaces.
func fsckNotFetched(h *host.Host, name string) (func(objid.ID) bool, string, error) {
	st, ok, err := ship.ReadFetchState(vfs.Default, h.WorkspaceDir(name))
	if err != nil || !ok {
		return nil, "", err
	}
	ids, err := st.IDs()
	if err != nil {
		return nil, "", err
	}
	rc, err := remote.ParseURL(st.Remote)
	if err != nil {
		return nil, "", err
	}
	if hc, err := remote.ReadConfig(h); err == nil {
		rc.CredentialsFile, rc.Profile = hc.CredentialsFile, hc.Profile
	}
	store, err := remote.OpenS3(context.Background(), rc)
	if err != nil {
		return nil, "", err
	}
	pulled := make(map[objid.ID]bool, len(ids))
	for _, id := range ids {
		pulled[id] = true
	}
	return func(id objid.ID) bool {
		if !pulled[id] {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ok, err := store.Exists(ctx, remote.ObjectKey(id.String()))
		// An unreachable remote cannot say: the object is reported
		// missing, with the fetch error's advice in the log of the
		// daemon's reads.
		return err == nil && ok
	}, rc.String(), nil
}
