// Command wsfs is the workspace filesystem: host setup, workspace daemons,
// the stress harness and the host supervisor.
//
// Main.Run is the entry point (the shape of litestream's cmd/litestream).
// Each command lives in its own file with its own flag set and usage text,
// and registers itself in commands; a command with verbs (state sync,
// layout create) registers them as its subcommands. Every command parses
// its flags with parseFlags, so flags may come anywhere after the command
// name and -h is exit 0 with the usage; the global --home may also come
// before the command. Exit codes and the one table of them are in
// exitcodes.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"wsfs/internal/host"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, g *globals, args []string) error

	// subcommands are the verbs of a command that has them (state sync,
	// layout create): each has a name, a summary and a run, and parses its
	// own flags. If run is nil, register makes it dispatch to them: global
	// flags (--home) may come before the verb, -h prints argsUsage, about
	// and every verb's usage. If run is set, a first argument naming a verb
	// goes to it and anything else to run.
	subcommands []command
	argsUsage   string   // for commands with subcommands: what follows the verb
	about       string   // for commands with subcommands: the text of 'wsfs NAME -h'
	ownRun      bool     // set by register: a command with subcommands and its own run
	aliases     []string // other names of a subcommand ("list" for "ls")
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("wsfs: duplicate command " + c.name)
	}
	if len(c.subcommands) > 0 {
		own := c.run
		c.ownRun = own != nil
		c.run = func(ctx context.Context, g *globals, args []string) error {
			return c.dispatch(ctx, g, own, args)
		}
	}
	commands[c.name] = c
}

// sub returns the subcommand called name.
func (c command) sub(name string) (command, bool) {
	for _, s := range c.subcommands {
		if s.name == name || slices.Contains(s.aliases, name) {
			return s, true
		}
	}
	return command{}, false
}

func (c command) subNames() []string {
	var names []string
	for _, s := range c.subcommands {
		names = append(names, s.name)
	}
	return names
}

// dispatch runs the subcommand args name. own is the command's own run
// (nil if it has none): it gets args that do not start with a verb.
func (c command) dispatch(ctx context.Context, g *globals, own func(context.Context, *globals, []string) error, args []string) error {
	if own != nil {
		if len(args) > 0 {
			if s, ok := c.sub(args[0]); ok {
				return s.run(ctx, g, args[1:])
			}
		}
		return own(ctx, g, args)
	}
	verbs := strings.Join(c.subNames(), "|")
	home, rest, err := globalFlags(args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		c.usage(ctx, g)
		return usageError{"expected a subcommand: " + verbs}
	}
	switch rest[0] {
	case "-h", "-help", "--help", "help":
		c.usage(ctx, g)
		return flag.ErrHelp
	}
	if strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
		return usageError{fmt.Sprintf("flag %s comes before the subcommand: put it after it (wsfs %s %s %s ...)", rest[0], c.name, verbs, rest[0])}
	}
	s, ok := c.sub(rest[0])
	if !ok {
		return usageError{fmt.Sprintf("unknown subcommand %q: expected %s", rest[0], verbs)}
	}
	return s.run(ctx, g, withHome(home, rest[1:]))
}

// usage prints the usage of a command with subcommands: its text, the
// list of verbs, and each verb's own usage (flags included).
func (c command) usage(ctx context.Context, g *globals) {
	w := g.stderr
	fmt.Fprintf(w, "usage: %s\n\n%s\n\nsubcommands:\n", strings.TrimSpace("wsfs "+c.name+" "+strings.Join(c.subNames(), "|")+" [flags] "+c.argsUsage), strings.TrimSpace(c.about))
	for _, s := range c.subcommands {
		fmt.Fprintf(w, "  %-10s %s\n", s.name, s.summary)
	}
	for _, s := range c.subcommands {
		var buf strings.Builder
		sg := *g
		sg.stderr = &buf
		s.run(ctx, &sg, []string{"-h"}) // prints its usage, runs nothing
		fmt.Fprintf(w, "\n%s", buf.String())
	}
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
	m := &Main{Stdout: os.Stdout, Stderr: os.Stderr}
	os.Exit(m.Run(ctx, os.Args[1:]))
}

