package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	flagSeed = flag.Int64("e2e.seed", 0, "seed of the randomized tests (0: time-based; the seed used is logged)")
	flagBin  = flag.String("e2e.bin", "", "use this wsfs binary instead of building ./cmd/wsfs")
)

// wsfsBin is the binary the mount tests run; wsfsBuildErr says why there is
// none (every wsfs target then fails with that reason).
var (
	wsfsBin      string
	wsfsBuildErr error
)

// buildTimeout bounds the one build of the binary in TestMain.
const buildTimeout = 5 * time.Minute

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "wsfs-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: temp dir for the binary: %v\n", err)
		os.Exit(1)
	}
	if *flagBin != "" {
		wsfsBin = *flagBin
	} else {
		wsfsBin, wsfsBuildErr = buildWsfs(dir)
	}
	if wsfsBuildErr == nil {
		wsfsBuildErr = checkCommands(wsfsBin)
	}
	if wsfsBuildErr != nil {
		fmt.Fprintf(os.Stderr, "e2e: wsfs target disabled: %v\n", wsfsBuildErr)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildWsfs builds ./cmd/wsfs of this module into dir (with -race when the
// tests run with -race, so the daemon's data races fail the tests too).
func buildWsfs(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside the wsfs module")
	}
	bin := filepath.Join(dir, "wsfs")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/wsfs")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// checkCommands fails unless bin has the commands the mount tests run.
func checkCommands(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "help").CombinedOutput()
	for _, c := range []string{"init", "create", "mount"} {
		if !regexp.MustCompile(`(?m)^\s+` + c + `\s`).Match(out) {
			return fmt.Errorf("the wsfs binary has no %q command yet (see wsfs help)", c)
		}
	}
	return nil
}
