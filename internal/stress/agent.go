package stress

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/zeebo/blake3"

	"wsfs/internal/agentstate"
)

// Phase names, in the order the agent runs them.
const (
	PhaseWrite     = "write"
	PhaseRead      = "read"
	PhaseOverwrite = "overwrite"
	PhaseRename    = "rename"
	PhaseDelete    = "delete"
	PhaseWalk      = "walk"
)

// Phases lists the workload phases in order.
var Phases = []string{PhaseWrite, PhaseRead, PhaseOverwrite, PhaseRename, PhaseDelete, PhaseWalk}

// Latency sample kinds recorded by the agent.
const (
	OpWrite          = "write"            // open(O_CREAT|O_TRUNC) + write + close
	OpRead           = "read"             // open + read to EOF + close
	OpFsync          = "fsync"            // the fsync call alone
	OpCloseToDurable = "close_to_durable" // from close after writing to fsync returning
)

// Workload fractions after the read-back phase.
const (
	OverwriteShare = 0.20
	RenameShare    = 0.10
	DeleteShare    = 0.30
	// DefaultFsyncEvery is how often every arm fsyncs a written file (as an
	// agent does when it saves something that matters).
	DefaultFsyncEvery = 50
	// progressEvery is how many files pass between progress rows in the
	// agent's state database.
	progressEvery = 100
)

// AgentConfig configures one stub agent.
type AgentConfig struct {
	Root       string  // the workspace tree the agent works in; must exist and be empty
	StatePath  string  // the agent's SQLite state database (WSFS_AGENT_STATE)
	Profile    Profile // workload size
	Seed       int64
	Workspace  int // index of the workspace, part of the seed
	FsyncEvery int // fsync every Nth written file (1 = every file); 0 means DefaultFsyncEvery
	// Progress, if set, is called after every file and at each phase end
	// with the phase, files done in it and the phase total.
	Progress func(phase string, done, total int)
}

// AgentResult is what an agent reports to the harness, as JSON.
type AgentResult struct {
	Workspace int                `json:"workspace"`
	Files     int                `json:"files"`
	WallNs    int64              `json:"wall_ns"`
	PhaseNs   map[string]int64   `json:"phase_ns"`
	Samples   map[string][]int64 `json:"samples_ns,omitempty"` // raw latency samples per op kind
	// Latency summarises Samples; the harness fills it in and keeps only
	// the summaries in results.json (the raw samples stay in the agent's
	// result file under OUT/logs).
	Latency      map[string]LatencySummary `json:"latency,omitempty"`
	BytesWritten int64                     `json:"bytes_written"`
	BytesRead    int64                     `json:"bytes_read"`
	Fsyncs       int                       `json:"fsyncs"`
	// Verified is true only when every byte read back matched and the final
	// tree equalled the model.
	Verified bool   `json:"verified"`
	Error    string `json:"error,omitempty"`
}

// MismatchError reports data or tree that differs from the model.
type MismatchError struct {
	Phase string
	Path  string
	What  string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("verification failed in %s phase: %s: %s", e.Phase, e.Path, e.What)
}

// modelFile is the agent's expectation of one file.
type modelFile struct {
	id      int
	path    string
	size    int64
	version int
	hash    [32]byte
	touched bool // changed after the read-back phase: verified again in the walk
	deleted bool
}

// Agent runs the workload. Create it with NewAgent (which does all the
// preparation that must not be timed), then call Run once.
type Agent struct {
	cfg     AgentConfig
	set     *FileSet
	files   []*modelFile
	db      *sql.DB
	buf     []byte
	res     *AgentResult
	written int // files written so far, across phases (drives FsyncEvery)
}

