package host

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// MaxNameLen is the longest workspace name.
const MaxNameLen = 63

// ErrInvalidName is wrapped by the error of every function given a
// workspace name that ValidateName refuses.
var ErrInvalidName = errors.New("invalid workspace name")

// ValidateName checks a workspace name: 1 to MaxNameLen characters of
// a-z, 0-9, '.', '_', '-', starting with a letter or digit. A valid name is
// a safe single path element (never "", "." or "..", no slash, no NUL),
// cannot be taken for a flag, and cannot collide with the temp entries
// (vfs.TempPrefix, a leading dot) kept beside the workspaces. It is the
// one check of a name: every command and every Host method taking a name
// that can fail uses it. The error wraps ErrInvalidName and says what is
// wrong with this name.
func ValidateName(name string) error {
	if why := nameProblem(name); why != "" {
		return fmt.Errorf("%w %q: %s; use 1-%d characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit",
			ErrInvalidName, name, why, MaxNameLen)
	}
	return nil
}

// nameProblem says what is wrong with name, "" if nothing.
func nameProblem(name string) string {
	switch {
	case name == "":
		return "it is empty"
	case name == "." || name == "..":
		return "it names a directory, not a workspace"
	case strings.ContainsRune(name, 0):
		return "it contains a NUL byte"
	case strings.ContainsRune(name, '/'):
		return "it contains a slash"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("it is %d bytes long", len(name))
	case name[0] == '-':
		return "it starts with a dash (it would read as a flag)"
	case name[0] == '.' || name[0] == '_':
		return "it starts with " + string(name[0])
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		case r == unicode.ReplacementChar:
			return "it is not valid UTF-8"
		case !unicode.IsPrint(r) || r == ' ':
			return fmt.Sprintf("it contains the non-printable or blank character %U", r)
		case unicode.IsUpper(r):
			return "it contains an upper-case letter"
		default:
			return fmt.Sprintf("it contains %q", r)
		}
	}
	if !nameRE.MatchString(name) { // the reasons above cover the grammar; this keeps them honest
		return "it does not match " + nameRE.String()
	}
	return ""
}
