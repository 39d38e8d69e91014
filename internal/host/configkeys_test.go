package host

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestUnknownConfigKeys(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   []string
	}{
		{`{"state_dir": "s", "pool_dir": "p", "mount_dir": "m"}`, nil},
		{`{"agent_state": {"replica_url": "file:///x/{name}"}}`, nil},
		{`{"state_dirs": "s", "pool_dir": "p"}`, []string{"state_dirs"}},
		{`{"agent_state": {"replica_uri": "x"}, "zeta": 1, "alpha": {}}`, []string{"agent_state.replica_uri", "alpha", "zeta"}},
		{`{"agent_state": "not an object"}`, nil},
		{`[1, 2]`, nil},
	} {
		if got := UnknownConfigKeys([]byte(tc.config)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: unknown %q, want %q", tc.config, got, tc.want)
		}
	}
}

// TestOpenWarnsAboutUnknownKeys: Open logs one warning per unknown key,
// naming it, and still opens the host.
func TestOpenWarnsAboutUnknownKeys(t *testing.T) {
	home := t.TempDir()
	if _, err := Init(home); err != nil {
		t.Fatal(err)
	}
	cfg := `{"state_dir": "state", "pool_dri": "elsewhere", "agent_state": {"replica": "x"}}`
	if err := os.WriteFile(filepath.Join(home, ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(prev)
	h, err := Open(home)
	if err != nil {
		t.Fatal(err)
	}
	if h.PoolDir() != filepath.Join(h.Home(), "pool") {
		t.Errorf("pool %s: the misspelt key must not count", h.PoolDir())
	}
	log := buf.String()
	for _, k := range []string{"key=pool_dri", "key=agent_state.replica", "level=WARN"} {
		if !strings.Contains(log, k) {
			t.Errorf("log %q does not say %q", log, k)
		}
	}
	if n := strings.Count(log, "\n"); n != 2 {
		t.Errorf("%d log lines, want one per unknown key (2):\n%s", n, log)
	}
}
