// Package s3test starts a real S3 server for tests, on 127.0.0.1 with
// random ports, keeping its data in a temporary directory, with one bucket
// created. The engine is chosen by $S3_ENGINE:
//
//   - versitygw (the default; Apache-2.0, pinned by the tools module
//     tools/versitygw): `versitygw posix DIR`, binary from $WSFS_VERSITYGW;
//   - seaweedfs (Apache-2.0, pinned by tools/seaweedfs): `weed mini`, the
//     distributed engine, binary from $WSFS_SEAWEEDFS. CI does not run it.
//
// Without its environment variable, the binary is built once from its tools
// module into the user's cache directory (a lock file serialises concurrent
// test binaries; the build is bounded by BuildTimeout). A missing or
// unbuildable server skips the test on a developer's machine and fails it
// where testenv.Promised(testenv.Tools) (CI): a CI run never passes without
// the remote tests. An unknown $S3_ENGINE fails every test that asks for a
// server.
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

// SeaweedFSVersion is the SeaweedFS module version tools/seaweedfs pins.
const SeaweedFSVersion = "v0.0.0-20261109003541-7506e5f91cd6"

// BuildTimeout bounds building the server (versitygw: about a minute on an
// idle 2-vCPU machine, several under load; seaweedfs: about 6 minutes idle).
const BuildTimeout = 30 * time.Minute

// An engine is one S3 server implementation the helper can start.
type engine struct {
	name    string // the value of $S3_ENGINE
	version string // pinned by its tools module
	binEnv  string // names a prebuilt binary
	tools   string // its tools module, under tools/
	pkg     string // its main package, built in the tools module
	bin     string // the binary's file name
	// start starts one server keeping its data under dir, logging to
	// logPath; it returns once the S3 port accepts connections.
	start func(bin, dir, logPath string) (*Server, error)
}

var engines = map[string]*engine{
	"versitygw": {name: "versitygw", version: Version, binEnv: "WSFS_VERSITYGW", tools: "versitygw",
		pkg: "github.com/versity/versitygw/cmd/versitygw", bin: "versitygw", start: startVersitygw},
	"seaweedfs": {name: "seaweedfs", version: SeaweedFSVersion, binEnv: "WSFS_SEAWEEDFS", tools: "seaweedfs",
		pkg: "github.com/seaweedfs/seaweedfs/weed", bin: "weed", start: startSeaweedFS},
}

// Engine is the engine $S3_ENGINE selects ("versitygw" when unset).
func Engine() string {
	if e := os.Getenv("S3_ENGINE"); e != "" {
		return e
	}
	return "versitygw"
}

func currentEngine(t testing.TB) *engine {
	t.Helper()
	e, ok := engines[Engine()]
	if !ok {
		t.Fatalf("S3_ENGINE=%q is not an S3 engine of the test helper: use versitygw (the default) or seaweedfs", Engine())
	}
	return e
}

// Keys of the test server's single account.
const (
	AccessKey = "wsfs-test-access"
	SecretKey = "wsfs-test-secret-key"
)

// Server is a running S3 server.
type Server struct {
	Engine   string // versitygw or seaweedfs
	Endpoint string // http://127.0.0.1:PORT
	Bucket   string
	Dir      string // where it keeps its data (engine-specific layout; use the S3 API to reach objects)
	proc     *os.Process
	done     chan struct{} // closed when the process has exited
	// For Restart: the command line (every port in it) and the log.
	argv     []string
	name     string
	addr     string
	logPath  string
	restarts int
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

// Restart starts the server again after Stop with the same command line
// (address, ports, data), for tests of a remote that comes back. It fails
// t if the server does not accept connections again.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.restarts++
	n, err := startProc(exec.Command(s.argv[0], s.argv[1:]...), s.name, s.addr, s.Dir, fmt.Sprintf("%s.restart-%d", s.logPath, s.restarts))
	if err != nil {
		t.Fatalf("restart %s: %v", s.name, err)
	}
	s.proc, s.done = n.proc, n.done
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
	buildMu sync.Mutex
	builds  = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of the current engine's binary, building it once
// per test binary if needed, or skips/fails t.
func Binary(t testing.TB) string {
	t.Helper()
	e := currentEngine(t)
	buildMu.Lock()
	b := builds[e.name]
	if b == nil {
		b = &build{}
		builds[e.name] = b
	}
	buildMu.Unlock()
	b.once.Do(func() { b.path, b.err = binary(e) })
	if b.err != nil {
		if testenv.Promised(testenv.Tools) {
			t.Fatalf("required by the environment (CI or WSFS_REQUIRE=tools) but missing: the %s S3 server: %v", e.name, b.err)
		}
		t.Skipf("skipping: no %s S3 server: %v (set WSFS_REQUIRE=tools to make this a failure)", e.name, b.err)
	}
	return b.path
}

func binary(e *engine) (string, error) {
	if p := os.Getenv(e.binEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", e.binEnv, p, err)
		}
		return p, nil
	}
	mod, err := toolsModule(e.tools)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "wsfs", e.name+"-"+e.version)
	if err := vfs.Default.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, e.bin)
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
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, e.pkg)
	cmd.Dir = mod
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build %s in %s (bounded by %v): %v\n%s", e.name, mod, BuildTimeout, err, out)
	}
	if err := vfs.Default.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// toolsModule finds tools/NAME above the working directory (a test runs in
