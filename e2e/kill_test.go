package e2e

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Kill test bounds.
const (
	killMinDelay    = 50 * time.Millisecond
	killMaxDelay    = 500 * time.Millisecond
	workloadTimeout = 30 * time.Second // the workload must stop this soon after the kill
	maxKillOps      = 20000            // a round never runs more ops than this
)

// TestKill runs the kill workload, SIGKILLs the daemon at a random moment
// (50-500 ms in), lazily unmounts, mounts the workspace again and requires:
//
//   - every file whose fsync returned is intact (its content hash), and
//   - the round's tree equals the model after some op prefix k with
//     acked <= k <= started, where acked covers the last op whose fsync
//     returned and started counts every op begun (the last may be lost);
//     the one op in flight, a create, may show its file with a prefix of
//     its content;
//   - the directories of all earlier rounds are unchanged.
//
// The default mount runs 30 rounds (-short: 6); each variant of
// mountVariants a third of that.
//
// Each round works in its own directory of one workspace, so every round
// also recovers all the earlier rounds' crashes (the workload runs in the
// round's subdirectory w0, see TestKillConcurrent). The native target runs the
// same rounds with the workload stopped instead of killed, which checks the
// model and the checker. Prints "kill rounds: N, violations: V".
func TestKill(t *testing.T) {
	rounds := 30
	if testing.Short() {
		rounds = 6
	}
	run := func(t *testing.T, tg *target) {
		n := rounds
		switch {
		case tg.kind == kindNative:
			n = min(rounds, 6) // the native run checks the model, not a filesystem
		case tg.variant != "":
			n = max(3, rounds/3) // the variants add coverage, the default mount the count
		}
		runKillRounds(t, tg, n, 1)
	}
	forEachTarget(t, mountOpts{}, run)
	forEachVariant(t, run)
}

// TestKillConcurrent is TestKill with three workers, each in its own
// directory with its own op list, running at once. A returned fsync bounds
// every worker: each op any worker had completed before the fsync began
// must survive. So each worker's directory must be a prefix of its ops
// between that bound and its last op started.
func TestKillConcurrent(t *testing.T) {
	rounds := 10
	if testing.Short() {
		rounds = 3
	}
	forEachTarget(t, mountOpts{}, func(t *testing.T, tg *target) {
		runKillRounds(t, tg, rounds, 3)
	})
}

// runKillRounds runs rounds kill rounds of the given number of workers on
// tg; see TestKill.
func runKillRounds(t *testing.T, tg *target, rounds, workers int) {
	seed := testSeed(t)
	r := rand.New(rand.NewSource(seed))
	var prev tree // earlier rounds, as checked
	violations, totalOps, totalAcked, finishedEarly, bigCreates := 0, 0, 0, 0, 0
	var spans []int // k - acked per round and worker
	for round := range rounds {
		dir := fmt.Sprintf("r%03d", round)
		for w := range workers {
			if err := os.MkdirAll(filepath.Join(tg.root, dir, fmt.Sprintf("w%d", w)), 0o755); err != nil {
				t.Fatalf("round %d: mkdir: %v", round, err)
			}
		}
		if err := fsyncAt(unix.AT_FDCWD, tg.root); err != nil { // covers the mkdirs too
			t.Fatalf("round %d: fsync of the mount root: %v", round, err)
		}
		rseed := seed + int64(round)*int64(workers)
		delay := killMinDelay + time.Duration(r.Int63n(int64(killMaxDelay-killMinDelay)))
		ws := startKillWorkers(t, filepath.Join(tg.root, dir), rseed, workers, tg.kind == kindNative, maxKillOps)
		time.Sleep(delay)
		ws.killed.Store(true)
		if tg.kind == kindWsfs {
			tg.stop(true)
		}
		if err := ws.wait(workloadTimeout); err != nil {
			t.Fatalf("round %d (seed %d): %v", round, rseed, err)
		}
		for w, j := range ws.js {
			if j.failedEarly != nil {
				t.Fatalf("round %d (seed %d) worker %d: the workload failed before the kill: %v", round, rseed, w, j.failedEarly)
			}
			if tg.kind == kindWsfs && j.ended == nil {
				finishedEarly++ // ran out of ops before the kill: no crash mid-workload
			}
		}
		if tg.kind == kindWsfs {
			tg.mnt.mountpoint = ""
			tg.root, tg.stop = mountWorkspace(t, tg.mnt)
		}

		var problems []string
		var desc []string
		for w, j := range ws.js {
			k, p := checkKillRound(filepath.Join(tg.root, dir, fmt.Sprintf("w%d", w)), j)
			for _, x := range p {
				problems = append(problems, fmt.Sprintf("worker %d: %s", w, x))
			}
			if len(p) == 0 {
				spans = append(spans, k-j.acked)
			}
			totalOps += j.started
			totalAcked += j.acked
			for _, op := range j.ops {
				if op.kind == "create" && len(op.data) >= bigFile {
					bigCreates++
				}
			}
			desc = append(desc, fmt.Sprintf("worker %d: %d ops started, durable at least through op %d", w, j.started, j.acked-1))
		}
		problems = append(problems, checkEarlierRounds(tg.root, dir, prev)...)
		if len(problems) > 0 {
			violations++
			t.Errorf("round %d (seed %d, kill after %v; %s):\n  %s\n(replay: go test ./e2e -run '%s' -args -e2e.seed=%d)",
				round, rseed, delay, strings.Join(desc, "; "), strings.Join(problems, "\n  "), t.Name(), seed)
		}
		var err error
		if prev, err = snapshot(tg.root, snapOpts{dirLink: true}); err != nil {
			t.Fatalf("round %d: snapshot after the check: %v", round, err)
		}
	}

	// A clean unmount and mount keep what the rounds recovered.
	tg.remount(t)
	if others := checkEarlierRounds(tg.root, "", prev); len(others) > 0 {
		violations++
		t.Errorf("after the last round and a clean remount:\n  %s", strings.Join(others, "\n  "))
	}
	t.Logf("kill rounds: %d, violations: %d", rounds, violations)
	if finishedEarly > 0 {
		t.Errorf("%d workers of %d rounds ran all %d ops before the kill: raise maxKillOps", finishedEarly, rounds, maxKillOps)
	}
	t.Logf("workers: %d; ops started: %d (%d creates of more than 4 MiB), known durable by a returned fsync: %d; recovered prefix beyond that, per round and worker: %v",
		workers, totalOps, bigCreates, totalAcked, spans)
}

