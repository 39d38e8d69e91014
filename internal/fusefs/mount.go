// Package fusefs serves a workspace over FUSE with go-fuse's raw API.
//
// The kernel's node id of a file is its inode number (root 1), so the
// adapter keeps no tree of its own: it translates requests to engine calls
// and engine errors to errnos (errors.go, the one mapping). Requests are
// served concurrently, each in its own goroutine; a read of committed data
// never waits for a commit.
//
// Mount options and why (the measurements behind each, with request counts
// per file, are in docs/benchmarks.md, "FUSE mount options"; TestRoundTrips
// pins the counts):
//
//   - default_permissions: the kernel checks permissions from the
//     attributes, so no ACCESS round trips and no checks in the adapter.
//   - allow_other (as root): the agent may run as another user.
//   - entry/attribute/negative timeouts of 60s: wsfs is the only writer of
//     its tree and every change passes through this kernel, which updates
//     or drops its cached entries itself; short timeouts cost a LOOKUP per
//     path component for every access after a pause.
//   - explicit data cache control plus FOPEN_KEEP_CACHE for unchanged files
//     (io.go), FOPEN_NOFLUSH for read-only opens: a file read back after it
//     was written costs OPEN and an asynchronous RELEASE, no READ, no FLUSH.
//   - writeback cache off by default: it adds a SETATTR per written file
//     and a FLUSH per read-only close (the kernel ignores FOPEN_NOFLUSH
//     with it), excludes passthrough, and leaves file mtimes at the time
//     the daemon receives the data. It wins for files written in many
//     small writes; agents and most tools write a small file in one
//     write(2), so the default favours them; Options.Writeback (wsfs mount
//     --writeback) turns it on.
//   - passthrough off by default although it reads pooled files several
//     times faster: while a passthrough reader is open, the kernel forbids
//     every other kind of open of the file, so a writer would get ETXTBSY
//     (see inodeIO).
//   - MaxWrite 1 MiB, MaxBackground 64, concurrent dispatch (never
//     SingleThreaded), no splice (replies are copied from memory).
//   - directories opened without a message (FUSE_NO_OPENDIR_SUPPORT: OPENDIR
//     answers ENOSYS, fs.go OpenDir) and their listings cached by the
//     kernel: a directory listed again costs no request at all; READDIR
//     offsets name a snapshot of the directory (listing.go). Symlink
//     targets are cached too (one READLINK per symlink).
//   - no lock capabilities: flock and fcntl locks stay in the kernel
//     (TestLocks).
//   - Each write(2) also costs one GETXATTR "security.capability" round
//     trip that the kernel sends and go-fuse answers (IgnoreSecurityLabels);
//     only disabling xattrs altogether would remove it. HANDLE_KILLPRIV_V2
//     does not (the kernel still sends one per file written once per open),
//     and the adapter would then have to clear suid/sgid on write and
//     truncate.
package fusefs

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"wsfs/internal/metrics"
	"wsfs/internal/mountinfo"
	"wsfs/internal/workspace"
)