// NewAgent generates the file set and opens the state database.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.FsyncEvery <= 0 {
		cfg.FsyncEvery = DefaultFsyncEvery
	}
	if cfg.Root == "" || cfg.StatePath == "" {
		return nil, errors.New("agent: Root and StatePath are required")
	}
	ents, err := os.ReadDir(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("agent: workspace tree: %w", err)
	}
	if len(ents) != 0 {
		return nil, fmt.Errorf("agent: workspace tree %s is not empty (%d entries); the harness gives every run a fresh directory", cfg.Root, len(ents))
	}
	db, err := openState(cfg.StatePath)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg,
		set: GenerateFiles(cfg.Profile, cfg.Seed, cfg.Workspace),
		db:  db,
		buf: make([]byte, MaxFileSize),
		res: &AgentResult{
			Workspace: cfg.Workspace,
			PhaseNs:   map[string]int64{},
			Samples:   map[string][]int64{},
		},
	}
	a.res.Files = len(a.set.Files)
	for _, f := range a.set.Files {
		a.files = append(a.files, &modelFile{id: f.ID, path: f.Path, size: f.Size})
	}
	return a, nil
}

// openState opens the agent's state database with agentstate.OpenDB, as a
// real agent does (WAL mode, wal_autocheckpoint=0: checkpoints are left to
// the replication sidecar, see the agentstate package doc), and creates the
// progress table, as a real agent keeps its session state in SQLite. The
// database may already exist: in the wsfs arms the sidecar creates it
// before the agent starts.
func openState(path string) (*sql.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("agent state: %w", err)
	}
	db, err := agentstate.OpenDB(path)
	if err != nil {
		return nil, err
	}
	// One connection: the agent writes serially, and a single connection
	// keeps the pool from opening (and, on close, checkpointing) others.
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(ProgressTableSQL); err != nil {
		db.Close()
		return nil, fmt.Errorf("agent state %s: create progress table: %w", path, err)
	}
	return db, nil
}

// ProgressTableSQL creates the agent's progress table: one row every
// progressEvery files of a phase and one at each phase end ("PHASE:done").
const ProgressTableSQL = `CREATE TABLE IF NOT EXISTS progress (
	id INTEGER PRIMARY KEY,
	phase TEXT NOT NULL,
	files_done INTEGER NOT NULL,
	at_unix_ns INTEGER NOT NULL)`

// Close closes the state database.
func (a *Agent) Close() error { return a.db.Close() }

// TotalBytes is the size of the file set the agent writes in its write phase.
func (a *Agent) TotalBytes() int64 { return a.set.TotalBytes() }

// Run executes every phase once. It always returns the result; a non-nil
// error (also recorded in the result) means the run failed, and a
// *MismatchError means the data or the tree was wrong.
func (a *Agent) Run(ctx context.Context) (*AgentResult, error) {
	start := time.Now()
	err := a.run(ctx)
	a.res.WallNs = int64(time.Since(start))
	a.res.Verified = err == nil
	if err != nil {
		a.res.Error = err.Error()
	}
	return a.res, err
}

func (a *Agent) run(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{PhaseWrite, a.writePhase},
		{PhaseRead, a.readPhase},
		{PhaseOverwrite, a.overwritePhase},
		{PhaseRename, a.renamePhase},
		{PhaseDelete, a.deletePhase},
		{PhaseWalk, a.walkPhase},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.fn(ctx); err != nil {
			return err
		}
		a.res.PhaseNs[s.name] = int64(time.Since(t))
		if err := a.record(s.name, -1); err != nil {
			return err
		}
	}
	return nil
}

// record inserts a progress row; done < 0 marks the end of the phase.
func (a *Agent) record(phase string, done int) error {
	if done < 0 {
		phase += ":done"
		done = 0
	}
	if _, err := a.db.Exec(`INSERT INTO progress(phase, files_done, at_unix_ns) VALUES (?, ?, ?)`,
		phase, done, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("agent state: record progress: %w", err)
	}
	return nil
}

func (a *Agent) step(ctx context.Context, phase string, done, total int) error {
	if a.cfg.Progress != nil {
		a.cfg.Progress(phase, done, total)
	}
	if done%progressEvery == 0 {
		if err := a.record(phase, done); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (a *Agent) abs(rel string) string { return filepath.Join(a.cfg.Root, filepath.FromSlash(rel)) }

func (a *Agent) sample(kind string, d time.Duration) {
	a.res.Samples[kind] = append(a.res.Samples[kind], int64(d))
}

// content fills a.buf[:size] with the deterministic bytes of file id at
// version and returns them with their hash.
func (a *Agent) content(id, version int, size int64) ([]byte, [32]byte) {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], uint64(a.cfg.Seed))
	binary.LittleEndian.PutUint64(key[8:], uint64(a.cfg.Workspace))
	binary.LittleEndian.PutUint64(key[16:], uint64(id))
	binary.LittleEndian.PutUint64(key[24:], uint64(version))
	b := a.buf[:size]
	_, _ = rand.NewChaCha8(key).Read(b) // never fails
	return b, blake3.Sum256(b)
}

