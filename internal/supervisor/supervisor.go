// Package supervisor runs every workspace of a host: for each one a daemon
// process (`wsfs mount NAME MOUNTPOINT --ready-file F`) and an agent-state
// replication sidecar (`wsfs sidecar NAME`), both real child processes of
// the same executable. It is the body of `wsfs up`.
//
// Lifecycle:
//
//   - A child that exits while the supervisor is running is restarted after
//     a backoff that doubles with each quick death (MinBackoff up to
//     MaxBackoff) and returns to MinBackoff once a child has stayed up for
//     StableAfter. Every death is logged with who died, how (exit code or
//     signal) and when it restarts.
//   - Before a daemon is (re)started, a stale FUSE mount left at its mount
//     point by a killed daemon is lazily unmounted (and the log says so):
//     the kernel keeps a dead daemon's mount, which would make the new
//     daemon's mount fail.
//   - On shutdown (ctx done) the sidecars are stopped first with SIGTERM
//     (each syncs its replica a last time), then the daemons with SIGTERM
//     (each commits what is pending and unmounts). A child that does not
//     exit within StopTimeout gets SIGKILL; a daemon killed that way has its
//     mount lazily unmounted. Both are logged. Run then returns nil.
//
// Children get Setpgid (so a terminal's ^C reaches only the supervisor,
// which then stops them in order) and Pdeathsig SIGTERM (so they stop, and
// daemons commit and unmount, if the supervisor itself is killed). Each
// child writes its output to a file (see LogFile for why not a pipe), which
// the supervisor copies into its log, one line at a time, prefixed with
// "NAME/kind: ".
//
// Runtime files: HOME/run/NAME.ready (the daemon's ready file),
// HOME/run/NAME.KIND.log (children's output), HOME/run/up.json (pids and
// restart counts, for `wsfs status`) and, with a metrics endpoint,
// HOME/run/NAME.KIND.metrics (where each child's own endpoint listens; see
// metrics.go).
package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/agentstate"
	"wsfs/internal/host"
	"wsfs/internal/mountinfo"
)

// Options configure Run.
type Options struct {
	// Host is the host whose workspaces run.
	Host *host.Host
	// Workspaces to run. Each must exist.
	Workspaces []string
	// Exe is the wsfs executable to start children from (os.Executable()).
	Exe string
	// DaemonArgs are extra flags for every `wsfs mount` (before NAME).
	DaemonArgs []string
	// SidecarArgs are extra flags for every `wsfs sidecar` (before NAME).
	SidecarArgs []string
	// Ship also runs a `wsfs ship NAME` per workspace (the host has a
	// remote tier). Shippers stop last, so the daemons' final commits are
	// shipped.
	Ship bool
	// MinBackoff, MaxBackoff bound the restart delay. Defaults 500ms, 30s.
	MinBackoff, MaxBackoff time.Duration
	// StableAfter is how long a child must live for its backoff to reset.
	// Default 30s.
	StableAfter time.Duration
	// StopTimeout bounds the wait for a child after SIGTERM. Default 30s.
	StopTimeout time.Duration
	// Logger receives the supervisor's and the children's messages.
	Logger *slog.Logger
	// Ready, if set, is called once every daemon has written its ready file
	// for the first time.
	Ready func()
	// GCInterval, if positive, runs `wsfs gc` (with GCArgs) on the host
	// every GCInterval while the daemons serve, the first pass one interval
	// after the start. Each pass's output and outcome are logged; a failed
	// or refused pass is retried at the next tick, and a pass still running
	// at shutdown is killed (the next pass finishes its work; see
	// pool.Collect).
	GCInterval time.Duration
	GCArgs     []string
	// MetricsListener, if set, serves the host's metrics on /metrics:
	// every child's, labelled with its workspace and process, and the
	// supervisor's own (see metrics.go). It is closed when Run returns.
	MetricsListener net.Listener
	// MetricsTimeout bounds the scrape of one child. Default 5s.
	MetricsTimeout time.Duration
}

// Kinds of child process.
const (
	KindDaemon  = "daemon"
	KindSidecar = "sidecar"
	KindShipper = "shipper"
)

