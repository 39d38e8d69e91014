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
