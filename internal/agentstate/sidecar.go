package agentstate

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"

	"wsfs/internal/peercred"
	"wsfs/internal/unixsock"
	"wsfs/internal/vfs"
)

// Options configure a Sidecar.
type Options struct {
	// Workspace names the workspace (for logs and the status file).
	Workspace string
	// DBPath is the agent's state database. Created (WAL mode) if missing.
	DBPath string
	// ReplicaURL is the replica: a directory path (file replica) or a
	// Litestream replica URL. Required.
	ReplicaURL string
	// SocketPath, if set, is where the sidecar listens for sync requests
	// (RequestSync). A stale socket left by a killed sidecar is replaced.
	SocketPath string
	// StatusPath, if set, is rewritten every StatusInterval with a Status.
	StatusPath string
	// SyncInterval is how often Litestream looks at the WAL and uploads new
	// transactions: the window an unconfirmed transaction can be lost in.
	// Default 1s.
	SyncInterval time.Duration
	// StatusInterval is how often the status file is rewritten. Default 1s.
	StatusInterval time.Duration
	// CheckTimeout bounds the start-up reachability check of the replica.
	// Default 10s.
	CheckTimeout time.Duration
	// ShutdownSyncTimeout bounds Close (final sync and release). Default
	// 20s: below the supervisor's default stop timeout of 30s.
	ShutdownSyncTimeout time.Duration
	// LockHeld says the caller holds the sidecar lock (LockSidecar) for
	// the sidecar's whole run, as `wsfs push` does while it replicates
	// once before it ships: Start then neither takes it nor, at Close,
	// releases it.
	LockHeld bool
	// Logger receives the sidecar's and Litestream's messages.
	Logger *slog.Logger
}

// Position is a confirmed replica position: every Litestream transaction up
// to TXID (and so every SQLite transaction they cover) is in the replica.
type Position struct {
	TXID uint64    `json:"txid"`
	At   time.Time `json:"at"` // when it was confirmed
}

func (p Position) String() string {
	return fmt.Sprintf("txid %s (%d) confirmed at %s", ltx.TXID(p.TXID), p.TXID, p.At.UTC().Format(time.RFC3339Nano))
}

// Status is what a running sidecar reports about itself.
type Status struct {
	Workspace string `json:"workspace"`
	PID       int    `json:"pid"`
	DB        string `json:"db"`
	Replica   string `json:"replica"`
	// LocalTXID is the last Litestream transaction (one LTX file; it covers
	// every SQLite transaction committed since Litestream's previous look at
	// the WAL, at most one SyncInterval ago). Litestream TXIDs count syncs,
	// not SQLite transactions.
	LocalTXID uint64 `json:"local_txid"`
	// ReplicaTXID is the last Litestream transaction the replica has
	// acknowledged.
	ReplicaTXID uint64 `json:"replica_txid"`
	// LastSyncAt is the last time a replica sync succeeded (zero: never).
	LastSyncAt time.Time `json:"last_sync_at"`
	// UpdatedAt is when this status was written; a status much older than
	// the status interval belongs to a sidecar that is no longer running.
	UpdatedAt time.Time `json:"updated_at"`
	// Error is the last replication error, empty once a sync succeeds again.
	Error string `json:"error,omitempty"`
}

// Lag is the number of Litestream transactions (LTX files) taken from the
// WAL but not yet acknowledged by the replica.
func (s Status) Lag() uint64 {
	if s.LocalTXID > s.ReplicaTXID {
		return s.LocalTXID - s.ReplicaTXID
	}
	return 0
}

// Sidecar replicates one agent state database. Create it with Start; stop it
// with Close. Its methods are safe for concurrent use.
type Sidecar struct {
	opts   Options
	log    *slog.Logger
	db     *litestream.DB
	store  *litestream.Store
	lock   io.Closer
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		lastErr string
		closed  bool
	}
}

