package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"wsfs/internal/agentstate"
	"wsfs/internal/fusefs"
	"wsfs/internal/host"
	"wsfs/internal/layout"
	"wsfs/internal/vfs"
)

// commandLines returns every registered command and subcommand as the
// words that name it ("ls", "state sync", "agent neighbour"), and the
// commands with subcommands separately.
func commandLines() (leaves, parents [][]string) {
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range commands {
			if !yield(n) {
				return
			}
		}
	}) {
		c := commands[name]
		for _, s := range c.subcommands {
			leaves = append(leaves, []string{name, s.name})
		}
		if len(c.subcommands) > 0 && !c.ownRun {
			parents = append(parents, []string{name})
		} else {
			leaves = append(leaves, []string{name})
		}
	}
	return leaves, parents
}

// TestHelpEveryCommand: -h, -help and --help, before or after a
// positional argument, exit 0 with the command's full usage on stderr,
// for every command and subcommand; a command with subcommands lists them
// and shows each one's flags.
func TestHelpEveryCommand(t *testing.T) {
	t.Setenv("WSFS_HOME", filepath.Join(t.TempDir(), "home"))
	ctx := context.Background()
	leaves, parents := commandLines()
	if len(leaves) < 16 || len(parents) < 2 {
		t.Fatalf("found %d commands and %d with subcommands; the registry is not what this test expects", len(leaves), len(parents))
	}
	checkFlags := func(args []string, stderr string) {
		t.Helper()
		i := strings.Index(stderr, "\nflags:\n")
		if i < 0 {
			t.Errorf("wsfs %s: no flags section in\n%s", strings.Join(args, " "), stderr)
			return
		}
		if !strings.HasPrefix(stderr[i+len("\nflags:\n"):], "  -") {
			t.Errorf("wsfs %s: empty flags section in\n%s", strings.Join(args, " "), stderr)
		}
	}
	for _, words := range leaves {
		for _, h := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"x", "-h"}} {
			args := append(slices.Clone(words), h...)
			code, stdout, stderr := runCLI(ctx, args...)
			if code != exitOK || strings.Contains(stderr, "help requested") || stdout != "" {
				t.Errorf("wsfs %s: exit %d, stdout %q, stderr %q; want exit 0 and usage on stderr", strings.Join(args, " "), code, stdout, stderr)
				continue
			}
			if want := "usage: wsfs " + strings.Join(words, " "); !strings.HasPrefix(stderr, want) {
				t.Errorf("wsfs %s: usage starts %q, want %q", strings.Join(args, " "), firstLine(stderr), want)
			}
			checkFlags(args, stderr)
		}
	}
	for _, words := range parents {
		c := commands[words[0]]
		for _, h := range []string{"-h", "--help", "help"} {
			code, _, stderr := runCLI(ctx, words[0], h)
			if code != exitOK || !strings.Contains(stderr, "\nsubcommands:\n") {
				t.Errorf("wsfs %s %s: exit %d, %q; want exit 0 listing subcommands", words[0], h, code, stderr)
				continue
			}
			for _, s := range c.subcommands {
				if !strings.Contains(stderr, "  "+s.name+" ") || !strings.Contains(stderr, "usage: wsfs "+words[0]+" "+s.name) {
					t.Errorf("wsfs %s %s: does not list and show subcommand %s:\n%s", words[0], h, s.name, stderr)
				}
			}
			checkFlags([]string{words[0], h}, stderr)
		}
		// Without a subcommand: the usage, but exit 2.
		if code, _, stderr := runCLI(ctx, words[0]); code != exitUsage || !strings.Contains(stderr, "subcommands:") {
			t.Errorf("wsfs %s: exit %d, %q; want exit 2 with the usage", words[0], code, stderr)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, _, stderr := runCLI(ctx, args...)
		if code != exitOK || !strings.Contains(stderr, "commands:") || !strings.Contains(stderr, "exit codes:") {
			t.Errorf("wsfs %s: exit %d, %q", args[0], code, stderr)
		}
		for name := range commands {
			if !strings.Contains(stderr, "  "+name+" ") {
				t.Errorf("wsfs %s does not list %s", args[0], name)
			}
		}
	}
	if code, _, stderr := runCLI(ctx, "help", "mount"); code != exitOK || !strings.HasPrefix(stderr, "usage: wsfs mount") {
		t.Errorf("wsfs help mount: exit %d, %q", code, firstLine(stderr))
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// newCLIHost makes a host with workspace ws-1 and returns its directory.
func newCLIHost(t *testing.T) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	h, err := host.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CreateWorkspace("ws-1"); err != nil {
		t.Fatal(err)
	}
	return home
}

// TestFlagsAnywhere: flags before, between and after the arguments of
// every kind of command, the global --home before the command or the
// subcommand, and the refusals of misplaced or malformed global flags.
func TestFlagsAnywhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := newCLIHost(t)
	t.Setenv("WSFS_HOME", filepath.Join(t.TempDir(), "not-a-host"))
	other := filepath.Join(t.TempDir(), "other")
	to := filepath.Join(t.TempDir(), "restored.db")
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		// The README's examples and the issue's.
		{[]string{"state", "restore", "ws-1", "--home", home, "--to", to}, exitPrecondition, "holds no copy"},
		{[]string{"state", "restore", "--home", home, "ws-1", "--to", to, "--at", "2020-01-01T00:00:00Z"}, exitPrecondition, "holds no copy"},
		{[]string{"state", "sync", "ws-1", "--timeout", "1s", "--home", home}, exitFailure, "no sidecar answers"},
		{[]string{"--home", other, "init"}, exitOK, "host ready at " + other},
		{[]string{"--home=" + home, "ls"}, exitOK, "ws-1"},
		{[]string{"-home", home, "ls"}, exitOK, "ws-1"},
		{[]string{"-home=" + home, "create", "ws-2"}, exitOK, "created workspace ws-2"},
		{[]string{"rm", "ws-2", "--home", home}, exitOK, "removed workspace ws-2"},
		{[]string{"--home", home, "state", "sync", "ws-1", "--timeout=1s"}, exitFailure, "no sidecar answers"},
		{[]string{"state", "--home", home, "sync", "--timeout", "1s", "ws-1"}, exitFailure, "no sidecar answers"},
		{[]string{"--home", home, "layout", "status"}, exitPrecondition, "no layout recorded"},
		{[]string{"layout", "--home", home, "status"}, exitPrecondition, "no layout recorded"},
		{[]string{"--home", home, "status"}, exitOK, "ws-1"},
		// The command's own --home wins over the global one.
		{[]string{"--home", filepath.Join(t.TempDir(), "nohost"), "ls", "--home", home}, exitOK, "ws-1"},
		// Refusals.
		{[]string{"--home"}, exitUsage, "flag needs an argument: --home"},
		{[]string{"--home=", "ls"}, exitUsage, "empty directory"},
		{[]string{"--home", home}, exitUsage, "usage: wsfs"},
		{[]string{"--bogus", "ls"}, exitUsage, `unknown command "--bogus"`},
		{[]string{"--home", home, "stress", "--workspaces", "1"}, exitUsage, "flag provided but not defined: -home"},
		{[]string{"state", "--timeout", "1s", "sync", "ws-1"}, exitUsage, "comes before the subcommand"},
		{[]string{"state", "sync", "ws-1", "--timeout", "soon", "--home", home}, exitUsage, "invalid value"},
		{[]string{"state", "sync", "ws-1", "ws-2", "--home", home}, exitUsage, "expected one workspace NAME, got 2"},
		{[]string{"layout", "status", "extra", "--home", home}, exitUsage, `unexpected argument "extra"`},
		{[]string{"ls", "--home", home, "--", "--home"}, exitUsage, "ls takes no arguments"},
	} {
		code, stdout, stderr := runCLI(ctx, tc.args...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("wsfs %s: exit %d, stdout %q, stderr %q; want exit %d saying %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(other, host.ConfigFile)); err != nil {
		t.Errorf("wsfs --home OTHER init made no host there: %v", err)
	}
}

// TestInvalidNamesAreUsageErrors: every command taking a workspace name
// refuses an invalid one with exit 2 and the reason, and creates nothing.
func TestInvalidNamesAreUsageErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := newCLIHost(t)
	for _, name := range []string{"", ".", "..", "a/b", "../ws-1", "Ws", "a b", "x\x00y", strings.Repeat("a", 64)} {
		for _, cmd := range [][]string{
			{"create"}, {"rm"}, {"mount"}, {"sidecar"}, {"state", "sync"}, {"state", "restore"},
		} {
			args := append(slices.Clone(cmd), "--home", home, "--", name)
			code, _, stderr := runCLI(ctx, args...)
			if code != exitUsage || !strings.Contains(stderr, "invalid workspace name") {
				t.Errorf("wsfs %s %q: exit %d, %q; want exit 2 naming the invalid name", strings.Join(cmd, " "), name, code, stderr)
			}
		}
	}
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	if names, err := h.Workspaces(); err != nil || !slices.Equal(names, []string{"ws-1"}) {
		t.Errorf("workspaces after the refusals: %q, %v", names, err)
	}
	for _, p := range []string{filepath.Join(h.StateDir(), "workspaces", "agent"), filepath.Join(h.PoolDir(), "replicas")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists after the refusals (phantom workspace)", p)
		}
	}
}

