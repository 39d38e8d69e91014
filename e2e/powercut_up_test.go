package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
)

// TestPowerCutUp runs `wsfs up` (daemons and Litestream sidecars) for two
// workspaces on a host whose state and pool live on crashfs, an agent
// process per workspace committing SQLite transactions to its state
// database, `wsfs state sync` now and then, and the kill workload in
// ws-1's mount. At a random moment the power is cut (crashfs freezes, then
// every wsfs and agent process is SIGKILLed and the workspace mounts
// detached); after the restore each agent database must open, pass
// integrity_check, hold a gapless prefix of the agent's transactions that
// includes every transaction it saw committed (SQLite's synchronous=FULL,
// as agentstate documents) and so every one a `wsfs state sync` confirmed;
// a restore from the replica must hold every confirmed one too; and the
// kill workload's directory must be a prefix of its ops at or after its
// last acknowledged fsync. Then `wsfs up` starts again on what survived.
//
// 6 cuts by default (-short 3; WSFS_POWERCUTS=N runs N/5): a round costs
// 30 to 60 s on a loaded 2-core machine under -race, most of it the
// sidecars' start-up (their full snapshot, bounded at 20 s, before the
// first confirmed sync) and the two restores from the replica; every round
// exercises the same paths with a new random cut, so more rounds buy
// samples, not coverage (soak runs set WSFS_POWERCUTS).
func TestPowerCutUp(t *testing.T) {
	cuts := max(1, powerCuts(t, 6*5, 3*5)/5)
	seed := testSeed(t)
	start := time.Now()
	r := rand.New(rand.NewSource(seed))
	h := newCrashHost(t, "", nil)
	names := []string{"ws-1", "ws-2"}
	u := startUp(t, h.home, "--workspaces", strconv.Itoa(len(names)))
	hst, err := host.Open(h.home)
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(h.home, "mnt", names[0])

	var cs cutStats
	violations, commits, confirmedTotal, syncs := 0, 0, 0, 0
	var longestCommit time.Duration
	var phases [4]time.Duration // first confirmed syncs, cut to restored, state restores, up again
	for round := range cuts {
		t0 := time.Now()
		rseed := seed + int64(round)
		delay := 300*time.Millisecond + time.Duration(r.Int63n(int64(1500*time.Millisecond)))
		t.Logf("round %d: workload seed %d, cut after %v", round, rseed, delay)
		var agents []*agentProc
		for i, name := range names {
			agents = append(agents, startAgent(t, agentstate.PathsFor(hst, name).DB, rseed+int64(i)))
		}
		dir := fmt.Sprintf("r%03d", round)
		if err := os.MkdirAll(filepath.Join(mnt, dir, "w0"), 0o755); err != nil {
			t.Fatalf("round %d: mkdir: %v", round, err)
		}
		if err := fsyncAt(unix.AT_FDCWD, mnt); err != nil {
			t.Fatalf("round %d: fsync of the mount root: %v", round, err)
		}
		// Each round starts with a confirmed sync of every workspace (the
		// sidecars restart after each cut), so every cut has something
		// confirmed to lose.
		syncer := startStateSyncs(h.home, names, agents)
		for i, name := range names {
			syncer.confirmed[i].Store(stateSyncNow(t, h.home, name, agents[i]))
		}
		ws := startKillWorkers(t, filepath.Join(mnt, dir), rseed, 1, false, maxKillOps)
		t1 := time.Now()

		time.Sleep(delay)
		ws.killed.Store(true)
		for _, a := range agents {
			a.killed.Store(true) // from the cut on, their errors are expected
		}
		t2 := time.Now()
		h.cut(r, &cs)
		u.kill(t)
		for _, a := range agents {
			a.kill()
		}
		killAll(t, wsfsBin)
		syncer.stop()
		for _, name := range names {
			if p := filepath.Join(h.home, "mnt", name); isFUSEMount(p) {
				lazyUnmount(t, p)
			}
		}
		if err := ws.wait(workloadTimeout); err != nil {
			t.Fatalf("round %d (seed %d): %v", round, rseed, err)
		}
		j := ws.js[0]
		if j.failedEarly != nil {
			t.Fatalf("round %d (seed %d): the workload failed before the cut: %v", round, rseed, j.failedEarly)
		}
		var problems []string
		h.restore(func() {
			for i, name := range names {
				committed, confirmed := int(agents[i].committed.Load()), int(syncer.confirmed[i].Load())
				db := h.backingPath(agentstate.PathsFor(hst, name).DB)
				for _, p := range checkAgentDB(db, committed, confirmed) {
					problems = append(problems, fmt.Sprintf("%s local database: %s", name, p))
				}
			}
		})
		t3 := time.Now()
		for i, name := range names {
			a := agents[i]
			if a.failed != "" {
				lg, _ := os.ReadFile(filepath.Join(h.home, "run", name+".sidecar.log"))
				problems = append(problems, fmt.Sprintf("%s agent failed before the cut: %s\nsidecar log:\n%s", name, a.failed, tail(string(lg), 6000)))
			}
			committed, confirmed := int(a.committed.Load()), int(syncer.confirmed[i].Load())
			commits += committed - int(a.first) + 1
			confirmedTotal += confirmed
			restored := filepath.Join(t.TempDir(), "restored.db")
			out, err := exec.Command(wsfsBin, "state", "restore", "--home", h.home, "--to", restored, name).CombinedOutput()
			if err != nil {
				if confirmed > 0 {
					problems = append(problems, fmt.Sprintf("%s: wsfs state restore: %v: %s", name, err, out))
				}
			} else {
				for _, p := range checkAgentDB(restored, -1, confirmed) {
					problems = append(problems, fmt.Sprintf("%s replica: %s", name, p))
				}
			}
		}
		syncs += int(syncer.ok.Load())
		for i, a := range agents {
			longestCommit = max(longestCommit, time.Duration(a.longest.Load())*time.Millisecond)
			if d := time.Duration(a.longest.Load()) * time.Millisecond; d > time.Second {
				t.Logf("round %d: %s agent's longest transaction took %v", round, names[i], d)
			}
		}
		if e, _ := syncer.lastErr.Load().(string); e != "" {
			t.Logf("round %d: %d state syncs ok, %d failed, the last with: %s", round, syncer.ok.Load(), syncer.failed.Load(), e)
			if syncer.ok.Load() == 0 {
				t.Logf("wsfs up's log:\n%s", tail(u.stderr.String(), 6000))
			}
		}

		t4 := time.Now()
		u = startUp(t, h.home)
		for i, d := range []time.Duration{t1.Sub(t0), t3.Sub(t2), t4.Sub(t3), time.Since(t4)} {
			phases[i] += d
		}
		_, p := checkKillRound(filepath.Join(mnt, dir, "w0"), j)
		problems = append(problems, p...)
		if old := round - keepRounds; old >= 0 {
			if err := os.RemoveAll(filepath.Join(mnt, fmt.Sprintf("r%03d", old))); err != nil {
				t.Fatalf("round %d: remove: %v", round, err)
			}
		}
		if len(problems) > 0 {
			violations++
			t.Errorf("round %d (workload seed %d, cut after %v):\n  %s\n(replay: go test ./e2e -run '%s' -args -e2e.seed=%d)",
				round, rseed, delay, strings.Join(problems, "\n  "), t.Name(), seed)
		}
	}
	u.stop(t)
	t.Logf("power cuts: %d, violations: %d; time in agent start and first confirmed syncs %v, cut to restored mounts %v, wsfs state restore %v, wsfs up %v",
		cuts, violations, phases[0].Round(time.Second), phases[1].Round(time.Second), phases[2].Round(time.Second), phases[3].Round(time.Second))
	t.Logf("agent transactions committed: %d (the longest took %v), confirmed by wsfs state sync (sum of positions): %d, syncs: %d; unsynced writes at the cuts: %d, kept: %d, torn: %d; %v",
		commits, longestCommit, confirmedTotal, syncs, cs.unsynced, cs.kept, cs.torn, time.Since(start).Round(time.Second))
}

