package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// TestConcurrentMixed runs writers, readers, listers and a renamer on the
// same files at once, with passthrough on (so opens also race on the I/O
// mode of an inode). Allowed failures are the ones POSIX and the
// passthrough rule allow: ENOENT (renamed away) and ETXTBSY (a writer
// while a passthrough reader is open). At the end every file holds the
// last version its writer wrote. Run it under -race.
func TestConcurrentMixed(t *testing.T) {
	e := newEnv(t, Options{Passthrough: true})
	d := e.path("mixed")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	const files, versions = 6, 25
	size := func(i int) int { return 1000 + i*40000 } // inline and pooled
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	allowed := func(err error) bool {
		return err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ETXTBSY)
	}
	last := make([]byte, files) // version byte each file ends with
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := filepath.Join(d, fmt.Sprintf("f%d", i))
			for v := 1; v <= versions; v++ {
				err := os.WriteFile(p, bytes.Repeat([]byte{byte(v)}, size(i)), 0o644)
				if err == nil {
					last[i] = byte(v)
				} else if !allowed(err) {
					fail(fmt.Errorf("write %s v%d: %w", p, v, err))
					return
				}
			}
			// Make sure the final version lands (readers may still hold
			// passthrough opens for a while).
			for last[i] != versions {
				err := os.WriteFile(p, bytes.Repeat([]byte{versions}, size(i)), 0o644)
				if err == nil {
					last[i] = versions
				} else if !allowed(err) {
					fail(err)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if r == 0 {
					if _, err := os.ReadDir(d); err != nil {
						fail(fmt.Errorf("readdir: %w", err))
						return
					}
					continue
				}
				p := filepath.Join(d, fmt.Sprintf("f%d", (n+r)%files))
				if _, err := os.ReadFile(p); !allowed(err) {
					fail(fmt.Errorf("read %s: %w", p, err))
					return
				}
				if r == 3 {
					// Rename a scratch file back and forth in the same directory.
					q := filepath.Join(d, "scratch")
					if err := os.WriteFile(q, []byte("s"), 0o644); !allowed(err) {
						fail(err)
						return
					}
					if err := os.Rename(q, q+"2"); !allowed(err) {
						fail(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range files {
		got := mustRead(t, filepath.Join(d, fmt.Sprintf("f%d", i)))
		if !bytes.Equal(got, bytes.Repeat([]byte{versions}, size(i))) {
			t.Errorf("f%d: final content wrong (len %d)", i, len(got))
		}
	}
}