// Options configure a mount. The zero value gives the measured defaults.
type Options struct {
	// Name names the mount (host.MountName: the workspace name and the
	// host's id); the mount shows as "wsfs:NAME" in
	// /proc/mounts.
	Name string
	// EntryTimeout and AttrTimeout are how long the kernel may trust a
	// name and an inode's attributes without asking (default 60s; a
	// negative value means 0). Long timeouts are safe because the kernel
	// sees every change to the tree.
	EntryTimeout, AttrTimeout time.Duration
	// NegativeTimeout is how long the kernel may remember that a name does
	// not exist (default 60s; negative: not at all).
	NegativeTimeout time.Duration
	// Writeback enables the kernel's writeback cache: writes are buffered
	// in the page cache and sent in large batches. The kernel disables
	// passthrough when it is on.
	Writeback bool
	// Passthrough lets the kernel read whole-object files directly from the
	// pool (read-only opens only). Needs root and kernel support; the
	// adapter falls back to reads through the daemon if the kernel refuses.
	// Off by default: while a file is open for passthrough reading, the
	// kernel allows no other kind of open of it, so opening it for writing
	// fails with ETXTBSY until the readers close it (see inodeIO).
	Passthrough bool
	// MaxBackground is the kernel's limit on asynchronous requests
	// (readahead, writeback) in flight (default 64).
	MaxBackground int
	// ReadAheadKB is the kernel readahead of the mount, in KiB (default
	// DefaultReadAheadKB; negative: leave the kernel's 128 KiB). FUSE
	// negotiates at most 128 KiB at INIT; Mount raises it afterwards
	// through /sys/class/bdi (root only; a failure is logged, not fatal).
	ReadAheadKB int
	// Logger receives the adapter's logs (default slog.Default()).
	Logger *slog.Logger
	// Metrics, if set, records each request.
	Metrics *metrics.Metrics
	// Debug logs every FUSE request (very verbose).
	Debug bool
	// IOUring serves the mount through FUSE over io_uring (the fork of
	// go-fuse in third_party/go-fuse, fuse/uring_linux.go) instead of
	// read(2)/write(2) on /dev/fuse: one ring per possible CPU, the
	// reply and the next request in one system call. It needs the
	// fuse module parameter enable_uring=Y (URingParam), which wsfs
	// never sets: Mount fails with a *PreconditionError otherwise.
	// FORGET, INTERRUPT and notifications still go through /dev/fuse.
	// Off by default (docs/benchmarks.md, "FUSE over io_uring
	// transport").
	IOUring bool
	// SpareProcs, if positive, raises the process's GOMAXPROCS, once the
	// server exists, to BlockedReaders() + SpareProcs: Ps that stay
	// free while every go-fuse reader is blocked in read(2) of
	// /dev/fuse. It never lowers GOMAXPROCS (a large host already has
	// more Ps than go-fuse has readers). It is process-wide: for a daemon that serves one mount
	// (see BlockedReaders for why it pays).
	SpareProcs int
}

// BlockedReaders is how many go-fuse reader goroutines a server created
// now can have blocked in read(2) of /dev/fuse at once: go-fuse v2.12
// sizes its readers from GOMAXPROCS when the server is created (clamped
// to 2..16) and lets one more start while all are busy. Each blocked
// reader holds a P in a system call. When they hold every P, the Go
// runtime's sysmon finds no idle P and takes one back from a reader
// after every 20 µs of waiting, which keeps sysmon polling every 20 µs
// instead of backing off to 10 ms; the reader then exits its read
// without a P and parks its thread while another takes the request
// over. That is a third of the daemon's context switches on a
// single-threaded client, and sysmon alone used 15–20 % of the
// daemon's CPU (docs/benchmarks.md,
// "Daemon CPU per request: spare Ps and fewer allocations").
func BlockedReaders() int {
	return min(max(runtime.GOMAXPROCS(0), 2), 16) + 1
}

// DefaultReadAheadKB is the default readahead of a mount. Reading a 200 MiB
// pooled file with a cold FUSE page cache (pool object cached) took
// 1.14–1.47 s at the kernel's 128 KiB and 0.55–0.79 s at 512–1024 KiB:
// every READ is a round trip, and 1 MiB matches MaxWrite (the largest
// request).
const DefaultReadAheadKB = 1024

// DefaultTimeout is the default entry, attribute and negative timeout.
const DefaultTimeout = 60 * time.Second

