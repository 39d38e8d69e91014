package e2e

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/crashfs"
	"wsfs/internal/objid"
)

// Power-cut test bounds.
const (
	cutMinDelay    = 50 * time.Millisecond
	cutMaxDelay    = 400 * time.Millisecond
	crashfsTimeout = 20 * time.Second // crashfs unmount and server end
	keepRounds     = 3                // round directories kept in the tree (older ones are removed)
)

// powerCuts returns the number of cuts of a power-cut test: WSFS_POWERCUTS
// if set, else def (-short: short).
func powerCuts(t *testing.T, def, short int) int {
	if s := os.Getenv("WSFS_POWERCUTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("WSFS_POWERCUTS=%q: want a positive count", s)
		}
		return n
	}
	if testing.Short() {
		return short
	}
	return def
}

// crashHost is a wsfs host whose state and pool directories are crashfs
// mounts: HOME/state and HOME/pool serve BASE/<role>-backing.
type crashHost struct {
	t     *testing.T
	home  string
	roles []*crashRole
	drop  map[string]func(path string, dir bool) bool // role -> crashfs.Options.DropSync
	syncs crashfs.Stats                               // summed over the mounts ended so far
	good  map[string]int64                            // pool objects that verified, by name: their size
}

type crashRole struct {
	name, backing, mnt string
	fs                 *crashfs.FS
}

// newCrashHost runs wsfs init, moves the state and pool directories it
// made onto crashfs mounts, and creates workspace name on them.
func newCrashHost(t *testing.T, name string, drop map[string]func(string, bool) bool) *crashHost {
	t.Helper()
	requireMount(t)
	base := t.TempDir()
	h := &crashHost{t: t, home: filepath.Join(base, "home"), drop: drop}
	wsfsCommand(t, "init", "--home", h.home)
	for _, role := range []string{"state", "pool"} {
		r := &crashRole{name: role, backing: filepath.Join(base, role+"-backing"), mnt: filepath.Join(h.home, role)}
		if err := os.Rename(r.mnt, r.backing); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(r.mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		h.roles = append(h.roles, r)
		h.mount(r)
	}
	t.Cleanup(func() {
		for _, r := range h.roles {
			if r.fs != nil {
				if err := r.fs.Close(crashfsTimeout); err != nil {
					t.Errorf("crashfs %s: %v", r.name, err)
				}
				r.fs = nil
			}
			if isFUSEMount(r.mnt) {
				lazyUnmount(t, r.mnt)
			}
		}
	})
	if name != "" {
		wsfsCommand(t, "create", "--home", h.home, name)
	}
	return h
}

func (h *crashHost) mount(r *crashRole) {
	h.t.Helper()
	fs, err := crashfs.Mount(r.backing, r.mnt, crashfs.Options{DropSync: h.drop[r.name]})
	if err != nil {
		h.t.Fatal(err)
	}
	r.fs = fs
}

// cutStats sum what the cuts of both mounts did.
type cutStats struct {
	unsynced, kept, torn int
}

// cut is the power cut of both mounts at once: from now on nothing more
// reaches the disk. Random unsynced writes are kept, one maybe torn.
func (h *crashHost) cut(r *rand.Rand, s *cutStats) {
	h.t.Helper()
	o := crashfs.CutOptions{Rand: r}
	if r.Intn(2) == 0 {
		o.Keep = r.Float64()
		o.Tear = r.Intn(2) == 0
	}
	for _, role := range h.roles {
		cs, err := role.fs.Cut(o)
		if err != nil {
			h.t.Fatalf("crashfs %s: cut: %v", role.name, err)
		}
		s.unsynced += cs.Unsynced
		s.kept += cs.Kept
		if cs.Torn {
			s.torn++
		}
	}
}

// restore unmounts both crashfs mounts (every process using them must be
// dead), restores their durable images, runs between (if not nil: the
// images are then plain directories, see backingPath) and mounts them
// again.
func (h *crashHost) restore(between func()) {
	h.t.Helper()
	for _, r := range h.roles {
		st := r.fs.Stats()
		h.syncs.Fsyncs += st.Fsyncs
		h.syncs.Fdatasyncs += st.Fdatasyncs
		h.syncs.DirSyncs += st.DirSyncs
		h.syncs.Writes += st.Writes
		if err := r.fs.Unmount(crashfsTimeout); err != nil {
			h.t.Fatalf("crashfs %s: %v", r.name, err)
		}
		if _, err := r.fs.Restore(); err != nil {
			h.t.Fatalf("crashfs %s: restore: %v", r.name, err)
		}
		r.fs = nil
	}
	if between != nil {
		between()
	}
	for _, r := range h.roles {
		h.mount(r)
	}
}

// backingPath maps a path on one of the crashfs mounts to the same path in
// its backing directory. The test process must never mmap a file through
// its own crashfs mount: a page fault served by the faulting process
// deadlocks with the garbage collector's stop-the-world (SQLite maps its
// -shm file), so it opens databases in the backing directory, between the
// restore and the next mount.
func (h *crashHost) backingPath(p string) string {
	for _, r := range h.roles {
		if rel, err := filepath.Rel(r.mnt, p); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(r.backing, rel)
		}
	}
	h.t.Fatalf("%s is on no crashfs mount", p)
	return ""
}

