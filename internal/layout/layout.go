// Package layout builds and tears down the dedicated disk layout of a wsfs
// host: two loop-backed ext4 filesystems, one for STATE (logs, checkpoints,
// agent state) and one for POOL (content objects), each on its own loop
// device with direct I/O on, mounted exactly at the host's state and pool
// directories. wsfs up, wsfs mount and wsfs stress then use them with no
// further configuration.
//
// Why: a flush on one filesystem (syncfs, or the journal commit that an
// fsync forces) drags every dirty page of that filesystem along. Giving the
// state and the pool their own filesystems keeps each one's durability work
// its own; direct I/O on the loop device keeps the image file's pages out of
// the host page cache, so they are not cached (and flushed) twice.
//
// On disk:
//
//	HOME/layout/state.img   sparse image of the state filesystem
//	HOME/layout/pool.img    sparse image of the pool filesystem
//	HOME/layout/layout.json Record: what was made, and where
//
// Invariants:
//   - An image file exists only once it holds a complete ext4 filesystem
//     (made under a temporary name, renamed after mkfs succeeded).
//   - Create never mounts over a directory holding files: that would hide
//     them. Empty directories are allowed (wsfs init makes them).
//   - Create is idempotent and resumable: each step (image, loop device,
//     mount) is checked against the running system and done only if
//     missing, so a second run reports what exists and a run after a reboot
//     (loop devices gone) re-attaches and re-mounts the same images.
//   - Destroy refuses while any workspace is locked by a daemon or any
//     mount lives under the host's mount directory.
//
// The tools are util-linux's losetup, mount and umount and e2fsprogs's
// mkfs.ext4, run with os/exec. Everything needs root.
package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"wsfs/internal/host"
	"wsfs/internal/mountinfo"
	"wsfs/internal/vfs"
)

// Roles of the two filesystems.
const (
	RoleState = "state"
	RolePool  = "pool"
)

// RecordName is the record file inside the layout directory.
const RecordName = "layout.json"

// ErrNotRoot is wrapped by the errors of operations run without root.
var ErrNotRoot = errors.New("wsfs layout needs root")

// ErrBusy is wrapped by Destroy's refusal while workspaces are in use.
var ErrBusy = errors.New("layout in use")

// ErrNotEmpty is wrapped by Create's refusal to mount over a state or pool
// directory that holds files.
var ErrNotEmpty = errors.New("not empty")

// ErrNoLayout is wrapped by Status and Destroy when no layout is recorded.
var ErrNoLayout = errors.New("no layout recorded")

// Options configure Create.
type Options struct {
	// Dir holds the image files and the record. Default HOME/layout.
	Dir string
	// StateSize and PoolSize are the image sizes in bytes (sparse files:
	// space is taken as it is written). Defaults 4 GiB and 16 GiB.
	StateSize, PoolSize int64
	// DirectIO turns direct I/O on for the loop devices. Default (via
	// DefaultOptions) true.
	DirectIO bool
	// Euid returns the effective user id; nil means os.Geteuid. Tests
	// inject it to check the refusal without root.
	Euid func() int
	// Log receives one line per step taken or found done; nil discards.
	Log func(format string, args ...any)
}

// DefaultOptions are the sizes of the user's story and direct I/O on.
func DefaultOptions() Options {
	return Options{StateSize: 4 << 30, PoolSize: 16 << 30, DirectIO: true}
}

// Record is the content of layout.json.
type Record struct {
	Version     int          `json:"version"`
	CreatedAt   time.Time    `json:"created_at"`
	Filesystems []Filesystem `json:"filesystems"`
}

// Filesystem is one of the two filesystems of the layout.
type Filesystem struct {
	Role       string `json:"role"`        // state or pool
	Image      string `json:"image"`       // absolute image path
	Size       int64  `json:"size"`        // image size in bytes
	MountPoint string `json:"mount_point"` // absolute; the host's state or pool dir
	DirectIO   bool   `json:"direct_io"`   // requested
	Device     string `json:"device"`      // loop device at the last create, e.g. /dev/loop3
}