// its package's directory).
func toolsModule(name string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "tools", name, "go.mod")
		if _, err := os.Stat(p); err == nil {
			return filepath.Dir(p), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("tools/" + name + "/go.mod not found above " + wd)
		}
	}
}

// StartTimeout bounds a server's start-up, from exec to a created bucket
// (seaweedfs starts its master, volume server, filer and S3 gateway in one
// process and answers S3 only once they have found each other).
const StartTimeout = 90 * time.Second

// Start starts a server of the current engine with one bucket, stopped in
// t.Cleanup. It sets the AWS environment for the test (see the package doc).
func Start(t testing.TB) *Server {
	t.Helper()
	e := currentEngine(t)
	bin := Binary(t)
	Env(t)
	dir := t.TempDir()
	bucket := "wsfs-test"
	if err := vfs.Default.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var s *Server
	var lastErr error
	for attempt := 0; attempt < 5 && s == nil; attempt++ {
		s, lastErr = e.start(bin, filepath.Join(dir, "data"), filepath.Join(dir, fmt.Sprintf("%s-%d.log", e.name, attempt)))
	}
	if s == nil {
		t.Fatalf("start %s: %v", e.name, lastErr)
	}
	s.Engine = e.name
	t.Cleanup(func() { s.Stop() })
	s.Bucket = bucket
	st, err := remote.OpenS3(context.Background(), s.Config(""))
	if err != nil {
		t.Fatal(err)
	}
	// The S3 port may accept before the engine can serve requests: retry
	// the bucket's creation until it succeeds or StartTimeout passes.
	deadline := time.Now().Add(StartTimeout)
	tries := 0
	for {
		tries++
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = st.CreateBucket(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-s.done:
			t.Fatalf("%s exited during start-up: %v", e.name, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("create bucket %s on %s within %v: %v", bucket, e.name, StartTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("s3test: %s on %s serving bucket %s after %v (bucket created at try %d)", e.name, s.Endpoint, bucket, time.Since(began).Round(time.Millisecond), tries)
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

func startVersitygw(bin, data, logPath string) (*Server, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	return startProc(exec.Command(bin, "--access", AccessKey, "--secret", SecretKey, "--port", addr, "posix", data), "versitygw", addr, data, logPath)
}

// seaweedfsS3Config is the identity file of `weed mini -s3.config`: the
// test account, with every action.
const seaweedfsS3Config = `{"identities":[{"name":"wsfs-test","credentials":[{"accessKey":"` + AccessKey +
	`","secretKey":"` + SecretKey + `"}],"actions":["Admin","Read","List","Tagging","Write"]}]}`

// startSeaweedFS starts `weed mini` bound to 127.0.0.1 only (-ip and
// -ip.bind: without -ip it advertises the host's detected address), every
// port chosen here (gRPC ports too: mini's default of HTTP port + 10000 can
// leave the port range), without the WebDAV, admin, Iceberg and Lance
// servers and without telemetry.
func startSeaweedFS(bin, data, logPath string) (*Server, error) {
	ports, err := freePorts(10)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(filepath.Dir(data), "seaweedfs-s3.json")
	if err := vfs.Publish(vfs.Default, cfg, false, func(f vfs.File) error {
		_, err := f.Write([]byte(seaweedfsS3Config))
		return err
	}); err != nil {
		return nil, err
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	addr := "127.0.0.1:" + p(0)
	cmd := exec.Command(bin, "mini", "-dir", data, "-ip", "127.0.0.1", "-ip.bind", "127.0.0.1",
		"-s3.config", cfg, "-s3.port", p(0), "-s3.port.grpc", p(1),
		"-master.port", p(2), "-master.port.grpc", p(3),
		"-volume.port", p(4), "-volume.port.grpc", p(5),
		"-filer.port", p(6), "-filer.port.grpc", p(7),
		"-webdav=false", "-webdav.port", p(8), "-admin.ui=false", "-admin.port", p(9), "-admin.port.legacy", "0",
		"-s3.port.iceberg", "0", "-s3.port.lance", "0", "-master.telemetry=false")
	return startProc(cmd, "seaweedfs", addr, data, logPath)
}

// freePorts returns n distinct free TCP ports of 127.0.0.1 (held open
// together while chosen, so they differ; another process may still take
// one before the server binds it, which Start's retries cover).
func freePorts(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startProc starts cmd, logging to logPath, and returns once addr accepts
// connections (bounded by StartTimeout), or the process's exit with its log.
func startProc(cmd *exec.Cmd, name, addr, data, logPath string) (*Server, error) {
	logf, err := vfs.Default.Create(logPath)
	if err != nil {
		return nil, err
	}
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
	deadline := time.Now().Add(StartTimeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("%s on %s exited: %v\n%s", name, addr, err, tail(readLog(logPath)))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return &Server{Endpoint: "http://" + addr, Dir: data, proc: cmd.Process, done: done,
				argv: cmd.Args, name: name, addr: addr, logPath: logPath}, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-done
	return nil, fmt.Errorf("%s on %s did not accept connections within %v\n%s", name, addr, StartTimeout, tail(readLog(logPath)))
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