// RunDir is HOME/run, the supervisor's runtime directory.
func RunDir(h *host.Host) string { return filepath.Join(h.Home(), "run") }

// ReadyFile is the ready file the daemon of name writes.
func ReadyFile(h *host.Host, name string) string {
	return filepath.Join(RunDir(h), name+".ready")
}

// StateFile is HOME/run/up.json.
func StateFile(h *host.Host) string { return filepath.Join(RunDir(h), "up.json") }

// ChildState is one child's entry in up.json.
type ChildState struct {
	Workspace string    `json:"workspace"`
	Kind      string    `json:"kind"`
	PID       int       `json:"pid"` // 0 while not running
	StartedAt time.Time `json:"started_at"`
	Restarts  int       `json:"restarts"`
	LastExit  string    `json:"last_exit,omitempty"`
}

// State is the content of up.json.
type State struct {
	PID       int          `json:"pid"` // the supervisor's
	UpdatedAt time.Time    `json:"updated_at"`
	Children  []ChildState `json:"children"`
}

type child struct {
	ws, kind    string
	args        []string
	env         []string
	mountPoint  string // daemon only
	readyFile   string // daemon only
	metricsFile string // where it publishes its metrics address ("": none)

	mu struct {
		sync.Mutex
		cmd      *exec.Cmd // nil while not running
		stopping bool
		st       ChildState
		backoff  time.Duration // the delay of its next restart
	}
	exited chan struct{} // closed when the current process has been waited for
	done   chan struct{} // closed when the loop has returned
}

// supervisor is a running `wsfs up`.
type supervisor struct {
	opts     Options
	log      *slog.Logger
	children []*child
	stateMu  sync.Mutex
}