// Main is the wsfs program (the shape of litestream's cmd/litestream): Run
// takes the global flags, dispatches to the command named by the first
// argument and returns the process's exit code (exitcodes.go). Commands
// write their output to Stdout and their usage, logs and errors to Stderr.
type Main struct {
	Stdout, Stderr io.Writer
}

// Run runs one wsfs command line (without the program name).
func (m *Main) Run(ctx context.Context, args []string) int {
	return run(ctx, &globals{stdout: m.Stdout, stderr: m.Stderr}, args)
}

func run(ctx context.Context, g *globals, args []string) int {
	home, args, err := globalFlags(args)
	if err != nil {
		fmt.Fprintf(g.stderr, "wsfs: %v\n\n", err)
		usage(g.stderr)
		return exitUsage
	}
	if len(args) == 0 {
		usage(g.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(g.stderr)
		return exitOK
	case "help":
		// 'wsfs help CMD' is 'wsfs CMD -h'.
		if len(args) == 1 {
			usage(g.stderr)
			return exitOK
		}
		args = []string{args[1], "-h"}
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(g.stderr, "wsfs: unknown command %q\n\n", args[0])
		usage(g.stderr)
		return exitUsage
	}
	err = c.run(ctx, g, withHome(home, args[1:]))
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	label := c.name // "state restore" for a subcommand's error
	if _, rest, _ := globalFlags(args[1:]); len(rest) > 0 {
		if s, ok := c.sub(rest[0]); ok {
			label += " " + s.name
		}
	}
	fmt.Fprintf(g.stderr, "wsfs %s: %v\n", label, err)
	return exitCodeOf(err)
}

// globalFlags takes the global flags (--home DIR, --home=DIR, one dash or
// two) off the front of args and returns the last --home given ("" if
// none) and the rest.
func globalFlags(args []string) (home string, rest []string, err error) {
	for len(args) > 0 {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if name != "home" || !strings.HasPrefix(args[0], "-") {
			break
		}
		if !hasValue {
			if len(args) < 2 {
				return "", nil, usageError{"flag needs an argument: --home"}
			}
			value, args = args[1], args[1:]
		}
		if value == "" {
			return "", nil, usageError{"--home: empty directory name"}
		}
		home, args = value, args[1:]
	}
	return home, args, nil
}

// withHome hands a global --home to the command as its own first flag
// (the command's flag set defines it; a --home later in args still wins).
// A command without --home then refuses it as an undefined flag.
func withHome(home string, args []string) []string {
	if home == "" {
		return args
	}
	return append([]string{"--home=" + home}, args...)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: wsfs [--home DIR] <command> [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nglobal flags (before the command, or among its flags; not for the internal commands):\n  --home DIR  host directory (env WSFS_HOME, default ./wsfs-data)")
	fmt.Fprintln(w, "\nFlags may come before, between or after the arguments; -- ends them.")
	fmt.Fprintln(w, "Run 'wsfs <command> -h' for a command's flags.\n\nexit codes:")
	for _, e := range exitCodes {
		fmt.Fprintf(w, "  %d  %s\n", e.code, e.meaning)
	}
}

// newFlagSet returns a flag set whose errors are returned, not fatal, and
// whose usage text names the command.
func newFlagSet(g *globals, name, argsUsage, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("wsfs "+name, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		fmt.Fprintf(g.stderr, "usage: %s\n\n%s\n\nflags:\n", strings.TrimSpace("wsfs "+name+" [flags] "+argsUsage), strings.TrimSpace(about))
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

// nameArg returns the one positional argument of fs, which must be a valid
// workspace name (host.ValidateName); anything else is a usage error.
func nameArg(fs *flag.FlagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", usageError{fmt.Sprintf("expected one workspace NAME, got %d arguments", fs.NArg())}
	}
	return workspaceName(fs.Arg(0))
}

// workspaceName checks a workspace name given on the command line: an
// invalid one is a usage error saying what a name may be.
func workspaceName(name string) (string, error) {
	if err := host.ValidateName(name); err != nil {
		return "", usageError{err.Error()}
	}
	return name, nil
}
