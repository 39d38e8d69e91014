package remote

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"wsfs/internal/host"
)

// TestConfigKnownToHost: host.Open warns about keys it does not know; the
// remote section's keys must be listed there.
func TestConfigKnownToHost(t *testing.T) {
	got := host.JSONKeys(reflect.TypeFor[Config]())
	want := host.ConfigSections["remote"]
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("Config keys %q, host.ConfigSections[remote] %q: list the section's keys in host/configkeys.go", got, want)
	}
}

// TestConfig: the section is read (a relative credentials file resolved
// against HOME), a host without it has no remote, URLs round-trip, bad
// values are refused, and the agent state URL lands in the same bucket.
func TestConfig(t *testing.T) {
	home := t.TempDir()
	h, err := host.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := ReadConfig(h); err != nil || c.Enabled() {
		t.Fatalf("no section: %+v %v", c, err)
	}
	cfg := `{"state_dir": "state", "pool_dir": "pool", "mount_dir": "mnt",
		"remote": {"endpoint": "http://127.0.0.1:9", "bucket": "b", "prefix": "p/q", "path_style": true, "credentials_file": "creds"}}`
	if err := os.WriteFile(filepath.Join(home, host.ConfigFile), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ReadConfig(h)
	if err != nil || c.Bucket != "b" || c.Prefix != "p/q" || !c.PathStyle || c.CredentialsFile != filepath.Join(h.Home(), "creds") {
		t.Fatalf("read: %+v %v", c, err)
	}
	back, err := ParseURL(c.URL())
	if err != nil || back.Bucket != c.Bucket || back.Prefix != c.Prefix || back.Endpoint != c.Endpoint || !back.PathStyle {
		t.Fatalf("URL %s parses to %+v, %v", c.URL(), back, err)
	}
	if u := c.AgentStateURL("ws-1"); !strings.HasPrefix(u, "s3://b/p/q/agent/ws-1?") || !strings.Contains(u, "force-path-style=true") {
		t.Errorf("agent state URL %s", u)
	}
	for _, bad := range []string{"http://b", "s3://", "s3://b?path-style=maybe", "s3://b?endpoint=ftp://x"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) accepted", bad)
		}
	}
	if strings.Contains(c.String(), "creds") {
		t.Errorf("String() shows the credentials file: %s", c)
	}
}

// TestConfigSectionWithoutBucket: a remote section that names no bucket
// is an error naming the file and the missing key, never a host without a
// remote tier: its shipping, and "sync_fsync" (every fsync waiting for
// the remote), would otherwise be off without a word. A null section is
// no section.
func TestConfigSectionWithoutBucket(t *testing.T) {
	home := t.TempDir()
	h, err := host.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		section string
		ok      bool
	}{
		{`{"endpoint": "http://127.0.0.1:9", "sync_fsync": true}`, false},
		{`{"Bucket ": "b"}`, false},
		{`{}`, false},
		{`null`, true},
	} {
		cfg := `{"state_dir": "state", "pool_dir": "pool", "mount_dir": "mnt", "remote": ` + tc.section + `}`
		if err := os.WriteFile(filepath.Join(home, host.ConfigFile), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := ReadConfig(h)
		if tc.ok {
			if err != nil || c.Enabled() {
				t.Errorf("remote %s: %+v, %v; want no remote tier", tc.section, c, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), `"bucket"`) || !strings.Contains(err.Error(), h.Home()) {
			t.Errorf("remote %s: %+v, %v; want an error naming the config and \"bucket\"", tc.section, c, err)
		}
	}
}
