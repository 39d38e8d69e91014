package testenv

import "testing"

func TestPromised(t *testing.T) {
	for _, c := range []struct {
		ci, require, key string
		want             bool
	}{
		{"", "", FUSE, false},
		{"true", "", FUSE, true},
		{"false", "", Loop, false},
		{"", "root,fuse", FUSE, true},
		{"", "root, fuse", Loop, false},
		{"", " loop ", Loop, true},
		{"", "all", Tools, true},
		{"", "fuser", FUSE, false},
	} {
		t.Setenv("CI", c.ci)
		t.Setenv("WSFS_REQUIRE", c.require)
		if got := Promised(c.key); got != c.want {
			t.Errorf("CI=%q WSFS_REQUIRE=%q: Promised(%q) = %v, want %v", c.ci, c.require, c.key, got, c.want)
		}
	}
}
