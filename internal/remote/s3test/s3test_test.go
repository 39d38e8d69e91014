package s3test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"wsfs/internal/remote"
)

// TestServer: the helper's server answers the Store operations.
func TestServer(t *testing.T) {
	s := Start(t)
	st := s.Store(t, "p")
	ctx := context.Background()
	if err := st.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "a/b", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, "a/b")
	if err != nil || !bytes.Equal(got, []byte("hello")) {
		t.Fatalf("get: %q %v", got, err)
	}
	if ok, err := st.Exists(ctx, "a/b"); !ok || err != nil {
		t.Fatalf("exists: %v %v", ok, err)
	}
	if ok, err := st.Exists(ctx, "a/c"); ok || err != nil {
		t.Fatalf("exists missing: %v %v", ok, err)
	}
	if _, err := st.Get(ctx, "a/c"); !errors.Is(err, remote.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	keys, err := st.List(ctx, "a/")
	if err != nil || len(keys) != 1 || keys[0] != "a/b" {
		t.Fatalf("list: %v %v", keys, err)
	}
	if err := st.Delete(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := st.Exists(ctx, "a/b"); ok {
		t.Fatal("deleted key exists")
	}
}

// TestConditionalPut: the server honours If-None-Match and If-Match on
// PUT (what the lease relies on).
func TestConditionalPut(t *testing.T) {
	s := Start(t)
	st := s.Store(t, "")
	ctx := context.Background()
	e1, err := st.PutIf(ctx, "lease", []byte("one"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutIf(ctx, "lease", []byte("two"), ""); !errors.Is(err, remote.ErrPrecondition) {
		t.Fatalf("create over an existing object: %v, want ErrPrecondition", err)
	}
	e2, err := st.PutIf(ctx, "lease", []byte("three"), e1)
	if err != nil {
		t.Fatalf("replace the version read: %v", err)
	}
	if _, err := st.PutIf(ctx, "lease", []byte("four"), e1); !errors.Is(err, remote.ErrPrecondition) {
		t.Fatalf("replace a stale version: %v, want ErrPrecondition", err)
	}
	b, e3, err := st.GetETag(ctx, "lease")
	if err != nil || string(b) != "three" || e3 != e2 {
		t.Fatalf("get: %q %q %v (want three, %q)", b, e3, err, e2)
	}
}

// TestEnginesPinned: each engine's version constant is the one its tools
// module requires, and the tools module imports the package the helper
// builds (a bump of one without the other would build a different server
// than the cache directory's name says).
func TestEnginesPinned(t *testing.T) {
	for name, e := range engines {
		t.Run(name, func(t *testing.T) {
			mod, err := toolsModule(e.tools)
			if err != nil {
				t.Fatal(err)
			}
			gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(gomod), " "+e.version+"\n") {
				t.Errorf("tools/%s/go.mod does not require version %s", e.tools, e.version)
			}
			src, err := os.ReadFile(filepath.Join(mod, "tools.go"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(src), `_ "`+e.pkg+`"`) {
				t.Errorf("tools/%s/tools.go does not import %s", e.tools, e.pkg)
			}
		})
	}
}