// writeFile writes f's current version with open-write-close, and fsyncs it
// (reopen, fsync, close) when it is an FsyncEvery-th written file.
func (a *Agent) writeFile(f *modelFile) error {
	data, sum := a.content(f.id, f.version, f.size)
	p := a.abs(f.path)
	t0 := time.Now()
	h, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := h.Write(data); err != nil {
		h.Close()
		return err
	}
	if err := h.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.path, err)
	}
	closed := time.Now()
	a.sample(OpWrite, closed.Sub(t0))
	f.hash = sum
	a.res.BytesWritten += f.size
	a.written++
	if a.written%a.cfg.FsyncEvery == 0 {
		h, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		ts := time.Now()
		err = h.Sync()
		te := time.Now()
		if cerr := h.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("fsync %s: %w", f.path, err)
		}
		a.res.Fsyncs++
		a.sample(OpFsync, te.Sub(ts))
		a.sample(OpCloseToDurable, te.Sub(closed))
	}
	return nil
}

func (a *Agent) writePhase(ctx context.Context) error {
	for _, d := range a.set.Dirs {
		if err := os.Mkdir(a.abs(d), 0o755); err != nil {
			return fmt.Errorf("write phase: mkdir %s: %w", d, err)
		}
	}
	for i, f := range a.files {
		if err := a.writeFile(f); err != nil {
			return fmt.Errorf("write phase: %s: %w", f.path, err)
		}
		if err := a.step(ctx, PhaseWrite, i+1, len(a.files)); err != nil {
			return err
		}
	}
	return nil
}

// readVerify reads f back in full and compares length and hash with the
// model. It returns how long open-read-close took.
func (a *Agent) readVerify(phase string, f *modelFile) (time.Duration, error) {
	t0 := time.Now()
	h, err := os.Open(a.abs(f.path))
	if err != nil {
		return 0, fmt.Errorf("%s phase: %s: %w", phase, f.path, err)
	}
	// Read one byte past the expected size so a longer file is caught.
	n, err := io.ReadFull(h, a.buf[:min(f.size+1, int64(len(a.buf)))])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		h.Close()
		return 0, fmt.Errorf("%s phase: read %s: %w", phase, f.path, err)
	}
	if cerr := h.Close(); cerr != nil {
		return 0, fmt.Errorf("%s phase: close %s: %w", phase, f.path, cerr)
	}
	d := time.Since(t0)
	a.res.BytesRead += int64(n)
	if int64(n) != f.size {
		return d, &MismatchError{Phase: phase, Path: f.path, What: fmt.Sprintf("read %d bytes, want %d (version %d)", n, f.size, f.version)}
	}
	if blake3.Sum256(a.buf[:n]) != f.hash {
		return d, &MismatchError{Phase: phase, Path: f.path, What: fmt.Sprintf("content hash differs from what was written (size %d, version %d)", f.size, f.version)}
	}
	return d, nil
}

func (a *Agent) readPhase(ctx context.Context) error {
	for i, f := range a.files {
		d, err := a.readVerify(PhaseRead, f)
		if err != nil {
			return err
		}
		a.sample(OpRead, d)
		if err := a.step(ctx, PhaseRead, i+1, len(a.files)); err != nil {
			return err
		}
	}
	return nil
}

// pick returns share of the live files, chosen deterministically by stream.
func (a *Agent) pick(stream uint64, share float64) []*modelFile {
	var live []*modelFile
	for _, f := range a.files {
		if !f.deleted {
			live = append(live, f)
		}
	}
	r := rng(a.cfg.Seed, a.cfg.Workspace, stream)
	r.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	n := int(share*float64(len(a.files)) + 0.5)
	return live[:min(n, len(live))]
}

