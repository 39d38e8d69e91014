package fusefs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadDirLarge lists a directory of 10,001 entries (many READDIRPLUS
// requests, offsets far beyond one buffer) with both getdents paths, and
// checks every name comes back exactly once.
func TestReadDirLarge(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.path("big")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 10001
	for i := range n {
		f, err := os.Create(filepath.Join(d, fmt.Sprintf("entry-with-a-longish-name-%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	check := func(names []string) {
		t.Helper()
		seen := make(map[string]bool, len(names))
		for _, name := range names {
			if seen[name] {
				t.Fatalf("%s listed twice", name)
			}
			seen[name] = true
		}
		if len(seen) != n {
			t.Fatalf("listed %d names, want %d", len(seen), n)
		}
	}
	names := listRaw(t, d)
	if names[0] != "." || names[1] != ".." {
		t.Fatalf("first entries %q %q, want . and ..", names[0], names[1])
	}
	check(names[2:])
	// Second listing: entries are now cached by the kernel (READDIRPLUS
	// made them known); the listing must be the same.
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var plain []string
	for _, e := range ents {
		if !e.Type().IsRegular() {
			t.Fatalf("%s: type %v", e.Name(), e.Type())
		}
		plain = append(plain, e.Name())
	}
	check(plain)
}

// listRaw reads a directory with getdents64 in small buffers, so that the
// kernel asks for many continuation offsets.
func listRaw(t *testing.T, dir string) []string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return names
		}
		names = appendDirents(names, buf[:n])
	}
}

// appendDirents parses linux_dirent64 records (d_ino u64, d_off s64,
// d_reclen u16, d_type u8, d_name NUL-terminated), keeping "." and "..".
func appendDirents(names []string, buf []byte) []string {
	for len(buf) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(buf[16:18]))
		name := buf[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		names = append(names, string(name))
		buf = buf[reclen:]
	}
	return names
}

// TestReadDirConcurrentChanges lists a directory while another goroutine
// creates and removes entries in it. An open directory handle serves a
// snapshot, so every entry that existed for the whole listing is returned
// exactly once, whatever else happens.
func TestReadDirConcurrentChanges(t *testing.T) {
	e := newEnv(t, Options{})
	d := e.path("churn")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	const stable = 3000
	for i := range stable {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("s%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			p := filepath.Join(d, fmt.Sprintf("c%05d", i%500))
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				done <- err
				return
			}
			if i%2 == 0 {
				if err := os.Remove(p); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	for range 5 {
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for {
			batch, err := f.Readdirnames(100)
			names = append(names, batch...)
			if err != nil || len(batch) == 0 {
				break
			}
		}
		f.Close()
		seen := map[string]int{}
		for _, n := range names {
			seen[n]++
		}
		for i := range stable {
			if c := seen[fmt.Sprintf("s%05d", i)]; c != 1 {
				t.Fatalf("s%05d listed %d times", i, c)
			}
		}
		for n, c := range seen {
			if c != 1 {
				t.Fatalf("%s listed %d times", n, c)
			}
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRewindDir checks that seeking a directory back to 0 shows entries
// created after it was opened.
func TestRewindDir(t *testing.T) {
	e := newEnv(t, Options{})
	f, err := os.Open(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 0 {
		t.Fatalf("new workspace lists %q", first)
	}
	if err := os.WriteFile(e.path("late"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	again, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0] != "late" {
		t.Fatalf("after rewind: %q", again)
	}
}