func (o *Options) setDefaults() {
	for _, d := range []*time.Duration{&o.EntryTimeout, &o.AttrTimeout, &o.NegativeTimeout} {
		switch {
		case *d == 0:
			*d = DefaultTimeout
		case *d < 0:
			*d = 0
		}
	}
	if o.MaxBackground <= 0 {
		o.MaxBackground = 64
	}
	if o.ReadAheadKB == 0 {
		o.ReadAheadKB = DefaultReadAheadKB
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Server is a mounted workspace.
type Server struct {
	srv        *fuse.Server
	fs         *rawFS
	ws         *workspace.Workspace
	mountpoint string
	log        *slog.Logger
	served     chan struct{} // closed when the serve loop has exited

	once sync.Once
	err  error
}

// Mount mounts ws at mountpoint and serves it until Unmount (or an external
// umount). The mount is live when Mount returns. It fails with a
// *PreconditionError when the environment or the mount point is not usable.
func Mount(ws *workspace.Workspace, mountpoint string, opts Options) (*Server, error) {
	opts.setDefaults()
	mp, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, err
	}
	if err := CheckFUSE(); err != nil {
		return nil, err
	}
	if err := CheckMountpoint(mp); err != nil {
		return nil, err
	}
	if opts.Passthrough && opts.Writeback {
		opts.Logger.Warn("the writeback cache excludes FUSE passthrough: passthrough is off for this mount")
	}
	if opts.IOUring {
		if err := CheckURing(); err != nil {
			return nil, err
		}
	}
	r := newRawFS(ws, opts)
	root := os.Geteuid() == 0
	var extra, disabled uint64
	if opts.Writeback {
		extra |= fuse.CAP_WRITEBACK_CACHE
	}
	if !opts.Passthrough || opts.Writeback {
		disabled |= fuse.CAP_PASSTHROUGH
	}
	mo := &fuse.MountOptions{
		FsName: MountSource(opts.Name),
		Name:   "wsfs",
		// Permission checks by the kernel from our attributes.
		Options:    []string{"default_permissions"},
		AllowOther: root, // fusermount refuses allow_other without user_allow_other
		// Larger than go-fuse's 12: readahead and writeback of several
		// files at once otherwise queue in the kernel.
		MaxBackground: opts.MaxBackground,
		// 1 MiB writes: 8x fewer round trips than the 128 KiB default for
		// large files.
		MaxWrite: 1 << 20,
		// Mount with mount(2) as root; go-fuse falls back to fusermount3.
		DirectMount: true,
		// The kernel keeps flock/fcntl locks locally (see rawFS).
		EnableLocks: false,
		// The kernel asks for security.capability before every write to
		// a file; answering ENODATA in go-fuse saves the engine call.
		// File capabilities are not supported on the mount.
		IgnoreSecurityLabels: true,
		// The kernel invalidates a file's page cache only when an open
		// comes without FOPEN_KEEP_CACHE (io.go decides), not whenever a
		// GETATTR shows a new mtime: every change passes through this
		// kernel, so its cache is never stale. Without it a file read
		// right after it was written costs a READ (measured: OPEN,
		// GETATTR, READ, FLUSH, RELEASE per 4 KiB file; with it, no READ).
		ExplicitDataCacheControl: true,
		// No splice: every READ reply is a byte slice (the engine reads
		// into the request's buffer), which go-fuse would otherwise first
		// try to push through a pipe (a pipe from its pool, an fcntl to
		// grow it, a writev of the header) before falling back to a copy,
		// and for 1 MiB replies, larger than the pipe's maximum size, log
		// "trySplice: ... max pipe size" at every READ.
		DisableSplice: true,
		// Symlink targets cached in the kernel's page cache: a symlink's
		// target never changes (there is no operation that rewrites it),
		// so a path through a symlink costs READLINK only once per inode.
		EnableSymlinkCaching: true,
		// Concurrent dispatch: a request never waits behind another.
		SingleThreaded:       false,
		ExtraCapabilities:    extra,
		DisabledCapabilities: disabled,
		Debug:                opts.Debug,
		Logger:               log.New(slogWriter{opts.Logger}, "", 0),
		IOUring:              opts.IOUring,
	}
	srv, err := fuse.NewServer(r, mp, mo)
	if n := BlockedReaders() + opts.SpareProcs; err == nil && opts.SpareProcs > 0 && n > runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
	}
	if err != nil {
		if !root {
			// go-fuse fell back to fusermount3, whose failure reads
			// "exited with code 256"; say what to do instead.
			return nil, precondition("mounting %s as uid %d failed (%s): run the daemon as root, as the systemd units and `wsfs up` do (agents of other users reach the mount through allow_other); a mount without root needs /dev/fuse open to that user and a setuid fusermount3 that permits the mount point", mp, os.Geteuid(), strings.TrimSpace(err.Error()))
		}
		return nil, fmt.Errorf("mount %s: %w", mp, err)
	}
	transport := "/dev/fuse"
	if opts.IOUring {
		transport = "io_uring"
	}
	opts.Logger.Info("FUSE transport", "transport", transport, "mountpoint", mp)
	s := &Server{srv: srv, fs: r, ws: ws, mountpoint: mp, log: opts.Logger, served: make(chan struct{})}
	go func() {
		defer close(s.served)
		srv.Serve()
	}()
	if err := srv.WaitMount(); err != nil {
		s.Unmount()
		return nil, fmt.Errorf("mount %s: %w", mp, err)
	}
	if opts.ReadAheadKB > 0 {
		if err := setReadAhead(mp, opts.ReadAheadKB); err != nil {
			opts.Logger.Warn("readahead left at the kernel default", "err", err)
		}
	}
	return s, nil
}

