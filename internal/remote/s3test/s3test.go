// Package s3test starts a real S3 server for tests: versitygw (Apache-2.0,
// pinned by the tools module tools/versitygw), on 127.0.0.1 with a random
// port, serving a temporary directory, with one bucket created.
//
// The binary comes from $WSFS_VERSITYGW if set (what .ci/run builds), else
// it is built once from the tools module into the user's cache directory
// (a lock file serialises concurrent test binaries; the build is bounded by
// BuildTimeout). A missing or unbuildable server skips the test on a
// developer's machine and fails it where testenv.Promised(testenv.Tools)
// (CI): a CI run never passes without the remote tests.
//
// Start also clears AWS_CA_BUNDLE for the test (a non-empty one that does
// not name a readable PEM file breaks the AWS SDK, and so Litestream's S3
// client, at start-up) and sets AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY to
// the server's keys, so in-process clients and child processes find them.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"wsfs/internal/remote"
	"wsfs/internal/testenv"
	"wsfs/internal/vfs"
)

// Version is the versitygw version the tools module pins.
const Version = "v1.8.0"

// BuildTimeout bounds building the server (about a minute on an idle
// 2-vCPU machine, several under load).
const BuildTimeout = 15 * time.Minute

// Keys of the test server's single account.
const (
	AccessKey = "wsfs-test-access"
	SecretKey = "wsfs-test-secret-key"
)

// Server is a running versitygw.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Bucket   string
	Dir      string // the directory it serves (the posix backend: DIR/BUCKET/KEY)
	proc     *os.Process
	done     chan struct{} // closed when the process has exited
}

// Config is a remote.Config for the server's bucket with prefix.
func (s *Server) Config(prefix string) remote.Config {
	return remote.Config{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: prefix, Region: "us-east-1", PathStyle: true}
}

// Store opens the S3 store of s.Config(prefix).
func (s *Server) Store(t testing.TB, prefix string) *remote.S3 {
	t.Helper()
	st, err := remote.OpenS3(context.Background(), s.Config(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Stop kills the server (tests of an unreachable remote); Cleanup also
// stops it.
func (s *Server) Stop() {
	_ = s.proc.Signal(syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of the versitygw binary, building it once per
// test binary if needed, or skips/fails t.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { buildPath, buildErr = binary() })
	if buildErr != nil {
		if testenv.Promised(testenv.Tools) {
			t.Fatalf("required by the environment (CI or WSFS_REQUIRE=tools) but missing: the versitygw S3 server: %v", buildErr)
		}
		t.Skipf("skipping: no versitygw S3 server: %v (set WSFS_REQUIRE=tools to make this a failure)", buildErr)
	}
	return buildPath
}

func binary() (string, error) {
	if p := os.Getenv("WSFS_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("WSFS_VERSITYGW=%s: %w", p, err)
		}
		return p, nil
	}
	mod, err := toolsModule()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "wsfs", "versitygw-"+Version)
	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "versitygw")
	// Another test binary may be building it: wait for its lock.
	var lock io.Closer
	for deadline := time.Now().Add(BuildTimeout); ; {
		lock, err = vfs.Default.Lock(filepath.Join(dir, "lock"))
		if err == nil {
			break
		}
		if !errors.Is(err, vfs.ErrLocked) || time.Now().After(deadline) {
			return "", fmt.Errorf("lock %s: %w", dir, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer lock.Close()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	tmp := bin + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, "github.com/versity/versitygw/cmd/versitygw")
	cmd.Dir = mod
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build versitygw in %s (bounded by %v): %v\n%s", mod, BuildTimeout, err, out)
	}
	if err := vfs.Default.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// toolsModule finds tools/versitygw above the working directory (a test
// runs in its package's directory).
func toolsModule() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "tools", "versitygw", "go.mod")
		if _, err := os.Stat(p); err == nil {
			return filepath.Dir(p), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("tools/versitygw/go.mod not found above " + wd)
		}
	}
}

// Start starts a server with one bucket, stopped in t.Cleanup. It sets the
// AWS environment for the test (see the package doc).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	Env(t)
	dir := t.TempDir()
	bucket := "wsfs-test"
	if err := vfs.Default.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	var s *Server
	var lastErr error
	for attempt := 0; attempt < 5 && s == nil; attempt++ {
		s, lastErr = start(bin, filepath.Join(dir, "data"), filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt)))
	}
	if s == nil {
		t.Fatalf("start versitygw: %v", lastErr)
	}
	t.Cleanup(s.Stop)
	s.Bucket = bucket
	st, err := remote.OpenS3(context.Background(), s.Config(""))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.CreateBucket(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// Env sets the AWS environment of the test server's account for t and its
// child processes, and clears AWS_CA_BUNDLE.
func Env(t testing.TB) {
	t.Helper()
	t.Setenv("AWS_CA_BUNDLE", "")
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "us-east-1")
	// No shared config of the machine leaks into the tests.
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// Environ returns the same environment as Env, for a child process's
// cmd.Env (appended to os.Environ()).
func Environ() []string {
	return []string{
		"AWS_CA_BUNDLE=", "AWS_ACCESS_KEY_ID=" + AccessKey, "AWS_SECRET_ACCESS_KEY=" + SecretKey,
		"AWS_SESSION_TOKEN=", "AWS_PROFILE=", "AWS_REGION=us-east-1",
		"AWS_CONFIG_FILE=" + os.DevNull, "AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull, "AWS_EC2_METADATA_DISABLED=true",
	}
}

func start(bin, data, logPath string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logf, err := vfs.Default.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--access", AccessKey, "--secret", SecretKey, "--port", addr, "posix", data)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "AWS_CA_BUNDLE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() { exited <- cmd.Wait(); logf.Close(); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("versitygw on %s exited: %v\n%s", addr, err, tail(readLog(logPath)))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return &Server{Endpoint: "http://" + addr, Dir: data, proc: cmd.Process, done: done}, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-done
	return nil, fmt.Errorf("versitygw on %s did not accept connections within 20s", addr)
}

func readLog(path string) string {
	f, err := vfs.Default.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return string(b)
}

func tail(s string) string {
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return strings.TrimSpace(s)
}
