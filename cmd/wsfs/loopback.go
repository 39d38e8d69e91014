package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"wsfs/internal/metrics"
)

// The loopback command is internal: it is the `loopback` arm of wsfs stress,
// a plain pass-through FUSE mount that promises no durability of its own.
// It measures the floor any FUSE filesystem pays on this host.
func init() {
	register(command{
		name:    "loopback",
		summary: "(internal) plain go-fuse pass-through mount, the FUSE floor of wsfs stress",
		run:     runLoopback,
	})
}

func runLoopback(ctx context.Context, g *globals, args []string) error {
	flags := newFlagSet(g, "loopback", "SRC MNT", `
Mounts SRC at MNT with go-fuse's loopback file system (multi-threaded,
1 s entry and attribute timeouts as in go-fuse's example), writes
--ready-file once the mount serves, and unmounts cleanly on SIGTERM or
interrupt. With --metrics it counts every FUSE request by opcode in the
collectors a wsfs daemon serves (wsfs_fuse_ops_total, wsfs_fuse_op_seconds)
and logs "metrics addr=URL" before writing the ready file.`)
	ready := flags.String("ready-file", "", "file to create once the mount is serving")
	metricsAddr := flags.String("metrics", "", "serve Prometheus metrics on ADDR (host:port; port 0 picks one) at /metrics")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 2 {
		return usageError{fmt.Sprintf("want SRC and MNT, got %d arguments", flags.NArg())}
	}
	src, mnt := flags.Arg(0), flags.Arg(1)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return preconditionError{fmt.Errorf("no /dev/fuse: %w", err)}
	}
	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		return preconditionError{fmt.Errorf("loopback source %s: %w", src, err)}
	}
	sec := time.Second
	opts := &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			FsName:      src,
			Name:        "wsfs-loopback",
			DirectMount: os.Geteuid() == 0, // root mounts without fusermount3
		},
	}
	// fs.Mount's steps, with the raw file system wrapped when counting.
	raw := fs.NewNodeFS(root, opts)
	var m *metrics.Metrics
	if *metricsAddr != "" {
		m = metrics.New("loopback")
		raw = newCountingFS(raw, m)
	}
	server, err := fuse.NewServer(raw, mnt, &opts.MountOptions)
	if err != nil {
		return preconditionError{fmt.Errorf("mount %s: %w", mnt, err)}
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return preconditionError{fmt.Errorf("mount %s: %w", mnt, err)}
	}
	if m != nil {
		ms, err := m.Serve(*metricsAddr)
		if err != nil {
			server.Unmount()
			return err
		}
		defer ms.Close()
		fmt.Fprintf(g.stderr, "metrics addr=http://%s/metrics\n", ms.Addr())
	}
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte(mnt+"\n"), 0o644); err != nil {
			server.Unmount()
			return fmt.Errorf("ready file: %w", err)
		}
	}
	done := make(chan struct{})
	go func() { server.Wait(); close(done) }()
	select {
	case <-ctx.Done():
	case <-done:
		return fmt.Errorf("loopback mount %s ended (unmounted from outside?)", mnt)
	}
	// The kernel refuses to unmount while files are open; retry briefly.
	var uerr error
	for range 50 {
		if uerr = server.Unmount(); uerr == nil {
			<-done
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("unmount %s: %w", mnt, uerr)
}
