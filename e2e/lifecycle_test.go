package e2e

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
)

// lifecycleTimeout bounds each wsfs command of the lifecycle test (a
// bound on a hang, not a performance threshold).
const lifecycleTimeout = 2 * time.Minute

// TestLifecycleSnapshotForkDiffRestore drives the workspace lifecycle
// through real mounts and the real binary: a daemon serves workspace ws
// while a git workload (write, add, commit in a loop) runs on the mount
// and a SQLite transaction loop runs on ws's agent state database. A
// snapshot is taken through the daemon during both (git is held between
// two commits so that the tree at that moment is known; the SQLite loop
// keeps committing). Then: two forks of the snapshot, each mounted and
// changed differently (files and agent database) and snapshotted again,
// `wsfs diff` of each fork's two snapshots checked against the changes
// made; the original is stopped and restored to the snapshot (offline),
// and its files are compared byte for byte with the tree recorded at the
// snapshot, its agent state row for row with the snapshot's copy (which
// holds every transaction committed before the call and none started
// after it returned), including through a connection held open across
// the restore.
func TestLifecycleSnapshotForkDiffRestore(t *testing.T) {
	requireTool(t, "git")
	requireMount(t)
	opts := mountOpts{}
	mnt, stop := mountWorkspace(t, &opts)
	home := opts.home
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	wsfs := func(args ...string) string {
		t.Helper()
		return runIn(t, t.TempDir(), nil, lifecycleTimeout, wsfsBin, args...)
	}

	// The agent: a SQLite loop on ws's agent database. Each transaction
	// appends row n (content derived from n) and sets the counter to n.
	dbPath := filepath.Join(h.AgentDir("ws"), agentstate.DBName)
	if err := agentstate.Ensure(dbPath, "ws"); err != nil {
		t.Fatal(err)
	}
	agent, err := agentstate.OpenDB(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	for _, q := range []string{
		`CREATE TABLE steps (id INTEGER PRIMARY KEY, note TEXT NOT NULL)`,
		`CREATE TABLE counter (k INTEGER PRIMARY KEY, n INTEGER NOT NULL)`,
		`INSERT INTO counter VALUES (1, 0)`,
	} {
		if _, err := agent.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var started, committed atomic.Int64
	agentStop := make(chan struct{})
	var agentWG sync.WaitGroup
	agentWG.Add(1)
	go func() {
		defer agentWG.Done()
		for n := int64(1); ; n++ {
			select {
			case <-agentStop:
				return
			default:
			}
			started.Store(n)
			if err := agentStep(agent, n); err != nil {
				t.Errorf("agent transaction %d: %v", n, err)
				return
			}
			committed.Store(n)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	stopAgent := sync.OnceFunc(func() { close(agentStop); agentWG.Wait() })
	t.Cleanup(stopAgent)

	// The git workload on the mount; gitMu is held by each iteration.
	env := []string{
		"HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.invalid",
		"GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.invalid",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	}
	repo := filepath.Join(mnt, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) { runIn(t, repo, env, toolTimeout, "git", args...) }
	git("init", "-q", "-b", "main")
	git("config", "gc.auto", "0")
	var gitMu sync.Mutex
	var iter atomic.Int64
	gitStop := make(chan struct{})
	var gitWG sync.WaitGroup
	gitWG.Add(1)
	go func() {
		defer gitWG.Done()
		for i := 1; ; i++ {
			select {
			case <-gitStop:
				return
			default:
			}
			gitMu.Lock()
			err := gitStep(repo, i)
			if err == nil {
				err = gitRun(repo, env, "add", "-A")
			}
			if err == nil {
				err = gitRun(repo, env, "commit", "-q", "-m", fmt.Sprintf("step %d", i))
			}
			gitMu.Unlock()
			if err != nil {
				t.Errorf("git step %d: %v", i, err)
				return
			}
			iter.Store(int64(i))
		}
	}()
	stopGit := sync.OnceFunc(func() { close(gitStop); gitWG.Wait() })
	t.Cleanup(stopGit)

	if !waitFor(time.Minute, func() bool { return iter.Load() >= 3 && committed.Load() >= 50 }) {
		t.Fatalf("not 3 git commits and 50 agent transactions within a minute (%d, %d)", iter.Load(), committed.Load())
	}

	// The snapshot, through the daemon, between two git commits and in
	// the middle of the agent's transactions.
	gitMu.Lock()
	want, err := snapshot(mnt, snapOpts{})
	if err != nil {
		gitMu.Unlock()
		t.Fatal(err)
	}
	agentBefore := committed.Load()
	out := wsfs("snapshot", "create", "--home", home, "--label", "lifecycle", "ws")
	agentAfter := started.Load()
	gitMu.Unlock()
	if !strings.Contains(out, "ws@1\n") || !strings.Contains(out, "through the daemon") || !strings.Contains(out, "agent state ") {
		t.Fatalf("snapshot create:\n%s", out)
	}
	if !waitFor(time.Minute, func() bool { return iter.Load() >= 5 }) {
		t.Fatalf("not 2 more git commits after the snapshot within a minute (%d)", iter.Load())
	}
	stopGit()
	stopAgent()
	agentLater := committed.Load()
	t.Logf("agent: %d committed before the snapshot call, %d started before it returned, %d at the end; %d git commits",
		agentBefore, agentAfter, agentLater, iter.Load())

	ls := wsfs("snapshot", "ls", "--home", home, "--json", "ws")
	var listed []struct {
		ID    uint64 `json:"id"`
		Agent *struct {
			Bytes uint64 `json:"bytes"`
		} `json:"agent"`
	}
	if err := json.Unmarshal([]byte(ls[strings.Index(ls, "["):]), &listed); err != nil || len(listed) != 1 || listed[0].Agent == nil || listed[0].Agent.Bytes == 0 {
		t.Fatalf("snapshot ls --json: %v\n%s", err, ls)
	}

	// Two forks, each changed differently, each snapshotted before and
	// after its change; their diffs name exactly their own changes.
	var snapRows []string
	for i, f := range []string{"f1", "f2"} {
		out := wsfs("fork", "--home", home, "ws@1", f)
		if !strings.Contains(out, "forked ws@1 as "+f) || !strings.Contains(out, "agent state") {
			t.Fatalf("fork:\n%s", out)
		}
		fdb := filepath.Join(h.AgentDir(f), agentstate.DBName)
		rows := agentRows(t, fdb)
		if i == 0 {
			snapRows = rows
			checkAgentPrefix(t, "snapshot's agent state (via fork f1)", rows, agentBefore, agentAfter)
			t.Logf("the snapshot's agent state copy holds %d transactions", len(rows))
		} else if !slices.Equal(rows, snapRows) {
			t.Fatalf("fork f2's agent state differs from f1's (%d rows, %d)", len(rows), len(snapRows))
		}
		fo := mountOpts{home: home, name: f, created: true}
		fmnt, fstop := mountWorkspace(t, &fo)
		got, err := snapshot(fmnt, snapOpts{})
		if err != nil {
			t.Fatal(err)
		}
		if d := diffTrees(want, got, 10); len(d) > 0 {
			t.Fatalf("fork %s's tree differs from the snapshot's:\n  %s", f, strings.Join(d, "\n  "))
		}
		wsfs("snapshot", "create", "--home", home, f) // f@1: the fork as made
		var wantDiff []string
		switch f {
		case "f1":
			writeFileT(t, filepath.Join(fmnt, "f1-only.txt"), "fork one")
			writeFileT(t, filepath.Join(fmnt, "repo", "file-2.txt"), "changed in f1")
			if err := os.Remove(filepath.Join(fmnt, "repo", "file-3.txt")); err != nil {
				t.Fatal(err)
			}
			wantDiff = []string{"A  /f1-only.txt", "M  /repo/file-2.txt", "D  /repo/file-3.txt"}
		case "f2":
			if err := os.MkdirAll(filepath.Join(fmnt, "f2dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFileT(t, filepath.Join(fmnt, "f2dir", "new.txt"), "fork two")
			if err := os.Rename(filepath.Join(fmnt, "repo", "file-1.txt"), filepath.Join(fmnt, "repo", "moved-1.txt")); err != nil {
				t.Fatal(err)
			}
			wantDiff = []string{"A  /f2dir", "A  /f2dir/new.txt", "R  /repo/file-1.txt -> /repo/moved-1.txt"}
		}
		fagent, err := agentstate.OpenDB(fdb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fagent.Exec(`INSERT INTO steps (id, note) VALUES (?, ?)`, 1_000_000+i, "only in "+f); err != nil {
			t.Fatal(err)
		}
		fagent.Close()
		wsfs("snapshot", "create", "--home", home, f) // f@2: after the change
		diff := wsfs("diff", "--home", home, f+"@1", f+"@2")
		// Exactly the changes made: the other fork's are not there, and
		// a directory whose entries changed is not listed itself.
		lines := strings.Split(strings.TrimSpace(diff), "\n")
		slices.Sort(lines)
		slices.Sort(wantDiff)
		if !slices.Equal(lines, wantDiff) {
			t.Errorf("wsfs diff %s@1 %s@2:\n%s\nwant:\n%s", f, f, diff, strings.Join(wantDiff, "\n"))
		}
		stat := wsfs("diff", "--home", home, "--stat", "--json", f+"@1", f+"@2")
		if !strings.Contains(stat, `"added":`) {
			t.Errorf("diff --stat --json: %s", stat)
		}
		frows := agentRows(t, fdb)
		if len(frows) != len(snapRows)+1 || frows[len(frows)-1] != fmt.Sprintf("%d only in %s", 1_000_000+i, f) {
			t.Errorf("fork %s's agent state after its change: %d rows, last %q", f, len(frows), frows[len(frows)-1])
		}
		if f == "f1" {
			// Online restore (the daemon serves f1): files and agent
			// state back to f1@1 together.
			out := wsfs("restore", "--home", home, "f1@1")
			if !strings.Contains(out, "through the daemon") || !strings.Contains(out, "files and agent state") {
				t.Fatalf("online restore:\n%s", out)
			}
			if got := agentRows(t, fdb); !slices.Equal(got, snapRows) {
				t.Errorf("f1's agent state after the online restore: %d rows, want the snapshot's %d", len(got), len(snapRows))
			}
			if _, err := os.Stat(filepath.Join(fmnt, "f1-only.txt")); !os.IsNotExist(err) {
				t.Errorf("f1-only.txt after the online restore: %v", err)
			}
			// Back to f1@2 (the undo snapshot is f1@3) for the checks below.
			wsfs("restore", "--home", home, "f1@2")
		}
		fstop(false)
	}

	// Restore the original (offline: stop its daemon first).
	stop(false)
	held, err := agent.Conn(context.Background()) // open across the restore
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	out = wsfs("restore", "--home", home, "ws@1")
	if !strings.Contains(out, "restored ws to ws@1: files and agent state") || !strings.Contains(out, "undo: wsfs restore ws@2") {
		t.Fatalf("restore:\n%s", out)
	}
	var n int64
	if err := held.QueryRowContext(context.Background(), `SELECT n FROM counter`).Scan(&n); err != nil || n != int64(len(snapRows)) {
		t.Fatalf("connection held across the restore reads counter %d (%v), want %d", n, err, len(snapRows))
	}
	if got := agentRows(t, dbPath); !slices.Equal(got, snapRows) {
		t.Fatalf("restored agent state: %d rows, want the snapshot's %d", len(got), len(snapRows))
	}
	var check string
	if err := held.QueryRowContext(context.Background(), `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check after the restore: %q, %v", check, err)
	}
	held.Close()
	opts.mountpoint = ""
	mnt, _ = mountWorkspace(t, &opts)
	got, err := snapshot(mnt, snapOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(want, got, 10); len(d) > 0 {
		t.Fatalf("restored tree differs from the one recorded at the snapshot:\n  %s", strings.Join(d, "\n  "))
	}
	runIn(t, filepath.Join(mnt, "repo"), env, toolTimeout, "git", "fsck", "--strict", "--no-progress")
	// The undo snapshot holds the replaced agent state (everything the
	// agent committed).
	ls = wsfs("snapshot", "ls", "--home", home, "ws")
	if !regexp.MustCompile(`(?m)^ws@2 .* before restore to 1$`).MatchString(ls) || strings.Contains(ls, " none ") {
		t.Fatalf("snapshot ls after restore:\n%s", ls)
	}
}

// agentStep is the agent's transaction n.
func agentStep(db *sql.DB, n int64) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if _, err := tx.Exec(`INSERT INTO steps (id, note) VALUES (?, ?)`, n, agentNote(n)); err != nil {
		tx.Rollback()
		return err
	}
	if _, err := tx.Exec(`UPDATE counter SET n = ?`, n); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func agentNote(n int64) string {
	sum := sha256.Sum256([]byte(fmt.Sprint(n)))
	return fmt.Sprintf("step %d %x", n, sum[:8])
}

// agentRows returns the agent database's steps rows and counter.
func agentRows(t *testing.T, path string) []string {
	t.Helper()
	db, err := agentstate.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id, note FROM steps ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		var note string
		if err := rows.Scan(&id, &note); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s", id, note))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.QueryRow(`SELECT n FROM counter`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// The counter moves with every step in the same transaction (the
	// forks' own rows have ids from 1,000,000 and leave it alone).
	steps := 0
	for _, r := range out {
		if !strings.Contains(r, " only in ") {
			steps++
		}
	}
	if n != int64(steps) {
		t.Fatalf("%s: counter %d with %d step rows: not one transaction's state", path, n, steps)
	}
	return out
}

// checkAgentPrefix: rows are exactly the agent's steps 1..k with
// before <= k <= after.
func checkAgentPrefix(t *testing.T, what string, rows []string, before, after int64) {
	t.Helper()
	k := int64(len(rows))
	if k < before || k > after {
		t.Fatalf("%s holds %d steps; %d were committed before the snapshot call, %d started before it returned", what, k, before, after)
	}
	for i, r := range rows {
		if n := int64(i + 1); r != fmt.Sprintf("%d %s", n, agentNote(n)) {
			t.Fatalf("%s: row %d is %q, want step %d", what, i, r, n)
		}
	}
}

// gitStep writes the files of git iteration i: file-i.txt and a line
// appended to README.
func gitStep(repo string, i int) error {
	if err := os.WriteFile(filepath.Join(repo, fmt.Sprintf("file-%d.txt", i)), []byte(strings.Repeat(fmt.Sprintf("line %d\n", i), 50*i)), 0o644); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(repo, "README"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "step %d\n", i)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// gitRun runs git in repo, bounded by toolTimeout (for goroutines: it
// returns an error instead of failing the test).
func gitRun(repo string, env []string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 2000))
	}
	return nil
}

func writeFileT(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
