package ship

import (
	"context"
	"fmt"
	"time"

	"wsfs/internal/remote"
)

// RemoveStats count what RemoveRemote deleted.
type RemoveStats struct {
	Head       bool // the workspace had a head
	Files      int  // log batches, checkpoints, snapshot entries
	AgentFiles int  // files of the agent state replica
}

// RemoveRemote deletes workspace name from the remote tier: its head,
// everything else under workspaces/NAME/ (log batches, checkpoints,
// shipped snapshot entries), the Litestream replica of its agent state
// (agent/NAME/), and last its lease. Pool objects are shared by hash
// across workspaces and hosts, so they stay; those nothing else names
// are removed by remote GC after its grace period.
//
// It first takes the lease for hostID, as a pull does: a workspace that
// another host serves, or whose expired lease another host never
// released, is a *LeaseError (steal takes over an expired one), and
// nothing is deleted. It renews the lease as it goes and stops at the
// first renewal that fails. The head goes first, so that from the first delete
// on the workspace is no longer restorable, never half restorable: an
// error or a crash part-way leaves files that no head names, which a
// second RemoveRemote (the lease is still this host's, or expires) or
// remote GC removes. Deleting what does not exist is not an error, so
// the removal can simply be run again.
func RemoveRemote(ctx context.Context, st remote.Store, name, hostID string, ttl time.Duration, steal bool, now time.Time) (RemoveStats, error) {
	var rs RemoveStats
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	if _, err := acquireLease(ctx, st, name, hostID, ttl, steal, true, now); err != nil {
		return rs, err
	}
	// del renews the lease whenever a third of its TTL has passed, so
	// that a long removal never runs on an expired lease: a host that
	// took the workspace over (--steal) and shipped to it anew must not
	// lose what it shipped. now is the caller's clock at the start.
	start, renewed := time.Now(), time.Duration(0)
	del := func(key string) error {
		if el := time.Since(start); el-renewed > ttl/3 {
			if _, err := acquireLease(ctx, st, name, hostID, ttl, false, true, now.Add(el)); err != nil {
				return err
			}
			renewed = el
		}
		return st.Delete(ctx, key)
	}
	headKey := remote.WorkspaceKey(name, "head")
	found, err := st.Exists(ctx, headKey)
	if err != nil {
		return rs, err
	}
	if found {
		if err := del(headKey); err != nil {
			return rs, fmt.Errorf("remove workspace %s from %s: delete its head: %w", name, st, err)
		}
		rs.Head = true
	}
	keys, err := st.List(ctx, remote.WorkspaceKey(name, ""))
	if err != nil {
		return rs, err
	}
	for _, k := range keys {
		if k == LeaseKey(name) || k == headKey {
			continue
		}
		if err := del(k); err != nil {
			return rs, fmt.Errorf("remove workspace %s from %s: delete %s: %w", name, st, k, err)
		}
		rs.Files++
	}
	agent, err := st.List(ctx, remote.AgentKey(name)+"/")
	if err != nil {
		return rs, err
	}
	for _, k := range agent {
		if err := del(k); err != nil {
			return rs, fmt.Errorf("remove workspace %s from %s: delete its agent state replica file %s: %w", name, st, k, err)
		}
		rs.AgentFiles++
	}
	if err := del(LeaseKey(name)); err != nil {
		return rs, fmt.Errorf("remove workspace %s from %s: delete its lease: %w", name, st, err)
	}
	return rs, nil
}