// poolDamage hashes the objects of the pool's backing directory and
// returns those whose content does not match their name (torn or lost
// data under a durable name). Referenced ones make reads through the mount
// fail; unreferenced ones are reported, not counted as violations. An
// object that verified once is not hashed again while its size stays: its
// name and data were durable, so no later cut can change it (hashing the
// whole pool after every cut made long runs quadratic).
func (h *crashHost) poolDamage() ([]string, error) {
	if h.good == nil {
		h.good = map[string]int64{}
	}
	var bad []string
	dir := filepath.Join(h.roles[1].backing, "objects")
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		id, perr := objid.Parse(d.Name())
		if perr != nil {
			return nil
		}
		if size, ok := h.good[d.Name()]; ok {
			if fi, err := d.Info(); err == nil && fi.Size() == size {
				return nil
			}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if objid.Sum(b) != id {
			bad = append(bad, fmt.Sprintf("%s (%d bytes)", d.Name()[:12], len(b)))
		} else {
			h.good[d.Name()] = int64(len(b))
		}
		return nil
	})
	return bad, err
}

// TestPowerCut runs the kill workload (TestKill's generator, model and
// checker) in a workspace whose state and pool live on crashfs, cuts the
// power at a random moment (crashfs freezes, then the daemon is SIGKILLed
// and the workspace mount lazily detached), restores what was durable
// (sometimes with random unsynced writes kept and one torn), mounts again
// and requires:
//
//   - the round's directory is a prefix of its ops at or after the last
//     acknowledged fsync, every fsynced file intact (checkKillRound);
//   - the directories of the earlier rounds are unchanged;
//   - every file reads back (the daemon verifies every pool object it
//     reads), including files written after the previous cut with the
//     content of files that cut may have torn (a dedup onto a damaged
//     object would serve wrong bytes or fail).
//
// 100 cuts by default (-short 20, WSFS_POWERCUTS=N for a longer run).
// Prints "power cuts: N, violations: V".
func TestPowerCut(t *testing.T) {
	cuts := powerCuts(t, 100, 20)
	seed := testSeed(t)
	runPowerCuts(t, seed, cuts, nil, t.Errorf)
}

// TestPowerCutDetects proves the power-cut test can fail: with crashfs
// told to drop (acknowledge without effect) the directory syncs of the
// pool's objects, or the fdatasyncs of the log's segments — the bugs of a
// vfs that forgets a sync — a few cuts find violations.
func TestPowerCutDetects(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop map[string]func(string, bool) bool
	}{
		{"pool directory syncs dropped", map[string]func(string, bool) bool{
			"pool": func(p string, dir bool) bool { return dir && strings.HasPrefix(p, "objects") },
		}},
		{"log syncs dropped", map[string]func(string, bool) bool{
			"state": func(p string, dir bool) bool { return !dir && strings.HasSuffix(p, ".seg") },
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen []string
			v := runPowerCuts(t, testSeed(t), 8, tc.drop, func(f string, args ...any) {
				seen = append(seen, fmt.Sprintf(f, args...))
			})
			if v == 0 {
				t.Fatal("no violation found: the power-cut test cannot fail")
			}
			t.Logf("violations found, as planted; the first:\n%s", tail(seen[0], 2000))
		})
	}
}