// Run starts every workspace's daemon and sidecar and supervises them until
// ctx is done, then stops them (see the package doc). It returns an error
// only if it cannot start at all.
func Run(ctx context.Context, opts Options) error {
	if opts.MetricsListener != nil {
		defer opts.MetricsListener.Close()
	}
	if opts.Host == nil || opts.Exe == "" {
		return errors.New("supervisor: Host and Exe are required")
	}
	if len(opts.Workspaces) == 0 {
		return fmt.Errorf("no workspaces on host %s: create some with `wsfs create NAME` or `wsfs up --workspaces N`", opts.Host.Home())
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 500 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	if opts.StableAfter <= 0 {
		opts.StableAfter = 30 * time.Second
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MetricsTimeout <= 0 {
		opts.MetricsTimeout = 5 * time.Second
	}
	h := opts.Host
	if err := os.MkdirAll(RunDir(h), 0o700); err != nil {
		return fmt.Errorf("create runtime directory: %w", err)
	}
	s := &supervisor{opts: opts, log: opts.Logger}
	home := "--home=" + h.Home()
	for _, ws := range opts.Workspaces {
		if err := h.CheckWorkspace(ws); err != nil {
			return err
		}
		if locked, err := h.Locked(ws); err != nil {
			return err
		} else if locked {
			return fmt.Errorf("workspace %s is already served by another daemon (its lock is held): stop it first", ws)
		}
		env := append(os.Environ(),
			"WSFS_HOME="+h.Home(),
			agentstate.EnvVar+"="+agentstate.PathsFor(h, ws).DB,
		)
		mp := h.MountPoint(ws)
		if err := os.MkdirAll(mp, 0o755); err != nil && !errors.Is(err, syscall.ENOTCONN) {
			return fmt.Errorf("create mount point %s: %w", mp, err)
		}
		// metricsArgs are the flags of a child of kind that publishes its
		// metrics for the host endpoint.
		metricsArgs := func(kind string) (file string, args []string) {
			if opts.MetricsListener == nil {
				return "", nil
			}
			file = MetricsFile(h, ws, kind)
			return file, []string{"--metrics=127.0.0.1:0", "--metrics-file=" + file}
		}
		ready := ReadyFile(h, ws)
		mf, margs := metricsArgs(KindDaemon)
		dargs := append(append([]string{"mount", home, "--ready-file=" + ready}, margs...), opts.DaemonArgs...)
		s.children = append(s.children, &child{
			ws: ws, kind: KindDaemon, env: env, mountPoint: mp, readyFile: ready, metricsFile: mf,
			args: append(dargs, ws, mp),
		})
		mf, margs = metricsArgs(KindSidecar)
		sargs := append(append([]string{"sidecar", home}, margs...), opts.SidecarArgs...)
		s.children = append(s.children, &child{
			ws: ws, kind: KindSidecar, env: env, metricsFile: mf,
			args: append(sargs, ws),
		})
		if opts.Ship {
			mf, margs = metricsArgs(KindShipper)
			s.children = append(s.children, &child{ws: ws, kind: KindShipper, env: env, metricsFile: mf,
				args: append(append([]string{"ship", home}, margs...), ws)})
		}
	}
	for _, c := range s.children {
		c.mu.st = ChildState{Workspace: c.ws, Kind: c.kind}
		c.mu.backoff = opts.MinBackoff
	}

	// A ready file left by a daemon that died uncleanly must not make the
	// new run look ready before its own daemons are.
	// Likewise a metrics address file: its port may belong to anyone now.
	for _, c := range s.children {
		if c.kind == KindDaemon {
			os.Remove(c.readyFile)
		}
		c.removeMetricsFile()
	}
	restartCtx, stopRestarts := context.WithCancel(context.Background())
	defer stopRestarts()
	for _, c := range s.children {
		c.done = make(chan struct{})
		go func() { defer close(c.done); s.loop(restartCtx, c) }()
	}
	if ln := opts.MetricsListener; ln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.newMetricsHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		s.log.Info("wsfs up: metrics of every workspace", "addr", "http://"+ln.Addr().String()+"/metrics")
	}
	s.log.Info("wsfs up: supervising", "workspaces", len(opts.Workspaces), "children", len(s.children))
	go s.watchReady(ctx)
	gcDone := make(chan struct{})
	if opts.GCInterval > 0 {
		go func() { defer close(gcDone); s.gcLoop(restartCtx, home) }()
	} else {
		close(gcDone)
	}

	<-ctx.Done()
	s.log.Info("wsfs up: stopping (sidecars first, then daemons)")
	stopRestarts()
	<-gcDone
	s.stopAll(KindSidecar)
	s.stopAll(KindDaemon)
	s.stopAll(KindShipper)
	s.writeState()
	s.log.Info("wsfs up: stopped")
	return nil
}

// gcLoop runs `wsfs gc` every Options.GCInterval until ctx is done.
func (s *supervisor) gcLoop(ctx context.Context, home string) {
	t := time.NewTicker(s.opts.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		cmd := exec.CommandContext(ctx, s.opts.Exe, append([]string{"gc", home}, s.opts.GCArgs...)...)
		out, err := cmd.CombinedOutput()
		msg := strings.TrimSpace(string(out))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("wsfs up: periodic gc failed; retried at the next interval", "how", describeExit(cmd.ProcessState, err),
				"duration", time.Since(start).Round(time.Millisecond), "output", msg)
			continue
		}
		s.log.Info("wsfs up: periodic gc", "duration", time.Since(start).Round(time.Millisecond), "output", msg)
	}
}