// TestRefusalExitCodes pins the exit code of each refusal that needs no mount
// and no root (exitcodes_test.go on the host-safety side covers the daemon's).
func TestRefusalExitCodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := newCLIHost(t)
	t.Setenv("WSFS_HOME", filepath.Join(t.TempDir(), "not-a-host"))
	nohost := filepath.Join(t.TempDir(), "nohost")
	// A state directory that holds a file: layout create must refuse it
	// (as root, before touching any device; without root, for lack of it).
	busy := newCLIHost(t)
	if err := os.WriteFile(filepath.Join(busy, "state", "stray"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	notEmpty, noLayout := "not empty", "no layout recorded"
	if os.Geteuid() != 0 {
		notEmpty, noLayout = "needs root", "needs root"
	}
	to := filepath.Join(t.TempDir(), "r.db")
	type refusal struct {
		args []string
		code int
		want string
	}
	cases := []refusal{
		{nil, exitUsage, "usage: wsfs"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"ls", "--bogus"}, exitUsage, "flag provided but not defined"},
		{[]string{"create", "--home", home}, exitUsage, "want one workspace NAME"},
		{[]string{"state", "frobnicate"}, exitUsage, "unknown subcommand"},
		{[]string{"layout"}, exitUsage, "expected a subcommand"},
		{[]string{"mount", "--home", home, "--drain", "bogus", "ws-1"}, exitUsage, "drain"},
		{[]string{"state", "restore", "--home", home, "--at", "yesterday", "ws-1"}, exitUsage, "RFC 3339"},
		{[]string{"gc", "--home", home, "--grace", "1s"}, exitUsage, "shorter than the minimum"},
		{[]string{"mount", "--home", home, "--metrics-file", to, "ws-1"}, exitUsage, "--metrics-file needs --metrics"},
		{[]string{"ship", "--home", home, "--metrics-file", to, "ws-1"}, exitUsage, "--metrics-file needs --metrics"},
		{[]string{"sidecar", "--home", home, "--metrics-file", to, "ws-1"}, exitUsage, "--metrics-file needs --metrics"},
		{[]string{"up", "--home", home, "--metrics", "no-port"}, exitUsage, "--metrics: listen tcp: address no-port: missing port"},
		{[]string{"up", "--home", home, "--metrics", "127.0.0.1:0", "--metrics-timeout", "0s"}, exitUsage, "--metrics-timeout positive"},

		{[]string{"ls", "--home", nohost}, exitPrecondition, "wsfs init"},
		{[]string{"status", "--home", nohost}, exitPrecondition, "wsfs init"},
		{[]string{"up", "--home", nohost}, exitPrecondition, "wsfs init"},
		{[]string{"gc", "--home", nohost}, exitPrecondition, "wsfs init"},
		{[]string{"create", "--home", home, "ws-1"}, exitPrecondition, "workspace exists"},
		{[]string{"rm", "--home", home, "ws-9"}, exitPrecondition, "no such workspace"},
		{[]string{"mount", "--home", home, "ws-9"}, exitPrecondition, "no such workspace"},
		{[]string{"sidecar", "--home", home, "ws-9"}, exitPrecondition, "no such workspace"},
		{[]string{"state", "sync", "--home", home, "ws-9"}, exitPrecondition, "no such workspace"},
		{[]string{"state", "restore", "--home", home, "--to", to, "ws-1"}, exitPrecondition, "holds no copy"},
		{[]string{"state", "restore", "--home", home, "--to", to, "--at", "2020-01-01T00:00:00Z", "ws-1"}, exitPrecondition, "holds no copy"},
		{[]string{"layout", "status", "--home", home}, exitPrecondition, "no layout recorded"},
		{[]string{"layout", "status", "--home", nohost}, exitPrecondition, "wsfs init"},
		{[]string{"layout", "destroy", "--home", home}, exitPrecondition, noLayout},
		{[]string{"layout", "create", "--home", busy, "--state-size", "16M", "--pool-size", "16M"}, exitPrecondition, notEmpty},

		{[]string{"state", "sync", "--home", home, "--timeout", "1s", "ws-1"}, exitFailure, "no sidecar answers"},
		{[]string{"up", "--home", home, "--fuse-transport", "carrier-pigeon"}, exitUsage, "want dev or uring"},
		{[]string{"mount", "--home", home, "--fuse-transport", "carrier-pigeon", "ws-1"}, exitUsage, "want dev or uring"},
	}
	// With FUSE over io_uring disabled (as the kernel ships it, and as
	// CI runs), up refuses the transport before it starts anything.
	if fusefs.CheckURing() != nil {
		cases = append(cases, refusal{[]string{"up", "--home", home, "--fuse-transport", "uring"}, exitPrecondition, "io_uring"})
	}
	for _, tc := range cases {
		code, stdout, stderr := runCLI(ctx, tc.args...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("wsfs %s: exit %d, stdout %q, stderr %q; want exit %d saying %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.want)
		}
	}
	// The refused layout create left the stray file visible: nothing mounted over it.
	if _, err := os.Stat(filepath.Join(busy, "state", "stray")); err != nil {
		t.Errorf("after the refused layout create: %v", err)
	}
}

// TestExitCodeOf: the marks and the sentinels, however deeply wrapped.
func TestExitCodeOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", err)) }
	for _, tc := range []struct {
		err  error
		code int
	}{
		{errors.New("disk on fire"), exitFailure},
		{wrap(usageError{"bad"}), exitUsage},
		{wrap(preconditionError{errors.New("x")}), exitPrecondition},
		{wrap(corruptError{errors.New("x")}), exitCorrupt},
		{usageError{"bad flag"}, exitUsage},
		{wrap(host.ErrInvalidName), exitUsage},
		{wrap(host.ErrNoHost), exitPrecondition},
		{wrap(host.ErrNoWorkspace), exitPrecondition},
		{wrap(host.ErrWorkspaceExists), exitPrecondition},
		{wrap(vfs.ErrLocked), exitPrecondition},
		{wrap(layout.ErrNotRoot), exitPrecondition},
		{wrap(layout.ErrBusy), exitPrecondition},
		{wrap(layout.ErrNotEmpty), exitPrecondition},
		{wrap(layout.ErrNoLayout), exitPrecondition},
		{wrap(&agentstate.NotAvailableError{}), exitPrecondition},
		{wrap(&agentstate.DamagedReplicaError{}), exitCorrupt},
		// An explicit mark wins over a sentinel inside it.
		{corruptError{wrap(vfs.ErrLocked)}, exitCorrupt},
	} {
		if got := exitCodeOf(tc.err); got != tc.code {
			t.Errorf("exitCodeOf(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}
}

// TestSecondSidecarRefused: a sidecar for a workspace whose agent state
// another sidecar replicates is refused with exit 3, saying so.
func TestSecondSidecarRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := newCLIHost(t)
	h, err := host.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	p := agentstate.PathsFor(h, "ws-1")
	sc, err := agentstate.Start(ctx, agentstate.Options{Workspace: "ws-1", DBPath: p.DB, ReplicaURL: p.ReplicaDir, SocketPath: p.Socket, StatusPath: p.Status})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(ctx)
	code, _, stderr := runCLI(ctx, "sidecar", "ws-1", "--home", home)
	if code != exitPrecondition || !strings.Contains(stderr, "already replicating") {
		t.Errorf("second sidecar: exit %d, %q; want exit 3 saying another sidecar replicates", code, stderr)
	}
}
