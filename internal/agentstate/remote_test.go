package agentstate

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"wsfs/internal/remote/s3test"
)

// TestReplicateToRemoteTier: the agent state replicates with Litestream's
// s3 backend to the remote tier's bucket, at the URL built from the same
// remote config (remote.Config.AgentStateURL), against a real S3 server;
// a restore after a sync has every row.
func TestReplicateToRemoteTier(t *testing.T) {
	srv := s3test.Start(t) // also clears AWS_CA_BUNDLE (see s3test)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := testOptions(t)
	opts.ReplicaURL = srv.Config("host-a").AgentStateURL("ws-test")
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start sidecar on %s: %v", opts.ReplicaURL, err)
	}
	w := newWriter(t, opts.DBPath)
	w.insert(t, 40)
	if _, err := RequestSync(ctx, opts.SocketPath); err != nil {
		t.Fatal(err)
	}
	want := dump(t, opts.DBPath)
	to := filepath.Join(t.TempDir(), "restored.db")
	if err := Restore(ctx, RestoreOptions{ReplicaURL: opts.ReplicaURL, To: to}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, "restore from the remote tier", dump(t, to), want)
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The replica lives under the remote's prefix, beside the workspaces.
	keys, err := srv.Store(t, "host-a").List(ctx, "agent/ws-test/")
	if err != nil || len(keys) == 0 {
		t.Fatalf("no replica files under host-a/agent/ws-test/: %v %v", keys, err)
	}
}