// Start checks the replica, creates the database if needed and starts
// replicating it. It returns an error (and replicates nothing) if the
// replica cannot be reached, if another sidecar already serves the same
// socket, or if the database cannot be opened.
func Start(ctx context.Context, opts Options) (*Sidecar, error) {
	if opts.DBPath == "" || opts.ReplicaURL == "" {
		return nil, errors.New("agentstate: DBPath and ReplicaURL are required")
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = time.Second
	}
	if opts.StatusInterval <= 0 {
		opts.StatusInterval = time.Second
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 10 * time.Second
	}
	if opts.ShutdownSyncTimeout <= 0 {
		opts.ShutdownSyncTimeout = 20 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("workspace", opts.Workspace)
	s := &Sidecar{opts: opts, log: log}

	if err := vfs.MkdirAllDurable(vfs.Default, filepath.Dir(opts.DBPath), dirPerm); err != nil {
		return nil, fmt.Errorf("create agent state directory: %w", err)
	}
	client, err := NewReplicaClient(opts.ReplicaURL)
	if err == nil {
		err = CheckReplica(ctx, client, opts.ReplicaURL, opts.CheckTimeout)
	}
	if err != nil {
		// The database exists (unreplicated) even when the replica cannot
		// be reached, so the agent can keep its state locally meanwhile;
		// the next start checks it against the replica as below.
		return nil, errors.Join(err, Ensure(opts.DBPath, opts.Workspace))
	}
	// One sidecar per database: two would upload conflicting LTX files.
	var lock io.Closer = heldLock{}
	if !opts.LockHeld {
		lock, err = LockSidecar(opts.DBPath)
	}
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("another sidecar is already replicating %s: %w", opts.DBPath, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock agent state: %w", err)
	}
	s.lock = lock
	// Never replicate a database that has not replicated from here over a
	// replica that holds state (adopt.go), and create none then: the
	// refusal leaves the path free for `wsfs state restore`.
	adopted, err := checkReplicaBehind(ctx, client, opts.DBPath, opts.ReplicaURL, opts.CheckTimeout)
	if err == nil {
		err = Ensure(opts.DBPath, opts.Workspace)
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	fail := func(err error) (*Sidecar, error) {
		if s.ln != nil {
			s.ln.Close()
		}
		lock.Close()
		return nil, err
	}
	db := litestream.NewDB(opts.DBPath)
	db.MonitorInterval = opts.SyncInterval
	db.ShutdownSyncTimeout = opts.ShutdownSyncTimeout
	r := litestream.NewReplicaWithClient(db, client)
	r.SyncInterval = opts.SyncInterval
	db.Replica = r
	levels := litestream.CompactionLevels{
		{Level: 0},
		{Level: 1, Interval: 30 * time.Second},
		{Level: 2, Interval: 5 * time.Minute},
		{Level: 3, Interval: time.Hour},
	}
	store := litestream.NewStore([]*litestream.DB{db}, levels)
	// NewStore gives its databases (and through them the replica clients)
	// a logger derived from slog.Default(); set ours afterwards so that
	// Litestream's messages reach Options.Logger with the workspace name.
	store.Logger = log
	db.SetLogger(log.With("db", filepath.Base(opts.DBPath)))
	store.SetShutdownSyncTimeout(opts.ShutdownSyncTimeout)

	// Catch up, then upload a full snapshot taken from the database itself.
	// A latest-state restore starts from the newest snapshot, so it never
	// depends on the incremental files Litestream writes while reconciling
	// the WAL after a crash or a checkpoint it did not see; in wsfs's tests
	// (Litestream v0.5.18) those lost a page now and then after a sidecar
	// was killed and the application checkpointed before the restart
	// (upstream: benbjohnson/litestream#1164, #1198). Agent state databases
	// are small; the snapshot is cheap.
	//
	// The snapshot is taken with the database open but before the store
	// is: Store.Open starts the snapshot monitor (on a 1 ns timer, then
	// once per SnapshotInterval), which writes the same file, level 9 TXIDs
	// 1..N, whenever the replica's newest snapshot predates the last
	// interval boundary, as on a fresh replica. The file replica client
	// writes every file through the fixed temporary name FILE.tmp
	// (O_TRUNC, no lock), so two concurrent writers of one snapshot
	// interleave their bytes and leave a snapshot that fails its file
	// checksum; every latest-state restore then fails until the monitor's
	// next snapshot, at the next SnapshotInterval boundary (24 h). That
	// happened in about one start in ten under -race (see
	// TestStartupSnapshotRoundTrips). Here no monitor runs yet, so ours is
	// the only snapshot writer; once the monitor runs, it finds ours (via
	// DB.MaxLTXFileInfo, which Snapshot updates) newer than the last
	// boundary and skips, or, if a boundary passed meanwhile, writes its
	// own after ours has finished. The monitor is a single goroutine, so
	// from then on snapshots never overlap. DB.Open is idempotent
	// (v0.5.18: "already open"), so Store.Open's own call leaves the
	// database as opened here.
	if err := durableLTXDirs(db); err != nil {
		return fail(err)
	}
	if err := db.Open(); err != nil {
		return fail(fmt.Errorf("start replication of %s: %w", opts.DBPath, err))
	}
	s.db = db
	if err := s.snapshot(ctx); err != nil {
		s.setErr(err)
		log.Error("start-up snapshot failed; the store's snapshot monitor takes one, and the next start retries", "err", err)
	} else if adopted {
		// Litestream's local files hold the position now.
		if err := dropAdoption(opts.DBPath); err != nil {
			log.Error("remove the adoption record", "err", err)
		}
	}
	// The first sync ran Litestream's initialisation, which removes and
	// recreates the L0 directory (plain MkdirAll) when it finds the
	// replica ahead of the local files.
	if err := durableLTXDirs(db); err != nil {
		db.Close(context.Background())
		return fail(err)
	}
	if err := store.Open(ctx); err != nil {
		db.Close(context.Background())
		return fail(fmt.Errorf("start replication of %s: %w", opts.DBPath, err))
	}
	s.store = store

	if opts.SocketPath != "" {
		// We hold the lock, so any socket file is a dead sidecar's.
		if err := vfs.Default.Remove(opts.SocketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			store.Close(context.Background())
			return fail(fmt.Errorf("remove stale socket: %w", err))
		}
		ln, err := unixsock.Listen(opts.SocketPath)
		if err != nil {
			store.Close(context.Background())
			return fail(err)
		}
		// Private like the database beside it (the umask left it 0755).
		if err := os.Chmod(opts.SocketPath, 0o600); err != nil {
			ln.Close()
			vfs.Default.Remove(opts.SocketPath)
			store.Close(context.Background())
			return fail(fmt.Errorf("listen on %s: %w", opts.SocketPath, err))
		}
		s.ln = ln
	}

	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if s.ln != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.serve(bg) }()
	}
	if opts.StatusPath != "" {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.statusLoop(bg) }()
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.shrinkWatch(bg) }()
	log.Info("replicating agent state", "db", opts.DBPath, "replica", opts.ReplicaURL, "sync_interval", opts.SyncInterval)
	return s, nil
}

