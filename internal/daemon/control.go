package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"wsfs/internal/manifest"
	"wsfs/internal/peercred"
	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/unixsock"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// The snapshot control socket lets `wsfs snapshot create` reach the daemon
// that serves a workspace: STATE/workspaces/NAME/control.sock, reached
// through its directory's handle when the path is too long for a unix
// socket address (unixsock; never an abstract socket, which any local
// user could connect to or bind first). The protocol is one JSON request line and one JSON
// reply line per connection:
//
//	-> {"op":"snapshot","label":"..."}
//	<- {"id":3,"group":120,"root":"<hex>","dirs":..,"entries":..,"bytes":..} | {"error":"..."}
//
// The socket file lives in the private workspace directory; the daemon
// also checks every client's credentials (SO_PEERCRED): only root and the
// daemon's own user may ask; and clients believe only a daemon of root or
// their own user (peercred).

const controlSocketName = "control.sock"

// ControlSocketPath is the control socket of the workspace in wsDir: a
// file in the private workspace directory, however long its path
// (unixsock).
func ControlSocketPath(wsDir string) string {
	return filepath.Join(wsDir, controlSocketName)
}

type controlRequest struct {
	Op    string `json:"op"` // snapshot, restore, diff
	Label string `json:"label,omitempty"`
	ID    uint64 `json:"id,omitempty"` // restore, diff: the snapshot
}

// ControlReply is the daemon's answer: for a snapshot, the snapshot taken
// (ID, the committed group it holds, its manifest root and what the build
// wrote); for a restore, the snapshot restored (ID), the undo snapshot
// taken first (Before) and the checkpoint group; for a diff, the changes
// from the snapshot to the live tree. Error if it failed; Warning if it
// succeeded with a problem the caller should hear about.
type ControlReply struct {
	Error   string            `json:"error,omitempty"`
	Warning string            `json:"warning,omitempty"`
	ID      uint64            `json:"id,omitempty"`
	Before  uint64            `json:"before,omitempty"`
	Group   uint64            `json:"group,omitempty"`
	Root    string            `json:"root,omitempty"`
	Dirs    int               `json:"dirs,omitempty"`
	Entries int               `json:"entries,omitempty"`
	Bytes   int               `json:"bytes,omitempty"`
	Changes []manifest.Change `json:"changes,omitempty"`
	// AgentBytes is the size of the agent state copy a snapshot records
	// (0: none).
	AgentBytes uint64 `json:"agent_bytes,omitempty"`
}

// ControlHooks connect the control socket to the rest of the daemon.
type ControlHooks struct {
	// Invalidate drops the kernel's caches of a tree an online restore
	// replaced (the mount's fusefs.Server.InvalidateRestored); nil when
	// nothing is mounted.
	Invalidate func(workspace.Restored) error
	// RestoreAgent, if set, is called at the moment of an online restore,
	// after snapshot.RestoreServing took the undo snapshot and set the
	// agent state database to the snapshot's copy, while file operations
	// are held up; its error aborts the restore.
	RestoreAgent func(before, target snapshot.Info) error
}

// StartControl serves the control socket of the workspace in
// wsDir for ws until the returned stop is called (stop waits for a
// snapshot in progress). The caller holds the workspace lock, so a socket
// file left behind is a dead daemon's and is replaced.
func StartControl(ws *workspace.Workspace, wsDir string, p *pool.Pool, lg *slog.Logger, hooks ControlHooks) (stop func(), err error) {
	path := ControlSocketPath(wsDir)
	if err := vfs.Default.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket: remove stale %s: %w", path, err)
	}
	ln, err := unixsock.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Private like everything under STATE (the umask left it 0755).
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		vfs.Default.Remove(path)
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	var mu sync.Mutex // one snapshot, restore or diff at a time
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				// A client that connects and says nothing must not hold
				// the daemon's stop (which waits for open requests).
				c.SetReadDeadline(time.Now().Add(controlReadTimeout))
				var req controlRequest
				perr := peerAllowed(c)
				line, err := bufio.NewReader(c).ReadBytes('\n')
				var rep ControlReply
				switch {
				case perr != nil:
					rep.Error = perr.Error()
				case err != nil:
					rep.Error = "read request: " + err.Error()
				case json.Unmarshal(line, &req) != nil:
					rep.Error = "malformed request"
				default:
					mu.Lock()
					rep = serveControl(ws, wsDir, p, lg, hooks, req)
					mu.Unlock()
				}
				b, _ := json.Marshal(rep)
				c.Write(append(b, '\n'))
			}()
		}
	}()
	return func() {
		ln.Close()
		wg.Wait()
		vfs.Default.Remove(path)
	}, nil
}

