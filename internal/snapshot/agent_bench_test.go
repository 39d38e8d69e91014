package snapshot

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/manifest"
	"wsfs/internal/vfs"
)

// The two ways a snapshot could record the agent state, measured on the
// same database (docs/benchmarks.md, "Agent state in snapshots"):
//
//	BenchmarkAgentCopy:     (a) the consistent copy snapshots take: the
//	                        backup API into a temp file, 1 MiB chunks put
//	                        into the pool and synced (10 rows changed
//	                        before each).
//	BenchmarkAgentRestore:  setting the live database back to that copy.
//	BenchmarkAgentSyncWait: (b) Litestream sync-and-wait with a running
//	                        sidecar (file replica), 10 rows changed before
//	                        each: the cost of recording a confirmed
//	                        replica position instead.
//
// go test -run '^$' -bench 'Agent(Copy|Restore|SyncWait)' -benchtime 10x ./internal/snapshot

var agentBenchSizes = []int{1, 50} // MiB

// benchAgentDB makes workspace ws's agent database of about mib MiB.
func benchAgentDB(b *testing.B, e *env, mib int) {
	path := agentstate.DBIn(e.wsDir("ws"))
	noErr(b, agentstate.Ensure(path, "ws"))
	db, err := agentstate.OpenDB(path)
	noErr(b, err)
	defer db.Close()
	_, err = db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)`)
	noErr(b, err)
	tx, err := db.Begin()
	noErr(b, err)
	for i := range mib * 256 { // 4 KiB rows
		_, err := tx.Exec(`INSERT INTO t (id, v) VALUES (?, randomblob(3900))`, i)
		noErr(b, err)
	}
	noErr(b, tx.Commit())
	_, err = db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	noErr(b, err)
}

// touchRows changes 10 rows of the benchmark database, one transaction.
func touchRows(b *testing.B, path string, i int) {
	db, err := agentstate.OpenDB(path)
	noErr(b, err)
	defer db.Close()
	_, err = db.Exec(`UPDATE t SET v = randomblob(3900) WHERE id % 997 = ? AND id < 100000`, i%997)
	noErr(b, err)
	_, err = db.Exec(`INSERT INTO t (v) VALUES (randomblob(100))`)
	noErr(b, err)
}

func BenchmarkAgentCopy(b *testing.B) {
	for _, mib := range agentBenchSizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			e := newEnv(b, vfs.Default, b.TempDir())
			benchAgentDB(b, e, mib)
			path := agentstate.DBIn(e.wsDir("ws"))
			var size uint64
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				touchRows(b, path, i)
				b.StartTimer()
				cut, err := beginAgentCut(e.wsDir("ws"))
				noErr(b, err)
				st := &manifest.PoolStore{Pool: e.pool}
				a, err := storeAgentCut(cut, st)
				noErr(b, err)
				noErr(b, st.Sync())
				closeCut(cut)
				size = a.Size
			}
			b.ReportMetric(float64(size)/(1<<20), "MiB")
		})
	}
}

func BenchmarkAgentRestore(b *testing.B) {
	for _, mib := range agentBenchSizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			e := newEnv(b, vfs.Default, b.TempDir())
			benchAgentDB(b, e, mib)
			cut, err := beginAgentCut(e.wsDir("ws"))
			noErr(b, err)
			st := &manifest.PoolStore{Pool: e.pool}
			a, err := storeAgentCut(cut, st)
			noErr(b, err)
			closeCut(cut)
			in := Info{ID: 1, Agent: a}
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				touchRows(b, agentstate.DBIn(e.wsDir("ws")), i)
				b.StartTimer()
				_, err := RestoreAgent(e.pool, e.wsDir("ws"), in)
				noErr(b, err)
			}
		})
	}
}

func BenchmarkAgentSyncWait(b *testing.B) {
	for _, mib := range agentBenchSizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			e := newEnv(b, vfs.Default, b.TempDir())
			benchAgentDB(b, e, mib)
			ctx := context.Background()
			s, err := agentstate.Start(ctx, agentstate.Options{
				Workspace: "ws", DBPath: agentstate.DBIn(e.wsDir("ws")),
				ReplicaURL: filepath.Join(e.root, "replica"), SyncInterval: time.Hour,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			noErr(b, err)
			defer s.Close(ctx)
			_, err = s.Sync(ctx) // the initial snapshot of the database
			noErr(b, err)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				touchRows(b, agentstate.DBIn(e.wsDir("ws")), i)
				b.StartTimer()
				_, err := s.Sync(ctx)
				noErr(b, err)
			}
		})
	}
}