// checkAgentDB opens the agent database at path and returns its problems:
// integrity_check must say ok, the agent's rows must be 1..max without a
// gap, max >= committed (if committed >= 0) and >= confirmed.
func checkAgentDB(path string, committed, confirmed int) []string {
	if _, err := os.Stat(path); err != nil {
		if committed <= 0 && confirmed <= 0 {
			return nil
		}
		return []string{fmt.Sprintf("%v (the first missing path: %s)", err, firstMissing(path))}
	}
	db, err := sql.Open("sqlite", agentstate.DSN(path))
	if err != nil {
		return []string{err.Error()}
	}
	defer db.Close()
	var ic string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ic); err != nil {
		return []string{"integrity_check: " + err.Error()}
	}
	var problems []string
	if ic != "ok" {
		problems = append(problems, "integrity_check: "+ic)
	}
	var exists int
	if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'pc_txn'").Scan(&exists); err != nil {
		return append(problems, err.Error())
	}
	n, hi := 0, 0
	if exists > 0 {
		if err := db.QueryRow("SELECT count(*), coalesce(max(id), 0) FROM pc_txn").Scan(&n, &hi); err != nil {
			return append(problems, err.Error())
		}
	}
	if n != hi {
		problems = append(problems, fmt.Sprintf("%d rows but the highest transaction is %d: a transaction in the middle is lost", n, hi))
	}
	if committed >= 0 && hi < committed {
		problems = append(problems, fmt.Sprintf("holds transactions up to %d, but %d had committed (synchronous=FULL)", hi, committed))
	}
	if hi < confirmed {
		problems = append(problems, fmt.Sprintf("holds transactions up to %d, but wsfs state sync confirmed %d", hi, confirmed))
	}
	return problems
}