// heldLock stands for a sidecar lock that the caller holds
// (Options.LockHeld): closing it releases nothing.
type heldLock struct{}

func (heldLock) Close() error { return nil }

// durableLTXDirs makes the directory chain of Litestream's local LTX files
// (DIR/.state.db-litestream/ltx/0 beside the database) durable: it creates
// what is missing and syncs every directory of the chain into its parent,
// also when the chain already exists (an older wsfs, or Litestream itself,
// made it with a plain MkdirAll).
//
// Litestream fsyncs each L0 file and the L0 directory, but never the
// directories above it. Without this a power cut lost the whole chain
// after every start: the next start found no local position ("detected
// database behind replica db_txid=0"), fetched the replica's last file and
// converted the entire database and WAL into a new LTX file, then
// uploaded it. On a slow disk that full conversion held Litestream's
// executor for longer than every sync request's timeout (e2e
// TestPowerCutUp: "wait for db sync executor: context deadline exceeded"
// for a minute). With the chain durable, a restart after a power cut
// resumes from the last local LTX file like a restart after a kill.
func durableLTXDirs(db *litestream.DB) error {
	l0 := db.LTXLevelDir(0)
	if err := vfs.MkdirAllDurable(vfs.Default, l0, dirPerm); err != nil {
		return fmt.Errorf("create Litestream's directory beside %s: %w", db.Path(), err)
	}
	agentDir := filepath.Dir(db.Path())
	for d := l0; d != agentDir && filepath.Dir(d) != d; d = filepath.Dir(d) {
		if err := vfs.SyncDir(vfs.Default, filepath.Dir(d)); err != nil {
			return fmt.Errorf("make Litestream's directory beside %s durable: %w", db.Path(), err)
		}
	}
	return nil
}

