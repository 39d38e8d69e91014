package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"wsfs/internal/remote"
	"wsfs/internal/ship"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// Remote ties a daemon to its workspace's remote tier.
//
// # One writer: the lease inside the daemon
//
// Before it mounts, the daemon takes (or renews) the workspace's lease in
// the bucket for its host (ship.AcquireLease: conditional PUTs, so two
// hosts can never both succeed). A lease another host holds refuses the
// start (a *RefusedError naming the holder and the lease's age; exit 3);
// Steal takes over one that has expired. A remote that cannot be reached
// also refuses the start: without reading the lease the daemon cannot
// know that no other host serves the workspace, with one exception: a
// host that still holds an unexpired lease by its own record
// (HeldLeaseName, written after every acquisition and renewal that got
// through) starts without the remote and renews in the background, as a
// daemon that was already serving would have kept serving. No other host
// can have taken the lease before that expiry (a steal needs an expired
// lease), so the restart adds no risk that the running daemon did not
// already carry; it is what lets a supervisor restart a crashed daemon
// during an outage of the remote. A workspace pushed from this host
// (ship.PushedName) is refused in every case: it belongs to the remote now.
//
// While serving, the daemon renews the lease every TTL/3 (as the shipper
// does; both are the same holder). A renewal that finds the lease held by
// another host means the workspace was taken over (--steal on that host,
// possible only after this lease expired, i.e. after this host was out of
// contact for a whole TTL): the daemon fails the workspace at once (every
// later write, fsync and namespace change gets EIO, nothing more is
// acknowledged), unmounts, and exits with an error naming the new holder.
// A renewal that fails because the remote is unreachable only logs: the
// workspace keeps serving from local disk (the remote tier's contract),
// and the next renewal that gets through either renews the lease or finds
// it taken and stops.
//
// Safety: the remote never holds two histories: a host that lost the
// lease can no longer write the workspace's head (its shipper's head PUT
// is conditional on the head it last wrote; the new owner's head differs),
// so nothing it acknowledged after the takeover can reach the remote or
// mix with the new owner's state. What such a host acknowledges between
// the takeover and its next successful renewal is local only: that window
// exists only when the operator declared the host gone (--steal after
// expiry) while it was in fact alive but partitioned, and it closes at
// the first renewal that reaches the remote. With SyncFsync an fsync is
// acknowledged only once its group is in the remote under this host's
// head, so even that window cannot hold an acknowledged fsync.
type Remote struct {
	Store    remote.Store
	HostID   string
	LeaseTTL time.Duration // default ship.DefaultLeaseTTL
	Steal    bool
	// SyncFsync: every fsync returns only once the group holding it is
	// in the remote, as the workspace's shipper reports it (ship.json);
	// a shipper round that fails meanwhile, or no progress within
	// SyncTimeout (default 60s), fails the fsync with EIO.
	SyncFsync   bool
	SyncTimeout time.Duration

	now func() time.Time // time.Now; tests set it
}

// HeldLeaseName is the daemon's own record, in the workspace directory, of
// the lease it last took or renewed: the holder and the expiry, computed
// from the moment before the request that got through. It is a hint that
// may only be stale in the safe direction: lost or unreadable, the start
// without a remote is refused as before.
const HeldLeaseName = "lease.held"

type heldLease struct {
	Workspace string    `json:"workspace"`
	Holder    string    `json:"holder"`
	Expires   time.Time `json:"expires"`
}

func (r *Remote) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// recordHeld writes HeldLeaseName after a lease request that got through
// at sent. A failure to write it only logs: the record is a hint.
func (r *Remote) recordHeld(dir, name string, sent time.Time, lg *slog.Logger) {
	b, _ := json.Marshal(heldLease{Workspace: name, Holder: r.HostID, Expires: sent.Add(r.ttl()).UTC()})
	if err := vfs.Publish(vfs.Default, filepath.Join(dir, HeldLeaseName), false, func(f vfs.File) error {
		_, err := f.Write(append(b, '\n'))
		return err
	}); err != nil {
		lg.Warn("cannot record the lease this host holds; a restart while the remote is unreachable will be refused", "err", err)
	}
}

// heldUntil returns the expiry of the lease this host holds by its own
// record, or the zero time if the record is absent, unreadable or names
// another host or workspace.
func (r *Remote) heldUntil(dir, name string) time.Time {
	b, err := vfs.ReadFile(vfs.Default, filepath.Join(dir, HeldLeaseName))
	if err != nil {
		return time.Time{}
	}
	var h heldLease
	if json.Unmarshal(b, &h) != nil || h.Holder != r.HostID || h.Workspace != name {
		return time.Time{}
	}
	return h.Expires
}

// RefusedError is a start refused by the remote tier: the lease is held
// by another host, or the workspace was pushed from this host.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// ErrLeaseLost is wrapped by the error a daemon ends with when another
// host took its workspace's lease.
var ErrLeaseLost = errors.New("lease lost")