// firstMissing names the first path on the way to path that does not
// exist (path itself if only it is missing).
func firstMissing(path string) string {
	d := path
	for {
		if _, err := os.Stat(filepath.Dir(d)); err == nil || filepath.Dir(d) == d {
			return d
		}
		d = filepath.Dir(d)
	}
}

// upProc is a running `wsfs up`.
type upProc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	err    error
}

// startUp starts `wsfs up --home home args...` and waits for "ready".
func startUp(t *testing.T, home string, args ...string) *upProc {
	t.Helper()
	u := &upProc{stderr: &lockedBuffer{}, done: make(chan struct{})}
	u.cmd = exec.Command(wsfsBin, append([]string{"up", "--home", home, "--stop-timeout", "10s"}, args...)...)
	u.cmd.Stderr = u.stderr
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := u.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				close(ready)
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	go func() { u.err = u.cmd.Wait(); close(u.done) }()
	t.Cleanup(func() { u.stop(t) })
	select {
	case <-ready:
	case <-u.done:
		t.Fatalf("wsfs up exited before it was ready (%v):\n%s", u.err, u.stderr)
	case <-time.After(readyTimeout * 2):
		u.kill(t)
		killAll(t, wsfsBin)
		t.Fatalf("wsfs up: not ready within %v:\n%s", readyTimeout*2, u.stderr)
	}
	return u
}

// kill SIGKILLs the supervisor (its children stay: see killAll).
func (u *upProc) kill(t *testing.T) {
	u.cmd.Process.Kill()
	select {
	case <-u.done:
	case <-time.After(killTimeout):
		t.Errorf("wsfs up (pid %d) not reaped %v after SIGKILL", u.cmd.Process.Pid, killTimeout)
	}
}

// stop ends up cleanly (SIGTERM), bounded; idempotent.
func (u *upProc) stop(t *testing.T) {
	select {
	case <-u.done:
		return
	default:
	}
	u.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-u.done:
	case <-time.After(stopTimeout + 15*time.Second):
		t.Errorf("wsfs up did not stop within %v of SIGTERM; killing:\n%s", stopTimeout, u.stderr)
		u.kill(t)
		killAll(t, wsfsBin)
	}
}

// killAll SIGKILLs every process running the executable bin (the binary
// this test run built: the supervisor's children, state syncs) until none
// is left, bounded by killTimeout.
func killAll(t *testing.T, bin string) {
	deadline := time.Now().Add(killTimeout)
	for {
		pids := processesOf(bin)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes of %s still alive %v after SIGKILL: %v", bin, killTimeout, pids)
			return
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processesOf lists the live (not zombie) processes whose executable is bin.
func processesOf(bin string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != bin {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i:]), ") Z") {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// agentProc is one agent: this test binary re-run as TestPowerCutAgent.
type agentProc struct {
	cmd       *exec.Cmd
	first     int64        // its first transaction (the database's next id)
	committed atomic.Int64 // the last transaction it reported committed
	longest   atomic.Int64 // its longest commit (begin to commit returned), in ms
	done      chan struct{}
	failed    string // its output if it ended before being killed
	killed    atomic.Bool
	out       lockedBuffer
}

func startAgent(t *testing.T, db string, seed int64) *agentProc {
	t.Helper()
	a := &agentProc{done: make(chan struct{}), first: -1}
	a.cmd = exec.Command(os.Args[0], "-test.run=^TestPowerCutAgent$", "-e2e.bin="+wsfsBin)
	a.cmd.Env = append(os.Environ(), "WSFS_POWERCUT_AGENT=1", agentstate.EnvVar+"="+db, "WSFS_POWERCUT_SEED="+strconv.FormatInt(seed, 10))
	a.cmd.Stderr = &a.out
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		defer close(a.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "first "):
				a.first, _ = strconv.ParseInt(line[6:], 10, 64)
				a.committed.Store(a.first - 1)
				close(started)
			case strings.HasPrefix(line, "c "):
				n, _ := strconv.ParseInt(line[2:], 10, 64)
				a.committed.Store(n)
			case strings.HasPrefix(line, "longest "):
				ms, _ := strconv.ParseInt(line[8:], 10, 64)
				a.longest.Store(ms)
			default:
				a.out.Write([]byte(line + "\n"))
			}
		}
		a.cmd.Wait()
		if !a.killed.Load() {
			a.failed = a.out.String()
		}
	}()
	select {
	case <-started:
	case <-a.done:
		t.Fatalf("agent on %s ended before it started:\n%s", db, a.out.String())
	case <-time.After(readyTimeout):
		a.kill()
		t.Fatalf("agent on %s: not started within %v:\n%s", db, readyTimeout, a.out.String())
	}
	t.Cleanup(a.kill)
	return a
}

