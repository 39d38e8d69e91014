package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/mountinfo"
	"wsfs/internal/testenv"
)

// wsfsBin is the wsfs binary built for the end-to-end tests ("" if the
// build failed; buildErr says why).
var wsfsBin, buildErr = "", error(nil)

func TestMain(m *testing.M) {
	// The test binary doubles as a misbehaving child for the tests of the
	// supervisor's own restart and kill logic (TestBackoffAndKill); the
	// end-to-end tests use the real wsfs binary.
	if mode := os.Getenv("WSFS_SUPERVISOR_TEST_CHILD"); mode != "" {
		testChild(mode)
		return
	}
	dir, err := os.MkdirTemp("", "wsfs-supervisor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin := filepath.Join(dir, "wsfs")
	out, err := exec.Command("go", "build", "-o", bin, "wsfs/cmd/wsfs").CombinedOutput()
	if err != nil {
		buildErr = fmt.Errorf("go build wsfs/cmd/wsfs: %v\n%s", err, out)
	} else {
		wsfsBin = bin
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needE2E skips unless the binary built, we are root with /dev/fuse, and
// the mount command exists.
func needE2E(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	testenv.RequireFUSE(t)
}

// syncBuffer is a goroutine-safe log sink that also forwards to t.Log.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// upProc is a running `wsfs up`.
type upProc struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	ready  chan struct{}
	exited chan struct{}
}

func startUp(t *testing.T, home string, args ...string) *upProc {
	t.Helper()
	cmd := exec.Command(wsfsBin, append([]string{"up", "--home", home, "--min-backoff", "100ms", "--max-backoff", "2s", "--stop-timeout", "30s"}, args...)...)
	u := &upProc{cmd: cmd, log: &syncBuffer{}, ready: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = u.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			if sc.Text() == "ready" {
				once.Do(func() { close(u.ready) })
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() { cmd.Wait(); close(u.exited) }()
	t.Cleanup(func() {
		select {
		case <-u.exited:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-u.exited:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				<-u.exited
			}
		}
		// Whatever happened, leave no mount behind.
		if m, err := mountinfo.Read(); err == nil {
			for _, x := range m {
				if strings.HasPrefix(x.Point, home+"/") {
					exec.Command("umount", "-l", x.Point).Run()
				}
			}
		}
		t.Logf("wsfs up log:\n%s", u.log.String())
	})
	return u
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func childOf(t *testing.T, h *host.Host, ws, kind string) ChildState {
	t.Helper()
	st, err := ReadState(h)
	if err != nil {
		return ChildState{}
	}
	for _, c := range st.Children {
		if c.Workspace == ws && c.Kind == kind {
			return c
		}
	}
	return ChildState{}
}

func mounted(path string) bool {
	m, err := mountinfo.Read()
	if err != nil {
		return false
	}
	_, ok := mountinfo.At(m, path)
	return ok
}

// writeFsynced writes n files in dir, each fsynced, and returns their
// contents by name.
func writeFsynced(t *testing.T, dir, prefix string, n int) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for i := range n {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		data := bytes.Repeat([]byte(name+"\n"), 1+i*37)
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync %s: %v", name, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	return files
}

func checkFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("fsynced file %s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("fsynced file %s: %d bytes, want %d (content differs)", name, len(got), len(want))
		}
	}
}

// agent writes progress rows into a workspace's agent state database, the
// way an agent would: path from the environment contract, WAL mode.
type agent struct {
	db   *sql.DB
	next int
}

func openAgent(t *testing.T, path string) *agent {
	t.Helper()
	db, err := agentstate.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS progress (id INTEGER PRIMARY KEY, note TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &agent{db: db, next: 1}
}

func (a *agent) write(t *testing.T, n int) {
	t.Helper()
	for range n {
		if _, err := a.db.Exec(`INSERT INTO progress (id, note) VALUES (?, ?)`, a.next, strings.Repeat(fmt.Sprint(a.next), 50)); err != nil {
			t.Fatal(err)
		}
		a.next++
	}
}

func rows(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", agentstate.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []string
	for _, q := range []string{`SELECT key || '=' || value FROM wsfs_meta ORDER BY key`, `SELECT id || ' ' || note FROM progress ORDER BY id`} {
		r, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for r.Next() {
			var s string
			if err := r.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		r.Close()
	}
	return out
}

func TestUpEndToEnd(t *testing.T) {
	needE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	home := t.TempDir()
	u := startUp(t, home, "--workspaces", "3")
	select {
	case <-u.ready:
	case <-u.exited:
		t.Fatalf("wsfs up exited before ready: %v", u.cmd.ProcessState)
	case <-ctx.Done():
		t.Fatal("wsfs up never became ready")
	}
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"ws-1", "ws-2", "ws-3"}
	if got, _ := h.Workspaces(); !slices.Equal(got, names) {
		t.Fatalf("workspaces %v, want %v", got, names)
	}

	// A workload in each: fsynced files in the mount, rows in the agent DB.
	files := map[string]map[string][]byte{}
	agents := map[string]*agent{}
	for _, n := range names {
		if !mounted(h.MountPoint(n)) {
			t.Fatalf("%s not mounted at %s", n, h.MountPoint(n))
		}
		files[n] = writeFsynced(t, h.MountPoint(n), "before", 20)
		db := agentstate.PathsFor(h, n).DB
		waitFor(ctx, t, n+" agent state database", func() bool { _, err := os.Stat(db); return err == nil })
		agents[n] = openAgent(t, db)
		agents[n].write(t, 100)
	}

	// SIGKILL ws-2's daemon: the supervisor restarts it, the workspace is
	// intact (every fsynced file present).
	d := childOf(t, h, "ws-2", KindDaemon)
	if d.PID == 0 {
		t.Fatal("no daemon pid for ws-2 in up.json")
	}
	if err := syscall.Kill(d.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "ws-2 daemon restart", func() bool {
		c := childOf(t, h, "ws-2", KindDaemon)
		_, err := os.Stat(ReadyFile(h, "ws-2"))
		return c.PID != 0 && c.PID != d.PID && c.Restarts >= 1 && err == nil
	})
	if !mounted(h.MountPoint("ws-2")) {
		t.Fatal("ws-2 not mounted after its daemon restarted")
	}
	checkFiles(t, h.MountPoint("ws-2"), files["ws-2"])
	for k, v := range writeFsynced(t, h.MountPoint("ws-2"), "after", 5) {
		files["ws-2"][k] = v
	}
	if !strings.Contains(u.log.String(), "signal SIGKILL") {
		t.Error("the log does not say how the daemon died")
	}

	// SIGKILL ws-3's sidecar while its agent writes: restarted, and
	// replication resumes past where it was.
	sc := childOf(t, h, "ws-3", KindSidecar)
	if sc.PID == 0 {
		t.Fatal("no sidecar pid for ws-3 in up.json")
	}
	agents["ws-3"].write(t, 50)
	if err := syscall.Kill(sc.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agents["ws-3"].write(t, 50)
	waitFor(ctx, t, "ws-3 sidecar restart", func() bool {
		c := childOf(t, h, "ws-3", KindSidecar)
		return c.PID != 0 && c.PID != sc.PID
	})
	var before uint64
	if st, err := agentstate.ReadStatus(agentstate.PathsFor(h, "ws-3").Status); err == nil {
		before = st.ReplicaTXID
	}
	agents["ws-3"].write(t, 10)
	waitFor(ctx, t, "ws-3 replication to resume", func() bool {
		st, err := agentstate.ReadStatus(agentstate.PathsFor(h, "ws-3").Status)
		c := childOf(t, h, "ws-3", KindSidecar)
		return err == nil && st.PID == c.PID && st.ReplicaTXID > before && st.Lag() == 0
	})

	// wsfs status sees every workspace mounted.
	out, err := exec.Command(wsfsBin, "status", "--home", home).CombinedOutput()
	if err != nil {
		t.Fatalf("wsfs status: %v\n%s", err, out)
	}
	t.Logf("wsfs status:\n%s", out)
	for _, n := range names {
		if !regexpLine(string(out), n, "yes") {
			t.Errorf("wsfs status does not show %s mounted:\n%s", n, out)
		}
	}

	// A confirmed position before shutdown, over the sidecar's socket.
	for _, n := range names {
		agents[n].write(t, 10)
		out, err := exec.Command(wsfsBin, "state", "sync", "--home", home, n).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "confirmed txid") {
			t.Errorf("wsfs state sync %s: %v\n%s", n, err, out)
		}
	}
	for _, n := range names {
		agents[n].write(t, 5) // only the final sync at shutdown covers these
	}

	// SIGTERM: exit 0, nothing left mounted.
	if err := u.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-u.exited:
	case <-ctx.Done():
		t.Fatal("wsfs up did not exit after SIGTERM")
	}
	if code := u.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("wsfs up exited %d after SIGTERM, want 0", code)
	}
	for _, n := range names {
		if mounted(h.MountPoint(n)) {
			t.Errorf("%s still mounted after shutdown", n)
		}
	}
	if strings.Contains(u.log.String(), "did not stop in time") {
		t.Error("a child had to be killed at shutdown")
	}

	// Restore every agent database from its replica: every row is there.
	for _, n := range names {
		to := filepath.Join(t.TempDir(), n+".db")
		if err := agentstate.Restore(ctx, agentstate.RestoreOptions{ReplicaURL: agentstate.PathsFor(h, n).ReplicaDir, To: to}); err != nil {
			t.Fatalf("restore %s: %v", n, err)
		}
		want, got := rows(t, agentstate.PathsFor(h, n).DB), rows(t, to)
		if !slices.Equal(got, want) {
			t.Errorf("%s: restored %d rows, original has %d", n, len(got), len(want))
		}
	}

	// The workspaces kept their files across the restart and the shutdown:
	// serve them once more.
	u2 := startUp(t, home)
	select {
	case <-u2.ready:
	case <-u2.exited:
		t.Fatalf("second wsfs up exited: %v", u2.cmd.ProcessState)
	case <-ctx.Done():
		t.Fatal("second wsfs up never became ready")
	}
	for _, n := range names {
		checkFiles(t, h.MountPoint(n), files[n])
	}
	u2.cmd.Process.Signal(syscall.SIGTERM)
	<-u2.exited
	if code := u2.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("second wsfs up exited %d", code)
	}
}

