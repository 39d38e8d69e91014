package agentstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"

	"wsfs/internal/host"
	"wsfs/internal/remote"
	"wsfs/internal/vfs"
)

// ReplicaSchemes are the replica URL schemes compiled into this binary (see
// backends.go; Litestream keeps its registry private).
func ReplicaSchemes() []string { return []string{"file", "s3"} }

// ConfigSection is the optional "agent_state" section of HOME/wsfs.json:
//
//	{"agent_state": {"replica_url": "file:///backups/wsfs/{name}"}}
//
// {name} is replaced by the workspace name; a URL without it gets the name
// appended as a last path element. Without the section the replica is the
// file replica POOL/replicas/NAME.
type ConfigSection struct {
	ReplicaURL string `json:"replica_url"`
}

// ReadConfig reads the agent_state section of the host config. A config
// without it yields the zero section.
func ReadConfig(h *host.Host) (ConfigSection, error) {
	path := filepath.Join(h.Home(), host.ConfigFile)
	f, err := vfs.Default.Open(path)
	if err != nil {
		return ConfigSection{}, fmt.Errorf("read host config: %w", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return ConfigSection{}, fmt.Errorf("read host config %s: %w", path, err)
	}
	var cfg struct {
		AgentState ConfigSection `json:"agent_state"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return ConfigSection{}, fmt.Errorf("host config %s: agent_state section: %w", path, err)
	}
	return cfg.AgentState, nil
}

// ReplicaURL returns the replica of workspace name: override if set (a full
// URL or path for this workspace), else the config's replica_url with the
// name filled in, else the remote tier's bucket (remote.Config.AgentStateURL)
// if the host has one, else the default file replica directory. An invalid
// name is refused (host.ErrInvalidName).
func ReplicaURL(h *host.Host, name, override string) (string, error) {
	if err := host.ValidateName(name); err != nil {
		return "", err // "" would name the directory of every replica
	}
	if override != "" {
		return override, nil
	}
	cfg, err := ReadConfig(h)
	if err != nil {
		return "", err
	}
	if cfg.ReplicaURL == "" {
		// A host with a remote tier keeps the agent state in the same
		// bucket (one configuration for both).
		rc, err := remote.ReadConfig(h)
		if err != nil {
			return "", err
		}
		if rc.Enabled() {
			return rc.AgentStateURL(name), nil
		}
		return PathsFor(h, name).ReplicaDir, nil
	}
	if strings.Contains(cfg.ReplicaURL, "{name}") {
		return strings.ReplaceAll(cfg.ReplicaURL, "{name}", name), nil
	}
	return strings.TrimRight(cfg.ReplicaURL, "/") + "/" + name, nil
}

// NewReplicaClient returns the Litestream replica client for u: a plain path
// (no scheme) is a file replica; otherwise the URL's scheme picks the
// backend. An unknown scheme is an error naming the compiled-in ones.
func NewReplicaClient(u string) (litestream.ReplicaClient, error) {
	if u == "" {
		return nil, errors.New("empty replica URL")
	}
	if !litestream.IsURL(u) {
		abs, err := filepath.Abs(u)
		if err != nil {
			return nil, fmt.Errorf("replica path %s: %w", u, err)
		}
		return file.NewReplicaClient(abs), nil
	}
	scheme := u[:strings.Index(u, "://")]
	c, err := litestream.NewReplicaClientFromURL(u)
	if err != nil {
		known := false
		for _, s := range ReplicaSchemes() {
			known = known || s == scheme
		}
		if !known {
			return nil, fmt.Errorf("replica URL %s: scheme %q is not compiled into this wsfs (available: %s)", u, scheme, strings.Join(ReplicaSchemes(), ", "))
		}
		return nil, fmt.Errorf("replica URL %s: %w", u, err)
	}
	return c, nil
}

// CheckReplica initialises the client and lists the replica once, within
// timeout, so that an unreachable replica is reported at start-up with its
// URL instead of as a later, rate-limited background error.
func CheckReplica(ctx context.Context, c litestream.ReplicaClient, u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := c.Init(ctx)
	if err == nil {
		var itr interface {
			Next() bool
			Close() error
		}
		itr, err = c.LTXFiles(ctx, 0, 0, false)
		if err == nil {
			for itr.Next() {
			}
			err = itr.Close()
		}
	}
	if err == nil {
		// The file backend lists a missing directory as empty; make sure it
		// can be created, or the first upload would fail much later.
		//
		// Durably, with every level directory: the file client syncs the
		// level directory after each upload, but creates it (and the
		// replica directory) with a plain MkdirAll, so after a power cut
		// confirmed uploads vanished with the directory that held them
		// ("cannot calc restore plan: transaction not available").
		if fc, ok := c.(*file.ReplicaClient); ok {
			err = vfs.MkdirAllDurable(vfs.Default, fc.Path(), dirPerm)
			for level := 0; err == nil && level <= litestream.SnapshotLevel; level++ {
				err = vfs.MkdirAllDurable(vfs.Default, fc.LTXLevelDir(level), dirPerm)
			}
			if err == nil {
				var st fs.FileInfo
				st, err = vfs.Default.Stat(fc.Path())
				if err == nil && !st.IsDir() {
					err = fmt.Errorf("%s is not a directory", fc.Path())
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("replica %s cannot be reached: %w (the workspace itself is unaffected: its daemon does not depend on the replica; fix the replica URL or its credentials and restart the sidecar)", u, err)
	}
	return nil
}