func (a *agentProc) kill() {
	a.killed.Store(true)
	a.cmd.Process.Kill()
	select {
	case <-a.done:
	case <-time.After(killTimeout):
	}
}

// TestPowerCutAgent is the agent process of TestPowerCutUp (skipped unless
// started by it): it commits one transaction after another to its state
// database, each inserting row id N (and sometimes rewriting an older
// row), and prints "c N" once the commit returned, and "longest MS" when
// a transaction took longer than any before (mostly waiting for the write
// lock that the sidecar's checkpoints take).
func TestPowerCutAgent(t *testing.T) {
	if os.Getenv("WSFS_POWERCUT_AGENT") == "" {
		t.Skip("the agent process of TestPowerCutUp")
	}
	seed, _ := strconv.ParseInt(os.Getenv("WSFS_POWERCUT_SEED"), 10, 64)
	r := rand.New(rand.NewSource(seed))
	db, err := agentstate.OpenDB(os.Getenv(agentstate.EnvVar))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	db.SetMaxOpenConns(1)
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "agent: %s: %v\n", what, err)
		os.Exit(1)
	}
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS pc_txn(id INTEGER PRIMARY KEY, payload BLOB NOT NULL)"); err != nil {
		fail("create table", err)
	}
	var last int64
	if err := db.QueryRow("SELECT coalesce(max(id), 0) FROM pc_txn").Scan(&last); err != nil {
		fail("max", err)
	}
	fmt.Printf("first %d\n", last+1)
	var longest time.Duration
	for i := last + 1; ; i++ {
		began := time.Now()
		tx, err := db.BeginTx(context.Background(), nil)
		if err != nil {
			fail("begin", err)
		}
		if _, err := tx.Exec("INSERT INTO pc_txn(id, payload) VALUES(?, ?)", i, randData(r, 50+r.Intn(1500))); err != nil {
			fail("insert", err)
		}
		if i > 1 && r.Intn(4) == 0 {
			if _, err := tx.Exec("UPDATE pc_txn SET payload = ? WHERE id = ?", randData(r, 50+r.Intn(1500)), 1+r.Int63n(i-1)); err != nil {
				fail("update", err)
			}
		}
		if err := tx.Commit(); err != nil {
			fail("commit", err)
		}
		fmt.Printf("c %d\n", i)
		if d := time.Since(began); d > longest {
			longest = d
			fmt.Printf("longest %d\n", d.Milliseconds())
		}
		time.Sleep(time.Millisecond) // an agent, not a benchmark: the replica keeps up
	}
}

