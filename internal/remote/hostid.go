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

// HostID returns the identity of host h, creating it on first use.
func HostID(h *host.Host) (string, error) {
	path := filepath.Join(h.Home(), HostIDFile)
	if f, err := vfs.Default.Open(path); err == nil {
		b, err := io.ReadAll(f)
		f.Close()
		if id := strings.TrimSpace(string(b)); err == nil && len(id) == 32 {
			return id, nil
		}
		return "", fmt.Errorf("host id %s is unreadable or malformed (%v): remove it to make a new one", path, err)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	if err := vfs.Publish(vfs.Default, path, true, func(f vfs.File) error {
		_, err := f.Write([]byte(id + "\n"))
		return err
	}); err != nil {
		return "", fmt.Errorf("create host id: %w", err)
	}
	return id, nil
}
