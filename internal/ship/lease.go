package ship

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"wsfs/internal/remote"
	"wsfs/internal/vfs"
)

// PushedName is the marker `wsfs push` leaves in the workspace directory:
// the workspace was released to the remote, and this host's copy is no
// longer shipped (nor may it take the lease back by itself).
const PushedName = "pushed"

// Pushed reports whether the workspace whose directory is dir was pushed
// from this host (its PushedName marker exists).
func Pushed(fsys vfs.FS, dir string) bool {
	_, err := fsys.Stat(filepath.Join(dir, PushedName))
	return err == nil
}

// ErrPushed is wrapped by a round of a workspace pushed from this host
// (PushedName exists): a refusal that lasts until the workspace is
// removed, so nothing retries it.
var ErrPushed = errors.New("the workspace was pushed from this host")

// DefaultLeaseTTL is how long a lease lasts without renewal.
const DefaultLeaseTTL = 30 * time.Second

// Lease is the object workspaces/NAME/lease: which host serves the
// workspace. It is written only with conditional PUTs (create-if-absent,
// replace-if-unchanged), so two hosts can never both believe they took it.
type Lease struct {
	Holder   string    `json:"holder"` // host id (remote.HostID)
	Hostname string    `json:"hostname"`
	Acquired time.Time `json:"acquired"`
	Renewed  time.Time `json:"renewed"`
	Expires  time.Time `json:"expires"`
	Released bool      `json:"released,omitempty"`
	// Removing marks a lease taken by RemoveRemote: a lease left with
	// it set is a removal that stopped part-way, which LeaseError
	// explains as such rather than as a host serving the workspace.
	Removing bool `json:"removing,omitempty"`
}

// LeaseKey is the key of workspace name's lease.
func LeaseKey(name string) string { return remote.WorkspaceKey(name, "lease") }

// LeaseError reports a lease held by another host.
type LeaseError struct {
	Workspace string
	Lease     Lease
	Now       time.Time
}

// Error says who holds the lease and what to do. A holder with this
// machine's host name is another wsfs host on it (another HOME), or this
// host under an ID it no longer has (HOME/host-id lost or replaced): the
// message says so, since "host X (vm)" on vm reads like a wsfs bug.
func (e *LeaseError) Error() string {
	l := e.Lease
	age := e.Now.Sub(l.Renewed).Round(time.Second)
	same := ""
	if hn, err := os.Hostname(); err == nil && hn == l.Hostname {
		same = fmt.Sprintf(" (%s is this machine: another wsfs HOME on it holds the lease, or this host did under an ID it no longer has, its HOME/host-id lost or replaced)", hn)
	}
	if l.Removing {
		if e.Now.Before(l.Expires) {
			return fmt.Sprintf("workspace %s is being removed from the remote by host %s (%s): wsfs rm --remote started %s, renewed %s ago; once it finishes the name is free%s",
				e.Workspace, l.Holder, l.Hostname, l.Acquired.Format(time.RFC3339), age, same)
		}
		return fmt.Sprintf("a removal of workspace %s from the remote by host %s (%s) stopped part-way (renewed %s ago, expired %s ago): finish it with 'wsfs rm --remote %s' on that host, or here with --steal%s",
			e.Workspace, l.Holder, l.Hostname, age, e.Now.Sub(l.Expires).Round(time.Second), e.Workspace, same)
	}
	if e.Now.Before(l.Expires) {
		return fmt.Sprintf("workspace %s is served by host %s (%s): lease taken %s, renewed %s ago, expires in %s; push it from that host first%s",
			e.Workspace, l.Holder, l.Hostname, l.Acquired.Format(time.RFC3339), age, l.Expires.Sub(e.Now).Round(time.Second), same)
	}
	return fmt.Sprintf("workspace %s is leased by host %s (%s), renewed %s ago and expired %s ago; if that host is gone, take it over with --steal%s",
		e.Workspace, l.Holder, l.Hostname, age, e.Now.Sub(l.Expires).Round(time.Second), same)
}

