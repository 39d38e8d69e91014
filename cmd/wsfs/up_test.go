package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeployUnitsMatchCLI keeps deploy/*.service honest: every wsfs command
// line in an ExecStart names a registered command and only flags that the
// command's usage lists.
func TestDeployUnitsMatchCLI(t *testing.T) {
	units, err := filepath.Glob(filepath.Join("..", "..", "deploy", "*.service"))
	if err != nil {
		t.Fatal(err)
	}
	if len(units) < 2 {
		t.Fatalf("found %d unit files in deploy/", len(units))
	}
	checked := 0
	for _, u := range units {
		f, err := os.Open(u)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "ExecStart=") {
				continue
			}
			args := strings.Fields(strings.TrimPrefix(line, "ExecStart="))
			if len(args) < 2 || filepath.Base(args[0]) != "wsfs" {
				continue
			}
			checked++
			name := args[1]
			c, ok := commands[name]
			if !ok {
				t.Errorf("%s: ExecStart runs unknown command %q", filepath.Base(u), name)
				continue
			}
			var stderr bytes.Buffer
			g := &globals{stdout: &bytes.Buffer{}, stderr: &stderr}
			// Leading words before the first flag are a subcommand (layout create).
			rest := args[2:]
			var sub []string
			for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
				sub, rest = append(sub, rest[0]), rest[1:]
			}
			c.run(context.Background(), g, append(sub, "-h"))
			usage := stderr.String()
			for _, a := range rest {
				if !strings.HasPrefix(a, "--") {
					continue
				}
				flag := strings.SplitN(strings.TrimPrefix(a, "--"), "=", 2)[0]
				if !strings.Contains(usage, "  -"+flag+" ") && !strings.Contains(usage, "  -"+flag+"\n") {
					t.Errorf("%s: `wsfs %s` has no flag --%s (usage:\n%s)", filepath.Base(u), name, flag, usage)
				}
			}
		}
		f.Close()
	}
	if checked < 3 {
		t.Errorf("checked %d wsfs ExecStart lines, want at least 3 (mount, sidecar, layout)", checked)
	}
}