// runPowerCuts is TestPowerCut with its seed, count and planted faults;
// each violation is reported with report. It returns the number of rounds
// with violations.
func runPowerCuts(t *testing.T, seed int64, cuts int, drop map[string]func(string, bool) bool, report func(string, ...any)) int {
	start := time.Now()
	r := rand.New(rand.NewSource(seed))
	h := newCrashHost(t, "ws", drop)
	opts := mountOpts{home: h.home, name: "ws", created: true}
	root, stop := mountWorkspace(t, &opts)

	var prev tree
	var cs cutStats
	violations, totalOps, totalAcked, redone := 0, 0, 0, 0
	var damagedObjects int
	for round := range cuts {
		dir := fmt.Sprintf("r%03d", round)
		if err := os.MkdirAll(filepath.Join(root, dir, "w0"), 0o755); err != nil {
			t.Fatalf("round %d: mkdir: %v", round, err)
		}
		if err := fsyncAt(unix.AT_FDCWD, root); err != nil {
			t.Fatalf("round %d: fsync of the mount root: %v", round, err)
		}
		rseed := seed + int64(round)
		delay := cutMinDelay + time.Duration(r.Int63n(int64(cutMaxDelay-cutMinDelay)))
		t.Logf("round %d: workload seed %d, cut after %v", round, rseed, delay)
		ws := startKillWorkers(t, filepath.Join(root, dir), rseed, 1, false, maxKillOps)
		time.Sleep(delay)
		ws.killed.Store(true)
		h.cut(r, &cs)
		stop(true)
		if err := ws.wait(workloadTimeout); err != nil {
			t.Fatalf("round %d (seed %d): %v", round, rseed, err)
		}
		j := ws.js[0]
		if j.failedEarly != nil {
			t.Fatalf("round %d (seed %d): the workload failed before the cut: %v", round, rseed, j.failedEarly)
		}
		h.restore(nil)
		opts.mountpoint = ""
		// With planted faults, a remount that refuses the log as
		// corrupt (exit 4) is the fault detected, not a test failure.
		opts.allowCorrupt = drop != nil
		root, stop = mountWorkspace(t, &opts)
		if root == "" {
			violations++
			report("round %d (seed %d): wsfs refused the state the cut left as corrupt:\n%s", round, rseed, opts.refused)
			break
		}

		var problems []string
		k, p := checkKillRound(filepath.Join(root, dir, "w0"), j)
		problems = append(problems, p...)
		problems = append(problems, checkEarlierRounds(root, dir, prev)...)
		totalOps += j.started
		totalAcked += j.acked
		if bad, err := h.poolDamage(); err != nil {
			t.Fatalf("round %d: scan the pool: %v", round, err)
		} else {
			damagedObjects += len(bad)
		}

		// Rewrite the content of the round's big creates (pooled:
		// more than the inline limit) that may not have survived, so
		// the next Put meets whatever the cut left under their names.
		n, err := redoCreates(root, fmt.Sprintf("redo%03d", round), j)
		if err != nil {
			problems = append(problems, err.Error())
		}
		redone += n
		// Keep the tree small: only the last rounds' directories.
		if old := round - keepRounds; old >= 0 {
			for _, d := range []string{fmt.Sprintf("r%03d", old), fmt.Sprintf("redo%03d", old)} {
				if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
					t.Fatalf("round %d: remove %s: %v", round, d, err)
				}
			}
		}
		if err := fsyncAt(unix.AT_FDCWD, root); err != nil {
			t.Fatalf("round %d: fsync of the mount root: %v", round, err)
		}
		if len(problems) > 0 {
			violations++
			report("round %d (workload seed %d, cut after %v; %d ops started, durable at least through op %d, recovered %d):\n  %s\n(replay: go test ./e2e -run '%s' -args -e2e.seed=%d)",
				round, rseed, delay, j.started, j.acked-1, k, strings.Join(problems, "\n  "), t.Name(), seed)
		}
		if (round+1)%100 == 0 {
			t.Logf("power cuts so far: %d, violations: %d (%v)", round+1, violations, time.Since(start).Round(time.Second))
		}
		if prev, err = snapshot(root, snapOpts{dirLink: true}); err != nil {
			if len(problems) == 0 {
				violations++
			}
			report("round %d (seed %d): read back the recovered tree: %v", round, seed, err)
			prev = nil
		}
	}
	stop(false)
	t.Logf("power cuts: %d, violations: %d", cuts, violations)
	t.Logf("ops started: %d, known durable by a returned fsync: %d; creates redone after a cut: %d; unsynced writes at the cuts: %d, kept: %d, torn: %d; damaged unreferenced pool objects seen: %d; crashfs saw %d fsyncs, %d fdatasyncs, %d directory syncs, %d writes; %v",
		totalOps, totalAcked, redone, cs.unsynced, cs.kept, cs.torn, damagedObjects,
		h.syncs.Fsyncs, h.syncs.Fdatasyncs, h.syncs.DirSyncs, h.syncs.Writes, time.Since(start).Round(time.Second))
	return violations
}

