package agentstate

import (
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"wsfs/internal/host"
)

// TestConfigSectionKnownToHost: host.Open warns about keys it does not
// know; the agent_state keys this package reads must be listed there.
func TestConfigSectionKnownToHost(t *testing.T) {
	got := host.JSONKeys(reflect.TypeFor[ConfigSection]())
	want := host.ConfigSections["agent_state"]
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("ConfigSection keys %q, host.ConfigSections[agent_state] %q: list the section's keys in host/configkeys.go", got, want)
	}
}

// TestReplicaURLRefusesInvalidNames: no name may resolve to the directory
// of all replicas, or outside it.
func TestReplicaURLRefusesInvalidNames(t *testing.T) {
	h, err := host.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", ".", "..", "a/b", "-x"} {
		for _, override := range []string{"", "/elsewhere/replica"} {
			if u, err := ReplicaURL(h, name, override); !errors.Is(err, host.ErrInvalidName) {
				t.Errorf("ReplicaURL(%q, override %q) = %q, %v; want ErrInvalidName", name, override, u, err)
			}
		}
	}
	if u, err := ReplicaURL(h, "ws-1", ""); err != nil || u != filepath.Join(h.PoolDir(), "replicas", "ws-1") {
		t.Errorf("ReplicaURL(ws-1) = %q, %v", u, err)
	}
}