// regexpLine reports whether some line starts with name and has want as
// its second column.
func regexpLine(out, name, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == name && f[1] == want {
			return true
		}
	}
	return false
}

func TestUnreachableReplicaStillServes(t *testing.T) {
	needE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	if _, err := host.Init(home); err != nil {
		t.Fatal(err)
	}
	// Point the replica at a path under a regular file: it can never exist.
	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"state_dir": "state", "pool_dir": "pool", "mount_dir": "mnt", "agent_state": {"replica_url": %q}}`, "file://"+blocker+"/{name}")
	if err := os.WriteFile(filepath.Join(home, host.ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUp(t, home, "--workspaces", "1")
	select {
	case <-u.ready:
	case <-u.exited:
		t.Fatalf("wsfs up exited: %v", u.cmd.ProcessState)
	case <-ctx.Done():
		t.Fatal("wsfs up never became ready")
	}
	h, _ := host.Open(home)
	waitFor(ctx, t, "the sidecar's error in the log", func() bool {
		return strings.Contains(u.log.String(), "cannot be reached")
	})
	files := writeFsynced(t, h.MountPoint("ws-1"), "served", 5)
	checkFiles(t, h.MountPoint("ws-1"), files)
	u.cmd.Process.Signal(syscall.SIGTERM)
	<-u.exited
	if code := u.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("wsfs up exited %d", code)
	}
}