// watchReady calls Options.Ready once every daemon's ready file exists.
func (s *supervisor) watchReady(ctx context.Context) {
	if s.opts.Ready == nil {
		return
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		all := true
		for _, c := range s.children {
			if c.kind == KindDaemon {
				if _, err := os.Stat(c.readyFile); err != nil {
					all = false
				}
			}
		}
		if all {
			s.log.Info("wsfs up: every workspace is mounted")
			s.opts.Ready()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// loop runs c until stopped, restarting it with backoff when it dies.
func (s *supervisor) loop(ctx context.Context, c *child) {
	log := s.log.With("workspace", c.ws, "kind", c.kind)
	backoff := s.opts.MinBackoff
	for {
		if c.kind == KindDaemon {
			os.Remove(c.readyFile)
			s.clearStaleMount(c, log)
		}
		c.removeMetricsFile()
		cmd := exec.Command(s.opts.Exe, c.args...)
		cmd.Env = c.env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		logPath := LogFile(s.opts.Host, c.ws, c.kind)
		lf, offset, err := openChildLog(logPath)
		if err != nil {
			log.Error("cannot open the child's log file; its output is discarded", "path", logPath, "err", err)
		} else {
			cmd.Stdout, cmd.Stderr = lf, lf
		}

		c.mu.Lock()
		if c.mu.stopping {
			c.mu.Unlock()
			if lf != nil {
				lf.Close()
			}
			return
		}
		err = cmd.Start()
		if lf != nil {
			lf.Close() // the child has its own descriptor
		}
		var tail *tailer
		if err == nil && lf != nil {
			tail = startTail(logPath, offset, newPrefixWriter(s.log, c.ws+"/"+c.kind))
		}
		if err == nil {
			c.mu.cmd = cmd
			c.exited = make(chan struct{})
			c.mu.st.PID = cmd.Process.Pid
			c.mu.st.StartedAt = time.Now().UTC()
		}
		exited := c.exited
		c.mu.Unlock()
		if err != nil {
			log.Error("cannot start", "err", err, "retry_in", backoff)
		} else {
			log.Info("started", "pid", cmd.Process.Pid)
			s.writeState()
			werr := cmd.Wait()
			if tail != nil {
				tail.finish()
			}
			c.removeMetricsFile() // a killed child leaves it
			lived := time.Since(c.mu.st.StartedAt)
			how := describeExit(cmd.ProcessState, werr)
			c.mu.Lock()
			c.mu.cmd = nil
			c.mu.st.PID = 0
			c.mu.st.LastExit = how
			stopping := c.mu.stopping
			close(exited)
			c.mu.Unlock()
			if stopping {
				s.writeState()
				return
			}
			if lived >= s.opts.StableAfter {
				backoff = s.opts.MinBackoff
				c.mu.Lock()
				c.mu.backoff = backoff
				c.mu.Unlock()
			}
			log.Warn("died", "pid", cmd.Process.Pid, "how", how, "after", lived.Round(time.Millisecond), "restart_in", backoff)
		}
		c.mu.Lock()
		c.mu.st.Restarts++
		c.mu.Unlock()
		s.writeState()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.opts.MaxBackoff)
		c.mu.Lock()
		c.mu.backoff = backoff
		c.mu.Unlock()
		log.Info("restarting")
	}
}

// removeMetricsFile removes c's metrics address file, if it has one.
func (c *child) removeMetricsFile() {
	if c.metricsFile != "" {
		os.Remove(c.metricsFile)
	}
}

// stopAll stops every child of kind in parallel: SIGTERM, bounded wait,
// SIGKILL.
func (s *supervisor) stopAll(kind string) {
	var wg sync.WaitGroup
	for _, c := range s.children {
		if c.kind != kind {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.stop(c) }()
	}
	wg.Wait()
}

func (s *supervisor) stop(c *child) {
	log := s.log.With("workspace", c.ws, "kind", c.kind)
	c.mu.Lock()
	c.mu.stopping = true
	cmd, exited := c.mu.cmd, c.exited
	c.mu.Unlock()
	if cmd != nil {
		what := "final replica sync"
		if c.kind == KindDaemon {
			what = "final commit and unmount"
		}
		log.Info("stopping with SIGTERM", "pid", cmd.Process.Pid, "waits_for", what, "timeout", s.opts.StopTimeout)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			c.mu.Lock()
			how := c.mu.st.LastExit
			c.mu.Unlock()
			if cmd.ProcessState.Success() {
				log.Info("stopped", "pid", cmd.Process.Pid)
			} else {
				log.Error("stopped with a failure", "pid", cmd.Process.Pid, "how", how)
			}
		case <-time.After(s.opts.StopTimeout):
			log.Error("did not stop in time: sending SIGKILL", "pid", cmd.Process.Pid, "timeout", s.opts.StopTimeout, "lost", "whatever it had not yet "+map[string]string{KindDaemon: "committed", KindSidecar: "replicated", KindShipper: "shipped"}[c.kind])
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	<-c.done
	if c.kind == KindDaemon {
		s.clearStaleMount(c, log)
		os.Remove(c.readyFile)
	}
}

// clearStaleMount lazily unmounts c's mount point if something is still
// mounted there while no daemon of c runs.
func (s *supervisor) clearStaleMount(c *child, log *slog.Logger) {
	mounts, err := mountinfo.Read()
	if err != nil {
		log.Error("cannot read the mount table", "err", err)
		return
	}
	if m, ok := mountinfo.At(mounts, c.mountPoint); ok {
		if err := unix.Unmount(c.mountPoint, unix.MNT_DETACH); err != nil {
			log.Error("stale mount left by a dead daemon; lazy unmount failed", "mount_point", c.mountPoint, "fstype", m.FSType, "err", err)
			return
		}
		log.Warn("lazily unmounted a stale mount left by a dead daemon", "mount_point", c.mountPoint, "fstype", m.FSType)
	}
}

// describeExit says how a process ended: "exit code N" or "signal NAME".
func describeExit(ps *os.ProcessState, err error) string {
	if ps == nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit code %d", ps.ExitCode())
}

// writeState publishes HOME/run/up.json (advisory, not synced).
func (s *supervisor) writeState() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	st := State{PID: os.Getpid(), UpdatedAt: time.Now().UTC()}
	for _, c := range s.children {
		c.mu.Lock()
		st.Children = append(st.Children, c.mu.st)
		c.mu.Unlock()
	}
	data, _ := json.MarshalIndent(st, "", "  ")
	path := StateFile(s.opts.Host)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err == nil {
		os.Rename(tmp, path)
	}
}

// ReadState reads HOME/run/up.json.
func ReadState(h *host.Host) (State, error) {
	data, err := os.ReadFile(StateFile(h))
	if err != nil {
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, fmt.Errorf("%s: %w", StateFile(h), err)
	}
	return st, nil
}

// LogFile is HOME/run/NAME.KIND.log, where a child writes its output.
//
// Children write to a file, never to a pipe to the supervisor: a Go program
// writing to a broken pipe on stdout/stderr dies of SIGPIPE, so a child
// piped to a supervisor that was killed would die at its next log line,
// half way through its final commit. The supervisor tails the file into its
// own log. The file is kept across restarts (for post-mortems) and
// truncated at a child's start once it exceeds maxChildLog.
func LogFile(h *host.Host, name, kind string) string {
	return filepath.Join(RunDir(h), name+"."+kind+".log")
}

const maxChildLog = 64 << 20

// openChildLog opens path for appending and returns the offset at which the
// new child's output will start.
func openChildLog(path string) (*os.File, int64, error) {
	if st, err := os.Stat(path); err == nil && st.Size() > maxChildLog {
		os.Truncate(path, 0)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// tailer copies a child's log file, from an offset, into a prefixWriter
// until finish is called and the file is drained.
type tailer struct {
	stop chan struct{}
	done chan struct{}
}

func startTail(path string, offset int64, w *prefixWriter) *tailer {
	t := &tailer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		defer w.Flush()
		f, err := os.Open(path)
		if err != nil {
			w.log.Error("cannot read child log", "path", path, "err", err)
			return
		}
		defer f.Close()
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				continue
			}
			if err != nil && err != io.EOF {
				w.log.Error("cannot read child log", "path", path, "err", err)
				return
			}
			select {
			case <-t.stop:
				// The child has exited: whatever it wrote is in the file.
				for {
					n, _ := f.Read(buf)
					if n == 0 {
						return
					}
					w.Write(buf[:n])
				}
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return t
}

// finish drains the file and waits for the tailer to end.
func (t *tailer) finish() {
	close(t.stop)
	<-t.done
}

// prefixWriter copies a child's output to the log, one line per record.
type prefixWriter struct {
	mu     sync.Mutex
	log    *slog.Logger
	prefix string
	buf    []byte
}

func newPrefixWriter(log *slog.Logger, prefix string) *prefixWriter {
	return &prefixWriter{log: log, prefix: prefix}
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 {
		w.emit(w.buf)
		w.buf = nil
	}
	return len(p), nil
}

// Flush emits a last partial line.
func (w *prefixWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

func (w *prefixWriter) emit(line []byte) {
	w.log.Info(w.prefix + ": " + string(bytes.TrimRight(line, "\r")))
}

var _ io.Writer = (*prefixWriter)(nil)
