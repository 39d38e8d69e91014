package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"wsfs/internal/remote/s3test"
)

// TestPullAtSnapshot: host A serves a workspace with a real daemon and
// shipper, takes a snapshot through the daemon, changes every file, and
// syncs; host B (another HOME) runs `wsfs pull --at first`, which restores
// the snapshot's files byte for byte and ships them as the new remote
// head (a plain pull on a third host then gets them too); a --at that
// matches nothing exits 3 naming the shipped snapshots.
func TestPullAtSnapshot(t *testing.T) {
	requireMount(t)
	srv := s3test.Start(t)
	cfg := srv.Config("pullat")
	const wsName = "pull-at"
	homes := map[string]string{}
	for _, h := range []string{"a", "b", "c"} {
		homes[h] = filepath.Join(t.TempDir(), "home-"+h)
		wsfsCommand(t, "init", "--home", homes[h])
		setRemote(t, homes[h], cfg)
	}
	rng := rand.New(rand.NewPCG(31, 31))
	first := map[string][]byte{}
	mntA, stopA := mountWorkspace(t, &mountOpts{home: homes["a"], name: wsName})
	killA := startShipper(t, homes["a"], wsName)
	for i := range 8 {
		data := randBytes(rng, []int{200, 70 << 10, 1<<20 + 3}[i%3])
		name := fmt.Sprintf("f%02d", i)
		writeSynced(t, filepath.Join(mntA, name), data)
		first[name] = data
	}
	wsfsOutput(t, time.Minute, "snapshot", "create", "--home", homes["a"], "--label", "first", wsName)
	for name := range first {
		writeSynced(t, filepath.Join(mntA, name), []byte("second "+name))
	}
	writeSynced(t, filepath.Join(mntA, "only-later"), []byte("later"))
	wsfsOutput(t, 2*time.Minute, "sync", "--home", homes["a"], wsName)
	stopA(false)
	killA()
	t.Logf("a: %s", strings.TrimSpace(wsfsOutput(t, time.Minute, "push", "--home", homes["a"], wsName)))

	out, err := exec.Command(wsfsBin, "pull", "--home", homes["b"], "--no-agent-state", "--at", "nosuch", wsName).CombinedOutput()
	if code := exitCodeOfErr(err); code != 3 || !strings.Contains(string(out), `1 "first"`) {
		t.Errorf("pull --at nosuch: exit %d\n%s; want exit 3 naming snapshot 1 \"first\"", code, out)
	}
	out2 := wsfsOutput(t, 2*time.Minute, "pull", "--home", homes["b"], "--no-agent-state", "--at", "first", wsName)
	t.Logf("b: %s", strings.TrimSpace(out2))
	if !strings.Contains(out2, "new remote head") {
		t.Errorf("pull --at first did not ship the state as the new head:\n%s", out2)
	}
	check := func(mnt, where string) {
		t.Helper()
		ents, err := os.ReadDir(mnt)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != len(first) {
			t.Errorf("%s: %d entries, want %d", where, len(ents), len(first))
		}
		for name, data := range first {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: %s: %d bytes, %v (want %d bytes)", where, name, len(got), err, len(data))
			}
		}
	}
	mntB, stopB := mountWorkspace(t, &mountOpts{home: homes["b"], name: wsName, created: true})
	check(mntB, "B after pull --at first")
	if ls := wsfsOutput(t, time.Minute, "snapshot", "ls", "--home", homes["b"], wsName); !strings.Contains(ls, "first") {
		t.Errorf("the pulled catalog lacks the snapshot:\n%s", ls)
	}
	stopB(false)
	t.Logf("b: %s", strings.TrimSpace(wsfsOutput(t, time.Minute, "push", "--home", homes["b"], wsName)))
	wsfsOutput(t, 2*time.Minute, "pull", "--home", homes["c"], "--no-agent-state", wsName)
	mntC, _ := mountWorkspace(t, &mountOpts{home: homes["c"], name: wsName, created: true})
	check(mntC, "C after a plain pull")
}

func exitCodeOfErr(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
