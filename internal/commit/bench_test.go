package commit

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"wsfs/internal/objid"
	"wsfs/internal/pool"
	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
)

// BenchmarkCommit measures committed records per second through the real
// log and pool on the real disk (vfs.Default, in a fresh temp directory per
// run), for both drains, two payloads and with or without a neighbour that
// keeps gigabytes of unrelated dirty pages on the same filesystem.
//
// One op is one record. A single producer enqueues b.N records as fast as
// backpressure allows (the way completed operations never wait for the
// commit), then a Barrier waits until all are durable; the time includes
// that last commit. For the pooled payload the producer also writes and
// hashes each 256 KiB object (pool.Put: temp + link, no sync), so the
// numbers are for the whole path of a large file's close.
//
//   - payload=inline2KiB: 2 KiB records, no pool object (one log append and
//     fdatasync per group).
//   - payload=pooled256KiB: small records each referencing a new 256 KiB
//     object (entry: fdatasync of each object and of its fan-out directory
//     per group).
//   - neighbour=dirty: `dd if=/dev/zero of=DIR/big bs=1M count=2048` in a
//     loop (buffered, no conv=fsync) on the same filesystem, started with the
//     first dirty sub-benchmark and kept running through them: a tenant
//     writing new data as fast as it can (each pass truncates, so the
//     blocks are allocated again at writeback). The neighbour dirties
//     pages at a few hundred MB/s here; with the syncfs drain every group
//     pays for writing back whatever it dirtied since the previous group,
//     so Dirty stays low during those runs (the pathology of the user's
//     story: ~25 MB dirty instead of gigabytes).
//
// Metrics: records/s, MB/s (payload bytes), groups per run, the mean drain
// and log-sync time per group (from the Observer), and Dirty from
// /proc/meminfo when the timed part starts.
//
// Keep runs short; -bench matches each level of the name separately, e.g.
//
//	go test ./internal/commit -run '^$' -bench 'Commit/drain=/payload=inline' -benchtime 20000x
//	go test ./internal/commit -run '^$' -bench 'Commit/drain=/payload=pooled' -benchtime 400x
func BenchmarkCommit(b *testing.B) {
	for _, neighbour := range []string{"none", "dirty"} {
		// The neighbour starts with the first dirty sub-benchmark that
		// -bench selects, and runs until the last one is done.
		neighbourDir := b.TempDir()
		var stop func() error
		for _, drain := range []Drain{DrainEntry, DrainSyncFS} {
			for _, pl := range []benchPayload{{"inline2KiB", 2 << 10, false}, {"pooled256KiB", 256 << 10, true}} {
				name := fmt.Sprintf("drain=%s/payload=%s/neighbour=%s", drain, pl.name, neighbour)
				b.Run(name, func(b *testing.B) {
					if neighbour == "dirty" && stop == nil {
						stop = startDirtyNeighbour(b, neighbourDir)
					}
					benchCommit(b, drain, pl)
				})
			}
		}
		if stop != nil {
			if err := stop(); err != nil {
				b.Errorf("dirty neighbour: %v", err)
			}
		}
	}
}

type benchPayload struct {
	name   string
	size   int
	pooled bool
}

type benchObserver struct {
	mu                 sync.Mutex
	groups             int
	drainSum, syncSum  time.Duration
	recordsSum, maxRec int
}

func (o *benchObserver) GroupCommitted(s GroupStats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.groups++
	o.drainSum += s.Drain
	o.syncSum += s.LogSync
	o.recordsSum += s.Records
	o.maxRec = max(o.maxRec, s.Records)
}

func benchCommit(b *testing.B, drain Drain, pl benchPayload) {
	dir := b.TempDir()
	fsys := vfs.Default
	p, err := pool.Open(fsys, filepath.Join(dir, "pool"), pool.Options{})
	if err != nil {
		b.Fatal(err)
	}
	logDir := filepath.Join(dir, "state", "log")
	l, err := seglog.Open(fsys, logDir, seglog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	obs := &benchObserver{}
	c := New(l, p, Options{
		Drain:       drain,
		StateSyncFS: func() error { return fsys.SyncFS(logDir) },
		Observer:    obs,
		Logger:      slog.New(slog.DiscardHandler),
	})

	payload := make([]byte, pl.size)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := 0; i+8 <= len(payload); i += 8 {
		binary.LittleEndian.PutUint64(payload[i:], rng.Uint64())
	}
	b.SetBytes(int64(pl.size))
	dirtyStart := dirtyMB()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		binary.LittleEndian.PutUint64(payload, uint64(i)) // every object new
		var r Record
		if pl.pooled {
			id, _, err := p.Put(payload)
			if err != nil {
				b.Fatal(err)
			}
			r = Record{Data: []byte("file " + strconv.Itoa(i) + " " + id.String()), Objects: []objid.ID{id}}
		} else {
			r = Record{Data: append([]byte(nil), payload...)}
		}
		if _, err := enqueue(c, r); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.Barrier(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	obs.mu.Lock()
	defer obs.mu.Unlock()
	b.ReportMetric(float64(obs.groups), "groups")
	if obs.groups > 0 {
		b.ReportMetric(float64(obs.drainSum.Microseconds())/1000/float64(obs.groups), "drain-ms/group")
		b.ReportMetric(float64(obs.syncSum.Microseconds())/1000/float64(obs.groups), "logsync-ms/group")
	}
	b.ReportMetric(dirtyStart, "dirtyMB-start")
}

// startDirtyNeighbour runs dd in a loop writing a 2 GiB file in dir,
// buffered, and returns once 1 GiB of it exists. stop ends the loop, waits
// for it and returns the error that ended it early, if any; the file goes
// with dir.
func startDirtyNeighbour(b *testing.B, dir string) (stop func() error) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	big := filepath.Join(dir, "big")
	done := make(chan struct{})
	var ddErr error // set before done is closed
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cmd := exec.CommandContext(ctx, "dd", "if=/dev/zero", "of="+big, "bs=1M", "count=2048", "status=none")
			if out, err := cmd.CombinedOutput(); err != nil && ctx.Err() == nil {
				ddErr = fmt.Errorf("dd: %v: %s", err, out)
				return
			}
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		if fi, err := vfs.Default.Stat(big); err == nil && fi.Size() >= 1<<30 {
			break
		}
		select {
		case <-done:
			cancel()
			b.Fatalf("the dirty neighbour stopped: %v", ddErr)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			b.Fatalf("the dirty neighbour did not write 1 GiB within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Logf("dirty neighbour running; Dirty %.0f MB", dirtyMB())
	return func() error {
		cancel()
		<-done
		return ddErr
	}
}

// dirtyMB returns Dirty from /proc/meminfo in MB (0 if unreadable).
func dirtyMB() float64 {
	f, err := vfs.Default.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "Dirty:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1000
		}
	}
	return 0
}