// setReadAhead sets the readahead of the FUSE mount at mp (its backing
// device info is named after the superblock's anonymous device).
func setReadAhead(mp string, kb int) error {
	var st unix.Stat_t
	if err := unix.Stat(mp, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(p, []byte(strconv.Itoa(kb)), 0)
}

// URingParam is the fuse module parameter that must read Y for
// Options.IOUring.
const URingParam = fuse.URingModuleParam

// CheckURing reports whether FUSE over io_uring can be used: the module
// parameter URingParam must read Y. wsfs never writes it.
func CheckURing() error {
	b, err := os.ReadFile(URingParam)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return precondition("FUSE over io_uring is not available: %s does not exist (it needs Linux 6.14+ built with CONFIG_FUSE_IO_URING); mount with --fuse-transport=dev", URingParam)
	case err != nil:
		return precondition("FUSE over io_uring: %v", err)
	case strings.TrimSpace(string(b)) != "Y":
		return precondition("FUSE over io_uring is disabled: %s reads %s; an administrator enables it with `echo Y > %s` (wsfs never does), or mount with --fuse-transport=dev", URingParam, strings.TrimSpace(string(b)), URingParam)
	}
	return nil
}

// URingRequests is the number of requests served through io_uring
// (Options.IOUring); 0 on /dev/fuse.
func (s *Server) URingRequests() uint64 { return s.srv.URingRequests() }

// Mountpoint is the absolute mount point.
func (s *Server) Mountpoint() string { return s.mountpoint }

// Unmount commits every completed operation (ws.Sync), then unmounts. If
// the mount is busy (open files, a shell inside) it detaches it lazily
// instead (no new path lookups reach it) and waits up to BusyGrace for the
// last user to leave; if files are still open then, it logs so and returns
// nil: everything completed is committed, and the caller's ws.Close commits
// what the kernel sends meanwhile (and the dirty content of files still
// open); the open files get errors once the daemon exits. The workspace
// stays open: the caller closes it. Unmount is idempotent.
func (s *Server) Unmount() error {
	s.once.Do(func() {
		syncErr := s.ws.Sync()
		if syncErr != nil {
			s.log.Error("commit before unmount failed", "err", syncErr)
		}
		s.err = errors.Join(syncErr, s.unmount())
	})
	return s.err
}

