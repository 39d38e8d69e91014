package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite the README's exit-code table from exitcodes.go")

const readmePath = "../../README.md"

const (
	exitTableStart = "<!-- exit codes: generated from cmd/wsfs/exitcodes.go"
	exitTableEnd   = "<!-- end of exit codes -->"
)

// exitCodeTable renders exitCodes as the README's Markdown table.
func exitCodeTable() string {
	var b strings.Builder
	b.WriteString("| code | meaning |\n|---:|---|\n")
	for _, e := range exitCodes {
		fmt.Fprintf(&b, "| %d | %s |\n", e.code, e.meaning)
	}
	return b.String()
}

// TestREADMEExitCodes: the README's exit-code table is the one in
// exitcodes.go, and the table covers every exit code constant in order.
func TestREADMEExitCodes(t *testing.T) {
	for i, e := range exitCodes {
		if e.code != i {
			t.Fatalf("exitCodes[%d] is code %d: keep the table dense and in order", i, e.code)
		}
	}
	if got := exitCodes[len(exitCodes)-1].code; got != exitCorrupt {
		t.Fatalf("the table ends at %d, the constants at %d", got, exitCorrupt)
	}
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	i := strings.Index(readme, exitTableStart)
	j := strings.Index(readme, exitTableEnd)
	if i < 0 || j < i {
		t.Fatalf("README has no exit-code table between %q and %q", exitTableStart, exitTableEnd)
	}
	i += strings.Index(readme[i:], "\n") + 1
	if got, want := readme[i:j], exitCodeTable(); got != want {
		if *updateREADME {
			if err := os.WriteFile(readmePath, []byte(readme[:i]+want+readme[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("README's exit-code table differs from exitcodes.go (rerun with -update-readme):\n got:\n%s\nwant:\n%s", got, want)
	}
}

// readmeLine is one wsfs command line from a code block of the README.
type readmeLine struct {
	line int
	args []string // after "wsfs"
}

// readmeCommandLines extracts every wsfs command line from the README's
// fenced code blocks: lines starting with "wsfs" or "go run ./cmd/wsfs",
// split at "&&", with "# comments" removed.
func readmeCommandLines(t *testing.T) []readmeLine {
	t.Helper()
	f, err := os.Open(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeLine
	inBlock := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		for _, part := range strings.Split(line, "&&") {
			w := strings.Fields(part)
			switch {
			case len(w) > 0 && w[0] == "wsfs":
				out = append(out, readmeLine{n, w[1:]})
			case len(w) > 2 && w[0] == "go" && w[1] == "run" && w[2] == "./cmd/wsfs":
				out = append(out, readmeLine{n, w[3:]})
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestREADMECommandLines runs every wsfs command line shown in the README,
// in order, with its paths moved into a temporary directory, and fails if
// one is a usage error. Each line is first parsed with -h appended, which
// must print its usage and exit 0 (an unknown flag, a bad flag value or a
// flag the parser does not reach fails that); then the lines that finish
// on their own are run for real, bounded by a timeout, and must not exit 2
// (a wrong argument count fails that). Only the lines that would run a
// long-lived supervisor, the stress harness or the tools benchmark (minutes
// of real tools on real mounts), or format loop devices
// (layout create, as root; without root it is run and refuses), are left
// at the parse check.
func TestREADMECommandLines(t *testing.T) {
	lines := readmeCommandLines(t)
	tmp := t.TempDir()
	t.Setenv("WSFS_HOME", filepath.Join(tmp, "wsfs-data")) // the default ./wsfs-data
	move := func(a string) string {
		if strings.HasPrefix(a, "/") || strings.HasPrefix(a, "./") {
			return filepath.Join(tmp, a)
		}
		return a
	}
	seen := map[string]bool{}
	for _, l := range lines {
		args := make([]string, len(l.args))
		for i, a := range l.args {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
				args[i] = k + "=" + move(v)
			} else {
				args[i] = move(a)
			}
		}
		if len(args) == 0 {
			t.Errorf("README:%d: a wsfs line without a command", l.line)
			continue
		}
		verb := args[0]
		if c, ok := commands[verb]; ok && len(c.subcommands) > 0 && len(args) > 1 {
			verb += " " + args[1]
		}
		seen[verb] = true
		what := fmt.Sprintf("README:%d: wsfs %s", l.line, strings.Join(l.args, " "))

		code, stdout, stderr := runCLI(context.Background(), append(slices.Clone(args), "-h")...)
		if code != exitOK || !strings.HasPrefix(stderr, "usage: wsfs "+verb) {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q; want its usage and exit 0", what, code, stdout, firstLine(stderr))
			continue
		}
		timeout := 30 * time.Second
		switch {
		case verb == "layout create" && os.Geteuid() != 0:
			// Without root it refuses before touching anything: run it.
		case verb == "up", verb == "stress", verb == "bench tools", verb == "layout create":
			continue // parse check only (see the doc comment)
		case verb == "mount":
			timeout = 3 * time.Second // a daemon: stops when the context ends
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		code, stdout, stderr = runCLI(ctx, args...)
		cancel()
		if code == exitUsage {
			t.Errorf("%s: usage error (exit 2): %s%s", what, stdout, stderr)
		}
		t.Logf("%s: exit %d", what, code)
	}
	// The extraction must find the README's examples, or this test would
	// pass on nothing.
	for _, want := range []string{"init", "create", "mount", "ls", "up", "status", "layout create", "layout status",
		"state sync", "state restore", "gc", "stress"} {
		if !seen[want] {
			t.Errorf("no `wsfs %s` line found in the README's code blocks (found %d lines)", want, len(lines))
		}
	}
}