// shrinkWatch uploads a full snapshot whenever the database has shrunk
// (its page count went down since the last look, one SyncInterval
// earlier): a workaround like the start-up snapshot. With Litestream
// v0.5.18, a transaction that shrinks the database (a restore to an
// earlier, smaller snapshot, agentstate.RestoreLive; or the agent's
// VACUUM) while another connection keeps committing left, in about one
// run in two, incremental files from which the latest state restored
// "malformed" (wsfs probes, 2026-12-03: a writer committing throughout,
// then `wsfs state restore`). A latest-state restore starts from the
// newest snapshot, so the snapshot taken after the shrink (from the
// database itself) makes it whole; a point-in-time restore to the moment
// between the shrink and that snapshot can still hit the damage. A
// failed snapshot is the sidecar's error (status, metrics) and is
// retried at the next look.
func (s *Sidecar) shrinkWatch(ctx context.Context) {
	db, err := sql.Open("sqlite", roDSN(s.opts.DBPath))
	if err != nil {
		s.log.Error("watch the database's size", "err", err)
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	t := time.NewTicker(s.opts.SyncInterval)
	defer t.Stop()
	var last int64
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var n int64
		if err := db.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&n); err != nil {
			continue // busy or closing: the next look
		}
		if last > 0 && n < last {
			s.log.Info("the database shrank: uploading a full snapshot", "pages_before", last, "pages", n)
			pending = true
		}
		last = n
		if pending {
			if err := s.snapshot(ctx); err != nil {
				s.setErr(err)
				s.log.Error("snapshot after the database shrank failed; retrying", "err", err)
				continue
			}
			pending = false
		}
	}
}

// snapshot syncs and then uploads a full snapshot of the database.
func (s *Sidecar) snapshot(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownSyncTimeout)
	defer cancel()
	if _, err := s.Sync(ctx); err != nil {
		return err
	}
	info, err := s.db.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", s.opts.DBPath, err)
	}
	s.log.Info("uploaded a full snapshot", "txid", info.MaxTXID.String(), "bytes", info.Size)
	return nil
}

// Sync asks Litestream to take every committed WAL frame and upload it, and
// waits for the replica to acknowledge. On success every transaction
// committed before the call is in the replica.
func (s *Sidecar) Sync(ctx context.Context) (Position, error) {
	if err := s.db.SyncAndWait(ctx); err != nil {
		s.setErr(err)
		return Position{}, fmt.Errorf("sync %s to %s: %w", s.opts.DBPath, s.opts.ReplicaURL, err)
	}
	// Every frame committed before the call was converted by db.Sync and
	// uploaded by Replica.Sync, which advances Pos only after the client
	// acknowledged a file. A zero position after a successful sync would be
	// a contradiction: never report it as confirmed.
	txid := uint64(s.db.Replica.Pos().TXID)
	if txid == 0 {
		err := fmt.Errorf("sync %s: replica position unknown after sync", s.opts.DBPath)
		s.setErr(err)
		return Position{}, err
	}
	s.setErr(nil)
	return Position{TXID: txid, At: time.Now()}, nil
}

