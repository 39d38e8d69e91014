package host

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateNameReasons(t *testing.T) {
	for _, tc := range []struct {
		name string
		why  string // "" = valid
	}{
		{"a", ""},
		{"ws-7", ""},
		{"0.x_y", ""},
		{strings.Repeat("a", MaxNameLen), ""},
		{"", "empty"},
		{".", "names a directory"},
		{"..", "names a directory"},
		{"a/b", "slash"},
		{"../x", "slash"},
		{"a\x00b", "NUL"},
		{"-a", "dash"},
		{"--home", "dash"},
		{".tmp-x", "starts with ."},
		{"_x", "starts with _"},
		{strings.Repeat("a", MaxNameLen+1), "64 bytes"},
		{"a\tb", "non-printable"},
		{"a\nb", "non-printable"},
		{"a b", "blank"},
		{"a\u200bb", "non-printable"},
		{"a\xffb", "UTF-8"},
		{"Ws", "upper-case"},
		{"a:b", "':'"},
		{"é", "'é'"},
	} {
		err := ValidateName(tc.name)
		if tc.why == "" {
			if err != nil {
				t.Errorf("%q refused: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%q accepted", tc.name)
			continue
		}
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q: %v; want ErrInvalidName saying %q", tc.name, err, tc.why)
		}
	}
}

// TestMethodsValidateNames: every Host method that takes a name and can
// fail refuses an invalid one before touching the disk.
func TestMethodsValidateNames(t *testing.T) {
	h, err := Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", ".", "..", "a/b", "-x"} {
		for what, f := range map[string]func(string) error{
			"CreateWorkspace": h.CreateWorkspace,
			"CheckWorkspace":  h.CheckWorkspace,
			"RemoveWorkspace": h.RemoveWorkspace,
			"Locked":          func(n string) error { _, err := h.Locked(n); return err },
		} {
			if err := f(name); !errors.Is(err, ErrInvalidName) {
				t.Errorf("%s(%q) = %v, want ErrInvalidName", what, name, err)
			}
		}
	}
	if names, err := h.Workspaces(); err != nil || len(names) != 0 {
		t.Errorf("Workspaces after refused names: %q, %v", names, err)
	}
}

// TestNameReasonsMatchGrammar: nameProblem and nameRE agree on every
// string of up to two characters over an alphabet that covers each rule.
func TestNameReasonsMatchGrammar(t *testing.T) {
	alphabet := []string{"a", "z", "0", "9", ".", "_", "-", "/", "A", " ", "\x00", "\t", "é", "\xff"}
	var names []string
	for _, a := range alphabet {
		names = append(names, a)
		for _, b := range alphabet {
			names = append(names, a+b)
		}
	}
	for _, n := range names {
		// Without the final grammar check: the specific reasons alone.
		specific := nameProblem(n)
		if strings.HasPrefix(specific, "it does not match") {
			t.Errorf("%q: only the grammar check refuses it: give it a reason", n)
		}
		if (specific == "") != nameRE.MatchString(n) {
			t.Errorf("%q: reason %q but grammar match %v", n, specific, nameRE.MatchString(n))
		}
	}
}