func (s *Server) unmount() error {
	select {
	case <-s.served:
		return nil // unmounted from outside already
	default:
	}
	var err error
	delay := 5 * time.Millisecond
	for range 5 {
		// EBUSY right after the last close can be the kernel still
		// dropping references; retry briefly before detaching.
		if err = unix.Unmount(s.mountpoint, 0); !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(delay)
		delay *= 2
	}
	switch {
	case err == nil:
	case errors.Is(err, unix.EBUSY):
		s.log.Warn("mount point busy (open files or a process inside it): detaching lazily", "mountpoint", s.mountpoint)
		if err = unix.Unmount(s.mountpoint, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("lazy unmount %s: %w", s.mountpoint, err)
		}
	case errors.Is(err, unix.EPERM):
		// Not root: mounted through fusermount3, unmount through it.
		if err = s.srv.Unmount(); err != nil {
			return fmt.Errorf("unmount %s: %w", s.mountpoint, err)
		}
	default:
		select {
		case <-s.served:
			return nil // raced with an external unmount
		default:
		}
		return fmt.Errorf("unmount %s: %w", s.mountpoint, err)
	}
	select {
	case <-s.served:
		return nil
	case <-time.After(BusyGrace):
		s.log.Warn("detached mount still has open files: what was completed is committed; the open files get errors once the daemon exits", "mountpoint", s.mountpoint, "waited", BusyGrace)
		return nil
	}
}

// BusyGrace is how long Unmount waits, after detaching a busy mount, for
// its last open file to close.
const BusyGrace = time.Second

// Wait blocks until the file system is unmounted (by Unmount or by an
// external umount).
func (s *Server) Wait() { <-s.served }

// Done is closed when the file system is unmounted.
func (s *Server) Done() <-chan struct{} { return s.served }

// CheckFUSE reports whether this process can mount FUSE file systems.
func CheckFUSE() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return precondition("/dev/fuse does not exist: load the fuse module (modprobe fuse) or, in a container, pass --device /dev/fuse")
	case errors.Is(err, os.ErrPermission):
		if os.Geteuid() != 0 && !haveFusermount() {
			return precondition("cannot open /dev/fuse and no fusermount3 in PATH: run as root or install fuse3")
		}
	case err != nil:
		return precondition("cannot open /dev/fuse: %v", err)
	default:
		f.Close()
	}
	if os.Geteuid() != 0 && !haveFusermount() {
		return precondition("mounting needs root or fusermount3 in PATH: run as root or install fuse3")
	}
	return nil
}

func haveFusermount() bool {
	for _, b := range []string{"fusermount3", "fusermount"} {
		if _, err := exec.LookPath(b); err == nil {
			return true
		}
	}
	return false
}

// CheckMountpoint reports whether mp (absolute) can be mounted on: an
// existing, empty directory that is not already a mount point.
func CheckMountpoint(mp string) error {
	st, err := os.Stat(mp)
	switch {
	case errors.Is(err, syscall.ENOTCONN):
		return precondition("mount point %s is a stale FUSE mount (its daemon is gone): run `umount -l %s` first", mp, mp)
	case errors.Is(err, os.ErrNotExist):
		return precondition("mount point %s does not exist: create it (mkdir -p %s) or omit it to use the default", mp, mp)
	case err != nil:
		return precondition("mount point %s: %v", mp, err)
	case !st.IsDir():
		return precondition("mount point %s is not a directory", mp)
	}
	mounted, err := mountinfo.IsMountPoint(mp)
	if err != nil {
		return err
	}
	if mounted {
		return precondition("%s is already a mount point: unmount it first (umount %s), or stop the wsfs daemon serving it", mp, mp)
	}
	d, err := os.Open(mp)
	if err != nil {
		return precondition("mount point %s: %v", mp, err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return precondition("mount point %s is not empty (it holds %q): use an empty directory", mp, names[0])
	}
	return nil
}

// slogWriter routes go-fuse's log.Logger output to slog.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Info(strings.TrimRight(string(p), "\n"), "component", "go-fuse")
	return len(p), nil
}

