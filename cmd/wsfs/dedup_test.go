package main

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"

	"wsfs/internal/host"
	"wsfs/internal/pool"
	"wsfs/internal/vfs"
	"wsfs/internal/workspace"
)

// TestDedupAgainstCorruptObjectThroughWorkspace is the repro of hardening
// issue item 2: one byte of a pooled object flipped (same size); a new
// "daemon" writes the same 200 KiB to a new file and fsyncs; after a
// "remount" the file must read back (before the fix: EIO).
func TestDedupAgainstCorruptObjectThroughWorkspace(t *testing.T) {
	home := newHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(99, 200<<10)
	open := func() (*workspace.Workspace, *bytes.Buffer) {
		var logs bytes.Buffer
		p, err := pool.Open(vfs.Default, h.PoolDir(), pool.Options{Logger: newTestLogger(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		ws, err := workspace.Open(workspace.Options{Dir: h.WorkspaceDir("ws"), Pool: p})
		if err != nil {
			t.Fatal(err)
		}
		return ws, &logs
	}
	ws, _ := open()
	writeFile(t, ws, "first", data)
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	obj := h.PoolDir() + "/objects/" + pool.Sum(data).String()[:1] + "/" + pool.Sum(data).String()
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	b[1000] ^= 0x20
	os.Chmod(obj, 0o644)
	if err := os.WriteFile(obj, b, 0o444); err != nil {
		t.Fatal(err)
	}

	ws, logs := open() // the new daemon
	writeFile(t, ws, "second", data)
	if err := ws.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), pool.Sum(data).String()) {
		t.Errorf("no ERROR line naming the damaged object:\n%s", logs)
	}
	ws, _ = open() // remount
	defer ws.Close()
	for _, name := range []string{"first", "second"} {
		if err := checkFile(ws, name, data); err != nil {
			t.Errorf("after remount: %v", err)
		}
	}
}

func newTestLogger(w *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, nil))
}