// Status reports the sidecar's current view.
func (s *Sidecar) Status() Status {
	st := Status{
		Workspace: s.opts.Workspace,
		PID:       os.Getpid(),
		DB:        s.opts.DBPath,
		Replica:   s.opts.ReplicaURL,
		UpdatedAt: time.Now(),
	}
	if pos, err := s.db.Pos(); err == nil {
		st.LocalTXID = uint64(pos.TXID)
	}
	st.ReplicaTXID = uint64(s.db.Replica.Pos().TXID)
	st.LastSyncAt = s.db.LastSuccessfulSyncAt()
	s.mu.Lock()
	st.Error = s.mu.lastErr
	s.mu.Unlock()
	switch {
	case st.Error != "":
	case st.ReplicaTXID == 0 && st.LocalTXID > 0:
		// Litestream clears the replica position when a background sync
		// fails; say so rather than show a silent zero.
		st.Error = "replica position unknown (a background sync failed; see the sidecar log)"
	case st.LocalTXID > st.ReplicaTXID && !st.LastSyncAt.IsZero() && st.UpdatedAt.Sub(st.LastSyncAt) > 10*s.opts.SyncInterval:
		st.Error = fmt.Sprintf("no successful replica sync for %s while transactions wait (see the sidecar log)", st.UpdatedAt.Sub(st.LastSyncAt).Round(time.Second))
	}
	return st
}

// Close syncs a last time (bounded by ShutdownSyncTimeout), stops
// replicating and releases the database. It returns the final confirmed
// position, or the error that prevented it: a sidecar stopped with an error
// may have left the last transactions out of the replica.
func (s *Sidecar) Close(ctx context.Context) (Position, error) {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return Position{}, errors.New("sidecar already closed")
	}
	s.mu.closed = true
	s.mu.Unlock()

	// One deadline for the whole shutdown, so that a supervisor's stop
	// timeout (longer than ShutdownSyncTimeout) is never hit by a sidecar
	// whose replica hangs.
	sctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownSyncTimeout)
	defer cancel()
	pos, syncErr := s.Sync(sctx)
	if s.ln != nil {
		s.ln.Close()
	}
	s.cancel()
	s.wg.Wait()
	if s.opts.StatusPath != "" {
		s.writeStatus()
	}
	// Litestream's Close syncs once more (covering anything committed since
	// the sync above); no retry loop: the deadline above bounds it.
	s.store.SetShutdownSyncTimeout(0)
	err := s.store.Close(sctx)
	if s.ln != nil {
		vfs.Default.Remove(s.opts.SocketPath)
	}
	s.lock.Close()
	if syncErr != nil {
		return Position{}, fmt.Errorf("final sync: %w", syncErr)
	}
	if err != nil {
		return pos, fmt.Errorf("stop replication: %w", err)
	}
	s.log.Info("agent state replication stopped", "position", pos.String())
	return pos, nil
}

// Abort stops replicating at once, without Close's final sync: for a
// sidecar that must not write the replica any more (another host took the
// workspace over and replicates into it). Litestream's own close gets a
// context that is already cancelled, so the sync it attempts fails before
// anything is uploaded; what the database holds beyond the replica stays
// local.
func (s *Sidecar) Abort() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return errors.New("sidecar already closed")
	}
	s.mu.closed = true
	s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
	}
	s.cancel()
	s.wg.Wait()
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	s.store.SetShutdownSyncTimeout(0)
	err := s.store.Close(dead)
	if s.ln != nil {
		vfs.Default.Remove(s.opts.SocketPath)
	}
	if s.opts.StatusPath != "" {
		s.writeStatus()
	}
	s.lock.Close()
	s.log.Warn("agent state replication aborted without a final sync")
	if errors.Is(err, context.Canceled) {
		return nil // the final sync, refused as meant
	}
	return err
}

func (s *Sidecar) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.mu.lastErr = ""
	} else {
		s.mu.lastErr = err.Error()
	}
}