// killJournal is what one worker records, in the test process (outside
// the mount), about its progress.
type killJournal struct {
	ops         []killOp // every op started; written by the worker only
	started     int      // ops begun (ops[:started])
	acked       int      // ops[:acked] are durable by a returned fsync (killWorkers.mu)
	ended       error    // the error that ended the worker after the kill
	failedEarly error    // an op failed while the daemon was alive
}

// killWorkers are the workers of one round.
type killWorkers struct {
	killed    atomic.Bool // set just before the daemon is killed
	js        []*killJournal
	completed []atomic.Int64 // per worker: ops whose system calls returned
	done      chan struct{}  // one value per worker that ended
	mu        sync.Mutex     // guards every journal's acked while running
}

// raise records that a returned fsync made durable, for each worker v,
// the first upto[v] ops.
func (ws *killWorkers) raise(upto []int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for v, n := range upto {
		ws.js[v].acked = max(ws.js[v].acked, int(n))
	}
}

// startKillWorkers runs n workers, worker w doing the ops of seed+w in
// dir/w<w>, each until an op fails (on a mount: the daemon was killed, so
// the next op fails as it would for an agent) or, with stopOnKill (native:
// nothing to kill), until killed is set.
func startKillWorkers(t *testing.T, dir string, seed int64, n int, stopOnKill bool, limit int) *killWorkers {
	t.Helper()
	ws := &killWorkers{completed: make([]atomic.Int64, n), done: make(chan struct{}, n)}
	for range n {
		ws.js = append(ws.js, &killJournal{})
	}
	for w := range n {
		d := filepath.Join(dir, fmt.Sprintf("w%d", w))
		dirfd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("open worker directory %s: %v", d, err)
		}
		go ws.work(w, dirfd, newKillGen(seed+int64(w)), stopOnKill, limit)
	}
	return ws
}

