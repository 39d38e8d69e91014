package agentstate

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// TestRestoreNotAvailableSaysWhatIsThere: a restore from an empty replica,
// or --at before the replica's first transaction, is a NotAvailableError
// naming what the replica holds and what to do, not Litestream's "cannot
// calc restore plan".
func TestRestoreNotAvailableSaysWhatIsThere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := testOptions(t)

	check := func(what string, err error, want ...string) *NotAvailableError {
		t.Helper()
		var na *NotAvailableError
		if !errors.As(err, &na) {
			t.Fatalf("%s: %v, want a NotAvailableError", what, err)
		}
		msg := err.Error()
		if strings.Contains(msg, "cannot calc restore plan") || strings.Contains(msg, "transaction not available") {
			t.Errorf("%s: raw Litestream error in %q", what, msg)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", what, msg, w)
			}
		}
		return na
	}

	empty := filepath.Join(t.TempDir(), "empty-replica")
	err := Restore(ctx, RestoreOptions{ReplicaURL: empty, To: filepath.Join(t.TempDir(), "x.db")})
	check("empty replica", err, "holds no copy", empty, "wsfs state sync")

	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	before := time.Now().Add(-time.Hour)
	w := newWriter(t, opts.DBPath)
	w.insert(t, 10)
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	err = Restore(ctx, RestoreOptions{ReplicaURL: opts.ReplicaURL, To: filepath.Join(t.TempDir(), "y.db"), At: old})
	na := check("--at 2020", err, "2020-01-01T00:00:00Z", "restore --at a time after", "leave --at out")
	if na.First.Before(before) || na.Last.Before(na.First) || na.MaxTXID == 0 || na.MinTXID > na.MaxTXID {
		t.Errorf("range %v..%v, txid %s..%s; want this run's uploads", na.First, na.Last, na.MinTXID, na.MaxTXID)
	}
	if !strings.Contains(err.Error(), na.First.Format(time.RFC3339Nano)) {
		t.Errorf("%q does not name the first restorable time %s", err, na.First.Format(time.RFC3339Nano))
	}
	// A time inside the range restores.
	if err := Restore(ctx, RestoreOptions{ReplicaURL: opts.ReplicaURL, To: filepath.Join(t.TempDir(), "z.db"), At: time.Now()}); err != nil {
		t.Errorf("restore --at now: %v", err)
	}
}

// TestRestoreDamagedReplicaNamesTheFile: a restore whose plan runs into a
// damaged LTX file (bytes flipped on the replica's disk) is a
// DamagedReplicaError that names the file and says what to do, not
// Litestream's "decode database: ... checksum mismatch"; and it writes no
// database.
func TestRestoreDamagedReplicaNamesTheFile(t *testing.T) {
	ctx, opts, s := startTestSidecar(t)
	w := newWriter(t, opts.DBPath)
	w.insert(t, 200)
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	client, err := NewReplicaClient(opts.ReplicaURL)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := litestream.CalcRestorePlan(ctx, client, 0, time.Time{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// The plan's largest file: it holds the rows' pages.
	victim := plan[0]
	for _, f := range plan {
		if f.Size > victim.Size {
			victim = f
		}
	}
	name := filepath.Join("ltx", strconv.Itoa(victim.Level), ltx.FormatFilename(victim.MinTXID, victim.MaxTXID))
	path := filepath.Join(opts.ReplicaURL, name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+16; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	to := filepath.Join(t.TempDir(), "out.db")
	err = Restore(ctx, RestoreOptions{ReplicaURL: opts.ReplicaURL, To: to})
	var de *DamagedReplicaError
	if !errors.As(err, &de) {
		t.Fatalf("restore from a damaged replica: %v, want a DamagedReplicaError", err)
	}
	for _, want := range []string{name, "damaged", "restart", "--at"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if _, serr := os.Stat(to); !os.IsNotExist(serr) {
		t.Errorf("a database appeared at %s (%v)", to, serr)
	}
}
