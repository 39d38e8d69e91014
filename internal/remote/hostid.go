package remote

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"wsfs/internal/host"
	"wsfs/internal/vfs"
)

// HostIDFile holds the host's identity in the remote tier (HOME/host-id):
// 16 random bytes in hex, created on first use. Leases name it.
const HostIDFile = "host-id"

// HostID returns the identity of host h, creating it on first use. A
// malformed file is an error, never replaced: the host's leases name it.
func HostID(h *host.Host) (string, error) {
	path := filepath.Join(h.Home(), HostIDFile)
	if f, err := vfs.Default.Open(path); err == nil {
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("read host id: %w", err)
		}
		id := strings.TrimSpace(string(b))
		if _, herr := hex.DecodeString(id); herr == nil && len(id) == 32 {
			return id, nil
		}
		// Never replaced here: the leases this host holds name its ID.
		return "", fmt.Errorf("host id %s holds %q, not 32 hex digits: restore it from a backup of this host; removed, a new ID is made, "+
			"and the leases this host holds under its old ID must then expire and be taken over with --steal", path, id)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	// Publish under a name of our own, then link it to path: a link never
	// replaces an existing file, so of two processes that start at once on
	// a fresh host (a daemon and its shipper, as `wsfs up` starts them)
	// exactly one ID wins, and the loser reads and uses the winner's. A
	// rename would let the second publication replace the first while the
	// first process keeps its ID in memory: the daemon and the shipper of
	// one host would then hold the workspace's lease under two IDs and
	// lock each other out.
	mine := path + "." + id
	if err := vfs.Publish(vfs.Default, mine, true, func(f vfs.File) error {
		_, err := f.Write([]byte(id + "\n"))
		return err
	}); err != nil {
		return "", fmt.Errorf("create host id: %w", err)
	}
	lerr := vfs.Default.Link(mine, path)
	_ = vfs.Default.Remove(mine)
	if lerr != nil {
		if errors.Is(lerr, fs.ErrExist) {
			return HostID(h) // another process published first: use its ID
		}
		return "", fmt.Errorf("create host id: link %s: %w", path, lerr)
	}
	if err := vfs.SyncDir(vfs.Default, filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("create host id: %w", err)
	}
	return id, nil
}