// dir returns the layout directory of h.
func layoutDir(h *host.Host, opts Options) string {
	if opts.Dir != "" {
		if abs, err := filepath.Abs(opts.Dir); err == nil {
			return abs
		}
		return opts.Dir
	}
	return filepath.Join(h.Home(), "layout")
}

// CheckRoot returns an error wrapping ErrNotRoot unless euid is 0.
func CheckRoot(euid int) error {
	if euid != 0 {
		return fmt.Errorf("%w (loop devices, mkfs and mount are privileged; running as uid %d): run it with sudo or as root", ErrNotRoot, euid)
	}
	return nil
}

func (o *Options) checkRoot() error {
	euid := os.Geteuid
	if o.Euid != nil {
		euid = o.Euid
	}
	return CheckRoot(euid())
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

// ReadRecord reads the record of the layout in dir (HOME/layout unless
// told). It returns an error wrapping fs.ErrNotExist if there is none.
func ReadRecord(dir string) (Record, error) {
	data, err := os.ReadFile(filepath.Join(dir, RecordName))
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("layout record %s is not valid JSON (%v): inspect it; `wsfs layout destroy` needs it to know what to remove", filepath.Join(dir, RecordName), err)
	}
	return r, nil
}

// writeRecord publishes r as dir/layout.json: private (0600, as every file
// of the host's own directories), synced, renamed into place and its
// directory synced (vfs.Publish).
func writeRecord(dir string, r Record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := vfs.Publish(vfs.Default, filepath.Join(dir, RecordName), true, func(f vfs.File) error {
		_, err := f.Write(append(data, '\n'))
		return err
	}); err != nil {
		return fmt.Errorf("write layout record: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// run runs an external tool and returns its trimmed stdout; a failure
// carries the tool's stderr.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			pkg := "util-linux"
			if strings.HasPrefix(name, "mkfs") {
				pkg = "e2fsprogs"
			}
			return "", fmt.Errorf("%s not found: install %s", name, pkg)
		}
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// Create builds the layout for host h (see the package doc). It returns the
// record of what exists afterwards.
func Create(h *host.Host, opts Options) (Record, error) {
	if err := opts.checkRoot(); err != nil {
		return Record{}, err
	}
	if opts.StateSize <= 0 || opts.PoolSize <= 0 {
		return Record{}, errors.New("state and pool sizes must be positive")
	}
	dir := layoutDir(h, opts)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Record{}, fmt.Errorf("create layout directory: %w", err)
	}
	prev, err := ReadRecord(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Record{}, err
	}
	rec := Record{Version: 1, CreatedAt: time.Now().UTC()}
	if len(prev.Filesystems) > 0 {
		rec.CreatedAt = prev.CreatedAt
	}
	want := []Filesystem{
		{Role: RoleState, Image: filepath.Join(dir, "state.img"), Size: opts.StateSize, MountPoint: h.StateDir(), DirectIO: opts.DirectIO},
		{Role: RolePool, Image: filepath.Join(dir, "pool.img"), Size: opts.PoolSize, MountPoint: h.PoolDir(), DirectIO: opts.DirectIO},
	}
	if want[0].MountPoint == want[1].MountPoint {
		return Record{}, fmt.Errorf("the host's state and pool directories are the same (%s): the layout needs two", want[0].MountPoint)
	}
	for _, p := range prev.Filesystems {
		for i := range want {
			if want[i].Role == p.Role && p.Image == want[i].Image {
				if p.Size != want[i].Size {
					opts.logf("%s: image exists with size %s; keeping it (the size flag applies to new images only)", p.Role, FormatSize(p.Size))
				}
				want[i].Size = p.Size
			}
		}
	}
	// Check every mount point before changing anything, so a refusal leaves
	// the system as it was.
	mounts, err := mountinfo.Read()
	if err != nil {
		return Record{}, err
	}
	for _, f := range want {
		if _, ok := mountinfo.At(mounts, f.MountPoint); ok {
			continue // checked against the image below
		}
		if err := checkEmpty(f.MountPoint); err != nil {
			return Record{}, fmt.Errorf("%s directory: %w", f.Role, err)
		}
	}
	for i := range want {
		dev, err := ensure(&want[i], &opts)
		if err != nil {
			return Record{}, fmt.Errorf("%s filesystem: %w", want[i].Role, err)
		}
		want[i].Device = dev
		rec.Filesystems = append(rec.Filesystems, want[i])
		if err := writeRecord(dir, rec); err != nil {
			return Record{}, err
		}
	}
	// The new filesystems are empty: give them the host's directories.
	if _, err := host.Init(h.Home()); err != nil {
		return rec, fmt.Errorf("recreate host directories on the new filesystems: %w", err)
	}
	return rec, nil
}

// checkEmpty refuses a directory that holds any non-directory entry
// (recursively): mounting over it would hide those files.
func checkEmpty(dir string) error {
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fs.SkipAll
			}
			return err
		}
		if !d.IsDir() {
			found = append(found, p)
			if len(found) >= 3 {
				return fs.SkipAll
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	if len(found) > 0 {
		return fmt.Errorf("%s is %w (it holds %s): the layout mounts a new filesystem there, which would hide those files; move them elsewhere (or destroy those workspaces) first", dir, ErrNotEmpty, strings.Join(found, ", "))
	}
	return nil
}

// ensure makes f's image, loop device and mount exist, doing only the
// missing steps, and returns the loop device.
func ensure(f *Filesystem, opts *Options) (string, error) {
	// 1. Image.
	if _, err := os.Stat(f.Image); errors.Is(err, fs.ErrNotExist) {
		tmp := f.Image + ".tmp"
		os.Remove(tmp)
		img, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			return "", fmt.Errorf("create image: %w", err)
		}
		err = img.Truncate(f.Size) // sparse
		if e := img.Close(); err == nil {
			err = e
		}
		if err != nil {
			os.Remove(tmp)
			return "", fmt.Errorf("size image: %w", err)
		}
		if _, err := run("mkfs.ext4", "-q", "-F", "-m", "0", "-L", "wsfs-"+f.Role, tmp); err != nil {
			os.Remove(tmp)
			return "", err
		}
		if err := os.Rename(tmp, f.Image); err != nil {
			os.Remove(tmp)
			return "", fmt.Errorf("publish image: %w", err)
		}
		if err := syncDir(filepath.Dir(f.Image)); err != nil {
			return "", fmt.Errorf("publish image: %w", err)
		}
		opts.logf("%s: made ext4 image %s (%s, sparse)", f.Role, f.Image, FormatSize(f.Size))
	} else if err != nil {
		return "", fmt.Errorf("image %s: %w", f.Image, err)
	} else {
		opts.logf("%s: image %s exists", f.Role, f.Image)
	}

	// 2. Loop device.
	dev, err := deviceOf(f.Image)
	if err != nil {
		return "", err
	}
	if dev == "" {
		dio := "off"
		if f.DirectIO {
			dio = "on"
		}
		dev, err = run("losetup", "--find", "--show", "--direct-io="+dio, f.Image)
		if err != nil {
			return "", err
		}
		opts.logf("%s: attached %s to %s (direct I/O requested %s)", f.Role, dev, f.Image, dio)
	} else {
		opts.logf("%s: %s is already attached to %s", f.Role, f.Image, dev)
	}
	if f.DirectIO {
		if on, err := DirectIO(dev); err == nil && !on {
			opts.logf("%s: WARNING: direct I/O is off on %s although requested: the kernel refused it (the backing filesystem of %s may not support O_DIRECT at this sector size)", f.Role, dev, f.Image)
		}
	}

	// 3. Mount.
	mounts, err := mountinfo.Read()
	if err != nil {
		return "", err
	}
	if m, ok := mountinfo.At(mounts, f.MountPoint); ok {
		if m.Source != dev {
			return "", fmt.Errorf("%s is already a mount point of %s (%s), not of %s: unmount it or change the host config", f.MountPoint, m.Source, m.FSType, dev)
		}
		opts.logf("%s: %s is mounted at %s", f.Role, dev, f.MountPoint)
		return dev, nil
	}
	if err := os.MkdirAll(f.MountPoint, 0o755); err != nil {
		return "", fmt.Errorf("create mount point: %w", err)
	}
	if _, err := run("mount", "-t", "ext4", "-o", "noatime", dev, f.MountPoint); err != nil {
		return "", err
	}
	// The root of a fresh ext4 is 0755; the state and pool are private
	// (host.PrivateDirs) from the start, not from the first daemon's start.
	if err := os.Chmod(f.MountPoint, 0o700); err != nil {
		return "", fmt.Errorf("make %s private: %w", f.MountPoint, err)
	}
	opts.logf("%s: mounted %s at %s", f.Role, dev, f.MountPoint)
	return dev, nil
}

