package host

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// ConfigSections are the sections of wsfs.json that other packages read
// (each reads its own), with the keys each reads. Open warns about any key
// that neither Config nor a section names, so a misspelt key is not
// silently ignored. A package that adds a section or a key lists it here
// (agentstate's test checks its ConfigSection against this table).
var ConfigSections = map[string][]string{
	"agent_state": {"replica_url"}, // internal/agentstate.ConfigSection
	"remote": {"endpoint", "bucket", "prefix", "region", "path_style", // internal/remote.Config
		"credentials_file", "profile", "lease_ttl_seconds", "sync_fsync", "no_prefetch"},
}

// UnknownConfigKeys returns the keys of a wsfs.json (top-level, and inside
// the known sections as "section.key") that nothing in wsfs reads, sorted.
// It returns nil for data that is not a JSON object: Open reports that.
func UnknownConfigKeys(data []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return nil
	}
	known := map[string]bool{}
	for _, k := range JSONKeys(reflect.TypeFor[Config]()) {
		known[k] = true
	}
	var unknown []string
	for k, v := range top {
		if known[k] {
			continue
		}
		fields, ok := ConfigSections[k]
		if !ok {
			unknown = append(unknown, k)
			continue
		}
		var sec map[string]json.RawMessage
		if json.Unmarshal(v, &sec) != nil {
			continue // the section's reader reports it
		}
		for sk := range sec {
			if !slices.Contains(fields, sk) {
				unknown = append(unknown, k+"."+sk)
			}
		}
	}
	sort.Strings(unknown)
	return unknown
}

// JSONKeys returns the JSON object keys of the struct type t's fields.
func JSONKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		keys = append(keys, name)
	}
	return keys
}

// warnUnknownKeys logs one warning per key of the config at path that
// nothing reads; they are ignored (a newer wsfs may have written them).
func warnUnknownKeys(path string, data []byte) {
	for _, k := range UnknownConfigKeys(data) {
		slog.Warn("host config: unknown key ignored (misspelt, or written by a newer wsfs?)", "config", path, "key", k)
	}
}