func (s *Sidecar) statusLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.StatusInterval)
	defer t.Stop()
	for {
		s.writeStatus()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// writeStatus publishes the status file atomically (temp + rename). It is
// advisory, so it is not synced.
func (s *Sidecar) writeStatus() {
	data, err := json.MarshalIndent(s.Status(), "", "  ")
	if err != nil {
		return
	}
	data = append(data, '\n')
	if err := vfs.Publish(vfs.Default, s.opts.StatusPath, false, func(f vfs.File) error {
		_, err := f.Write(data)
		return err
	}); err != nil {
		s.log.Warn("cannot write sidecar status", "path", s.opts.StatusPath, "err", err)
	}
}

// request and response are the socket protocol: one JSON line each way per
// connection.
type request struct {
	Op string `json:"op"` // "sync" or "status"
}

type response struct {
	Position *Position `json:"position,omitempty"`
	Status   *Status   `json:"status,omitempty"`
	Error    string    `json:"error,omitempty"`
}

func (s *Sidecar) serve(ctx context.Context) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("sidecar socket accept failed", "err", err)
			}
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer c.Close()
			s.handle(ctx, c)
		}()
	}
}

func (s *Sidecar) handle(ctx context.Context, c net.Conn) {
	var req request
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	var resp response
	switch {
	case err != nil:
		resp.Error = "bad request: " + err.Error()
	case req.Op == "sync":
		pos, err := s.Sync(ctx)
		if err != nil {
			resp.Error = err.Error()
		} else {
			resp.Position = &pos
		}
	case req.Op == "status":
		st := s.Status()
		resp.Status = &st
	default:
		resp.Error = fmt.Sprintf("unknown op %q", req.Op)
	}
	out, _ := json.Marshal(resp)
	c.Write(append(out, '\n'))
}

// RequestSync asks the sidecar listening on socketPath to sync now and
// returns the replica position it confirmed. It fails if no sidecar
// listens there or if the sync failed; it never reports an unconfirmed
// position.
func RequestSync(ctx context.Context, socketPath string) (Position, error) {
	resp, err := call(ctx, socketPath, request{Op: "sync"})
	if err != nil {
		return Position{}, err
	}
	if resp.Position == nil {
		return Position{}, errors.New("sidecar answered without a position")
	}
	return *resp.Position, nil
}

func call(ctx context.Context, socketPath string, req request) (response, error) {
	c, err := unixsock.Dial(ctx, socketPath)
	if err != nil {
		return response{}, fmt.Errorf("no sidecar answers on %s (%v): is `wsfs up` (or `wsfs sidecar`) running for this workspace?", socketPath, err)
	}
	defer c.Close()
	if err := peercred.CheckServer(c, socketPath); err != nil {
		return response{}, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	out, _ := json.Marshal(req)
	if _, err := c.Write(append(out, '\n')); err != nil {
		return response{}, fmt.Errorf("sidecar %s: %w", socketPath, err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			return response{}, fmt.Errorf("sidecar %s: %w", socketPath, context.Cause(ctx))
		}
		return response{}, fmt.Errorf("sidecar %s closed the connection without an answer: %w", socketPath, err)
	}
	var resp response
	if err := json.Unmarshal(line, &resp); err != nil {
		return response{}, fmt.Errorf("sidecar %s: bad answer: %w", socketPath, err)
	}
	if resp.Error != "" {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// ReadStatus reads a sidecar's status file. A missing file yields an error
// satisfying errors.Is(err, fs.ErrNotExist).
func ReadStatus(path string) (Status, error) {
	f, err := vfs.Default.Open(path)
	if err != nil {
		return Status{}, err
	}
	defer f.Close()
	var st Status
	if err := json.NewDecoder(f).Decode(&st); err != nil {
		return Status{}, fmt.Errorf("sidecar status %s: %w", path, err)
	}
	return st, nil
}

// Run starts a sidecar, replicates until ctx is done, then closes it with a
// final sync. It is the body of `wsfs sidecar`.
func Run(ctx context.Context, opts Options) error {
	s, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	<-ctx.Done()
	_, err = s.Close(context.WithoutCancel(ctx))
	return err
}

// LockSidecar takes the lock that one sidecar holds while it replicates
// the database at dbPath (an error wrapping vfs.ErrLocked while one
// does), for a sidecar and for commands that must not run beside one.
func LockSidecar(dbPath string) (io.Closer, error) {
	return vfs.Default.Lock(dbPath + ".sidecar-lock")
}