// deviceOf returns the loop device the image is attached to, or "".
func deviceOf(image string) (string, error) {
	out, err := run("losetup", "--noheadings", "--output", "NAME", "--associated", image)
	if err != nil {
		return "", err
	}
	if out == "" {
		return "", nil
	}
	return strings.Fields(out)[0], nil
}

// DirectIO reads /sys/block/loopN/loop/dio for device /dev/loopN.
func DirectIO(dev string) (bool, error) {
	data, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "dio"))
	if err != nil {
		return false, fmt.Errorf("direct I/O state of %s: %w", dev, err)
	}
	return strings.TrimSpace(string(data)) == "1", nil
}

// FSStatus is the observed state of one filesystem of the layout.
type FSStatus struct {
	Filesystem
	ImageExists bool
	Attached    string // loop device the image is attached to now, "" if none
	DirectIOOn  bool   // from /sys/block/loopN/loop/dio
	Mounted     bool   // the attached device is mounted at MountPoint
	Size        uint64 // filesystem size in bytes (statfs), when mounted
	Used        uint64
	Avail       uint64
	Inodes      uint64
	InodesFree  uint64
	Problem     string // what is not as recorded, "" if all is well
}

// Status observes the layout recorded for h.
func Status(h *host.Host, dir string) ([]FSStatus, error) {
	if dir == "" {
		dir = layoutDir(h, Options{})
	}
	rec, err := ReadRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s: create one with `wsfs layout create`", ErrNoLayout, dir)
	}
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	var out []FSStatus
	for _, f := range rec.Filesystems {
		s := FSStatus{Filesystem: f}
		if _, err := os.Stat(f.Image); err == nil {
			s.ImageExists = true
			if dev, err := deviceOf(f.Image); err == nil {
				s.Attached = dev
			} else {
				s.Problem = err.Error()
			}
		}
		if s.Attached != "" {
			s.DirectIOOn, _ = DirectIO(s.Attached)
			if m, ok := mountinfo.At(mounts, f.MountPoint); ok && m.Source == s.Attached {
				s.Mounted = true
				var st unix.Statfs_t
				if err := unix.Statfs(f.MountPoint, &st); err == nil {
					bs := uint64(st.Bsize)
					s.Size, s.Avail = st.Blocks*bs, st.Bavail*bs
					s.Used = (st.Blocks - st.Bfree) * bs
					s.Inodes, s.InodesFree = st.Files, st.Ffree
				}
			}
		}
		switch {
		case s.Problem != "":
		case !s.ImageExists:
			s.Problem = "image missing"
		case s.Attached == "":
			s.Problem = "image not attached to a loop device (after a reboot?): run `wsfs layout create` to re-attach and mount it"
		case !s.Mounted:
			s.Problem = "not mounted at " + f.MountPoint + ": run `wsfs layout create` to mount it"
		case f.DirectIO && !s.DirectIOOn:
			s.Problem = "direct I/O requested but off"
		}
		out = append(out, s)
	}
	return out, nil
}

