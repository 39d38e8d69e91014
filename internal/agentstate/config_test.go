package agentstate

import (
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
