package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/host"
	"wsfs/internal/objid"
	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
	"wsfs/internal/ship"
	"wsfs/internal/vfs"
)

// TestLazyPull, real processes and a real S3 server: host A ships a
// workspace and pushes it; host B pulls it, which fetches no content, and
// mounts it with the prefetch off. First reads fetch and verify; an
// object corrupted in the bucket is EIO for the files that reference it
// (an ERROR naming the object), the rest of the tree reads; with the
// server down a first read is EIO with a clear log line and succeeds once
// the server is back; unread objects stay remote; a partial overwrite of
// a not-yet-local chunked file fetches its base; fsck calls the
// unfetched objects "not yet fetched", gc keeps everything readable.
// Remounted with the prefetch on, everything becomes local and fsck is
// clean.
func TestLazyPull(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("lazy")
	rng := rand.New(rand.NewPCG(9, 9))

	homeA := filepath.Join(t.TempDir(), "home-a")
	wsfsCommand(t, "init", "--home", homeA)
	setRemote(t, homeA, cfg)
	mntA, stopA := mountWorkspace(t, &mountOpts{home: homeA, name: "ws"})
	killShipper := startShipper(t, homeA, "ws")
	want := map[string][]byte{}
	// Single-object files (above the 64 KiB inline limit, below the 1 MiB
	// chunk size: their one object is the hash of their content) and
	// chunked ones.
	single := []string{}
	for i := range 12 {
		name := fmt.Sprintf("s%02d", i)
		want[name] = randBytes(rng, 100<<10+i*1000)
		single = append(single, name)
	}
	for i := range 3 {
		want[fmt.Sprintf("big%d", i)] = randBytes(rng, 3<<20+i*7777)
	}
	want["small"] = []byte("inline content\n")
	for name, data := range want {
		writeSynced(t, filepath.Join(mntA, name), data)
	}
	wsfsOutput(t, 2*time.Minute, "sync", "--home", homeA, "ws")
	stopA(false)
	killShipper()
	wsfsOutput(t, time.Minute, "push", "--home", homeA, "ws")

	homeB := filepath.Join(t.TempDir(), "home-b")
	wsfsCommand(t, "init", "--home", homeB)
	setRemote(t, homeB, cfg)
	hB, err := host.Open(homeB)
	if err != nil {
		t.Fatal(err)
	}
	objPath := func(name string) string {
		return filepath.Join(hB.PoolDir(), "objects", objid.Sum(want[name]).String()[:1], objid.Sum(want[name]).String())
	}
	local := func(name string) bool {
		_, err := os.Stat(objPath(name))
		return err == nil
	}
	st := srv.Store(t, "lazy")
	ctx := context.Background()
	key := func(name string) string { return remote.ObjectKey(objid.Sum(want[name]).String()) }
	out := wsfsOutput(t, time.Minute, "pull", "--home", homeB, "--no-agent-state", "ws")
	t.Logf("pull: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "fetched on first read") {
		t.Errorf("pull output %q does not say contents are fetched on first read", out)
	}
	for _, name := range single {
		if local(name) {
			t.Fatalf("%s's object is local right after the pull", name)
		}
	}
	// The pulled checkpoint is not synced yet: its private marker says so
	// until the daemon has synced it (before any fsync returns).
	markers := func() []string {
		m, _ := filepath.Glob(filepath.Join(hB.WorkspaceDir("ws"), "checkpoint", "*.unsynced"))
		return m
	}
	if m := markers(); len(m) != 1 {
		t.Errorf("pull left %d .unsynced markers, want 1: %v", len(m), m)
	} else if fi, err := os.Stat(m[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("marker %s: %v, %v; want mode 0600", m[0], fi, err)
	}

	// Corrupt s00's object in the bucket (through the S3 API: any engine).
	orig, err := st.Get(ctx, key("s00"))
	if err != nil {
		t.Fatalf("s00's object in the bucket: %v", err)
	}
	bad := bytes.Clone(orig)
	bad[len(bad)/3] ^= 0x55
	if err := st.Put(ctx, key("s00"), bad); err != nil {
		t.Fatal(err)
	}

	optsB := &mountOpts{home: homeB, name: "ws", created: true, extraArgs: []string{"--prefetch=false", "--fetch-timeout=20s"}}
	mntB, stopB := mountWorkspace(t, optsB)
	log := optsB.daemonLog
	_, err = os.ReadFile(filepath.Join(mntB, "s00"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a file whose remote object is corrupt: %v, want EIO", err)
	}
	badID := objid.Sum(want["s00"]).String()
	if !waitFor(10*time.Second, func() bool { return log.contains("level=ERROR") && log.contains(badID) && log.contains("corrupt") }) {
		t.Errorf("no ERROR line naming the corrupt object %s; daemon log:\n%s", badID, tail(log.String(), 3000))
	}
	if local("s00") {
		t.Error("the corrupt copy was published into the local pool")
	}
	// The rest of the tree reads (all but s11, kept remote for below).
	for name, data := range want {
		if name == "s00" || name == "s11" || name == "big2" {
			continue
		}
		got, err := os.ReadFile(filepath.Join(mntB, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %s on B: %d bytes, %v", name, len(got), err)
		}
	}
	// The bucket repaired: the next read of s00 fetches the good copy.
	if err := st.Put(ctx, key("s00"), orig); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(mntB, "s00")); err != nil || !bytes.Equal(got, want["s00"]) {
		t.Fatalf("read of s00 after the bucket was repaired: %d bytes, %v", len(got), err)
	}
	// Prefetch off: s11 is still remote.
	if local("s11") {
		t.Error("s11's object is local although nothing read it and the prefetch is off")
	}
	status := wsfsOutput(t, time.Minute, "status", "--home", homeB)
	if !strings.Contains(status, "fetch ws:") || !strings.Contains(status, "prefetch off") {
		t.Errorf("status does not show the fetch progress:\n%s", status)
	}
	t.Logf("status:\n%s", status)
	// A snapshot of the pulled tree references the unfetched objects too:
	// fsck counts them as not yet fetched there as well, not missing.
	wsfsOutput(t, time.Minute, "snapshot", "create", "--home", homeB, "ws")
	fsckOut := wsfsOutput(t, time.Minute, "fsck", "--home", homeB, "ws")
	if !strings.Contains(fsckOut, "not yet fetched") || strings.Contains(fsckOut, "DAMAGE") {
		t.Errorf("fsck of a lazily pulled workspace:\n%s\nwant \"not yet fetched\" and no damage", fsckOut)
	}
	gcOut := wsfsOutput(t, time.Minute, "gc", "--home", homeB)
	t.Logf("gc: %s", strings.TrimSpace(gcOut))

	// The server down: a first read is EIO with a clear line, and works
	// once the server is back.
	srv.Stop()
	_, err = os.ReadFile(filepath.Join(mntB, "s11"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a remote-only file with the server down: %v, want EIO", err)
	}
	id11 := objid.Sum(want["s11"]).String()
	if !waitFor(10*time.Second, func() bool { return log.contains("fetching it from") && log.contains(id11) }) {
		t.Errorf("no log line naming %s and the failed fetch; daemon log:\n%s", id11, tail(log.String(), 3000))
	}
	srv.Restart(t)
	if got, err := os.ReadFile(filepath.Join(mntB, "s11")); err != nil || !bytes.Equal(got, want["s11"]) {
		t.Fatalf("read of s11 with the server back: %d bytes, %v", len(got), err)
	}
	// A partial overwrite of a chunked file none of whose chunks is local.
	f, err := os.OpenFile(filepath.Join(mntB, "big2"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte("PATCHED")
	off := int64(1<<20 + 4096)
	if _, err := f.WriteAt(patch, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if m := markers(); len(m) != 0 {
		t.Errorf("an fsync returned, yet the pulled checkpoint's marker is still there: %v", m)
	}
	copy(want["big2"][off:], patch)
	if got, err := os.ReadFile(filepath.Join(mntB, "big2")); err != nil || !bytes.Equal(got, want["big2"]) {
		t.Fatalf("big2 after a partial overwrite: %d bytes, %v", len(got), err)
	}
	stopB(false)

	// Prefetch on (the default): everything becomes local, the fetch
	// state goes, fsck is clean.
	optsB = &mountOpts{home: homeB, name: "ws", created: true, extraArgs: []string{"--metrics=127.0.0.1:0"}}
	mntB, _ = mountWorkspace(t, optsB)
	wsDir := hB.WorkspaceDir("ws")
	if !waitFor(2*time.Minute, func() bool {
		_, ok, _ := ship.ReadFetchState(vfs.Default, wsDir)
		return !ok
	}) {
		t.Fatalf("the prefetch did not finish within 2 minutes; status:\n%s", wsfsOutput(t, time.Minute, "status", "--home", homeB))
	}
	for _, name := range single {
		if !local(name) {
			t.Errorf("%s's object is not local after the prefetch", name)
		}
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(mntB, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %s after the prefetch: %d bytes, %v", name, len(got), err)
		}
	}
	fsckOut = wsfsOutput(t, time.Minute, "fsck", "--home", homeB, "ws")
	if strings.Contains(fsckOut, "not yet fetched") || strings.Contains(fsckOut, "DAMAGE") {
		t.Errorf("fsck after the prefetch:\n%s", fsckOut)
	}
	// The metrics show the finished prefetch.
	m := regexp.MustCompile(`addr=(http://127\.0\.0\.1:[0-9]+/metrics)`).FindStringSubmatch(optsB.daemonLog.String())
	if m == nil {
		t.Fatalf("no metrics address in the daemon log:\n%s", tail(optsB.daemonLog.String(), 2000))
	}
	client := http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`wsfs_prefetch_done{workspace="ws"} 1`, `wsfs_fetch_objects_total{workspace="ws"}`, `wsfs_prefetch_objects{workspace="ws"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// waitFor polls cond every 20ms for at most d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