// stateSyncNow runs `wsfs state sync` for workspace name until it succeeds
// (bounded by readyTimeout) and returns the last transaction agent a had
// committed before the successful call.
func stateSyncNow(t *testing.T, home, name string, a *agentProc) int64 {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		before := a.committed.Load()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		out, err := exec.CommandContext(ctx, wsfsBin, "state", "sync", "--home", home, "--timeout", "10s", name).CombinedOutput()
		cancel()
		if err == nil {
			return before
		}
		if time.Now().After(deadline) {
			lg, _ := os.ReadFile(filepath.Join(home, "run", name+".sidecar.log"))
			t.Fatalf("wsfs state sync %s: no success within %v; the last: %v: %s\nsidecar log:\n%s", name, readyTimeout, err, out, tail(string(lg), 6000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stateSyncs runs `wsfs state sync` for each workspace in turn until
// stopped; confirmed[i] is the last transaction of agent i committed before
// a sync of workspace i that returned success.
type stateSyncs struct {
	confirmed []atomic.Int64
	ok        atomic.Int64
	failed    atomic.Int64
	lastErr   atomic.Value // string: the last failure's output
	quit      chan struct{}
	wg        sync.WaitGroup
}

func startStateSyncs(home string, names []string, agents []*agentProc) *stateSyncs {
	s := &stateSyncs{confirmed: make([]atomic.Int64, len(names)), quit: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for k := 0; ; k++ {
			select {
			case <-s.quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
			i := k % len(names)
			before := agents[i].committed.Load()
			ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
			out, err := exec.CommandContext(ctx, wsfsBin, "state", "sync", "--home", home, "--timeout", "10s", names[i]).CombinedOutput()
			cancel()
			if err != nil {
				s.failed.Add(1)
				s.lastErr.Store(fmt.Sprintf("%v: %s", err, out))
			}
			if err == nil {
				s.ok.Add(1)
				if before > s.confirmed[i].Load() {
					s.confirmed[i].Store(before)
				}
			}
		}
	}()
	return s
}

func (s *stateSyncs) stop() {
	close(s.quit)
	s.wg.Wait()
}

// TestPowerCutAfterStateSync is the regression case of two bugs the power
// cuts of TestPowerCutUp found, made deterministic: a fresh workspace, its
// sidecar, one agent transaction, one confirmed `wsfs state sync`, and the
// power cut right after it. Then the local database must exist and hold
// the transaction (the agent directory made by the sidecar was never
// synced into its parent, so the whole database vanished), and a restore
// from the replica must too (the file replica's level directories, made by
// Litestream with a plain MkdirAll, were never synced either: "cannot calc
// restore plan: transaction not available").
func TestPowerCutAfterStateSync(t *testing.T) {
	h := newCrashHost(t, "ws", nil)
	hst, err := host.Open(h.home)
	if err != nil {
		t.Fatal(err)
	}
	sc := exec.Command(wsfsBin, "sidecar", "--home", h.home, "ws")
	var scOut lockedBuffer
	sc.Stdout, sc.Stderr = &scOut, &scOut
	sc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Process.Kill(); sc.Wait() })
	db := agentstate.PathsFor(hst, "ws").DB
	a := startAgent(t, db, 1)
	deadline := time.Now().Add(readyTimeout)
	for a.committed.Load() < a.first {
		if time.Now().After(deadline) {
			t.Fatalf("the agent committed nothing within %v", readyTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var confirmed int64
	for {
		before := a.committed.Load()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		out, err := exec.CommandContext(ctx, wsfsBin, "state", "sync", "--home", h.home, "ws").CombinedOutput()
		cancel()
		if err == nil {
			confirmed = before
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wsfs state sync: %v: %s\nsidecar:\n%s", err, out, scOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.killed.Store(true)
	h.cut(rand.New(rand.NewSource(1)), &cutStats{})
	a.kill()
	sc.Process.Kill()
	sc.Wait()
	killAll(t, wsfsBin)
	h.restore(func() {
		for _, p := range checkAgentDB(h.backingPath(db), -1, int(confirmed)) {
			t.Errorf("local database: %s", p)
		}
		// Litestream's local position (its L0 files, synced with their
		// directory) must survive too, or every start after a power cut
		// converts the whole database again.
		l0 := filepath.Join(filepath.Dir(h.backingPath(db)), "."+agentstate.DBName+"-litestream", "ltx", "0")
		if ltx, _ := filepath.Glob(filepath.Join(l0, "*.ltx")); len(ltx) == 0 {
			t.Errorf("no LTX file survived in %s (the first missing path: %s): the next sidecar starts without its local position", l0, firstMissing(l0))
		}
	})
	restored := filepath.Join(t.TempDir(), "restored.db")
	if out, err := exec.Command(wsfsBin, "state", "restore", "--home", h.home, "--to", restored, "ws").CombinedOutput(); err != nil {
		t.Errorf("wsfs state restore after the cut (transaction %d was confirmed): %v: %s", confirmed, err, out)
	} else {
		for _, p := range checkAgentDB(restored, -1, int(confirmed)) {
			t.Errorf("replica: %s", p)
		}
	}
}