func (a *Agent) overwritePhase(ctx context.Context) error {
	sel := a.pick(4, OverwriteShare)
	for i, f := range sel {
		f.version++
		f.touched = true
		if err := a.writeFile(f); err != nil {
			return fmt.Errorf("overwrite phase: %s: %w", f.path, err)
		}
		if err := a.step(ctx, PhaseOverwrite, i+1, len(sel)); err != nil {
			return err
		}
	}
	return nil
}

func (a *Agent) renamePhase(ctx context.Context) error {
	sel := a.pick(5, RenameShare)
	r := rng(a.cfg.Seed, a.cfg.Workspace, 6)
	dirs := append([]string{""}, a.set.Dirs...)
	for i, f := range sel {
		d := dirs[r.IntN(len(dirs))]
		name := fmt.Sprintf("r%05d%s", f.id, filepath.Ext(f.path))
		np := name
		if d != "" {
			np = d + "/" + name
		}
		if err := os.Rename(a.abs(f.path), a.abs(np)); err != nil {
			return fmt.Errorf("rename phase: %s -> %s: %w", f.path, np, err)
		}
		f.path = np
		f.touched = true
		if err := a.step(ctx, PhaseRename, i+1, len(sel)); err != nil {
			return err
		}
	}
	return nil
}

func (a *Agent) deletePhase(ctx context.Context) error {
	sel := a.pick(7, DeleteShare)
	for i, f := range sel {
		if err := os.Remove(a.abs(f.path)); err != nil {
			return fmt.Errorf("delete phase: %s: %w", f.path, err)
		}
		f.deleted = true
		if err := a.step(ctx, PhaseDelete, i+1, len(sel)); err != nil {
			return err
		}
	}
	return nil
}

// walkPhase walks the tree and compares it with the model: the same
// directories, the same files with the same sizes, nothing else. Files
// changed after the read-back phase (overwritten or renamed) are read and
// verified again, so every byte the agent wrote has been checked once.
func (a *Agent) walkPhase(ctx context.Context) error {
	want := map[string]*modelFile{}
	for _, f := range a.files {
		if !f.deleted {
			want[f.path] = f
		}
	}
	wantDirs := map[string]bool{}
	for _, d := range a.set.Dirs {
		wantDirs[d] = true
	}
	seen := 0
	var problems []error
	err := filepath.WalkDir(a.cfg.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk phase: %w", err)
		}
		rel, rerr := filepath.Rel(a.cfg.Root, p)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		switch {
		case d.IsDir():
			if !wantDirs[rel] {
				problems = append(problems, &MismatchError{Phase: PhaseWalk, Path: rel, What: "unexpected directory"})
			}
			delete(wantDirs, rel)
		case d.Type().IsRegular():
			f, ok := want[rel]
			if !ok {
				problems = append(problems, &MismatchError{Phase: PhaseWalk, Path: rel, What: "unexpected file (deleted or renamed away)"})
				return nil
			}
			delete(want, rel)
			info, ierr := d.Info()
			if ierr != nil {
				return fmt.Errorf("walk phase: stat %s: %w", rel, ierr)
			}
			if info.Size() != f.size {
				problems = append(problems, &MismatchError{Phase: PhaseWalk, Path: rel, What: fmt.Sprintf("size %d, want %d", info.Size(), f.size)})
			}
			seen++
			if err := a.step(ctx, PhaseWalk, seen, len(want)+seen); err != nil {
				return err
			}
		default:
			problems = append(problems, &MismatchError{Phase: PhaseWalk, Path: rel, What: "unexpected file type " + d.Type().String()})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for p := range want {
		problems = append(problems, &MismatchError{Phase: PhaseWalk, Path: p, What: "missing file"})
	}
	for p := range wantDirs {
		problems = append(problems, &MismatchError{Phase: PhaseWalk, Path: p, What: "missing directory"})
	}
	if len(problems) > 0 {
		sort.Slice(problems, func(i, j int) bool { return problems[i].Error() < problems[j].Error() })
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Errorf("... and %d more", len(problems)-10))
		}
		return errors.Join(problems...)
	}
	for _, f := range a.files {
		if f.deleted || !f.touched {
			continue
		}
		if _, err := a.readVerify(PhaseWalk, f); err != nil {
			return err
		}
	}
	return nil
}
