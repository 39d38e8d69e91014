package seglog

import (
	"errors"
	"testing"

	"wsfs/internal/vfs"
)

// TestUnsyncedCheckpoint: a marked checkpoint reads like any other while it
// verifies; missing or torn (a crash image taken before any sync of it) it
// is an *UnsyncedBaseError naming the remote, never a *CorruptError or a
// fallback; StartBaseSync makes it durable and removes the marker; a
// marker older than a newer, synced checkpoint is ignored.
func TestUnsyncedCheckpoint(t *testing.T) {
	const dir, origin = "/ws/checkpoint", "s3://b/p"
	mem := vfs.NewCrashableMem()
	payload := []byte("the pulled tree")
	if err := WriteUnsyncedCheckpoint(mem, dir, 5, payload, origin); err != nil {
		t.Fatal(err)
	}
	if g, p, err := ReadLatestCheckpoint(mem, dir); err != nil || g != 5 || string(p) != string(payload) {
		t.Fatalf("ReadLatestCheckpoint = %d, %q, %v", g, p, err)
	}
	torn := mem.CrashClone()
	var ue *UnsyncedBaseError
	var ce *CorruptError
	if _, _, err := ReadLatestCheckpoint(torn, dir); !errors.As(err, &ue) || errors.As(err, &ce) || ue.Origin != origin || ue.Group != 5 {
		t.Fatalf("torn marked checkpoint: %v, want *UnsyncedBaseError from %s", err, origin)
	}
	if err := torn.Remove(dir + "/" + ckptName(5)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadLatestCheckpoint(torn, dir); !errors.As(err, &ue) || ue.Reason != "is missing" {
		t.Fatalf("missing marked checkpoint: %v, want *UnsyncedBaseError", err)
	}
	if err := WriteUnsyncedCheckpoint(mem, dir, 6, payload, origin); err == nil {
		t.Fatal("a second unsynced checkpoint beside the first was written")
	}

	b, err := StartBaseSync(mem, dir, nil)
	if err != nil || b == nil {
		t.Fatalf("StartBaseSync = %v, %v", b, err)
	}
	if err := b.Wait(); err != nil {
		t.Fatal(err)
	}
	synced := mem.CrashClone()
	if g, _, err := ReadLatestCheckpoint(synced, dir); err != nil || g != 5 {
		t.Fatalf("after the base sync a crash image reads %d, %v", g, err)
	}
	if _, ok, _ := UnsyncedBase(synced, dir); ok {
		t.Fatal("the marker survived the base sync")
	}
	if b, err := StartBaseSync(mem, dir, nil); b != nil || err != nil {
		t.Fatalf("StartBaseSync without a marker = %v, %v", b, err)
	}

	// A stale marker: a newer checkpoint written synced supersedes it.
	if err := vfs.MkdirAllDurable(mem, "/ws2", vfs.PrivateDir); err != nil {
		t.Fatal(err)
	}
	if err := WriteUnsyncedCheckpoint(mem, "/ws2/checkpoint", 5, payload, origin); err != nil {
		t.Fatal(err)
	}
	if err := WriteCheckpoint(mem, "/ws2/checkpoint", 9, payload); err != nil {
		t.Fatal(err)
	}
	if g, _, err := ReadLatestCheckpoint(mem.CrashClone(), "/ws2/checkpoint"); err != nil || g != 9 {
		t.Fatalf("with a stale marker: %d, %v", g, err)
	}
	if _, ok, _ := UnsyncedBase(mem, "/ws2/checkpoint"); ok {
		t.Fatal("a stale marker counts as an unsynced base")
	}
}
