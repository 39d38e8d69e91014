package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/remote/s3test"
)

// startSidecarProc runs `wsfs sidecar NAME` as a child process. exited is
// closed once it has exited, with its result in *result; stop sends SIGTERM
// (final sync) unless it has exited, waits for it, bounded, and returns
// its result.
func startSidecarProc(t *testing.T, home, name string) (out *lockedBuffer, exited <-chan struct{}, result *error, stop func() error) {
	t.Helper()
	out = &lockedBuffer{}
	cmd := exec.Command(wsfsBin, "sidecar", "--home", home, name)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var err error
	go func() { err = cmd.Wait(); close(done) }()
	stop = func() error {
		select {
		case <-done:
			return err
		default:
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(commandTimeout):
			cmd.Process.Kill()
			<-done
			t.Errorf("sidecar (pid %d) did not stop within %v of SIGTERM", cmd.Process.Pid, commandTimeout)
		}
		return err
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("sidecar output:\n%s", tail(out.String(), 3000))
		}
	})
	return out, done, &err, stop
}

// noteCount counts the rows of the test table in the database at path
// (-1: no such table).
func noteCount(t *testing.T, path string) int {
	t.Helper()
	db, err := agentstate.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM notes`).Scan(&n); err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return -1
		}
		t.Fatal(err)
	}
	return n
}

// replicaRows restores the latest state of replica url into a new file
// (as a third host would) and counts its rows.
func replicaRows(t *testing.T, url string) int {
	t.Helper()
	to := filepath.Join(t.TempDir(), "restored.db")
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	if err := agentstate.Restore(ctx, agentstate.RestoreOptions{ReplicaURL: url, To: to}); err != nil {
		t.Fatalf("restore the replica %s elsewhere: %v", url, err)
	}
	return noteCount(t, to)
}

// TestPullKilledAgentState: host A replicates its agent state database to
// the remote (a real sidecar, real versitygw) and pushes the workspace.
// Host B runs `wsfs pull` and SIGKILLs it at the moments the workspace
// takes shape on disk (its temporary directory, the agent directory in it,
// the published workspace): whenever the workspace exists on B it holds
// A's agent state, and otherwise pulling again works. Then B pulls with
// --no-agent-state (what a pull killed between publishing the workspace
// and restoring the agent state used to leave): a sidecar refuses (exit 3,
// naming `wsfs state restore`) and creates no database, and the replica
// still restores A's rows elsewhere; after `wsfs state restore` the
// sidecar replicates again.
func TestPullKilledAgentState(t *testing.T) {
	requireMount(t) // root, and the tools the harness checks
	srv := s3test.Start(t)
	cfg := srv.Config("agentpull")
	const rows = 40

	homeA := filepath.Join(t.TempDir(), "home-a")
	wsfsCommand(t, "init", "--home", homeA)
	setRemote(t, homeA, cfg)
	mntA, stopA := mountWorkspace(t, &mountOpts{home: homeA, name: "ws"})
	writeSynced(t, filepath.Join(mntA, "f"), []byte("a file, so that there is a group to ship\n"))
	killShipper := startShipper(t, homeA, "ws")
	scOut, _, _, stopSC := startSidecarProc(t, homeA, "ws")
	dbA := filepath.Join(homeA, "state", "workspaces", "ws", "agent", "state.db")
	deadline := time.Now().Add(commandTimeout)
	for !scOut.contains("replicating agent state") {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar on A not replicating within %v:\n%s", commandTimeout, scOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	db, err := agentstate.OpenDB(dbA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if _, err := db.Exec(`INSERT INTO notes (body) VALUES (?)`, fmt.Sprintf("note %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	wsfsOutput(t, commandTimeout, "state", "sync", "--home", homeA, "ws")
	wsfsOutput(t, commandTimeout, "sync", "--home", homeA, "ws")
	if err := stopSC(); err != nil {
		t.Fatalf("sidecar on A: %v", err)
	}
	stopA(false)
	killShipper()
	wsfsOutput(t, commandTimeout, "push", "--home", homeA, "ws")
	url := cfg.AgentStateURL("ws")
	if n := replicaRows(t, url); n != rows {
		t.Fatalf("A's replica restores %d rows, want %d", n, rows)
	}

	homeB := filepath.Join(t.TempDir(), "home-b")
	wsfsCommand(t, "init", "--home", homeB)
	setRemote(t, homeB, cfg)
	wsDir := filepath.Join(homeB, "state", "workspaces", "ws")
	dbB := filepath.Join(wsDir, "agent", "state.db")
	tmpDir := filepath.Join(homeB, "state", "workspaces", ".tmp-pull-ws") // ship.writeWorkspace's
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	rmB := func() {
		out, err := exec.Command(wsfsBin, "rm", "--home", homeB, "--force", "ws").CombinedOutput()
		if err != nil {
			t.Fatalf("wsfs rm --force ws on B: %v\n%s", err, out)
		}
	}
	// killPullAt starts a pull and SIGKILLs it as soon as cond holds
	// (polled every millisecond); it reports whether the kill came before
	// the pull exited by itself.
	killPullAt := func(what string, cond func() bool) bool {
		cmd := exec.Command(wsfsBin, "pull", "--home", homeB, "ws")
		var out lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.After(commandTimeout)
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pull (to be killed at %s) failed: %v\n%s", what, err, out.String())
				}
				t.Logf("kill at %s: the pull finished first", what)
				return false
			case <-deadline:
				cmd.Process.Kill()
				<-done
				t.Fatalf("pull (to be killed at %s) still running after %v:\n%s", what, commandTimeout, out.String())
			default:
			}
			if cond() {
				cmd.Process.Kill()
				select {
				case <-done:
				case <-time.After(killTimeout):
					t.Fatalf("killed pull not reaped within %v", killTimeout)
				}
				return true
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, p := range []struct {
		what string
		cond func() bool
	}{
		{"its temporary directory", func() bool { return exists(tmpDir) }},
		{"the agent directory in it", func() bool { return exists(filepath.Join(tmpDir, "agent")) }},
		{"the published workspace", func() bool { return exists(wsDir) }},
	} {
		killed := killPullAt(p.what, p.cond)
		if exists(wsDir) {
			// Whatever the kill interrupted, the workspace is there only
			// with A's agent state.
			if !exists(dbB) {
				t.Fatalf("pull killed at %s (killed: %v) left workspace ws without its agent state database", p.what, killed)
			}
			if n := noteCount(t, dbB); n != rows {
				t.Fatalf("pull killed at %s: the agent state has %d rows, want %d", p.what, n, rows)
			}
			t.Logf("pull killed at %s (killed: %v): the workspace is there with its agent state", p.what, killed)
		} else {
			t.Logf("pull killed at %s left no workspace: pulling again", p.what)
			wsfsOutput(t, commandTimeout, "pull", "--home", homeB, "ws")
			if n := noteCount(t, dbB); n != rows {
				t.Fatalf("pull after a kill at %s: the agent state has %d rows, want %d", p.what, n, rows)
			}
		}
		rmB()
	}

	// A workspace without its agent state, as a pull killed after
	// publishing it used to leave (and as --no-agent-state asks for).
	wsfsOutput(t, commandTimeout, "pull", "--home", homeB, "--no-agent-state", "ws")
	if exists(dbB) {
		t.Fatalf("pull --no-agent-state restored %s", dbB)
	}
	out, exited, result, stop := startSidecarProc(t, homeB, "ws")
	select {
	case <-exited:
		err := *result
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("sidecar over a replica holding state, with no database: %v, want exit 3\n%s", err, out.String())
		}
		for _, want := range []string{"holds transactions", "wsfs state restore"} {
			if !out.contains(want) {
				t.Errorf("the sidecar's refusal does not say %q:\n%s", want, out.String())
			}
		}
		t.Logf("refused: %s", strings.TrimSpace(out.String()))
	case <-time.After(commandTimeout):
		stop()
		t.Fatalf("the sidecar started replicating a new database over the replica of A's state:\n%s", out.String())
	}
	if exists(dbB) {
		t.Errorf("the refused sidecar created %s", dbB)
	}
	if n := replicaRows(t, url); n != rows {
		t.Fatalf("after the sidecar on B, the replica restores %d rows, want %d: A's agent state is lost", n, rows)
	}

	// Restored from the replica, the database is the replica's to
	// continue: the sidecar starts, and a row written on B replicates.
	wsfsOutput(t, commandTimeout, "state", "restore", "--home", homeB, "ws")
	if !exists(dbB + agentstate.AdoptedSuffix) {
		t.Errorf("state restore wrote no adoption record %s%s", dbB, agentstate.AdoptedSuffix)
	}
	scOut, _, _, stopSC = startSidecarProc(t, homeB, "ws")
	deadline = time.Now().Add(commandTimeout)
	for !scOut.contains("replicating agent state") {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar on B (restored database) not replicating within %v:\n%s", commandTimeout, scOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if db, err = agentstate.OpenDB(dbB); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO notes (body) VALUES ('from B')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	wsfsOutput(t, commandTimeout, "state", "sync", "--home", homeB, "ws")
	if err := stopSC(); err != nil {
		t.Fatalf("sidecar on B: %v", err)
	}
	if n := replicaRows(t, url); n != rows+1 {
		t.Fatalf("after B's sidecar, the replica restores %d rows, want %d", n, rows+1)
	}
	if exists(dbB + agentstate.AdoptedSuffix) {
		t.Errorf("the adoption record outlived the sidecar's start-up snapshot")
	}

	// wsfs rm --remote: refused from A, which does not hold the lease
	// (B's pull took it); from B it deletes the workspace here and in the
	// bucket, agent replica included, so that it can no longer be pulled.
	rmOut, code := wsfsExit(t, "rm", "--home", homeA, "--remote", "ws")
	if code != 3 || !strings.Contains(rmOut, "not removed from") || !exists(filepath.Join(homeA, "state", "workspaces", "ws")) {
		t.Fatalf("rm --remote on A while B holds the lease: exit %d\n%s\nwant exit 3, A's copy kept", code, rmOut)
	}
	t.Logf("rm --remote on A refused: %s", strings.TrimSpace(rmOut))
	st := srv.Store(t, "agentpull")
	keys := func(prefix string) []string {
		ks, err := st.List(context.Background(), prefix)
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	if len(keys("workspaces/ws/")) == 0 || len(keys("agent/ws/")) == 0 {
		t.Fatal("the refused rm --remote deleted from the bucket")
	}
	wsfsOutput(t, commandTimeout, "rm", "--home", homeB, "--remote", "ws")
	if exists(wsDir) {
		t.Fatal("rm --remote on B left B's workspace")
	}
	if ks := append(keys("workspaces/ws/"), keys("agent/ws/")...); len(ks) != 0 {
		t.Fatalf("rm --remote left in the bucket: %v", ks)
	}
	wsfsOutput(t, commandTimeout, "rm", "--home", homeA, "ws")
	if out, code := wsfsExit(t, "pull", "--home", homeA, "ws"); code != 3 {
		t.Fatalf("pull of a workspace removed from the remote: exit %d\n%s\nwant exit 3", code, out)
	}
	if out, code := wsfsExit(t, "rm", "--home", homeA, "--remote", "ws"); code != 3 || !strings.Contains(out, "no workspace ws on this host nor in") {
		t.Fatalf("rm --remote of a workspace that is nowhere: exit %d\n%s\nwant exit 3", code, out)
	}
}

// TestPushCarriesAgentState: the agent's transactions that its sidecar
// never replicated (written after the sidecar stopped, as an agent may
// while `wsfs up` stops its children) leave with a pushed workspace:
// push used to ship the files and release the lease with the replica
// behind the database, so that the pull on host B silently restored an
// older agent state, and A's pushed copy, whose sidecar then refuses to
// start, held the only copy of the rest. The snapshots' agent state
// copies leave with it too: their chunks were never shipped (a fork or
// restore of a pulled snapshot failed on a missing object), and `pull
// --at SNAPSHOT` restored the replica as of the snapshot's time, which
// lacks what the sidecar had not uploaded by then, instead of the copy.
func TestPushCarriesAgentState(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("agentpush")
	const name = "agentpush"
	homeA := filepath.Join(t.TempDir(), "home-a")
	wsfsCommand(t, "init", "--home", homeA)
	setRemote(t, homeA, cfg)
	mntA, stopA := mountWorkspace(t, &mountOpts{home: homeA, name: name})
	writeSynced(t, filepath.Join(mntA, "f"), []byte("a file, so that there is a group to ship\n"))
	stopA(false)
	scOut, _, _, stopSC := startSidecarProc(t, homeA, name)
	deadline := time.Now().Add(commandTimeout)
	for !scOut.contains("replicating agent state") {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar on A not replicating within %v:\n%s", commandTimeout, scOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	dbA := filepath.Join(homeA, "state", "workspaces", name, "agent", "state.db")
	insert := func(n int) {
		db, err := agentstate.OpenDB(dbA)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT)`); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := db.Exec(`INSERT INTO notes (body) VALUES (?)`, fmt.Sprintf("note %d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert(20)
	wsfsOutput(t, commandTimeout, "state", "sync", "--home", homeA, name)
	if err := stopSC(); err != nil {
		t.Fatalf("sidecar on A: %v", err)
	}
	insert(10) // committed, never replicated by a sidecar
	wsfsOutput(t, commandTimeout, "snapshot", "create", "--home", homeA, name)
	insert(5) // after the snapshot
	wsfsOutput(t, commandTimeout, "push", "--home", homeA, name)

	homeB := filepath.Join(t.TempDir(), "home-b")
	wsfsCommand(t, "init", "--home", homeB)
	setRemote(t, homeB, cfg)
	// --fetch-all: a lazily pulled workspace's snapshots fork only once
	// their objects are local.
	wsfsOutput(t, commandTimeout, "pull", "--home", homeB, "--fetch-all", name)
	if n := noteCount(t, filepath.Join(homeB, "state", "workspaces", name, "agent", "state.db")); n != 35 {
		t.Fatalf("B's pulled agent state holds %d rows; A committed 35 before the push", n)
	}
	// The shipped snapshot's agent state copy came along: a fork of it on
	// B has the 30 rows committed before the snapshot.
	wsfsOutput(t, commandTimeout, "fork", "--home", homeB, name+"@1", "forked")
	if n := noteCount(t, filepath.Join(homeB, "state", "workspaces", "forked", "agent", "state.db")); n != 30 {
		t.Fatalf("fork of the pulled snapshot on B: agent state holds %d rows, want the snapshot's 30", n)
	}
	// pull --at the snapshot restores the snapshot's copy, not the replica
	// as of the snapshot's time (which lacked the 10 rows then).
	homeC := filepath.Join(t.TempDir(), "home-c")
	wsfsCommand(t, "init", "--home", homeC)
	setRemote(t, homeC, cfg)
	wsfsOutput(t, commandTimeout, "push", "--home", homeB, name)
	wsfsOutput(t, commandTimeout, "pull", "--home", homeC, "--at", "1", name)
	if n := noteCount(t, filepath.Join(homeC, "state", "workspaces", name, "agent", "state.db")); n != 30 {
		t.Fatalf("pull --at 1: agent state holds %d rows, want the snapshot's 30", n)
	}
	// C's sidecar takes the restored copy as the replica's next state.
	cOut, _, _, _ := startSidecarProc(t, homeC, name)
	for deadline := time.Now().Add(commandTimeout); !cOut.contains("replicating agent state"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar on C not replicating within %v:\n%s", commandTimeout, cOut.String())
		}
	}
	wsfsOutput(t, commandTimeout, "state", "sync", "--home", homeC, name)
	if n := replicaRows(t, cfg.AgentStateURL(name)); n != 30 {
		t.Fatalf("the replica after C's sidecar started restores %d rows, want the snapshot's 30", n)
	}
}
