package snapshot

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"wsfs/internal/agentstate"
	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
	"wsfs/internal/objid"
	"wsfs/internal/pool"
)

// The agent state cut. A snapshot of a workspace that has an agent state
// database (agentstate.DBIn(wsDir)) records a consistent copy of it,
// taken with the SQLite backup API and stored in the pool in chunks of
// 1<<AgentChunkShift bytes (identical chunks deduplicate across
// snapshots and workspaces; gc marks them, fsck checks them).
//
// Same moment, by a bracket: the copy's read transaction is opened
// before the file cut (the commit that fixes the tree) and the copy is
// made from it after. So the copy is the database as of one instant
// between the call of snapshot create and the file cut: it holds every
// transaction committed before the call, and none that started after
// the command returned. A workspace without an agent database gets a
// snapshot without agent state (Info.Agent nil).

// AgentChunkShift sets the chunk size of agent state copies (1 MiB).
const AgentChunkShift = 20

// beginAgentCut opens the read transaction of the workspace's agent
// database (nil: it has none).
func beginAgentCut(wsDir string) (*agentstate.Cut, error) {
	c, err := agentstate.BeginCut(context.Background(), agentstate.DBIn(wsDir))
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return c, nil
}

func closeCut(c *agentstate.Cut) {
	if c != nil {
		c.Close()
	}
}

// storeAgentCut copies cut into pool objects through st (so that
// publishNew's Sync makes them durable with the manifests).
func storeAgentCut(cut *agentstate.Cut, st *manifest.PoolStore) (*AgentCopy, error) {
	if cut == nil {
		return nil, nil
	}
	a := &AgentCopy{Content: namespace.Content{ChunkShift: AgentChunkShift, Chunks: []objid.ID{}}}
	size, err := cut.Copy(context.Background(), 1<<AgentChunkShift, func(b []byte) error {
		id, err := st.Put(b)
		if err != nil {
			return fmt.Errorf("store agent state chunk: %w", err)
		}
		a.Content.Chunks = append(a.Content.Chunks, id)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: agent state: %w", err)
	}
	a.Size = uint64(size)
	if err := a.Content.Validate(a.Size); err != nil {
		return nil, fmt.Errorf("snapshot: agent state copy: %w", err)
	}
	return a, nil
}

// RestoreAgent sets the agent state database of the workspace in wsDir
// to snapshot in's copy (agentstate.RestoreLive: one write transaction
// of the live database, safe while the agent and the sidecar have it
// open; durable when it returns) and reports whether in had one. A
// snapshot without agent state leaves the database as it is. The chunks
// are read verified from p: a missing or corrupt one is an error and
// changes nothing. Offline restore, fork and the daemon's online restore
// all go through here.
func RestoreAgent(p *pool.Pool, wsDir string, in Info) (bool, error) {
	return RestoreAgentFrom(p.ReadAll, wsDir, in)
}

// RestoreAgentFrom is RestoreAgent with the chunks read by read, which
// must return an object's bytes verified against its ID (pool.ReadAll;
// for a pull, the bucket's copy).
func RestoreAgentFrom(read func(objid.ID) ([]byte, error), wsDir string, in Info) (bool, error) {
	if in.Agent == nil {
		return false, nil
	}
	a := in.Agent
	err := agentstate.RestoreLive(context.Background(), agentstate.DBIn(wsDir), filepath.Base(wsDir), func(w io.Writer) error {
		left := a.Size
		for i, id := range a.Content.Chunks {
			n := min(left, uint64(1)<<a.Content.ChunkShift)
			var b []byte
			if id == namespace.HoleChunk {
				b = make([]byte, n)
			} else {
				var err error
				if b, err = read(id); err != nil {
					return fmt.Errorf("chunk %d of %d: %w", i, len(a.Content.Chunks), err)
				}
			}
			if uint64(len(b)) != n {
				return fmt.Errorf("chunk %d (%s) holds %d bytes, want %d", i, id, len(b), n)
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
			left -= n
		}
		return nil
	})
	if err != nil {
		return true, fmt.Errorf("snapshot %d: restore agent state: %w", in.ID, err)
	}
	return true, nil
}

// AgentObjects calls fn for every pool object of in's agent state copy
// (none for a snapshot without one). Whatever keeps or moves a
// snapshot's objects (pool GC, fsck, shipping, remote GC, pull) takes
// these with its tree's.
func AgentObjects(in Info, fn func(objid.ID)) {
	if in.Agent != nil {
		in.Agent.Content.Objects(fn)
	}
}
