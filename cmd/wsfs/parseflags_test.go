package main

import (
	"context"
	"flag"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseFlagsInterspersed(t *testing.T) {
	tests := []struct {
		args    []string
		drain   string
		pos     []string
		wantErr bool
	}{
		{args: []string{"ws-1"}, drain: "entry", pos: []string{"ws-1"}},
		{args: []string{"--drain", "syncfs", "ws-1", "mnt"}, drain: "syncfs", pos: []string{"ws-1", "mnt"}},
		{args: []string{"ws-1", "--drain=syncfs", "mnt"}, drain: "syncfs", pos: []string{"ws-1", "mnt"}},
		{args: []string{"ws-1", "mnt", "--drain", "syncfs"}, drain: "syncfs", pos: []string{"ws-1", "mnt"}},
		{args: []string{"ws-1", "--", "--drain"}, drain: "entry", pos: []string{"ws-1", "--drain"}},
		{args: []string{"ws-1", "--bogus"}, wantErr: true},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		drain := fs.String("drain", "entry", "")
		err := parseFlags(fs, tt.args)
		if tt.wantErr {
			if _, ok := err.(usageError); !ok {
				t.Errorf("%q: err = %v, want a usageError", tt.args, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if *drain != tt.drain || !reflect.DeepEqual(fs.Args(), tt.pos) {
			t.Errorf("%q: drain %q args %q, want %q %q", tt.args, *drain, fs.Args(), tt.drain, tt.pos)
		}
	}
}

func TestGlobalFlags(t *testing.T) {
	tests := []struct {
		args    []string
		home    string
		rest    []string
		wantErr string
	}{
		{args: []string{"ls"}, rest: []string{"ls"}},
		{args: []string{"--home", "H", "ls", "-x"}, home: "H", rest: []string{"ls", "-x"}},
		{args: []string{"-home", "H", "ls"}, home: "H", rest: []string{"ls"}},
		{args: []string{"--home=H", "ls"}, home: "H", rest: []string{"ls"}},
		{args: []string{"-home=-dir", "ls"}, home: "-dir", rest: []string{"ls"}},
		{args: []string{"--home", "A", "--home=B", "ls"}, home: "B", rest: []string{"ls"}},
		{args: []string{"ls", "--home", "H"}, rest: []string{"ls", "--home", "H"}}, // the command's own
		{args: []string{"home", "x"}, rest: []string{"home", "x"}},
		{args: []string{"--homes", "x"}, rest: []string{"--homes", "x"}},
		{args: []string{"--home"}, wantErr: "needs an argument"},
		{args: []string{"--home="}, wantErr: "empty"},
		{args: nil},
	}
	for _, tt := range tests {
		home, rest, err := globalFlags(tt.args)
		if tt.wantErr != "" {
			if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err %v, want a usageError saying %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || home != tt.home || !slices.Equal(rest, tt.rest) {
			t.Errorf("%q: home %q rest %q err %v; want %q %q", tt.args, home, rest, err, tt.home, tt.rest)
		}
	}
}

// TestMainRun: the program entry point writes usage to Stderr and output
// to Stdout and returns the exit code.
func TestMainRun(t *testing.T) {
	var o, e strings.Builder
	m := &Main{Stdout: &o, Stderr: &e}
	if code := m.Run(context.Background(), []string{"--home", t.TempDir(), "init"}); code != exitOK || !strings.Contains(o.String(), "host ready") {
		t.Errorf("init: exit %d, stdout %q, stderr %q", code, o.String(), e.String())
	}
	if code := m.Run(context.Background(), []string{"nope"}); code != exitUsage || !strings.Contains(e.String(), `unknown command "nope"`) {
		t.Errorf("nope: exit %d, stderr %q", code, e.String())
	}
}

// TestSubcommandDispatch: a command registered with subcommands finds
// them by name or alias, takes --home before the verb, and refuses the
// rest with a usage error.
func TestSubcommandDispatch(t *testing.T) {
	var got []string
	rec := func(verb string) func(context.Context, *globals, []string) error {
		return func(_ context.Context, _ *globals, args []string) error {
			got = append([]string{verb}, args...)
			return nil
		}
	}
	c := command{name: "t", about: "test", subcommands: []command{
		{name: "ls", aliases: []string{"list"}, run: rec("ls")},
		{name: "rm", run: rec("rm")},
	}}
	g := &globals{stdout: io.Discard, stderr: io.Discard}
	for _, tc := range []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{args: []string{"ls", "a", "-x"}, want: []string{"ls", "a", "-x"}},
		{args: []string{"list"}, want: []string{"ls"}},
		{args: []string{"--home", "H", "rm", "a"}, want: []string{"rm", "--home=H", "a"}},
		{args: []string{"-home=H", "rm"}, want: []string{"rm", "--home=H"}},
		{args: nil, wantErr: "expected a subcommand: ls|rm"},
		{args: []string{"mv"}, wantErr: `unknown subcommand "mv": expected ls|rm`},
		{args: []string{"-x", "ls"}, wantErr: "flag -x comes before the subcommand"},
		{args: []string{"-h"}, wantErr: flag.ErrHelp.Error()},
	} {
		got = nil
		err := c.dispatch(context.Background(), g, nil, tc.args)
		if tc.wantErr != "" {
			// (printing the usage runs each subcommand with -h, nothing else)
			ran := got != nil && !slices.Equal(got[1:], []string{"-h"})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || ran {
				t.Errorf("%q: err %v, ran %q; want an error saying %q", tc.args, err, got, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: ran %q, err %v; want %q", tc.args, got, err, tc.want)
		}
	}
}
