// Package lint holds tests that enforce rules on the wsfs source tree
// itself (modelled on pebble's internal/lint).
//
// TestNoDirectFileIO: engine code does all disk I/O through internal/vfs, so
// that crash tests (vfs.NewCrashableMem) and fault injection (errorfs) see
// every byte it persists. A direct os.OpenFile in the engine would be
// invisible to both, and its durability untested.
package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// forbidden lists, per import path, the functions that touch the disk
// behind the vfs's back. Any reference counts (a call, or taking the
// function's value). The syncs and sync_file_range are here although they
// act on a descriptor the vfs handed out: a sync the vfs does not see is
// invisible to the crash model, and a writeback hint is vfs.File's
// StartWriteback.
var forbidden = map[string][]string{
	"os": {
		"OpenFile", "Open", "Create", "Rename", "Remove", "RemoveAll",
		"Mkdir", "MkdirAll", "ReadFile", "WriteFile", "ReadDir", "Link",
		"Truncate", "Chtimes",
	},
	"golang.org/x/sys/unix": {"Syncfs", "Sync", "Fsync", "Fdatasync", "SyncFileRange"},
	"syscall":               {"Sync", "Fsync", "Fdatasync"},
}

// exempt lists the directories under internal/ whose code may use the OS
// directly, and why. Everything else under internal/ is checked; the engine
// packages (internal/seglog, internal/pool, internal/namespace,
// internal/commit, internal/workspace) must never be added here.
var exempt = []struct{ dir, why string }{
	{"vfs", "it is the implementation of the interface everyone else uses"},
	{"lint", "this checker"},
	{"stress", "the harness drives real mounts and native directories from outside"},
	{"layout", "creates loop-backed ext4 file systems with OS tools"},
	{"mountinfo", "reads the kernel's mount table in /proc, not stored data"},
	{"supervisor", "starts daemon processes and manages their runtime files"},
	{"agentstate", "SQLite and Litestream open their own files"},
	{"fusefs", "the FUSE adapter's passthrough hands OS file descriptors to the kernel"},
	{"crashfs", "test support: a FUSE filesystem over a backing directory, simulating power loss below the vfs"},
}

// enginePackages must never be exempt (checked by TestExemptTable).
var enginePackages = []string{"seglog", "pool", "namespace", "commit", "workspace"}

type violation struct {
	pos  token.Position
	call string // e.g. "os.Rename"
}

// check returns every reference in file to a forbidden function.
func check(fset *token.FileSet, file *ast.File) []violation {
	// Local name -> import path, for the imports we care about.
	local := make(map[string]string)
	var out []violation
	for _, imp := range file.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			continue
		}
		if _, ok := forbidden[path]; !ok {
			continue
		}
		name := filepath.Base(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		switch name {
		case "_":
			continue
		case ".":
			// A dot import hides every call; refuse it outright.
			out = append(out, violation{fset.Position(imp.Pos()), "dot import of " + path})
			continue
		}
		local[name] = path
	}
	if len(local) == 0 {
		return out
	}
	ast.Inspect(file, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		path, ok := local[id.Name]
		if !ok || id.Obj != nil { // id.Obj != nil: a local variable shadows the package
			return true
		}
		if slices.Contains(forbidden[path], sel.Sel.Name) {
			out = append(out, violation{fset.Position(sel.Pos()), id.Name + "." + sel.Sel.Name})
		}
		return true
	})
	return out
}

func isExempt(rel string) bool {
	first, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	for _, e := range exempt {
		if first == e.dir {
			return true
		}
	}
	return false
}

func TestNoDirectFileIO(t *testing.T) {
	root, err := filepath.Abs("..") // internal/
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (isExempt(rel) || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		// Object resolution stays on: check uses it to skip locals that
		// shadow a package name.
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			// Another package may be mid-edit; a syntax error is the
			// compiler's to report, not this test's.
			t.Logf("skipping %s: %v", rel, err)
			return nil
		}
		checked++
		for _, v := range check(fset, file) {
			t.Errorf("%s: calls %s; code under internal/ must do disk I/O through a vfs.FS (or, if it is not engine code, be added to the exempt table with a reason)",
				v.pos, v.call)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checked %d non-test Go files under internal/ (exempt: %d directories)", checked, len(exempt))
}

func TestExemptTable(t *testing.T) {
	for _, e := range exempt {
		if slices.Contains(enginePackages, e.dir) {
			t.Errorf("engine package internal/%s is exempt; engine I/O must go through internal/vfs", e.dir)
		}
		if e.why == "" {
			t.Errorf("exempt directory %s has no reason", e.dir)
		}
	}
}

func TestCheckerFindsViolations(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"clean", `package p
import "os"
func f() { _ = os.Getenv("X"); _ = os.ErrNotExist }`, nil},
		{"calls", `package p
import (
	"os"
	"syscall"
	"golang.org/x/sys/unix"
)
func f() {
	os.Rename("a", "b")
	f, _ := os.OpenFile("a", os.O_RDONLY, 0)
	_ = f
	unix.Syncfs(3)
	syscall.Sync()
	_ = os.WriteFile
	unix.SyncFileRange(3, 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	unix.Fdatasync(3)
}`, []string{"os.Rename", "os.OpenFile", "unix.Syncfs", "syscall.Sync", "os.WriteFile", "unix.SyncFileRange", "unix.Fdatasync"}},
		{"renamed import", `package p
import xos "os"
func f() { xos.Remove("a") }`, []string{"xos.Remove"}},
		{"dot import", `package p
import . "os"
func f() { Remove("a") }`, []string{"dot import of os"}},
		{"shadowed by a local", `package p
import "os"
type fsys struct{}
func (fsys) Remove(string) error { return nil }
func f() { os := fsys{}; os.Remove("a") }`, nil},
		{"no forbidden import", `package p
import "wsfs/internal/vfs"
func f(fs vfs.FS) { fs.Rename("a", "b") }`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, "x.go", c.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range check(fset, file) {
				got = append(got, v.call)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("violations %q, want %q", got, c.want)
			}
		})
	}
}

func TestExempt(t *testing.T) {
	for rel, want := range map[string]bool{
		"vfs": true, "vfs/errorfs": true, "fusefs": true, "seglog": false,
		"pool/gc": false, "vfsx": false,
	} {
		if got := isExempt(rel); got != want {
			t.Errorf("isExempt(%q) = %v, want %v", rel, got, want)
		}
	}
}
