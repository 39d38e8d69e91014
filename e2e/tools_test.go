package e2e

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/testenv"
)

// Bounds of the tool runs (hang guards, not performance thresholds).
const toolTimeout = 5 * time.Minute

// requireTool skips t when a command is not installed.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	return testenv.RequireTool(t, name)
}

// timed runs fn and logs how long it took.
func timed(t *testing.T, what string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

// TestToolsGit runs git as a user would on a generated repository of a few
// hundred files: init, add, commit, status (with modifications, deletions,
// additions and renames whose porcelain output is predicted), a second
// commit, gc --prune=now, fsck --strict, and a clone whose working tree
// must equal the repository's.
func TestToolsGit(t *testing.T) {
	requireTool(t, "git")
	nfiles := 300
	if testing.Short() {
		nfiles = 100
	}
	forEachTarget(t, mountOpts{}, func(t *testing.T, tg *target) {
		home := t.TempDir() // native: no global git config leaks in
		env := []string{
			"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
			"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.invalid",
			"GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.invalid",
			"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		}
		repo := filepath.Join(tg.root, "repo")
		r := rand.New(rand.NewSource(3))
		var files []string
		for i := range nfiles {
			rel := filepath.Join(fmt.Sprintf("pkg%d", i%17), fmt.Sprintf("sub%d", i%5), fmt.Sprintf("file%03d.txt", i))
			files = append(files, rel)
			writeText(t, filepath.Join(repo, rel), r, 50+r.Intn(6000))
		}
		git := func(args ...string) string {
			t.Helper()
			return runIn(t, repo, env, toolTimeout, "git", args...)
		}
		timed(t, "git init+add+commit", func() {
			git("init", "-q", "-b", "main")
			// No automatic (detached, background) gc: a process left in
			// the mount would keep it busy at unmount. gc runs explicitly.
			git("config", "gc.auto", "0")
			git("add", "-A")
			git("commit", "-q", "-m", "first")
		})
		if s := git("status", "--porcelain"); s != "" {
			t.Fatalf("git status after the first commit is not clean:\n%s", s)
		}

		// Change the tree and predict the porcelain status after add -A.
		var want []string
		for _, rel := range files[0:10] {
			writeText(t, filepath.Join(repo, rel), r, 100+r.Intn(3000))
			want = append(want, "M  "+rel)
		}
		for _, rel := range files[10:15] {
			if err := os.Remove(filepath.Join(repo, rel)); err != nil {
				t.Fatal(err)
			}
			want = append(want, "D  "+rel)
		}
		for i := range 5 {
			rel := filepath.Join("new", fmt.Sprintf("added%d.txt", i))
			writeText(t, filepath.Join(repo, rel), r, 500)
			want = append(want, "A  "+rel)
		}
		for _, rel := range files[15:18] {
			to := rel + ".moved"
			git("mv", rel, to)
			want = append(want, "R  "+rel+" -> "+to)
		}
		git("add", "-A")
		got := strings.Split(strings.TrimSpace(git("status", "--porcelain")), "\n")
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("git status --porcelain:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		git("commit", "-q", "-m", "second")
		timed(t, "git gc --prune=now", func() { git("gc", "-q", "--prune=now") })
		timed(t, "git fsck --strict", func() { git("fsck", "--strict", "--no-progress") })
		if n := strings.Count(git("log", "--oneline"), "\n"); n != 2 {
			t.Fatalf("git log: %d commits, want 2", n)
		}
		if s := git("status", "--porcelain"); s != "" {
			t.Fatalf("git status after gc is not clean:\n%s", s)
		}
		if loose := git("count-objects"); !strings.HasPrefix(loose, "0 objects") {
			t.Fatalf("git count-objects after gc --prune=now: %q, want no loose objects", loose)
		}
		runIn(t, tg.root, env, toolTimeout, "git", "clone", "-q", "repo", "clone")
		skipGit := func(rel string) bool { return rel == ".git" }
		a, err := snapshot(repo, snapOpts{skip: skipGit})
		if err != nil {
			t.Fatal(err)
		}
		b, err := snapshot(filepath.Join(tg.root, "clone"), snapOpts{skip: skipGit})
		if err != nil {
			t.Fatal(err)
		}
		if d := diffTrees(a, b, 20); len(d) > 0 {
			t.Fatalf("clone's working tree differs from the repository's:\n  %s", strings.Join(d, "\n  "))
		}
	})
}

// writeText writes n bytes of random lowercase text (with newlines) to p,
// creating its directory.
func writeText(t *testing.T, p string, r *rand.Rand, n int) {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		if r.Intn(60) == 0 {
			b[i] = '\n'
		} else {
			b[i] = byte('a' + r.Intn(26))
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestToolsGoBuild builds a small Go module (two packages) inside the
// target and runs the binary from there. The build cache is the user's
// (outside the mount); a random token in the source makes the compile and
// the link real on every run.
func TestToolsGoBuild(t *testing.T) {
	goBin := requireTool(t, "go")
	forEachTarget(t, mountOpts{}, func(t *testing.T, tg *target) {
		dir := filepath.Join(tg.root, "hello")
		token := fmt.Sprintf("%x", rand.Int63())
		files := map[string]string{
			"go.mod": "module e2ehello\n\ngo 1.26\n",
			"main.go": `package main

import (
	"fmt"

	"e2ehello/lib"
)

func main() { fmt.Println("hello from", lib.Token, lib.Sum(lib.Token)) }
`,
			"lib/lib.go": `// Package lib is the second package of the e2e Go build.
package lib

import (
	"crypto/sha256"
	"encoding/hex"
)

// Token is unique per test run, so the build cache cannot answer the compile.
const Token = "` + token + `"

// Sum is the hex sha256 of s.
func Sum(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
`,
		}
		for rel, src := range files {
			p := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		env := []string{"GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "CGO_ENABLED=0"}
		timed(t, "go build", func() { runIn(t, dir, env, toolTimeout, goBin, "build", "-o", "hello", ".") })
		runIn(t, dir, env, toolTimeout, goBin, "vet", "./...")
		out := runIn(t, dir, nil, toolTimeout, filepath.Join(dir, "hello"))
		want := fmt.Sprintf("hello from %s %s\n", token, hashBytes([]byte(token)))
		if out != want {
			t.Fatalf("./hello printed %q, want %q", out, want)
		}
	})
}

// TestToolsTar extracts a tar of thousands of files (made with tar from a
// native directory) into the target, copies the tree with cp -a inside the
// target, compares both with the native source (diff -r and a snapshot of
// content, modes, mtimes, hard links and symlinks), and removes it all with
// rm -rf.
func TestToolsTar(t *testing.T) {
	for _, tool := range []string{"tar", "cp", "diff", "rm"} {
		requireTool(t, tool)
	}
	nfiles := 3000
	if testing.Short() {
		nfiles = 600
	}
	src := filepath.Join(t.TempDir(), "src")
	makeTarSource(t, src, nfiles)
	archive := filepath.Join(t.TempDir(), "src.tar")
	runIn(t, src, nil, toolTimeout, "tar", "-cf", archive, ".")
	o := snapOpts{mtime: true, dirLink: true}
	want, err := snapshot(src, o)
	if err != nil {
		t.Fatal(err)
	}
	forEachTarget(t, mountOpts{}, func(t *testing.T, tg *target) {
		x, y := filepath.Join(tg.root, "x"), filepath.Join(tg.root, "y")
		if err := os.Mkdir(x, 0o755); err != nil {
			t.Fatal(err)
		}
		timed(t, fmt.Sprintf("tar -x of %d entries", len(want)), func() { runIn(t, x, nil, toolTimeout, "tar", "-xf", archive) })
		timed(t, "cp -a", func() { runIn(t, tg.root, nil, toolTimeout, "cp", "-a", "x", "y") })
		timed(t, "diff -r", func() { runIn(t, tg.root, nil, toolTimeout, "diff", "-r", "--no-dereference", src, "y") })
		for _, dir := range []string{x, y} {
			got, err := snapshot(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffTrees(want, got, 20); len(d) > 0 {
				t.Fatalf("%s differs from the native source:\n  %s", filepath.Base(dir), strings.Join(d, "\n  "))
			}
		}
		timed(t, "rm -rf", func() { runIn(t, tg.root, nil, toolTimeout, "rm", "-rf", "x", "y") })
		ents, err := os.ReadDir(tg.root)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 0 {
			t.Fatalf("after rm -rf the root still holds %d entries (first %q)", len(ents), ents[0].Name())
		}
	})
}

// makeTarSource writes n files in nested directories (mostly small, some
// past the inline limit), symlinks, hard links, empty directories and
// assorted modes and mtimes.
func makeTarSource(t *testing.T, root string, n int) {
	t.Helper()
	r := rand.New(rand.NewSource(4))
	var files []string
	for i := range n {
		rel := filepath.Join(fmt.Sprintf("d%d", i%23), fmt.Sprintf("e%d", i%7), fmt.Sprintf("f%04d", i))
		if i%11 == 0 {
			rel = filepath.Join(fmt.Sprintf("d%d", i%23), fmt.Sprintf("top%04d", i))
		}
		size := r.Intn(4096)
		switch x := r.Intn(100); {
		case x >= 98:
			size = 64<<10 + r.Intn(300<<10)
		case x >= 80:
			size = 4096 + r.Intn(60<<10)
		}
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		perm := []os.FileMode{0o644, 0o600, 0o755, 0o444}[r.Intn(4)]
		if err := os.WriteFile(p, randData(r, size), perm); err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	for i := range 30 {
		if err := os.Symlink("../"+files[r.Intn(len(files))], filepath.Join(root, fmt.Sprintf("d%d", i%23), fmt.Sprintf("sym%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if err := os.Link(filepath.Join(root, files[r.Intn(len(files))]), filepath.Join(root, fmt.Sprintf("d%d", i%23), fmt.Sprintf("hard%d", i))); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if err := os.MkdirAll(filepath.Join(root, "empty", fmt.Sprint(i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Set mtimes bottom-up so directory mtimes are not disturbed afterwards.
	mt := time.Unix(1_650_000_000, 0)
	var all []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSymlink == 0 {
			all = append(all, p)
		}
		return err
	})
	for i := len(all) - 1; i >= 0; i-- {
		if err := os.Chtimes(all[i], mt, mt.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestACLXattrKeepsMode does what cp -a and rsync -A do to preserve a mode:
// create the file 0600, then set system.posix_acl_access to the ACL of
// mode 0644. A filesystem must either refuse the attribute (EOPNOTSUPP;
// the tools then chmod) or apply it to the mode; accepting it as an
// opaque attribute silently leaves every copied file 0600.
func TestACLXattrKeepsMode(t *testing.T) {
	forEachTarget(t, mountOpts{}, func(t *testing.T, tg *target) {
		p := filepath.Join(tg.root, "f")
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		// ACL xattr v2: USER_OBJ rw-, GROUP_OBJ r--, OTHER r-- (mode 0644).
		acl := []byte{2, 0, 0, 0,
			1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff,
			4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff,
			0x20, 0, 4, 0, 0xff, 0xff, 0xff, 0xff}
		err := unix.Setxattr(p, "system.posix_acl_access", acl, 0)
		if errors.Is(err, unix.EOPNOTSUPP) {
			t.Logf("system.posix_acl_access refused with EOPNOTSUPP (tools fall back to chmod)")
			return
		}
		if err != nil {
			t.Fatalf("setxattr system.posix_acl_access: %v (want success or EOPNOTSUPP)", err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Fatalf("setxattr system.posix_acl_access (ACL of mode 0644) succeeded but the mode is %#o: "+
				"the ACL was stored as an opaque attribute; cp -a and rsync -A then leave files with the wrong mode "+
				"(refuse system.posix_acl_* with EOPNOTSUPP, or apply them)", fi.Mode().Perm())
		}
	})
}
