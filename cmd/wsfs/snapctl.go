package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// The snapshot control socket lets `wsfs snapshot create` reach the daemon
// that serves a workspace: STATE/workspaces/NAME/control.sock, or an
// abstract socket named by a hash of that path when it is too long for a
// unix socket address. The protocol is one JSON request line and one JSON
// reply line per connection:
//
//	-> {"op":"snapshot","label":"..."}
//	<- {"id":3,"group":120,"root":"<hex>","dirs":..,"entries":..,"bytes":..} | {"error":"..."}
//
// The socket file is created by the daemon's user with its umask (only
// that user, or root, can connect); an abstract socket has no permissions,
// and the only thing it offers is taking a snapshot.

const controlSocketName = "control.sock"

// controlSocketPath is the control socket of the workspace in wsDir.
func controlSocketPath(wsDir string) string {
	p := filepath.Join(wsDir, controlSocketName)
	if len(p) <= 107 {
		return p
	}
	sum := sha256.Sum256([]byte(p))
	return "@wsfs-control-" + hex.EncodeToString(sum[:16])
}

type controlRequest struct {
	Op    string `json:"op"`
	Label string `json:"label"`
}

type controlReply struct {
	Error   string `json:"error,omitempty"`
	ID      uint64 `json:"id,omitempty"`
	Group   uint64 `json:"group,omitempty"`
	Root    string `json:"root,omitempty"`
	Dirs    int    `json:"dirs,omitempty"`
	Entries int    `json:"entries,omitempty"`
	Bytes   int    `json:"bytes,omitempty"`
}

// startSnapshotControl serves the control socket of the workspace in
// wsDir for ws until the returned stop is called (stop waits for a
// snapshot in progress). The caller holds the workspace lock, so a socket
// file left behind is a dead daemon's and is replaced.
func startSnapshotControl(ws *workspace.Workspace, wsDir string, p *pool.Pool, lg *slog.Logger) (stop func(), err error) {
	path := controlSocketPath(wsDir)
	if !strings.HasPrefix(path, "@") {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("control socket: remove stale %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if !strings.HasPrefix(path, "@") {
		// Private like everything under STATE (the umask left it 0755).
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, fmt.Errorf("control socket %s: %w", path, err)
		}
	}
	var mu sync.Mutex // one snapshot at a time
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
				var req controlRequest
				line, err := bufio.NewReader(c).ReadBytes('\n')
				var rep controlReply
				switch {
				case err != nil:
					rep.Error = "read request: " + err.Error()
				case json.Unmarshal(line, &req) != nil:
					rep.Error = "malformed request"
				case req.Op != "snapshot":
					rep.Error = fmt.Sprintf("unknown op %q", req.Op)
				case snapshot.ValidateLabel(req.Label) != nil:
					rep.Error = snapshot.ValidateLabel(req.Label).Error()
				default:
					mu.Lock()
					start := time.Now()
					in, st, err := snapshot.CreateServing(ws, vfs.Default, wsDir, p, req.Label, start)
					mu.Unlock()
					if err != nil {
						rep.Error = err.Error()
						lg.Error("snapshot failed", "err", err)
					} else {
						rep = controlReply{ID: in.ID, Group: in.Group, Root: in.Root.String(), Dirs: st.Dirs, Entries: st.Entries, Bytes: st.Bytes}
						lg.Info("snapshot", "id", in.ID, "group", in.Group, "dirs", st.Dirs, "took", time.Since(start).Round(time.Millisecond))
					}
				}
				b, _ := json.Marshal(rep)
				c.Write(append(b, '\n'))
			}()
		}
	}()
	return func() {
		ln.Close()
		wg.Wait()
		if !strings.HasPrefix(path, "@") {
			os.Remove(path)
		}
	}, nil
}

// errNoControl: no daemon answers on the control socket.
var errNoControl = errors.New("no daemon answers on the workspace's control socket")

// requestSnapshot asks the daemon serving the workspace in wsDir for a
// snapshot. It returns an error wrapping errNoControl if none answers.
func requestSnapshot(ctx context.Context, wsDir, label string) (controlReply, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", controlSocketPath(wsDir))
	if err != nil {
		return controlReply{}, fmt.Errorf("%w: %v", errNoControl, err)
	}
	defer c.Close()
	b, _ := json.Marshal(controlRequest{Op: "snapshot", Label: label})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return controlReply{}, fmt.Errorf("control socket: %w", err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return controlReply{}, fmt.Errorf("control socket: no reply: %w", err)
	}
	var rep controlReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return controlReply{}, fmt.Errorf("control socket: malformed reply: %w", err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("the daemon's snapshot failed: %s", rep.Error)
	}
	return rep, nil
}
