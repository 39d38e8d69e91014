package e2e

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
// The default mount runs 30 rounds (-short: 6); the --writeback and
// --passthrough variants a third of that each.
//
// Each round works in its own directory of one workspace, so every round
// also recovers all the earlier rounds' crashes. The native target runs the
// same rounds with the workload stopped instead of killed, which checks the
// model and the checker. Prints "kill rounds: N, violations: V".
func TestKill(t *testing.T) {
	rounds := 30
	if testing.Short() {
		rounds = 6
	}
	run := func(t *testing.T, tg *target) {
		seed := testSeed(t)
		r := rand.New(rand.NewSource(seed))
		rounds := rounds
		switch {
		case tg.kind == kindNative:
			rounds = min(rounds, 6) // the native run checks the model, not a filesystem
		case tg.variant != "":
			rounds = max(3, rounds/3) // the variants add coverage, the default mount the count
		}
		var prev tree // earlier rounds, as checked
		violations, totalOps, totalAcked, finishedEarly, bigCreates := 0, 0, 0, 0, 0
		var spans []int // k - acked per round
		for round := range rounds {
			dir := fmt.Sprintf("r%03d", round)
			if err := os.Mkdir(filepath.Join(tg.root, dir), 0o755); err != nil {
				t.Fatalf("round %d: mkdir %s: %v", round, dir, err)
			}
			if err := fsyncAt(unix.AT_FDCWD, tg.root); err != nil {
				t.Fatalf("round %d: fsync of the mount root: %v", round, err)
			}
			rseed := seed + int64(round)
			delay := killMinDelay + time.Duration(r.Int63n(int64(killMaxDelay-killMinDelay)))
			j := startKillWorkload(t, filepath.Join(tg.root, dir), rseed, tg.kind == kindNative, maxKillOps)
			time.Sleep(delay)
			j.killed.Store(true)
			if tg.kind == kindWsfs {
				tg.stop(true)
			}
			if err := j.wait(workloadTimeout); err != nil {
				t.Fatalf("round %d (seed %d): %v", round, rseed, err)
			}
			if j.failedEarly != nil {
				t.Fatalf("round %d (seed %d): the workload failed before the kill: %v", round, rseed, j.failedEarly)
			}
			if tg.kind == kindWsfs && j.ended == nil {
				finishedEarly++ // ran out of ops before the kill: no crash mid-workload
			}
			if tg.kind == kindWsfs {
				tg.mnt.mountpoint = ""
				tg.root, tg.stop = mountWorkspace(t, tg.mnt)
			}

			k, problems := checkKillRound(filepath.Join(tg.root, dir), j)
			if others := checkEarlierRounds(tg.root, dir, prev); len(others) > 0 {
				problems = append(problems, others...)
			}
			totalOps += j.started
			for _, op := range j.ops {
				if op.kind == "create" && len(op.data) >= bigFile {
					bigCreates++
				}
			}
			totalAcked += j.acked
			if len(problems) > 0 {
				violations++
				t.Errorf("round %d (seed %d, kill after %v, %d ops started, fsync acknowledged through op %d):\n  %s\n(replay: go test ./e2e -run 'TestKill/%s' -args -e2e.seed=%d)",
					round, rseed, delay, j.started, j.acked-1, strings.Join(problems, "\n  "), tg.kind, seed)
			} else {
				spans = append(spans, k-j.acked)
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
			t.Errorf("%d of %d rounds ran all %d ops before the kill: raise maxKillOps", finishedEarly, rounds, maxKillOps)
		}
		t.Logf("ops started: %d (%d creates of more than 4 MiB), covered by an acknowledged fsync: %d; recovered prefix beyond the last acknowledged op, per round: %v",
			totalOps, bigCreates, totalAcked, spans)
	}
	forEachTarget(t, mountOpts{}, run)
	forEachVariant(t, run)
}

// killJournal is what the workload records, in the test process (outside
// the mount), about its progress.
type killJournal struct {
	killed      atomic.Bool // set just before the daemon is killed
	done        chan struct{}
	ops         []killOp // every op started; written by the workload only until done
	started     int      // ops begun (ops[:started])
	acked       int      // ops[:acked] are covered by a returned fsync
	ended       error    // the error that ended the workload after the kill
	failedEarly error    // an op failed while the daemon was alive
}

// startKillWorkload runs the ops of seed in dir, in a goroutine, until one
// fails (on a mount: the daemon was killed, so the next op fails as it
// would for an agent) or, with stopOnKill (native: nothing to kill),
// until killed is set.
func startKillWorkload(t *testing.T, dir string, seed int64, stopOnKill bool, limit int) *killJournal {
	t.Helper()
	dirfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open round directory %s: %v", dir, err)
	}
	j := &killJournal{done: make(chan struct{})}
	g := newKillGen(seed)
	go func() {
		defer close(j.done)
		defer unix.Close(dirfd)
		defer func() {
			// A panic here would end the test process without its
			// cleanups (and leave the mount behind): report it instead.
			if p := recover(); p != nil {
				j.failedEarly = fmt.Errorf("workload panic at op %d: %v", j.started, p)
			}
		}()
		for j.started < limit {
			if stopOnKill && j.killed.Load() {
				return
			}
			op := g.next()
			j.ops = append(j.ops, op)
			j.started++
			err := op.exec(dirfd)
			if err == nil && op.fsync != "" {
				if err = fsyncAt(dirfd, op.fsync); err == nil {
					j.acked = op.i + 1
				}
			}
			if err != nil {
				if j.killed.Load() {
					j.ended = fmt.Errorf("%v: %w", op, err)
				} else {
					j.failedEarly = fmt.Errorf("%v: %w", op, err)
				}
				return
			}
		}
	}()
	return j
}

// wait waits for the workload to end, bounded.
func (j *killJournal) wait(timeout time.Duration) error {
	select {
	case <-j.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the workload did not stop within %v of the kill (a system call hangs on the dead mount)", timeout)
	}
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
		j := startKillWorkload(t, dir, 42, true, ops)
		if err := j.wait(workloadTimeout); err != nil || j.failedEarly != nil || j.started != ops {
			t.Fatalf("native workload: wait %v, failed %v, %d ops started", err, j.failedEarly, j.started)
		}
		return dir, j
	}
	t.Run("untouched", func(t *testing.T) {
		dir, j := run(t)
		if k, problems := checkKillRound(dir, j); len(problems) > 0 || k != ops {
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