// Destroy unmounts the layout's filesystems, detaches their loop devices and
// removes their images and the record: every byte stored in the host's
// state and pool directories goes with them. It refuses (ErrBusy) while a
// daemon holds a workspace lock, a sidecar runs or anything is mounted
// under the host's mount directory, and (ErrNotRoot) without root.
func Destroy(h *host.Host, opts Options) error {
	if err := opts.checkRoot(); err != nil {
		return err
	}
	dir := layoutDir(h, opts)
	rec, err := ReadRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w in %s: nothing to destroy", ErrNoLayout, dir)
	}
	if err != nil {
		return err
	}
	if err := checkIdle(h); err != nil {
		return err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range rec.Filesystems {
		dev, err := deviceOf(f.Image)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m, ok := mountinfo.At(mounts, f.MountPoint); ok && (dev == "" || m.Source == dev) {
			if _, err := run("umount", f.MountPoint); err != nil {
				return fmt.Errorf("%s filesystem: %w (a process still uses it: stop it and retry; nothing was removed)", f.Role, err)
			}
			opts.logf("%s: unmounted %s", f.Role, f.MountPoint)
		}
		if dev != "" {
			if _, err := run("losetup", "--detach", dev); err != nil {
				errs = append(errs, fmt.Errorf("%s filesystem: %w", f.Role, err))
				continue
			}
			opts.logf("%s: detached %s", f.Role, dev)
		}
		if err := os.Remove(f.Image); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s filesystem: remove image: %w", f.Role, err))
			continue
		}
		opts.logf("%s: removed %s", f.Role, f.Image)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.Remove(filepath.Join(dir, RecordName)); err != nil {
		return fmt.Errorf("remove layout record: %w", err)
	}
	os.Remove(dir) // only if empty
	return nil
}

