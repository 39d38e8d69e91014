package ship

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"wsfs/internal/seglog"
	"wsfs/internal/vfs"
)

// Files in the workspace directory.
const (
	// StatusName is the running shipper's status (rewritten about every
	// second; not state).
	StatusName = "ship.json"
	// LockName is the flock held by the one shipper of a workspace.
	LockName = "ship.lock"
)

// Status is the content of ship.json.
type Status struct {
	Stats
	Workspace string    `json:"workspace"`
	Remote    string    `json:"remote"`
	PID       int       `json:"pid"`
	UpdatedAt time.Time `json:"updated_at"`
	// LagP50/LagP99 are over the last (up to 4096) shipped groups, in
	// seconds, each from the moment the shipper saw the group durable to
	// the moment the head naming it was written.
	LagP50 float64 `json:"lag_p50_seconds"`
	LagP99 float64 `json:"lag_p99_seconds"`
}

// ReadStatus reads the status file of the shipper of workspace dir.
func ReadStatus(dir string) (Status, error) {
	var st Status
	b, err := vfs.ReadFile(vfs.Default, filepath.Join(dir, StatusName))
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	return st, err
}

// Lock takes the shipper lock of workspace dir; vfs.ErrLocked if another
// shipper holds it.
func Lock(fsys vfs.FS, dir string) (io.Closer, error) {
	return fsys.Lock(filepath.Join(dir, LockName))
}

// RunOptions configure Run.
type RunOptions struct {
	// Interval between looks at the log (default 50ms). A look is a
	// directory listing and a stat; a round uploads only when it found
	// new groups.
	Interval time.Duration
	// MaxBackoff bounds the wait after failed rounds (default 30s; it
	// doubles from Interval).
	MaxBackoff time.Duration
	// FinalTimeout bounds the last round after ctx is done (default 20s).
	FinalTimeout time.Duration
	// WriteStatus: write Dir/ship.json.
	WriteStatus bool
	// Wake: listen on Dir/ship.wake, where the daemon signals each group
	// commit, and start a round at once on a signal (Interval stays the
	// fallback); after each status write that follows a change (a group
	// shipped, a round failed), signal the waiters of ship.json (the
	// daemon's fsync.wake, Barrier's sockets). See wake.go.
	Wake bool
}

