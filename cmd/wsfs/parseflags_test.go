package main

import (
	"flag"
	"io"
	"reflect"
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
