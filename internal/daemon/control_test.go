package daemon

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"wsfs/internal/pool"
	"wsfs/internal/snapshot"
	"wsfs/internal/unixsock"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// serving opens a workspace and its control socket in a temp dir.
func serving(t *testing.T) (wsDir string, stop func()) {
	t.Helper()
	return servingIn(t, t.TempDir())
}

// servingIn is serving with the host's directories under root.
func servingIn(t *testing.T, root string) (wsDir string, stop func()) {
	t.Helper()
	p, err := pool.Open(vfs.Default, filepath.Join(root, "pool"), pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wsDir = filepath.Join(root, "state", "workspaces", "ws")
	ws, err := workspace.Open(workspace.Options{Dir: wsDir, Pool: p, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	stop, err = StartControl(ws, wsDir, p, slog.New(slog.DiscardHandler), ControlHooks{})
	if err != nil {
		t.Fatal(err)
	}
	return wsDir, stop
}

// TestControlSocketSilentClient: a client that connects to the control
// socket and sends nothing cannot hold the daemon's stop past the read
// timeout, and the daemon answers it with an error instead of a snapshot.
func TestControlSocketSilentClient(t *testing.T) {
	old := controlReadTimeout
	controlReadTimeout = 200 * time.Millisecond
	t.Cleanup(func() { controlReadTimeout = old })
	wsDir, stop := serving(t)
	c, err := net.Dial("unix", ControlSocketPath(wsDir))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil || !strings.Contains(string(line), "read request") {
		t.Fatalf("reply to a silent client: %q, %v", line, err)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return with a silent client connected")
	}
	if ins, _ := snapshot.List(vfs.Default, wsDir); len(ins) != 0 {
		t.Fatalf("a silent client made snapshots: %v", ins)
	}
}

// TestControlRequests: a snapshot through the socket, and requests the
// daemon refuses with a reason.
func TestControlRequests(t *testing.T) {
	wsDir, stop := serving(t)
	defer stop()
	rep, err := RequestSnapshot(t.Context(), wsDir, "first")
	if err != nil || rep.ID != 1 {
		t.Fatalf("snapshot: %+v, %v", rep, err)
	}
	for _, c := range []struct{ req, want string }{
		{`{"op":"frobnicate"}`, "unknown op"},
		{`{"op":"restore","id":7}`, "no such snapshot 7"},
		{`{"op":"diff","id":7}`, "no such snapshot 7"},
		{`not json`, "malformed request"},
		{`{"op":"snapshot","label":"` + strings.Repeat("x", snapshot.MaxLabel+1) + `"}`, "label of"},
	} {
		conn, err := net.Dial("unix", ControlSocketPath(wsDir))
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(c.req + "\n"))
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(conn).ReadBytes('\n')
		conn.Close()
		if err != nil || !strings.Contains(string(line), c.want) {
			t.Errorf("%s: reply %q, %v; want %q", c.req, line, err, c.want)
		}
	}
	if ins, _ := snapshot.List(vfs.Default, wsDir); len(ins) != 1 {
		t.Fatalf("%d snapshots, want 1", len(ins))
	}
	// Online diff against the live tree, and an online restore (here
	// with nothing mounted: no caches to invalidate).
	d, err := RequestDiff(context.Background(), wsDir, 1)
	if err != nil || len(d.Changes) != 0 {
		t.Fatalf("diff of an unchanged workspace: %+v, %v", d, err)
	}
	r, err := RequestRestore(context.Background(), wsDir, 1)
	if err != nil || r.ID != 1 || r.Before != 2 {
		t.Fatalf("restore: %+v, %v", r, err)
	}
}

// TestControlSocketLongPath: a workspace directory too long for a socket
// address still gets its control socket as a private file in it (never an
// abstract socket, whose name another local user could bind first and so
// keep the daemon from starting), and requests reach the daemon through
// it; stop removes it.
func TestControlSocketLongPath(t *testing.T) {
	root := filepath.Join(t.TempDir(), strings.Repeat("h", 100))
	wsDir, stop := servingIn(t, root)
	path := ControlSocketPath(wsDir)
	if path != filepath.Join(wsDir, "control.sock") || len(path) <= unixsock.MaxPath {
		t.Fatalf("control socket %q: want the file in the workspace directory, longer than a socket address", path)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v, %v; want a socket file, mode 0600", path, fi, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rep, err := RequestSnapshot(ctx, wsDir, "long"); err != nil || rep.ID != 1 {
		t.Fatalf("snapshot over the long path: %+v, %v", rep, err)
	}
	stop()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("control socket after stop: %v; want it removed", err)
	}
}