// work is worker w's loop; see startKillWorkers.
func (ws *killWorkers) work(w, dirfd int, g *killGen, stopOnKill bool, limit int) {
	j := ws.js[w]
	defer func() { ws.done <- struct{}{} }()
	defer unix.Close(dirfd)
	defer func() {
		// A panic here would end the test process without its
		// cleanups (and leave the mount behind): report it instead.
		if p := recover(); p != nil {
			j.failedEarly = fmt.Errorf("worker %d panic at op %d: %v", w, j.started, p)
		}
	}()
	for j.started < limit {
		if stopOnKill && ws.killed.Load() {
			return
		}
		op := g.next()
		j.ops = append(j.ops, op)
		j.started++
		err := op.exec(dirfd)
		if err == nil {
			ws.completed[w].Store(int64(op.i + 1))
			if op.fsync != "" {
				// Every op completed before the fsync begins must be
				// durable when it returns, whichever worker did it.
				upto := make([]int64, len(ws.completed))
				for v := range upto {
					upto[v] = ws.completed[v].Load()
				}
				if err = fsyncAt(dirfd, op.fsync); err == nil {
					ws.raise(upto)
				}
			}
		}
		if err != nil {
			if ws.killed.Load() {
				j.ended = fmt.Errorf("%v: %w", op, err)
			} else {
				j.failedEarly = fmt.Errorf("%v: %w", op, err)
			}
			return
		}
	}
}

// wait waits for every worker to end, bounded.
func (ws *killWorkers) wait(timeout time.Duration) error {
	deadline := time.After(timeout)
	for range ws.js {
		select {
		case <-ws.done:
		case <-deadline:
			return fmt.Errorf("the workload did not stop within %v of the kill (a system call hangs on the dead mount)", timeout)
		}
	}
	return nil
}

// checkKillRound compares the recovered round directory with the model
// after each op prefix k in [acked, started] and returns the k that
// matched, or the problems found.
func checkKillRound(dir string, j *killJournal) (int, []string) {
	got, err := snapshot(dir, snapOpts{dirLink: true})
	if err != nil {
		return 0, []string{fmt.Sprintf("snapshot of the recovered round: %v", err)}
	}
	m := newKModel()
	for _, op := range j.ops[:j.acked] {
		m.apply(op)
	}
	var models []tree // models[k-acked]
	var diffs [][]string
	for k := j.acked; k <= j.started; k++ {
		want := m.tree()
		models = append(models, want)
		g := got
		if k < j.started {
			g = allowPartialCreate(got, want, j.ops[k])
		}
		d := diffTrees(want, g, 15)
		if len(d) == 0 {
			return k, nil
		}
		diffs = append(diffs, d)
		if k < j.started {
			m.apply(j.ops[k])
		}
	}

	// No prefix matched: say which fsynced files are damaged (those the
	// in-flight ops cannot have changed), then the nearest differences.
	var problems []string
	for _, op := range j.ops[:j.acked] {
		if op.fsync == "" || op.fsync == "." {
			continue
		}
		p := op.fsync
		stable := true
		for _, mt := range models[1:] {
			if mt[p].diff(models[0][p]) != "" {
				stable = false
			}
		}
		if w, ok := models[0][p]; stable && ok && w.Type == 'f' && w.diff(got[p]) != "" {
			problems = append(problems, fmt.Sprintf("file %s (fsync returned after %v) is not intact: %s", p, op, w.diff(got[p])))
		}
	}
	problems = append(problems, fmt.Sprintf("the recovered tree is no prefix k in [%d, %d] of the op list", j.acked, j.started))
	for i, d := range diffs {
		problems = append(problems, fmt.Sprintf("vs. the model after %d ops: %s", j.acked+i, strings.Join(d, "; ")))
	}
	lo := max(0, j.acked-3)
	for _, op := range j.ops[lo:j.started] {
		problems = append(problems, "  "+op.String())
	}
	if j.ended != nil {
		problems = append(problems, "workload ended with: "+j.ended.Error())
	}
	return 0, problems
}

// allowPartialCreate: if op (the next, possibly in-flight op) creates a
// file the model does not have yet, and the recovered tree holds it with a
// prefix of its content, the file is removed from the copy of got that is
// compared (a crash may land between the create and its write).
func allowPartialCreate(got, want tree, op killOp) tree {
	if op.kind != "create" {
		return got
	}
	e, ok := got[op.path]
	if _, inModel := want[op.path]; inModel || !ok || e.Type != 'f' || e.Size > int64(len(op.data)) ||
		e.Hash != hashBytes(op.data[:e.Size]) || e.Perm != op.mode || e.Nlink != 1 {
		return got
	}
	g := make(tree, len(got))
	for p, x := range got {
		if p != op.path {
			g[p] = x
		}
	}
	return g
}

