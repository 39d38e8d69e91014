package stress

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"wsfs/internal/agentstate"
)

func newTestAgent(t *testing.T, every int) *Agent {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "tree")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := NewAgent(AgentConfig{Root: root, StatePath: filepath.Join(dir, "agent", "state.db"),
		Profile: Profiles["tiny"], Seed: 3, Workspace: 1, FsyncEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestAgentRunVerifies(t *testing.T) {
	a := newTestAgent(t, 0)
	res, err := a.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified || res.Error != "" {
		t.Fatalf("result not verified: %+v", res)
	}
	n := Profiles["tiny"].Files
	overwrites := int(OverwriteShare*float64(n) + 0.5)
	if got := len(res.Samples[OpWrite]); got != n+overwrites {
		t.Errorf("%d write samples, want %d", got, n+overwrites)
	}
	if got := len(res.Samples[OpRead]); got != n {
		t.Errorf("%d read samples, want %d", got, n)
	}
	if want := (n + overwrites) / DefaultFsyncEvery; res.Fsyncs != want || len(res.Samples[OpFsync]) != want || len(res.Samples[OpCloseToDurable]) != want {
		t.Errorf("fsyncs %d, samples %d/%d, want %d", res.Fsyncs, len(res.Samples[OpFsync]), len(res.Samples[OpCloseToDurable]), want)
	}
	for _, p := range Phases {
		if res.PhaseNs[p] <= 0 {
			t.Errorf("phase %s has no time", p)
		}
	}
	// The tree holds exactly the live files.
	var files int
	filepath.WalkDir(a.cfg.Root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files++
		}
		return nil
	})
	if want := n - int(DeleteShare*float64(n)+0.5); files != want {
		t.Errorf("%d files left, want %d", files, want)
	}
	// The agent leaves checkpoints to the replication sidecar, in WAL mode.
	var autockpt int
	var mode string
	if err := a.db.QueryRow(`PRAGMA wal_autocheckpoint`).Scan(&autockpt); err != nil {
		t.Fatal(err)
	}
	if err := a.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if autockpt != 0 || mode != "wal" {
		t.Errorf("agent state database: wal_autocheckpoint=%d journal_mode=%s, want 0 and wal (agentstate.OpenDB)", autockpt, mode)
	}
	// Progress rows, one per phase end at least.
	db, err := agentstate.OpenDB(a.cfg.StatePath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM progress WHERE phase LIKE '%:done'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(Phases) {
		t.Errorf("%d phase-end progress rows, want %d", rows, len(Phases))
	}
}

func TestAgentFsyncEveryFile(t *testing.T) {
	a := newTestAgent(t, 1)
	res, err := a.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fsyncs != len(res.Samples[OpWrite]) {
		t.Fatalf("%d fsyncs for %d writes, want one per write", res.Fsyncs, len(res.Samples[OpWrite]))
	}
}

func TestAgentDetectsCorruptContent(t *testing.T) {
	a := newTestAgent(t, 0)
	ctx := context.Background()
	if err := a.writePhase(ctx); err != nil {
		t.Fatal(err)
	}
	victim := a.files[len(a.files)/2]
	p := a.abs(victim.path)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = a.readPhase(ctx)
	var me *MismatchError
	if !errors.As(err, &me) || me.Path != victim.path {
		t.Fatalf("readPhase = %v, want a mismatch naming %s", err, victim.path)
	}
}

func TestAgentDetectsTreeDifferences(t *testing.T) {
	a := newTestAgent(t, 0)
	ctx := context.Background()
	if err := a.writePhase(ctx); err != nil {
		t.Fatal(err)
	}
	missing := a.files[3]
	if err := os.Remove(a.abs(missing.path)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.abs("stray.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := a.walkPhase(ctx)
	if err == nil || !strings.Contains(err.Error(), missing.path+": missing file") || !strings.Contains(err.Error(), "stray.txt: unexpected file") {
		t.Fatalf("walkPhase = %v, want both the missing file and the stray one named", err)
	}
}

func TestNewAgentRefusesNonEmptyTree(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewAgent(AgentConfig{Root: dir, StatePath: filepath.Join(t.TempDir(), "s.db"), Profile: Profiles["tiny"]})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("NewAgent on a non-empty tree = %v", err)
	}
}
