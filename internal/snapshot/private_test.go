package snapshot

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// TestDirectoriesPrivate: the catalog directory and a fork's workspace
// directory hold file contents (inline data in the manifests' checkpoint,
// labels) and are created 0700 like every other directory under STATE,
// whatever the umask.
func TestDirectoriesPrivate(t *testing.T) {
	e := newEnv(t, vfs.Default, t.TempDir())
	w := e.open("w")
	writeFile(t, w, workspace.RootIno, "f", []byte("secret"))
	noErr(t, w.Close())
	in, _, err := CreateOffline(e.opts("w"), "", time.Now())
	noErr(t, err)
	must[Info](t)(Fork(e.fs, e.pool, e.wsDir("w"), in.ID, e.wsDir("f")))
	for _, d := range []string{Dir(e.wsDir("w")), e.wsDir("f"), filepath.Join(e.wsDir("f"), "checkpoint")} {
		st, err := os.Stat(d)
		noErr(t, err)
		if m := st.Mode().Perm(); m != 0o700 {
			t.Errorf("%s: mode %o, want 0700", d, m)
		}
	}
}
