package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/ship"
	"wsfs/internal/stress"
	"wsfs/internal/vfs"
)

// setRemote adds the remote section to HOME/wsfs.json.
func setRemote(t *testing.T, home string, cfg remote.Config) {
	t.Helper()
	path := filepath.Join(home, "wsfs.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["remote"] = cfg
	if b, err = json.MarshalIndent(m, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startShipper runs `wsfs ship NAME` as a child process until kill is
// called (SIGKILL; it returns once the process is reaped), in t.Cleanup at
// the latest.
func startShipper(t *testing.T, home, name string) (kill func()) {
	t.Helper()
	var out lockedBuffer
	cmd := exec.Command(wsfsBin, "ship", "--home", home, name)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	kill = func() {
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(killTimeout):
			t.Errorf("shipper (pid %d) not reaped", cmd.Process.Pid)
		}
	}
	t.Cleanup(func() {
		kill()
		if out.contains("WARNING: DATA RACE") {
			t.Errorf("shipper reported a data race:\n%s", out.from("WARNING: DATA RACE"))
		}
		if t.Failed() {
			t.Logf("shipper output:\n%s", tail(out.String(), 4000))
		}
	})
	return kill
}

// wsfsOutput runs a wsfs command, fails t unless it exits 0 within
// timeout, and returns its stdout.
func wsfsOutput(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, wsfsBin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("wsfs %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := rng.Uint64()
		for j := i; j < i+8 && j < n; j++ {
			b[j] = byte(v >> (8 * (j - i)))
		}
	}
	return b
}

func writeSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHostLossRemote: host A (one HOME) runs a real `wsfs mount` daemon and
// a real `wsfs ship` shipper under a workload of fsynced files (inline,
// one-object and chunked sizes; overwrites and deletes), then `wsfs sync`;
// everything of A is SIGKILLed and A's HOME deleted. Host B (another HOME)
// runs `wsfs pull`, mounts the workspace, and every file fsynced before
// the sync reads back byte-equal; nothing else is there.
func TestHostLossRemote(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t) // sets the AWS environment the children inherit
	cfg := srv.Config("hosts")
	cfg.LeaseTTLSeconds = 2 // host B may take over 2 s after A's last renewal
	seed := uint64(time.Now().UnixNano())
	if *flagSeed != 0 {
		seed = uint64(*flagSeed)
	}
	t.Logf("seed %d (-e2e.seed replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	homeA := filepath.Join(t.TempDir(), "home-a")
	wsfsCommand(t, "init", "--home", homeA)
	setRemote(t, homeA, cfg)
	optsA := &mountOpts{home: homeA, name: "ws"}
	mnt, stopA := mountWorkspace(t, optsA)
	killShipper := startShipper(t, homeA, "ws")

	want := map[string][]byte{}
	sizes := []int{10, 900, 4 << 10, 70 << 10, 300 << 10, 1<<20 + 12345, 3 << 20}
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 120; i++ {
		name := fmt.Sprintf("d/f%03d", rng.IntN(60))
		if _, ok := want[name]; ok && rng.IntN(5) == 0 {
			if err := os.Remove(filepath.Join(mnt, name)); err != nil {
				t.Fatal(err)
			}
			delete(want, name)
			continue
		}
		size := sizes[rng.IntN(len(sizes)-1)]
		if i%40 == 0 {
			size = sizes[len(sizes)-1]
		}
		data := randBytes(rng, size)
		writeSynced(t, filepath.Join(mnt, name), data)
		want[name] = data
	}
	// Durable the way a directory operation is: fsync the directory.
	if d, err := os.Open(filepath.Join(mnt, "d")); err == nil {
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	out := wsfsOutput(t, 2*time.Minute, "sync", "--home", homeA, "ws")
	t.Logf("sync: %s", strings.TrimSpace(out))

	// Lose host A.
	killShipper()
	stopA(true)
	if err := os.RemoveAll(homeA); err != nil {
		t.Fatal(err)
	}

	homeB := filepath.Join(t.TempDir(), "home-b")
	wsfsCommand(t, "init", "--home", homeB)
	setRemote(t, homeB, cfg)
	// B is refused, naming A (as "served by host" while A's lease is
	// live, "leased by host ... --steal" if init on a loaded machine took
	// longer than the TTL).
	if out, err := exec.Command(wsfsBin, "pull", "--home", homeB, "ws").CombinedOutput(); err == nil || !strings.Contains(string(out), "d by host") {
		t.Errorf("pull while A's lease is live: %v\n%s; want a refusal naming the holder", err, out)
	} else {
		t.Logf("refused while the lease is live: %s", strings.TrimSpace(string(out)))
	}
	time.Sleep(time.Duration(cfg.LeaseTTLSeconds)*time.Second + 500*time.Millisecond)
	if out, err := exec.Command(wsfsBin, "pull", "--home", homeB, "ws").CombinedOutput(); err == nil || !strings.Contains(string(out), "--steal") {
		t.Errorf("pull of an expired lease without --steal: %v\n%s; want a refusal pointing to --steal", err, out)
	}
	start := time.Now()
	out = wsfsOutput(t, 2*time.Minute, "pull", "--home", homeB, "--steal", "ws")
	t.Logf("pull (%.2fs): %s", time.Since(start).Seconds(), strings.TrimSpace(out))
	mntB, _ := mountWorkspace(t, &mountOpts{home: homeB, name: "ws", created: true})
	ents, err := os.ReadDir(filepath.Join(mntB, "d"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, "d/"+e.Name())
	}
	var wantNames []string
	for n := range want {
		wantNames = append(wantNames, n)
	}
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Fatalf("host B has %v, want %v", names, wantNames)
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(mntB, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("host B: %s differs (%d bytes, want %d)", name, len(got), len(data))
		}
	}
}

// TestRemoteLag measures, with a real daemon and shipper, how long after
// an fsync returns the remote head names the group that made it durable
// (the shipping lag as a caller sees it), during a moderate workload of
// fsynced files. WSFS_REMOTE_BENCH=N runs N files instead of 200 and
// prints the figures in Go benchmark format as well.
func TestRemoteLag(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("lag")
	n := 200
	if v := os.Getenv("WSFS_REMOTE_BENCH"); v != "" {
		fmt.Sscan(v, &n)
	}
	home := filepath.Join(t.TempDir(), "home")
	wsfsCommand(t, "init", "--home", home)
	setRemote(t, home, cfg)
	mnt, _ := mountWorkspace(t, &mountOpts{home: home, name: "ws"})
	startShipper(t, home, "ws")
	st := srv.Store(t, "lag")
	wsDir := filepath.Join(home, "state", "workspaces", "ws")
	rng := rand.New(rand.NewPCG(3, 3))
	sizes := []int{500, 2 << 10, 8 << 10, 100 << 10, 700 << 10}
	var lags []time.Duration
	var bytesWritten int64
	start := time.Now()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		data := randBytes(rng, sizes[rng.IntN(len(sizes))])
		writeSynced(t, filepath.Join(mnt, fmt.Sprintf("f%05d", i)), data)
		bytesWritten += int64(len(data))
		done := time.Now()
		if i%5 != 0 {
			continue // sample every fifth fsync, so the workload keeps running
		}
		target, err := ship.LocalLast(vfs.Default, wsDir)
		if err != nil {
			t.Fatal(err)
		}
		for {
			h, ok, err := ship.ReadHead(ctx, st, "ws")
			if err != nil {
				t.Fatal(err)
			}
			if ok && h.Group >= target {
				break
			}
			if time.Since(done) > time.Minute {
				t.Fatalf("group %d not shipped within a minute", target)
			}
			time.Sleep(2 * time.Millisecond)
		}
		lags = append(lags, time.Since(done))
	}
	elapsed := time.Since(start)
	slices.Sort(lags)
	p := func(q float64) time.Duration { return lags[min(len(lags)-1, int(float64(len(lags))*q))] }
	t.Logf("%d fsynced files, %.1f MB in %.2fs (%.1f MB/s including the sampled waits); shipping lag after fsync: p50 %v p99 %v max %v (%d samples)",
		n, float64(bytesWritten)/1e6, elapsed.Seconds(), float64(bytesWritten)/1e6/elapsed.Seconds(), p(0.5), p(0.99), lags[len(lags)-1], len(lags))
	if os.Getenv("WSFS_REMOTE_BENCH") != "" {
		fmt.Printf("BenchmarkRemoteLag/p50 1 %d ns/op\nBenchmarkRemoteLag/p99 1 %d ns/op\n", p(0.5).Nanoseconds(), p(0.99).Nanoseconds())
	}
	if stat, err := ship.ReadStatus(wsDir); err == nil {
		t.Logf("shipper status: shipped %d, uploaded %d objects (%d present), %d bytes, lag p50 %.3fs p99 %.3fs",
			stat.Shipped, stat.ObjectsUploaded, stat.ObjectsPresent, stat.BytesUploaded, stat.LagP50, stat.LagP99)
	}
}

// TestHostLossUp: host A runs `wsfs up` with two workspaces and the remote
// tier configured (so a daemon, a sidecar and a shipper each); agents write
// fsynced files and rows in their agent state databases; after `wsfs state
// sync` and `wsfs sync` everything of A is SIGKILLed (the supervisor frozen
// first, so nothing stops gracefully) and A's HOME deleted. Host B pulls
// each workspace: every fsynced file is byte-equal and every row is there.
func TestHostLossUp(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("up")
	cfg.LeaseTTLSeconds = 2
	homeA := filepath.Join(t.TempDir(), "home-a")
	wsfsCommand(t, "init", "--home", homeA)
	setRemote(t, homeA, cfg)

	var upLog lockedBuffer
	up := exec.Command(wsfsBin, "up", "--home", homeA, "--workspaces", "2", "--min-backoff", "100ms", "--max-backoff", "2s", "--metrics", "127.0.0.1:0")
	up.Stderr = &upLog
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	up.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	upDone := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		b := make([]byte, 4096)
		var seen strings.Builder
		for {
			n, err := stdout.Read(b)
			seen.Write(b[:n])
			if strings.Contains(seen.String(), "ready") {
				select {
				case <-ready:
				default:
					close(ready)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { up.Wait(); close(upDone) }()
	names := []string{"ws-1", "ws-2"}
	killAll := func() {
		// Freeze the supervisor so it neither restarts nor stops its
		// children gracefully, kill every child, then the supervisor.
		up.Process.Signal(syscall.SIGSTOP)
		if b, err := os.ReadFile(filepath.Join(homeA, "run", "up.json")); err == nil {
			var st struct {
				Children []struct{ PID int } `json:"children"`
			}
			if json.Unmarshal(b, &st) == nil {
				for _, c := range st.Children {
					if c.PID > 0 {
						syscall.Kill(c.PID, syscall.SIGKILL)
					}
				}
			}
		}
		up.Process.Kill()
		select {
		case <-upDone:
		case <-time.After(killTimeout):
			t.Errorf("wsfs up not reaped")
		}
		for _, n := range names {
			if mp := filepath.Join(homeA, "mnt", n); isFUSEMount(mp) {
				lazyUnmount(t, mp)
			}
		}
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(killAll)
		if t.Failed() {
			t.Logf("wsfs up log:\n%s", tail(upLog.String(), 6000))
		}
	})
	select {
	case <-ready:
	case <-upDone:
		t.Fatalf("wsfs up exited before ready:\n%s", upLog.String())
	case <-time.After(2 * readyTimeout):
		t.Fatalf("wsfs up not ready within %v:\n%s", 2*readyTimeout, upLog.String())
	}

	rng := rand.New(rand.NewPCG(11, 11))
	want := map[string]map[string][]byte{}
	rows := map[string]int{}
	for _, n := range names {
		want[n] = map[string][]byte{}
		mnt := filepath.Join(homeA, "mnt", n)
		for i := range 30 {
			data := randBytes(rng, []int{300, 5000, 90 << 10, 1<<20 + 7}[rng.IntN(4)])
			name := fmt.Sprintf("f%02d", i)
			writeSynced(t, filepath.Join(mnt, name), data)
			want[n][name] = data
		}
		db, err := agentstate.OpenDB(filepath.Join(homeA, "state", "workspaces", n, "agent", "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT)`); err != nil {
			t.Fatal(err)
		}
		for i := range 25 {
			if _, err := db.Exec(`INSERT INTO notes (body) VALUES (?)`, fmt.Sprintf("%s note %d", n, i)); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		rows[n] = 25
		wsfsOutput(t, 2*time.Minute, "state", "sync", "--home", homeA, n)
		out := wsfsOutput(t, 2*time.Minute, "sync", "--home", homeA, n)
		t.Logf("%s", strings.TrimSpace(out))
	}
	status := wsfsOutput(t, time.Minute, "status", "--home", homeA)
	if !strings.Contains(status, "remote ws-1: shipped group") {
		t.Errorf("wsfs status shows no remote line:\n%s", status)
	}
	t.Logf("status:\n%s", status)
	// The shippers' metrics reach the host endpoint, labelled.
	waitSeries(t, upMetricsURL(t, upLog.String()), []string{
		`wsfs_ship_shipped_group{process="shipper",workspace="ws-1"}`,
		`wsfs_ship_shipped_group{process="shipper",workspace="ws-2"}`,
		`wsfs_up_scrape_up{process="shipper",workspace="ws-2"} 1`,
	}, readyTimeout, &upLog)
	once.Do(killAll)
	if err := os.RemoveAll(homeA); err != nil {
		t.Fatal(err)
	}

	homeB := filepath.Join(t.TempDir(), "home-b")
	wsfsCommand(t, "init", "--home", homeB)
	setRemote(t, homeB, cfg)
	time.Sleep(time.Duration(cfg.LeaseTTLSeconds)*time.Second + 500*time.Millisecond)
	for _, n := range names {
		out := wsfsOutput(t, 2*time.Minute, "pull", "--home", homeB, "--steal", n)
		t.Logf("%s", strings.TrimSpace(out))
		if !strings.Contains(out, "restored the agent state") {
			t.Errorf("%s: agent state not restored: %s", n, out)
		}
		mnt, _ := mountWorkspace(t, &mountOpts{home: homeB, name: n, created: true})
		for name, data := range want[n] {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("host B: %s/%s differs (%d bytes, want %d)", n, name, len(got), len(data))
			}
		}
		db, err := agentstate.OpenDB(filepath.Join(homeB, "state", "workspaces", n, "agent", "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		var count int
		if err := db.QueryRow(`SELECT count(*) FROM notes`).Scan(&count); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if count != rows[n] {
			t.Errorf("host B: %s has %d agent rows, want %d", n, count, rows[n])
		}
	}
}

// TestRemoteProfile ships the stress harness's workload (its file set and
// size mix: most files under 4 KiB, a few up to 8 MiB) written through a
// real mount with a real shipper, and measures the shipping lag (sampled
// continuously: at each sample the last group in the log on disk, then the
// time until the remote head names it), the shipping throughput, and the
// pull time on a second host. WSFS_REMOTE_PROFILE selects the profile
// (default tiny; seed is the user's 8,000 files and 600 MB).
func TestRemoteProfile(t *testing.T) {
	requireMount(t)
	name := os.Getenv("WSFS_REMOTE_PROFILE")
	if name == "" {
		name = "tiny"
	}
	prof, err := stress.ParseProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	cfg := srv.Config("profile")
	home := filepath.Join(t.TempDir(), "home")
	wsfsCommand(t, "init", "--home", home)
	setRemote(t, home, cfg)
	mnt, stop := mountWorkspace(t, &mountOpts{home: home, name: "ws"})
	killShipper := startShipper(t, home, "ws")
	st := srv.Store(t, "profile")
	wsDir := filepath.Join(home, "state", "workspaces", "ws")
	set := stress.GenerateFiles(prof, 1, 0)

	ctx, cancel := context.WithCancel(context.Background())
	var lags []time.Duration
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			t0 := time.Now()
			target, err := ship.LocalLast(vfs.Default, wsDir)
			if err != nil || target == 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			for ctx.Err() == nil {
				h, ok, err := ship.ReadHead(context.Background(), st, "ws")
				if err == nil && ok && h.Group >= target {
					lags = append(lags, time.Since(t0))
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	start := time.Now()
	for _, d := range set.Dirs {
		if err := os.MkdirAll(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(5, 5))
	buf := randBytes(rng, stress.MaxFileSize)
	var total int64
	for i, f := range set.Files {
		data := stamp(buf, i, f.Size)
		if err := os.WriteFile(filepath.Join(mnt, f.Path), data, 0o644); err != nil {
			t.Fatal(err)
		}
		total += f.Size
	}
	written := time.Since(start)
	out := wsfsOutput(t, 10*time.Minute, "sync", "--home", home, "ws")
	shippedAll := time.Since(start)
	cancel()
	<-sampled
	slices.Sort(lags)
	q := func(p float64) time.Duration {
		if len(lags) == 0 {
			return 0
		}
		return lags[min(len(lags)-1, int(float64(len(lags))*p))]
	}
	stat, _ := ship.ReadStatus(wsDir)
	t.Logf("profile %s: %d files, %.1f MB written in %.2fs (%.1f MB/s); all shipped %.2fs after the start (%s); uploaded %.1f MB, %d objects",
		name, len(set.Files), float64(total)/1e6, written.Seconds(), float64(total)/1e6/written.Seconds(), shippedAll.Seconds(),
		strings.TrimSpace(out), float64(stat.BytesUploaded)/1e6, stat.ObjectsUploaded)
	t.Logf("shipping lag during the workload: p50 %v p99 %v max %v (%d samples); shipper's own view: p50 %.3fs p99 %.3fs",
		q(0.5), q(0.99), q(1), len(lags), stat.LagP50, stat.LagP99)
	// Where the shipper's steps spent their time (seconds, total and
	// max per phase), and its worst group's lag split in the wait for
	// its objects and the step that shipped it.
	var phases []string
	for _, k := range slices.Sorted(maps.Keys(stat.Phases)) {
		p := stat.Phases[k]
		phases = append(phases, fmt.Sprintf("%s %d× %.2fs (max %.3fs)", k, p.Count, p.TotalSeconds, p.MaxSeconds))
	}
	w := stat.WorstLag
	t.Logf("shipper's steps: %s; %d checkpoints, %d merges; worst lag: group %d %.3fs (objects %.3fs, then step %.3fs)",
		strings.Join(phases, ", "), stat.Checkpoints, stat.Merges, w.Group, w.Seconds, w.ObjectsSeconds, w.StepSeconds)
	fmt.Printf("BenchmarkRemoteProfile/%s/lag-p50 1 %d ns/op\nBenchmarkRemoteProfile/%s/lag-p99 1 %d ns/op\nBenchmarkRemoteProfile/%s/ship 1 %d ns/op %.2f MB/s\n",
		name, q(0.5).Nanoseconds(), name, q(0.99).Nanoseconds(), name, shippedAll.Nanoseconds(), float64(total)/1e6/shippedAll.Seconds())
	// Migrate: stop the daemon and the shipper, push (release), pull on B.
	stop(false)
	killShipper()
	t.Logf("%s", strings.TrimSpace(wsfsOutput(t, time.Minute, "push", "--home", home, "ws")))

	homeB := filepath.Join(t.TempDir(), "home-b")
	wsfsCommand(t, "init", "--home", homeB)
	setRemote(t, homeB, cfg)
	pstart := time.Now()
	out = wsfsOutput(t, 10*time.Minute, "pull", "--home", homeB, "--no-agent-state", "ws")
	pulled := time.Since(pstart)
	mntB, _ := mountWorkspace(t, &mountOpts{home: homeB, name: "ws", created: true})
	first := set.Files[0]
	got, err := os.ReadFile(filepath.Join(mntB, first.Path))
	if err != nil || int64(len(got)) != first.Size {
		t.Fatalf("first read on host B: %d bytes, %v", len(got), err)
	}
	firstRead := time.Since(pstart)
	t.Logf("pull on host B: %.2fs (%s); mounted and first file read %.2fs after the pull started",
		pulled.Seconds(), strings.TrimSpace(out), firstRead.Seconds())
	fmt.Printf("BenchmarkRemoteProfile/%s/pull 1 %d ns/op\nBenchmarkRemoteProfile/%s/first-read 1 %d ns/op\n", name, pulled.Nanoseconds(), name, firstRead.Nanoseconds())
	// The pull is lazy: the daemon's prefetch makes everything local
	// meanwhile. Time to all local, against the link: every object got
	// from the server with as many parallel GETs, nothing written.
	wsDirB := filepath.Join(homeB, "state", "workspaces", "ws")
	if !waitFor(10*time.Minute, func() bool {
		_, ok, _ := ship.ReadFetchState(vfs.Default, wsDirB)
		return !ok
	}) {
		t.Fatalf("host B: the prefetch did not finish within 10 minutes")
	}
	allLocal := time.Since(pstart)
	ids := map[string]bool{}
	keys, err := st.List(context.Background(), "objects/")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		ids[k] = true
	}
	lstart := time.Now()
	var linkBytes atomic.Int64
	var wg sync.WaitGroup
	work := make(chan string)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				b, err := st.Get(context.Background(), k)
				if err != nil {
					t.Error(err)
				}
				linkBytes.Add(int64(len(b)))
			}
		}()
	}
	for k := range ids {
		work <- k
	}
	close(work)
	wg.Wait()
	link := time.Since(lstart)
	t.Logf("host B: all content local %.2fs after the pull started; the link alone (GET of all %d objects, %.1f MB, 4 parallel like the prefetch): %.2fs (%.1f MB/s)",
		allLocal.Seconds(), len(ids), float64(linkBytes.Load())/1e6, link.Seconds(), float64(linkBytes.Load())/1e6/link.Seconds())
	fmt.Printf("BenchmarkRemoteProfile/%s/all-local 1 %d ns/op\nBenchmarkRemoteProfile/%s/link-get-all 1 %d ns/op %.2f MB/s\n",
		name, allLocal.Nanoseconds(), name, link.Nanoseconds(), float64(linkBytes.Load())/1e6/link.Seconds())
	// Everything is there and equal.
	for i, f := range set.Files {
		if i%17 != 0 {
			continue
		}
		got, err := os.ReadFile(filepath.Join(mntB, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		want := stamp(buf, i, f.Size)
		if !bytes.Equal(got, want) {
			t.Fatalf("host B: %s differs", f.Path)
		}
	}
}

// stamp returns buf[:size] made distinct for file i: its index at the
// start of every 64 KiB, so no chunk or object deduplicates with another
// file's.
func stamp(buf []byte, i int, size int64) []byte {
	data := buf[:size]
	for off := int64(0); off < size; off += 64 << 10 {
		copy(data[off:], fmt.Sprintf("%08d", i))
	}
	return data
}

// TestMigrateRoundTrip: push from A, pull on B, write on B, push back,
// pull on A again: every file of every step is there; while B holds the
// workspace, A can neither pull it nor ship its old copy.
func TestMigrateRoundTrip(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("migrate")
	// A name no other test mounts: wsfs rm refuses while any mount of a
	// workspace of that name exists on the machine.
	const wsName = "migrate-rt"
	homes := map[string]string{}
	for _, h := range []string{"a", "b"} {
		homes[h] = filepath.Join(t.TempDir(), "home-"+h)
		wsfsCommand(t, "init", "--home", homes[h])
		setRemote(t, homes[h], cfg)
	}
	rng := rand.New(rand.NewPCG(21, 21))
	want := map[string][]byte{}
	write := func(mnt, prefix string) {
		for i := range 10 {
			data := randBytes(rng, []int{200, 70 << 10, 1<<20 + 3}[rng.IntN(3)])
			name := fmt.Sprintf("%s%02d", prefix, i)
			writeSynced(t, filepath.Join(mnt, name), data)
			want[name] = data
		}
	}
	check := func(mnt, where string) {
		for name, data := range want {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: %s: %d bytes, %v (want %d bytes)", where, name, len(got), err, len(data))
			}
		}
	}
	// serve mounts the workspace on host h with a shipper, runs fn, stops
	// both and pushes.
	serve := func(h string, created bool, fn func(mnt string)) {
		mnt, stop := mountWorkspace(t, &mountOpts{home: homes[h], name: wsName, created: created})
		kill := startShipper(t, homes[h], wsName)
		fn(mnt)
		stop(false)
		kill()
		t.Logf("%s: %s", h, strings.TrimSpace(wsfsOutput(t, time.Minute, "push", "--home", homes[h], wsName)))
	}
	serve("a", false, func(mnt string) { write(mnt, "a") })
	// A's pushed copy is never shipped again.
	if out, err := exec.Command(wsfsBin, "sync", "--home", homes["a"], "--timeout", "5s", wsName).CombinedOutput(); err == nil || !strings.Contains(string(out), "pushed") {
		t.Errorf("sync of A's pushed copy: %v\n%s; want a refusal", err, out)
	}
	wsfsOutput(t, time.Minute, "rm", "--home", homes["a"], wsName)
	wsfsOutput(t, time.Minute, "pull", "--home", homes["b"], wsName)
	mntB, stopB := mountWorkspace(t, &mountOpts{home: homes["b"], name: wsName, created: true})
	killB := startShipper(t, homes["b"], wsName)
	check(mntB, "B after the pull")
	write(mntB, "b")
	wsfsOutput(t, time.Minute, "sync", "--home", homes["b"], wsName)
	// While B serves it, A cannot pull it.
	if out, err := exec.Command(wsfsBin, "pull", "--home", homes["a"], wsName).CombinedOutput(); err == nil || !strings.Contains(string(out), "served by host") {
		t.Errorf("pull on A while B serves: %v\n%s; want a refusal naming B", err, out)
	}
	stopB(false)
	killB()
	t.Logf("b: %s", strings.TrimSpace(wsfsOutput(t, time.Minute, "push", "--home", homes["b"], wsName)))
	wsfsOutput(t, time.Minute, "pull", "--home", homes["a"], wsName)
	mntA, _ := mountWorkspace(t, &mountOpts{home: homes["a"], name: wsName, created: true})
	check(mntA, "A after the round trip")
}