func (r *Remote) ttl() time.Duration {
	if r.LeaseTTL > 0 {
		return r.LeaseTTL
	}
	return ship.DefaultLeaseTTL
}

// acquire takes the lease before the daemon serves (see Remote for the
// start without a remote).
func (r *Remote) acquire(ctx context.Context, dir, name string, lg *slog.Logger) error {
	if ship.Pushed(vfs.Default, dir) {
		return &RefusedError{fmt.Errorf("workspace %s was pushed from this host (%s exists): it is served from the remote now; remove it here (wsfs rm %s) and pull it to serve it here again", name, filepath.Join(dir, ship.PushedName), name)}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sent := r.clock()
	_, err := ship.AcquireLease(cctx, r.Store, name, r.HostID, r.ttl(), r.Steal, sent)
	var le *ship.LeaseError
	switch {
	case err == nil:
		r.recordHeld(dir, name, sent, lg)
		return nil
	case errors.As(err, &le):
		return &RefusedError{err}
	}
	if !ship.RemoteDown(err) {
		return fmt.Errorf("workspace %s: cannot take its lease in %s (refusing to start): %w", name, r.Store, err)
	}
	now := r.clock()
	if until := r.heldUntil(dir, name); now.Before(until) {
		lg.Warn("cannot reach the remote to renew the lease; this host holds it until its expiry by its own record, so serving from local disk and renewing in the background",
			"expires", until.Format(time.RFC3339), "err", err)
		return nil
	} else if !until.IsZero() {
		return fmt.Errorf("workspace %s: cannot take its lease in %s (%w), and the lease this host last held expired %s ago, so another host may serve it now (refusing to start); start it again once the remote can be reached",
			name, r.Store, err, now.Sub(until).Round(time.Second))
	}
	return fmt.Errorf("workspace %s: cannot take its lease in %s, so cannot tell that no other host serves it (refusing to start); start it again once the remote can be reached: %w", name, r.Store, err)
}

// keepLease renews the lease every TTL/3 until ctx ends; if another host
// took it, it fails ws and sends the error on the returned channel.
func (r *Remote) keepLease(ctx context.Context, ws *workspace.Workspace, dir, name string, lg *slog.Logger) <-chan error {
	lost := make(chan error, 1)
	go func() {
		t := time.NewTicker(r.ttl() / 3)
		defer t.Stop()
		lastErr := ""
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(ctx, r.ttl()/3)
			sent := r.clock()
			_, err := ship.AcquireLease(cctx, r.Store, name, r.HostID, r.ttl(), false, sent)
			cancel()
			var le *ship.LeaseError
			switch {
			case errors.As(err, &le):
				err = fmt.Errorf("workspace %s: %w: %v; this daemon stops acknowledging writes (EIO) and exits", name, ErrLeaseLost, err)
				ws.Fail(err)
				lg.Error("lease lost to another host", "err", err)
				lost <- err
				return
			case err != nil && ctx.Err() == nil:
				if err.Error() != lastErr {
					lg.Warn("lease renewal failed; serving from local disk and retrying", "err", err)
				}
				lastErr = err.Error()
			case err == nil:
				r.recordHeld(dir, name, sent, lg)
				if lastErr != "" {
					lg.Info("lease renewed again")
				}
				lastErr = ""
			}
		}
	}()
	return lost
}

// waitShipped is the AfterFsync hook of SyncFsync: it returns once the
// shipper's status in dir says group g (or later) is in the remote; an
// error if a shipper round fails after the wait began, or none gets there
// within the timeout. The shipper signals wake after each status change
// (ship/wake.go); the status is also polled, so a lost signal (or a nil
// wake) only delays the answer.
func (r *Remote) waitShipped(dir string, g uint64, wake *ship.WakeListener) error {
	start := time.Now()
	timeout := r.SyncTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	wait, maxWait := 500*time.Microsecond, 5*time.Millisecond
	if wake != nil {
		wait, maxWait = 5*time.Millisecond, 50*time.Millisecond
	}
	for {
		woken := wake.Armed() // before the read: see ship/wake.go
		st, err := ship.ReadStatus(dir)
		if err == nil && st.Shipped >= g {
			return nil
		}
		if err == nil && st.ConsecutiveFails > 0 && st.UpdatedAt.After(start) {
			return fmt.Errorf("remote fsync: group %d is not in the remote: the shipper failed: %s", g, st.LastError)
		}
		if time.Since(start) > timeout {
			why := "no shipper status (is `wsfs ship` running?)"
			if err == nil {
				why = fmt.Sprintf("the shipper reports group %d shipped, updated %s ago", st.Shipped, time.Since(st.UpdatedAt).Round(time.Millisecond))
			}
			return fmt.Errorf("remote fsync: group %d not in the remote after %v: %s", g, timeout, why)
		}
		t := time.NewTimer(wait)
		select {
		case <-woken:
		case <-t.C:
			wait = min(wait*2, maxWait)
		}
		t.Stop()
	}
}