// ErrLeaseLost is wrapped when a renewal finds the lease changed under us.
var ErrLeaseLost = errors.New("lease lost")

// AcquireLease takes or renews workspace name's lease for hostID: a lease
// that is absent, released, or already this host's is (re)written with a
// conditional PUT; one held by another host is a *LeaseError, unless
// steal is set and it has expired. It returns the lease's ETag.
func AcquireLease(ctx context.Context, st remote.Store, name, hostID string, ttl time.Duration, steal bool, now time.Time) (string, error) {
	return acquireLease(ctx, st, name, hostID, ttl, steal, false, now)
}

// acquireLease is AcquireLease; removing marks the lease as RemoveRemote's.
func acquireLease(ctx context.Context, st remote.Store, name, hostID string, ttl time.Duration, steal, removing bool, now time.Time) (string, error) {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	hn, _ := os.Hostname()
	l, etag, found, err := readLease(ctx, st, name)
	if err != nil {
		return "", err
	}
	nl := Lease{Holder: hostID, Hostname: hn, Acquired: now.UTC(), Renewed: now.UTC(), Expires: now.Add(ttl).UTC(), Removing: removing}
	if found {
		switch {
		case l.Released:
		case l.Holder == hostID:
			nl.Acquired = l.Acquired
		case now.Before(l.Expires) || !steal:
			return "", &LeaseError{Workspace: name, Lease: l, Now: now}
		}
	}
	nb, _ := json.MarshalIndent(nl, "", "  ")
	ne, err := st.PutIf(ctx, LeaseKey(name), nb, etag)
	if errors.Is(err, remote.ErrPrecondition) {
		// Another process of this host (the daemon and the shipper both
		// renew) may have renewed it meanwhile: then it is still ours.
		if l, cur, found, gerr := readLease(ctx, st, name); gerr == nil && found && l.Holder == hostID && !l.Released && now.Before(l.Expires) {
			return cur, nil
		}
		return "", fmt.Errorf("workspace %s: another host wrote the lease at the same moment: %w", name, err)
	}
	return ne, err
}

// CheckLease reads workspace name's lease without writing it: a lease
// that another host holds and has not released is a *LeaseError (expired
// or not: this host did not take it back), anything else (absent,
// released, hostID's own) is nil. For processes of a host that act for
// the workspace without holding the lease themselves (the agent state
// sidecar).
func CheckLease(ctx context.Context, st remote.Store, name, hostID string, now time.Time) error {
	l, _, found, err := readLease(ctx, st, name)
	if err != nil || !found || l.Released || l.Holder == hostID {
		return err
	}
	return &LeaseError{Workspace: name, Lease: l, Now: now}
}

// readLease reads workspace name's lease and its ETag (found false: there
// is none).
func readLease(ctx context.Context, st remote.Store, name string) (l Lease, etag string, found bool, err error) {
	b, etag, err := st.GetETag(ctx, LeaseKey(name))
	if errors.Is(err, remote.ErrNotFound) {
		return l, "", false, nil
	}
	if err != nil {
		return l, "", false, err
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return l, "", false, fmt.Errorf("lease %s in %s is not valid JSON: %w", LeaseKey(name), st, err)
	}
	return l, etag, true, nil
}

// ReleaseLease marks hostID's lease of workspace name released, so another
// host can take it without --steal. A lease of another host is a
// *LeaseError.
func ReleaseLease(ctx context.Context, st remote.Store, name, hostID string, now time.Time) error {
	l, etag, found, err := readLease(ctx, st, name)
	if err != nil || !found || l.Released {
		return err
	}
	if l.Holder != hostID {
		return &LeaseError{Workspace: name, Lease: l, Now: now}
	}
	l.Released, l.Renewed = true, now.UTC()
	nb, _ := json.MarshalIndent(l, "", "  ")
	_, err = st.PutIf(ctx, LeaseKey(name), nb, etag)
	return err
}