// MountSource is the mount source ("fsname") of workspace name's mounts.
func MountSource(name string) string { return "wsfs:" + name }

// Mounts returns the mount points where workspace name is mounted, from
// /proc/self/mountinfo (a dead daemon's mount included).
func Mounts(name string) ([]string, error) {
	ms, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	return mountsOf(ms, MountSource(name)), nil
}

// WsfsMountPoints returns every wsfs mount point of the mount table (of
// any workspace and host, dead ones included).
func WsfsMountPoints() ([]string, error) {
	ms, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if isWsfs(m) {
			out = append(out, m.Point)
		}
	}
	return out, nil
}

// isWsfs reports whether m is a wsfs mount (fstype fuse.wsfs, source
// wsfs:NAME).
func isWsfs(m mountinfo.Mount) bool {
	return strings.HasPrefix(m.FSType, "fuse") && strings.HasPrefix(m.Source, MountSource(""))
}

func mountsOf(ms []mountinfo.Mount, source string) []string {
	var out []string
	for _, m := range ms {
		if strings.HasPrefix(m.FSType, "fuse") && m.Source == source {
			out = append(out, m.Point)
		}
	}
	return out
}

// ProbeTimeout bounds the statfs that tells a dead mount from a live one.
const ProbeTimeout = 2 * time.Second

// ErrNoAnswer is wrapped by Probe when a mount does not answer within
// ProbeTimeout (its daemon is alive but stuck, or stopped).
var ErrNoAnswer = errors.New("mount does not answer")

// Probe reports whether the FUSE mount at mp has lost its daemon. It asks
// statfs(2), which the kernel never answers from its caches (a stat of a
// dead mount's root can still succeed from the attribute cache): once the
// daemon's /dev/fuse is closed, the connection is aborted and every request
// fails with ENOTCONN. A live daemon answers; one that does not answer
// within timeout gives an error wrapping ErrNoAnswer.
func Probe(mp string, timeout time.Duration) (dead bool, err error) {
	res := make(chan error, 1)
	go func() {
		var st unix.Statfs_t
		res <- unix.Statfs(mp, &st)
	}()
	select {
	case err := <-res:
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, unix.ENOTCONN):
			return true, nil
		}
		return false, fmt.Errorf("statfs %s: %w", mp, err)
	case <-time.After(timeout):
		return false, fmt.Errorf("%w: statfs %s took more than %v", ErrNoAnswer, mp, timeout)
	}
}

// DeadMount is a mount DetachDead detached.
type DeadMount struct {
	Point, Source string
}

// DetachDead lazily unmounts the wsfs mounts at mp (mountinfo: fstype
// fuse.wsfs, source wsfs:NAME) whose daemon is gone, top first, and
// returns them; it stops at the first mount that is not a wsfs mount or
// whose daemon answers (CheckMountpoint then refuses the mount point).
//
// The caller holds the workspace's lock, so no live daemon serves that
// workspace; the statfs probe (Probe) then tells whether this mount is the
// dead one, so that a live mount of another host's workspace of the same
// name is never detached.
func DetachDead(mp string) ([]DeadMount, error) {
	var out []DeadMount
	for range 8 {
		ms, err := mountinfo.Read()
		if err != nil {
			return out, err
		}
		top, ok := mountinfo.At(ms, mp)
		if !ok || !isWsfs(top) {
			return out, nil
		}
		dead, err := Probe(mp, ProbeTimeout)
		if err != nil {
			return out, precondition("mount point %s holds a wsfs mount (%s) whose daemon does not answer (%v): stop that daemon, or detach the mount with umount -l %s", mp, top.Source, err, mp)
		}
		if !dead {
			return out, nil
		}
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			return out, fmt.Errorf("detach the dead mount %s (%s): %w", mp, top.Source, err)
		}
		out = append(out, DeadMount{Point: mp, Source: top.Source})
	}
	return out, nil
}
