package remote

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/vfs"
)

// Config is the optional "remote" section of HOME/wsfs.json:
//
//	{"remote": {"endpoint": "http://127.0.0.1:7070", "bucket": "wsfs",
//	            "prefix": "prod", "region": "us-east-1", "path_style": true}}
//
// Credentials are never part of it: they come from the standard AWS
// environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE) or from the
// shared credentials file named by CredentialsFile. Without the section
// (Bucket empty) a host has no remote tier and everything works as before.
//
// The same remote can be written as a URL (ParseURL, Config.URL):
// s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true.
type Config struct {
	// Endpoint is the S3 service's URL; empty means AWS itself.
	Endpoint string `json:"endpoint,omitempty"`
	// Bucket must exist; wsfs does not create it.
	Bucket string `json:"bucket"`
	// Prefix is prepended to every key ("" or a path without leading or
	// trailing slash), so several hosts or tenants can share a bucket.
	Prefix string `json:"prefix,omitempty"`
	// Region; default us-east-1 (what most S3-compatible servers accept).
	Region string `json:"region,omitempty"`
	// PathStyle addresses the bucket as ENDPOINT/BUCKET instead of as a
	// host name BUCKET.ENDPOINT; most self-hosted servers need it.
	PathStyle bool `json:"path_style,omitempty"`
	// CredentialsFile is a shared credentials file (AWS format) to read
	// the keys from instead of the environment; Profile picks its section.
	CredentialsFile string `json:"credentials_file,omitempty"`
	Profile         string `json:"profile,omitempty"`
	// LeaseTTLSeconds is how long a workspace's lease lasts without
	// renewal (default 30): after a host is lost, another host can take
	// its workspaces over (pull --steal) once this much time has passed.
	LeaseTTLSeconds int `json:"lease_ttl_seconds,omitempty"`
	// SyncFsync makes every fsync on this host's mounts return only once
	// the group holding it is in the remote (as `wsfs mount
	// --remote-fsync`); a remote failure fails the fsync with EIO.
	SyncFsync bool `json:"sync_fsync,omitempty"`
	// NoPrefetch turns off the background prefetch of lazily pulled
	// workspaces on this host (as `wsfs mount --prefetch=false` does):
	// their contents are then fetched only when read.
	NoPrefetch bool `json:"no_prefetch,omitempty"`
}

// LeaseTTL is LeaseTTLSeconds as a duration (0: the default).
func (c Config) LeaseTTL() time.Duration { return time.Duration(c.LeaseTTLSeconds) * time.Second }

// Enabled reports whether a remote is configured.
func (c Config) Enabled() bool { return c.Bucket != "" }

// String names the remote without credentials.
func (c Config) String() string {
	s := "s3://" + c.Bucket
	if c.Prefix != "" {
		s += "/" + c.Prefix
	}
	if c.Endpoint != "" {
		s += " at " + c.Endpoint
	}
	return s
}

// URL returns the remote as an s3:// URL (ParseURL reads it back).
func (c Config) URL() string {
	u := url.URL{Scheme: "s3", Host: c.Bucket, Path: "/" + c.Prefix}
	q := url.Values{}
	if c.Endpoint != "" {
		q.Set("endpoint", c.Endpoint)
	}
	if c.Region != "" {
		q.Set("region", c.Region)
	}
	if c.PathStyle {
		q.Set("path-style", "true")
	}
	u.RawQuery = q.Encode()
	return strings.Replace(u.String(), "s3://"+c.Bucket+"/?", "s3://"+c.Bucket+"?", 1)
}

// ParseURL parses s3://BUCKET[/PREFIX][?endpoint=URL&region=R&path-style=true].
func ParseURL(s string) (Config, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Config{}, fmt.Errorf("remote URL %q: %w", s, err)
	}
	if u.Scheme != "s3" || u.Host == "" {
		return Config{}, fmt.Errorf("remote URL %q: want s3://BUCKET[/PREFIX][?endpoint=URL&region=R&path-style=true]", s)
	}
	c := Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	q := u.Query()
	c.Endpoint = q.Get("endpoint")
	c.Region = q.Get("region")
	if v := q.Get("path-style"); v != "" {
		if c.PathStyle, err = strconv.ParseBool(v); err != nil {
			return Config{}, fmt.Errorf("remote URL %q: path-style=%q: %w", s, v, err)
		}
	}
	return c, c.Validate()
}

// Validate checks the fields that can be checked without the network.
func (c Config) Validate() error {
	if c.Bucket == "" {
		return fmt.Errorf("remote: no bucket configured")
	}
	if strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/") {
		return fmt.Errorf("remote: prefix %q must not start or end with '/'", c.Prefix)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("remote: endpoint %q is not an http(s) URL", c.Endpoint)
		}
	}
	return nil
}

// AgentStateURL is the Litestream s3 replica URL of workspace name's agent
// state in this remote: P/agent/NAME in the same bucket. Credentials come
// from the same environment variables.
func (c Config) AgentStateURL(name string) string {
	key := AgentKey(name)
	if c.Prefix != "" {
		key = c.Prefix + "/" + key
	}
	q := url.Values{}
	if c.Endpoint != "" {
		q.Set("endpoint", c.Endpoint)
	}
	if c.Region != "" {
		q.Set("region", c.Region)
	} else {
		q.Set("region", "us-east-1")
	}
	if c.PathStyle {
		q.Set("force-path-style", "true")
	}
	return "s3://" + c.Bucket + "/" + key + "?" + q.Encode()
}

// ReadConfig reads the remote section of the host config; a config without
// it (or with "remote": null) yields the zero Config (no remote), and a
// section without a bucket is an error. A relative CredentialsFile is
// resolved against HOME.
func ReadConfig(h *host.Host) (Config, error) {
	path := filepath.Join(h.Home(), host.ConfigFile)
	f, err := vfs.Default.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("read host config: %w", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return Config{}, fmt.Errorf("read host config %s: %w", path, err)
	}
	var cfg struct {
		Remote *Config `json:"remote"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return Config{}, fmt.Errorf("host config %s: remote section: %w", path, err)
	}
	if cfg.Remote == nil {
		return Config{}, nil
	}
	// A section is a remote tier: one without a bucket is a mistake to
	// report, not a host without a remote (its shipping and "sync_fsync"
	// would be off without a word).
	c := *cfg.Remote
	if !c.Enabled() {
		return Config{}, fmt.Errorf("host config %s: the remote section names no \"bucket\": add it, or remove the section for a host without a remote tier", path)
	}
	if c.CredentialsFile != "" && !filepath.IsAbs(c.CredentialsFile) {
		c.CredentialsFile = filepath.Join(h.Home(), c.CredentialsFile)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("host config %s: %w", path, err)
	}
	return c, nil
}