// redoCreates writes, under dir, the content of every create of j with
// more than the inline limit that ran after its last acknowledged fsync,
// fsyncs each file and the directory, and reads each back.
func redoCreates(root, dir string, j *killJournal) (int, error) {
	const inlineMax = 64 << 10
	var todo []killOp
	for _, op := range j.ops[max(0, j.acked-20):j.started] {
		if op.kind == "create" && len(op.data) > inlineMax {
			todo = append(todo, op)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	d := filepath.Join(root, dir)
	if err := os.Mkdir(d, 0o755); err != nil {
		return 0, err
	}
	for _, op := range todo {
		p := filepath.Join(d, fmt.Sprintf("op%d", op.i))
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return 0, err
		}
		_, err = f.Write(op.data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, fmt.Errorf("redo %s: %w", p, err)
		}
	}
	if err := fsyncAt(unix.AT_FDCWD, d); err != nil {
		return 0, err
	}
	for _, op := range todo {
		p := filepath.Join(d, fmt.Sprintf("op%d", op.i))
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, fmt.Errorf("read back redone %s: %w", p, err)
		}
		if !bytes.Equal(b, op.data) {
			return 0, fmt.Errorf("redone %s (content of %v) reads back wrong: %d bytes, sha256 %s", p, op, len(b), short(hashBytes(b)))
		}
	}
	return len(todo), nil
}

// TestPowerCutFreshHost cuts the power on a host made from nothing on
// crashfs: `wsfs init` and `wsfs create` (which succeeded, so the
// workspace exists), the first mount, one file written and fsynced through
// it. After the restore the workspace must mount again and hold the file:
// every directory on the way (HOME/state, STATE/workspaces, the
// workspace's log and checkpoint directories, the pool's) must have been
// made durable by whoever created it.
func TestPowerCutFreshHost(t *testing.T) {
	requireMount(t)
	base := t.TempDir()
	h := &crashHost{t: t, home: filepath.Join(base, "home")}
	r := &crashRole{name: "home", backing: filepath.Join(base, "home-backing"), mnt: h.home}
	for _, d := range []string{r.backing, r.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.roles = []*crashRole{r}
	h.mount(r)
	t.Cleanup(func() {
		if r.fs != nil {
			r.fs.Close(crashfsTimeout)
		}
		if isFUSEMount(r.mnt) {
			lazyUnmount(t, r.mnt)
		}
	})
	wsfsCommand(t, "init", "--home", h.home)
	wsfsCommand(t, "create", "--home", h.home, "ws")
	opts := mountOpts{home: h.home, name: "ws", created: true}
	root, stop := mountWorkspace(t, &opts)
	data := randData(rand.New(rand.NewSource(1)), 200<<10) // pooled, not inline
	if err := os.WriteFile(filepath.Join(root, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fsyncAt(unix.AT_FDCWD, filepath.Join(root, "f")); err != nil {
		t.Fatal(err)
	}
	if err := fsyncAt(unix.AT_FDCWD, root); err != nil {
		t.Fatal(err)
	}
	h.cut(rand.New(rand.NewSource(1)), &cutStats{})
	stop(true)
	h.restore(nil)
	opts.mountpoint = ""
	root, _ = mountWorkspace(t, &opts)
	got, err := os.ReadFile(filepath.Join(root, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the fsynced file after the power cut: %d bytes, %v (want %d bytes)", len(got), err, len(data))
	}
}
