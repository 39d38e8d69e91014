package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"wsfs/internal/daemon"
	"wsfs/internal/manifest"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
)

func init() {
	register(command{
		name:    "diff",
		summary: "compare a snapshot with another one or with the workspace",
		run:     runDiff,
	})
}

// changeJSON is one change in `diff --json`.
type changeJSON struct {
	Op       string `json:"op"` // added, removed, modified, renamed
	Path     string `json:"path"`
	OldPath  string `json:"old_path,omitempty"`
	Type     string `json:"type"` // d f l p s c b
	Size     uint64 `json:"size"`
	OldSize  uint64 `json:"old_size"`
	Modified bool   `json:"modified,omitempty"` // renamed and changed
}

var changeOps = map[byte]string{manifest.Added: "added", manifest.Removed: "removed", manifest.Modified: "modified", manifest.Renamed: "renamed"}

func runDiff(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "diff", "NAME@A [NAME@B]", `
Prints what changed from snapshot A to snapshot B, or to the workspace's
durable state when B is omitted (every operation completed before the
command; when a daemon serves NAME, the daemon compares with its live
tree through its control socket).
One line per path, in path order:

  A path            added (a directory's whole subtree is listed)
  D path            removed
  M path            modified: content, size, symlink target, mode,
                    owner or xattrs (times alone are not changes)
  R old -> new      renamed (same inode); "R*" if also modified

Subtrees whose manifests are equal are skipped unread, so the cost is
that of the changes, not of the tree.`)
	g.homeFlag(flags)
	stat := flags.Bool("stat", false, "print counts and bytes changed instead of paths")
	asJSON := flags.Bool("json", false, "print JSON (an array of changes; with --stat, the summary)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 && flags.NArg() != 2 {
		return usageError{fmt.Sprintf("want NAME@A [NAME@B], got %d arguments", flags.NArg())}
	}
	name, a, err := parseSnapshotRef(flags.Arg(0))
	if err != nil {
		return err
	}
	h, p, err := snapshotHost(g, name)
	if err != nil {
		return err
	}
	dir := h.WorkspaceDir(name)
	ia, err := snapshot.Get(vfs.Default, dir, a)
	if err != nil {
		return offlineError("wsfs diff", name, err)
	}
	var changes []manifest.Change
	if flags.NArg() == 2 {
		name2, b, err := parseSnapshotRef(flags.Arg(1))
		if err != nil {
			return err
		}
		if name2 != name {
			return usageError{fmt.Sprintf("both snapshots must be of one workspace (%s and %s); fork to compare across workspaces", name, name2)}
		}
		ib, err := snapshot.Get(vfs.Default, dir, b)
		if err != nil {
			return offlineError("wsfs diff", name, err)
		}
		if changes, err = snapshot.Diff(p, ia, ib); err != nil {
			return classifyOpenError(name, err)
		}
	} else if changes, err = snapshot.DiffLive(offlineOptions(h, p, name, g.stderr), ia); errors.Is(err, vfs.ErrLocked) {
		rep, rerr := daemon.RequestDiff(ctx, dir, a)
		if errors.Is(rerr, daemon.ErrNoControl) {
			return lockedNoControl(dir, name, rerr, err)
		}
		if errors.Is(rerr, daemon.ErrNoReply) {
			return noReply("diff", name, a, rerr)
		}
		if rerr != nil {
			return rerr
		}
		changes = rep.Changes
	} else if err != nil {
		return offlineError("wsfs diff", name, err)
	}
	switch {
	case *stat:
		return printDiffStat(g.stdout, changes, *asJSON)
	case *asJSON:
		out := make([]changeJSON, 0, len(changes))
		for _, c := range changes {
			out = append(out, changeJSON{Op: changeOps[c.Kind], Path: c.Path, OldPath: c.OldPath, Type: string(c.Type),
				Size: c.Size, OldSize: c.OldSize, Modified: c.Modified})
		}
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, c := range changes {
		switch {
		case c.Kind == manifest.Renamed && c.Modified:
			fmt.Fprintf(g.stdout, "R* %s -> %s\n", c.OldPath, c.Path)
		case c.Kind == manifest.Renamed:
			fmt.Fprintf(g.stdout, "R  %s -> %s\n", c.OldPath, c.Path)
		default:
			fmt.Fprintf(g.stdout, "%c  %s\n", c.Kind, c.Path)
		}
	}
	return nil
}

// diffStat is the --stat summary. Bytes count regular files only: added
// and removed files by their size, modified files by their old and new
// size.
type diffStat struct {
	Added        int    `json:"added"`
	Removed      int    `json:"removed"`
	Modified     int    `json:"modified"`
	Renamed      int    `json:"renamed"`
	AddedBytes   uint64 `json:"added_bytes"`
	RemovedBytes uint64 `json:"removed_bytes"`
	OldBytes     uint64 `json:"modified_old_bytes"`
	NewBytes     uint64 `json:"modified_new_bytes"`
}

func printDiffStat(w io.Writer, changes []manifest.Change, asJSON bool) error {
	var s diffStat
	for _, c := range changes {
		reg := c.Type == 'f'
		switch c.Kind {
		case manifest.Added:
			s.Added++
			if reg {
				s.AddedBytes += c.Size
			}
		case manifest.Removed:
			s.Removed++
			if reg {
				s.RemovedBytes += c.OldSize
			}
		case manifest.Modified, manifest.Renamed:
			if c.Kind == manifest.Renamed {
				s.Renamed++
				if !c.Modified {
					continue
				}
			} else {
				s.Modified++
			}
			if reg {
				s.OldBytes += c.OldSize
				s.NewBytes += c.Size
			}
		}
	}
	if asJSON {
		return json.NewEncoder(w).Encode(s)
	}
	_, err := fmt.Fprintf(w, "%d added (%s), %d removed (%s), %d modified (%s -> %s), %d renamed\n",
		s.Added, humanBytes(int64(s.AddedBytes)), s.Removed, humanBytes(int64(s.RemovedBytes)),
		s.Modified, humanBytes(int64(s.OldBytes)), humanBytes(int64(s.NewBytes)), s.Renamed)
	return err
}
