package supervisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/daemon"
	"wsfs/internal/host"
)

func writeJSON(t *testing.T, path string, v any, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(v)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestCollectAndColumns(t *testing.T) {
	h, err := host.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ws-1", "ws-2", "ws-3"} {
		if err := h.CreateWorkspace(n); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// ws-1: fresh daemon and sidecar status; commits stalled on a full log.
	writeJSON(t, filepath.Join(h.WorkspaceDir("ws-1"), daemon.StatusName),
		map[string]any{"group": 42, "committed_at": now.Add(-1500 * time.Millisecond).Format(time.RFC3339Nano), "pending": 7, "failed": "",
			"stalled": "log filesystem full"}, now)
	writeJSON(t, agentstate.PathsFor(h, "ws-1").Status,
		agentstate.Status{LocalTXID: 12, ReplicaTXID: 10, LastSyncAt: now.Add(-2 * time.Second), UpdatedAt: now}, now)
	// ws-2: a failed workspace whose daemon and sidecar stopped long ago.
	writeJSON(t, filepath.Join(h.WorkspaceDir("ws-2"), daemon.StatusName),
		map[string]any{"group": 3, "committed_at": now.Add(-time.Hour).Format(time.RFC3339Nano), "pending": 0, "failed": "log sync: EIO"}, now.Add(-time.Hour))
	writeJSON(t, agentstate.PathsFor(h, "ws-2").Status,
		agentstate.Status{ReplicaTXID: 5, LocalTXID: 5, UpdatedAt: now.Add(-time.Hour), Error: "replica unreachable"}, now)
	// ws-3: nothing yet; and an unreadable daemon status.
	if err := os.WriteFile(filepath.Join(h.WorkspaceDir("ws-3"), daemon.StatusName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}

	st, err := Collect(h, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 3 {
		t.Fatalf("%d workspaces", len(st))
	}
	got := map[string]string{}
	for _, w := range st {
		got[w.Name] = strings.Join(w.Columns(now), " | ")
		t.Log(got[w.Name])
	}
	want := map[string][]string{
		"ws-1": {"ws-1 | no | 42 | 1.5s | 7 | txid 10 | 2 ltx, synced 2s ago | STALLED: log filesystem full"},
		"ws-2": {"ws-2 | no | 3 | 1h0m0s | 0 | txid 5 | 0 ltx", "FAILED: log sync: EIO", "daemon status stale", "replica: replica unreachable", "sidecar status stale"},
		"ws-3": {"ws-3 | no | - | - | - | - | - |", "daemon status", "unexpected EOF"},
	}
	for n, parts := range want {
		for _, p := range parts {
			if !strings.Contains(got[n], p) {
				t.Errorf("%s: %q lacks %q", n, got[n], p)
			}
		}
	}
}

func TestFormatAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 1234 * time.Millisecond: "1.2s", 3*time.Minute + 4400*time.Millisecond: "3m4s", 2*time.Hour + 5*time.Minute + 10*time.Second: "2h5m0s",
	} {
		if got := FormatAge(d); got != want {
			t.Errorf("FormatAge(%v) = %q, want %q", d, got, want)
		}
	}
}