// checkEarlierRounds compares the tree at root, without the directory
// current and the root itself, with prev (the same filter applied).
func checkEarlierRounds(root, current string, prev tree) []string {
	if prev == nil {
		return nil
	}
	skip := func(rel string) bool { return current != "" && rel == current }
	now, err := snapshot(root, snapOpts{dirLink: true, skip: skip})
	if err != nil {
		return []string{fmt.Sprintf("snapshot of earlier rounds: %v", err)}
	}
	was := tree{}
	for p, e := range prev {
		if p != "." && !(current != "" && (p == current || strings.HasPrefix(p, current+"/"))) {
			was[p] = e
		}
	}
	delete(now, ".")
	var out []string
	for _, d := range diffTrees(was, now, 15) {
		out = append(out, "earlier round changed: "+d)
	}
	return out
}

// TestKillCheckerDetects proves the kill test's checker can fail: on a
// native run of the workload it accepts the untouched tree and rejects a
// torn fsynced file, a lost fsynced create and an entry no op made.
func TestKillCheckerDetects(t *testing.T) {
	const ops = 300
	run := func(t *testing.T) (string, *killJournal) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "w0"), 0o755); err != nil {
			t.Fatal(err)
		}
		ws := startKillWorkers(t, dir, 42, 1, true, ops)
		j := ws.js[0]
		if err := ws.wait(workloadTimeout); err != nil || j.failedEarly != nil || j.started != ops {
			t.Fatalf("native workload: wait %v, failed %v, %d ops started", err, j.failedEarly, j.started)
		}
		return filepath.Join(dir, "w0"), j
	}
	t.Run("untouched", func(t *testing.T) {
		dir, j := run(t)
		// A create as the last op also matches one op earlier: the
		// checker takes its file for an in-flight create's (allowPartialCreate).
		k, problems := checkKillRound(dir, j)
		if len(problems) > 0 || (k != ops && !(k == ops-1 && j.ops[ops-1].kind == "create")) {
			t.Fatalf("k %d, problems:\n%s", k, strings.Join(problems, "\n"))
		}
	})
	// lastFsynced returns the last acknowledged op that fsynced a file
	// still present at the end.
	lastFsynced := func(t *testing.T, dir string, j *killJournal, kinds ...string) killOp {
		for i := j.acked - 1; i >= 0; i-- {
			op := j.ops[i]
			if op.fsync == op.path && slices.Contains(kinds, op.kind) {
				if fi, err := os.Lstat(filepath.Join(dir, op.path)); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
					return op
				}
			}
		}
		t.Fatal("no fsynced file survives in the workload")
		return killOp{}
	}
	t.Run("torn", func(t *testing.T) {
		dir, j := run(t)
		op := lastFsynced(t, dir, j, "create", "write", "append")
		p := filepath.Join(dir, op.path)
		fi, _ := os.Stat(p)
		if err := os.Truncate(p, fi.Size()-1); err != nil {
			t.Fatal(err)
		}
		_, problems := checkKillRound(dir, j)
		if len(problems) == 0 {
			t.Fatalf("a torn %s went unnoticed", op.path)
		}
		t.Logf("detected: %s", problems[0])
	})
	t.Run("lost", func(t *testing.T) {
		dir, j := run(t)
		op := lastFsynced(t, dir, j, "create")
		if err := os.Remove(filepath.Join(dir, op.path)); err != nil {
			t.Fatal(err)
		}
		if _, problems := checkKillRound(dir, j); len(problems) == 0 {
			t.Fatalf("the loss of fsynced %s went unnoticed", op.path)
		}
	})
	t.Run("xattr", func(t *testing.T) {
		// The last attribute set that the tree still holds, removed.
		dir, j := run(t)
		for i := j.acked - 1; i >= 0; i-- {
			op := j.ops[i]
			if op.kind != "setxattr" {
				continue
			}
			p := filepath.Join(dir, op.path)
			if _, err := unix.Lgetxattr(p, op.xname, nil); err != nil {
				continue
			}
			if err := unix.Lremovexattr(p, op.xname); err != nil {
				t.Fatal(err)
			}
			if _, problems := checkKillRound(dir, j); len(problems) == 0 {
				t.Fatalf("the loss of %s's %s went unnoticed", op.path, op.xname)
			}
			return
		}
		t.Fatal("no attribute set in the workload survives")
	})
	t.Run("extra", func(t *testing.T) {
		// An entry no op made: a state no prefix reaches.
		dir, j := run(t)
		if err := os.Mkdir(filepath.Join(dir, "extra"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, problems := checkKillRound(dir, j); len(problems) == 0 {
			t.Fatal("an entry no op created went unnoticed")
		}
	})
}
