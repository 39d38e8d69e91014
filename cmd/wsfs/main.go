// Command wsfs is the workspace filesystem: host setup, workspace daemons,
// the stress harness and the host supervisor.
//
// Each subcommand lives in its own file with its own flag set and usage text,
// and registers itself in commands. Exit codes are listed in exitcodes.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, g *globals, args []string) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("wsfs: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// globals are the options every command shares.
type globals struct {
	home   string // host directory (--home, WSFS_HOME, default ./wsfs-data)
	stdout io.Writer
	stderr io.Writer
}

// homeFlag adds --home to fs, defaulting to WSFS_HOME or ./wsfs-data.
func (g *globals) homeFlag(fs *flag.FlagSet) {
	def := os.Getenv("WSFS_HOME")
	if def == "" {
		def = "wsfs-data"
	}
	fs.StringVar(&g.home, "home", def, "host directory holding state, pool and mount points (env WSFS_HOME)")
}

func main() {
	// A daemon whose stderr is a pipe must not die of SIGPIPE in the middle
	// of a commit because the reader went away: writes then fail with EPIPE
	// and the daemon carries on (its log lines are lost, its data is not).
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{stdout: os.Stdout, stderr: os.Stderr}
	os.Exit(run(ctx, g, os.Args[1:]))
}

func run(ctx context.Context, g *globals, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(g.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(g.stderr, "wsfs: unknown command %q\n\n", args[0])
		usage(g.stderr)
		return exitUsage
	}
	err := c.run(ctx, g, args[1:])
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(g.stderr, "wsfs %s: %v\n", c.name, err)
	return exitCodeOf(err)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: wsfs <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'wsfs <command> -h' for a command's flags.")
}

// newFlagSet returns a flag set whose errors are returned, not fatal, and
// whose usage text names the command.
func newFlagSet(g *globals, name, argsUsage, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("wsfs "+name, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprintf(g.stderr, "usage: wsfs %s [flags] %s\n\n%s\n\nflags:\n", name, argsUsage, strings.TrimSpace(about))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args with flags allowed before, between and after the
// positional arguments (`wsfs mount ws-1 --drain syncfs` works as well as
// `wsfs mount --drain syncfs ws-1`); "--" ends flag parsing. Afterwards
// flags.Args() holds the positional arguments in order. A bad flag is a
// usageError naming it.
func parseFlags(flags *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{err.Error()}
		}
		rest := flags.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return flags.Parse(append([]string{"--"}, positional...))
}