// checkIdle refuses while a workspace daemon runs (its lock is held), a
// sidecar runs (its socket answers) or a mount lives under the host's mount
// directory.
func checkIdle(h *host.Host) error {
	names, err := h.Workspaces()
	if err != nil {
		return err
	}
	var busy []string
	for _, n := range names {
		locked, err := h.Locked(n)
		if err != nil {
			return fmt.Errorf("check workspace %s: %w", n, err)
		}
		if locked {
			busy = append(busy, n+" (daemon running)")
		}
		// A running agent-state sidecar answers on its socket (the name is
		// agentstate.SocketName; not imported to keep layout free of
		// Litestream).
		if c, err := net.DialTimeout("unix", filepath.Join(h.AgentDir(n), "sidecar.sock"), time.Second); err == nil {
			c.Close()
			busy = append(busy, n+" (agent-state sidecar running)")
		}
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	prefix := h.MountDir() + string(filepath.Separator)
	for _, m := range mounts {
		if strings.HasPrefix(m.Point, prefix) {
			busy = append(busy, m.Point+" (mounted)")
		}
	}
	if len(busy) > 0 {
		return fmt.Errorf("%w: %s; stop `wsfs up` / the daemons first", ErrBusy, strings.Join(busy, ", "))
	}
	return nil
}

// ParseSize parses sizes like 4G, 512M, 16GiB, 1T or a plain byte count.
// Units are powers of 1024.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: want a positive number with an optional K, M, G or T suffix (powers of 1024)", s)
	}
	return n * mult, nil
}

// FormatSize renders bytes with a binary unit.
func FormatSize(n int64) string {
	const u = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	i := -1
	for f >= 1024 && i < len(u)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, u[i])
}