// Run ships continuously until ctx is done, then ships once more (bounded
// by FinalTimeout) and returns. Failed rounds are retried with exponential
// backoff; their errors are in the status and logged once per change. A
// failed local sync ends Run with that error. The caller holds Lock.
func (s *Shipper) Run(ctx context.Context, ro RunOptions) error {
	if ro.Interval <= 0 {
		ro.Interval = 50 * time.Millisecond
	}
	if ro.MaxBackoff <= 0 {
		ro.MaxBackoff = 30 * time.Second
	}
	if ro.FinalTimeout <= 0 {
		ro.FinalTimeout = 20 * time.Second
	}
	var wake *WakeListener
	if ro.Wake {
		l, err := ListenWake(filepath.Join(s.opts.Dir, ShipWakeName))
		if err != nil {
			s.lg.Warn("ship: no wakeups from the daemon; polling only", "err", err)
		} else {
			wake = l
			defer wake.Close()
		}
	}
	// The pipeline (pipeline.go): object uploads run in the background
	// across steps; a step ships the prefix that is ready.
	up := s.newUploader(ctx)
	stopPipeline := func() {
		up.close()
		s.waitMerge()
	}
	defer stopPipeline()
	wait := ro.Interval
	lastErr := ""
	var lastStatus time.Time
	var lastShipped uint64
	for {
		// Armed before the round reads the log: a commit after that read
		// wakes the next round at once.
		woken := wake.Armed()
		progress := up.Changed()
		shipped, err := s.step(ctx, up)
		if s.failed != nil {
			s.writeStatus(ro)
			s.wakeWaiters(ro)
			return s.failed
		}
		if err != nil && ctx.Err() == nil {
			if err.Error() != lastErr {
				s.lg.Warn("ship: round failed; retrying with backoff (the workspace keeps serving from local disk)", "err", err)
			}
			lastErr = err.Error()
			wait = min(wait*2, ro.MaxBackoff)
		} else if err == nil {
			if lastErr != "" {
				s.lg.Info("ship: remote reachable again", "shipped_group", s.Shipped())
			}
			lastErr, wait = "", ro.Interval
		}
		// At once when a group shipped or a round failed (a daemon's
		// remote fsync waits on this file), else about 4 times a second.
		if ro.WriteStatus && (time.Since(lastStatus) >= time.Second/4 || shipped != lastShipped || err != nil) {
			s.writeStatus(ro)
			lastStatus = time.Now()
			if shipped != lastShipped || err != nil {
				s.wakeWaiters(ro)
			}
		}
		lastShipped = shipped
		if err != nil {
			// Backing off: neither a commit nor an upload finished
			// shortens the wait.
			woken, progress = nil, nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			stopPipeline()
			fctx, cancel := context.WithTimeout(context.Background(), ro.FinalTimeout)
			g, err := s.Round(fctx)
			cancel()
			s.writeStatus(ro)
			s.wakeWaiters(ro)
			if err != nil {
				return fmt.Errorf("ship %s: final round (shipped through group %d): %w", s.opts.Name, g, err)
			}
			return nil
		case <-woken:
			timer.Stop()
		case <-progress:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// wakeWaiters signals the waiters of ship.json after a status write.
func (s *Shipper) wakeWaiters(ro RunOptions) {
	if !ro.Wake || !ro.WriteStatus {
		return
	}
	if err := wakeWaiters(s.opts.Dir); err != nil {
		s.lg.Debug("ship: wake the status's waiters", "err", err)
	}
}

func (s *Shipper) writeStatus(ro RunOptions) {
	if !ro.WriteStatus {
		return
	}
	st := s.Status()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return
	}
	if err := vfs.Publish(s.opts.FS, filepath.Join(s.opts.Dir, StatusName), false, func(f vfs.File) error {
		_, err := f.Write(append(b, '\n'))
		return err
	}); err != nil {
		s.lg.Warn("ship: write status", "err", err)
	}
}

// Status returns the shipper's status as ship.json holds it.
func (s *Shipper) Status() Status {
	st := Status{Stats: s.Stats(), Workspace: s.opts.Name, Remote: s.opts.Store.String(), PID: os.Getpid(), UpdatedAt: time.Now().UTC()}
	s.mu.Lock()
	lags := slices.Clone(s.lags)
	s.mu.Unlock()
	if len(lags) > 0 {
		slices.Sort(lags)
		st.LagP50 = lags[len(lags)/2]
		st.LagP99 = lags[min(len(lags)-1, len(lags)*99/100)]
	}
	return st
}

// LocalLast returns the last complete group in the log of workspace dir
// on disk: every group committed (acknowledged) before the call is at or
// below it.
func LocalLast(fsys vfs.FS, dir string) (uint64, error) {
	logDir := filepath.Join(dir, "log")
	for range 10 {
		seqs, err := seglog.ListSegments(fsys, logDir)
		if err != nil || len(seqs) == 0 {
			return 0, err
		}
		t := seglog.NewTail(fsys, logDir, seqs[len(seqs)-1])
		if _, err := t.Next(func(uint64, [][]byte) error { return nil }); errors.Is(err, seglog.ErrSegmentGone) {
			continue
		} else if err != nil {
			return 0, err
		}
		if t.First() == 0 {
			// Being created: the previous segment is complete.
			if len(seqs) == 1 {
				return 0, nil
			}
			p := seglog.NewTail(fsys, logDir, seqs[len(seqs)-2])
			if _, err := p.Next(func(uint64, [][]byte) error { return nil }); err != nil {
				continue
			}
			return p.Last(), nil
		}
		return t.Last(), nil
	}
	return 0, fmt.Errorf("ship: %s changes too fast to find its last group", logDir)
}

// ShipThrough runs rounds (retrying failures with backoff) until the
// remote head names group target or later, or ctx ends. Refusals that
// retrying cannot lift (a sticky failure, another host's lease,
// ErrPushed) end it at once. The caller holds Lock.
func (s *Shipper) ShipThrough(ctx context.Context, target uint64) (uint64, error) {
	wait := 50 * time.Millisecond
	for {
		g, err := s.Round(ctx)
		if err == nil && g >= target {
			return g, nil
		}
		if s.failed != nil {
			return g, s.failed
		}
		var le *LeaseError
		if errors.As(err, &le) || errors.Is(err, ErrPushed) {
			return g, err
		}
		select {
		case <-ctx.Done():
			return g, fmt.Errorf("ship %s: remote has group %d, want %d: %v (last error: %v)", s.opts.Name, g, target, ctx.Err(), err)
		case <-time.After(wait):
			wait = min(wait*2, 5*time.Second)
		}
	}
}

// Barrier waits until every group committed before it was called is
// shipped, and returns the shipped group. If no shipper runs for the
// workspace (its lock is free), Barrier takes the lock and ships itself;
// otherwise it watches the running shipper's status file. ctx bounds the
// wait; on timeout the error says what the shipper last reported.
func Barrier(ctx context.Context, opts Options) (uint64, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	return barrier(ctx, opts.FS, opts.Dir, opts.Name, func() (Options, error) { return opts, nil })
}

// BarrierOpen is Barrier (on vfs.Default) for a caller that has not
// opened the remote and the pool: open makes the Options only if no
// shipper runs and Barrier ships by itself. Watching a running shipper
// needs neither, so `wsfs sync` then skips their cost.
func BarrierOpen(ctx context.Context, dir, name string, open func() (Options, error)) (uint64, error) {
	return barrier(ctx, vfs.Default, dir, name, open)
}

func barrier(ctx context.Context, fsys vfs.FS, dir, name string, open func() (Options, error)) (uint64, error) {
	target, err := LocalLast(fsys, dir)
	if err != nil {
		return 0, err
	}
	lk, err := Lock(fsys, dir)
	if err == nil {
		defer lk.Close()
		opts, err := open()
		if err != nil {
			return 0, err
		}
		return New(opts).ShipThrough(ctx, target)
	}
	if !errors.Is(err, vfs.ErrLocked) {
		return 0, err
	}
	opts := Options{Dir: dir, Name: name}
	// The running shipper signals this socket after each status change
	// (wake.go); without one (it cannot be bound) the poll is all.
	poll := 250 * time.Millisecond
	wake, werr := listenBarrier(opts.Dir)
	if werr != nil {
		poll = 20 * time.Millisecond
	}
	defer wake.Close()
	var st Status
	for {
		woken := wake.Armed() // before the read: see wake.go
		st, err = ReadStatus(opts.Dir)
		if err == nil && st.Shipped >= target {
			return st.Shipped, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-woken:
			t.Stop()
			continue
		case <-t.C:
			continue
		case <-ctx.Done():
			why := st.LastError
			if err != nil {
				why = err.Error()
			}
			t.Stop()
			return st.Shipped, fmt.Errorf("ship %s: the running shipper has shipped group %d, want %d: %v (its last error: %s)", opts.Name, st.Shipped, target, ctx.Err(), why)
		}
	}
}
