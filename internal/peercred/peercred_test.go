package peercred_test

import (
	"context"
	"crypto/rand"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/peercred"
	"wsfs/internal/testenv"
)

// squatEnv makes the test binary a squatter: it listens on the abstract
// socket named by the variable, answers every connection with a sidecar's
// "replicated" reply, and exits when its stdin closes.
const squatEnv = "PEERCRED_TEST_SQUAT"

func TestMain(m *testing.M) {
	if name := os.Getenv(squatEnv); name != "" {
		ln, err := net.Listen("unix", name)
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("listening\n")
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(`{"position":{"txid":4096,"at":"2026-01-01T00:00:00Z"}}` + "\n"))
				c.Close()
			}
		}()
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSquatterNotBelieved: another user that binds the abstract address of
// a sidecar's socket (a workspace path too long for a socket file) is not
// believed: RequestSync fails naming the squatter's uid, instead of
// reporting a replication that never happened. A server of this process's
// own user is trusted.
func TestSquatterNotBelieved(t *testing.T) {
	testenv.RequireRoot(t) // to run the squatter as uid 65534
	// The squatter is this test binary, copied where uid 65534 can run it.
	dir, err := os.MkdirTemp("", "peercred-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "squatter")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := "@wsfs-peercred-test-" + rand.Text()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), squatEnv+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	buf := make([]byte, len("listening\n"))
	if _, err := io.ReadFull(stdout, buf); err != nil {
		t.Fatalf("the squatter did not start listening: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pos, err := agentstate.RequestSync(ctx, addr)
	if err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("RequestSync to a squatter of uid 65534: %v, %v; want refused, naming its uid", pos, err)
	}

	// Control: a server of this process's own user passes.
	own := "@wsfs-peercred-test-" + rand.Text()
	ln, err := net.Listen("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	c, err := net.Dial("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := peercred.CheckServer(c, own); err != nil {
		t.Fatalf("a server of our own user: %v", err)
	}
}