// serveControl runs one request.
func serveControl(ws *workspace.Workspace, wsDir string, p *pool.Pool, lg *slog.Logger, hooks ControlHooks, req controlRequest) (rep ControlReply) {
	start := time.Now()
	switch req.Op {
	case "snapshot":
		if err := snapshot.ValidateNewLabel(req.Label); err != nil {
			return ControlReply{Error: err.Error()}
		}
		in, st, err := snapshot.CreateServing(ws, vfs.Default, wsDir, p, req.Label, start)
		if err != nil {
			lg.Error("snapshot failed", "err", err)
			return ControlReply{Error: err.Error()}
		}
		lg.Info("snapshot", "id", in.ID, "group", in.Group, "dirs", st.Dirs, "took", time.Since(start).Round(time.Millisecond))
		rep := ControlReply{ID: in.ID, Group: in.Group, Root: in.Root.String(), Dirs: st.Dirs, Entries: st.Entries, Bytes: st.Bytes}
		if in.Agent != nil {
			rep.AgentBytes = in.Agent.Size
		}
		return rep
	case "restore":
		before, target, r, err := snapshot.RestoreServing(ws, vfs.Default, wsDir, p, req.ID, start, hooks.RestoreAgent)
		if err != nil {
			lg.Error("restore failed", "snapshot", req.ID, "err", err)
			return ControlReply{Error: err.Error(), Before: before.ID}
		}
		rep = ControlReply{ID: target.ID, Before: before.ID, Group: r.Group, Root: target.Root.String()}
		if hooks.Invalidate != nil {
			if err := hooks.Invalidate(r); err != nil {
				// The tree is restored durably; only the kernel may still
				// show cached attributes until its timeouts expire.
				lg.Error("restore: invalidating the kernel's caches failed", "err", err)
				rep.Warning = err.Error() + " (the restore is done and durable; cached attributes may show the old tree until the mount's cache timeouts expire)"
			}
		}
		lg.Info("restored", "snapshot", target.ID, "undo", before.ID, "group", r.Group, "kernel_inodes", len(r.Known), "took", time.Since(start).Round(time.Millisecond))
		return rep
	case "diff":
		a, err := snapshot.Get(vfs.Default, wsDir, req.ID)
		if err != nil {
			return ControlReply{Error: err.Error()}
		}
		changes, err := snapshot.DiffServing(ws, p, a)
		if err != nil {
			lg.Error("diff failed", "snapshot", req.ID, "err", err)
			return ControlReply{Error: err.Error()}
		}
		return ControlReply{ID: a.ID, Changes: changes}
	}
	return ControlReply{Error: fmt.Sprintf("unknown op %q", req.Op)}
}

// controlReadTimeout bounds how long the daemon waits for a request line
// (a variable for tests).
var controlReadTimeout = 10 * time.Second

// peerAllowed refuses a client that is neither root nor the daemon's own
// user (SO_PEERCRED): an abstract socket has no file permissions.
func peerAllowed(c net.Conn) error {
	cred, err := peercred.Get(c)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if !peercred.Trusted(cred) {
		return fmt.Errorf("permission denied: uid %d may not take snapshots of this workspace (only root or uid %d)", cred.Uid, os.Geteuid())
	}
	return nil
}

// ErrNoControl: no daemon answers on the control socket.
var ErrNoControl = errors.New("no daemon answers on the workspace's control socket")

// ErrNoReply: the daemon took the request but closed the connection
// without a reply: it exited (or was killed) while working on it, so the
// work may or may not have been done.
var ErrNoReply = errors.New("the daemon closed the control connection without a reply")

// RequestSnapshot asks the daemon serving the workspace in wsDir for a
// snapshot. It returns an error wrapping ErrNoControl if none answers.
func RequestSnapshot(ctx context.Context, wsDir, label string) (ControlReply, error) {
	return request(ctx, wsDir, controlRequest{Op: "snapshot", Label: label})
}

// RequestRestore asks the daemon serving the workspace in wsDir to restore
// snapshot id (online restore; see snapshot.RestoreServing). It returns an
// error wrapping ErrNoControl if none answers.
func RequestRestore(ctx context.Context, wsDir string, id uint64) (ControlReply, error) {
	return request(ctx, wsDir, controlRequest{Op: "restore", ID: id})
}

// RequestDiff asks the daemon serving the workspace in wsDir for the
// changes from snapshot id to the live tree. It returns an error wrapping
// ErrNoControl if none answers.
func RequestDiff(ctx context.Context, wsDir string, id uint64) (ControlReply, error) {
	return request(ctx, wsDir, controlRequest{Op: "diff", ID: id})
}

func request(ctx context.Context, wsDir string, req controlRequest) (ControlReply, error) {
	addr := ControlSocketPath(wsDir)
	c, err := unixsock.Dial(ctx, addr)
	if err != nil {
		return ControlReply{}, fmt.Errorf("%w: %v", ErrNoControl, err)
	}
	defer c.Close()
	if err := peercred.CheckServer(c, addr); err != nil {
		return ControlReply{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return ControlReply{}, fmt.Errorf("control socket: %w", err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return ControlReply{}, fmt.Errorf("control socket: %w: %w", ErrNoReply, err)
	}
	var rep ControlReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return ControlReply{}, fmt.Errorf("control socket: malformed reply: %w", err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("the daemon's %s failed: %s", req.Op, rep.Error)
	}
	return rep, nil
}
