// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

// FUSE over io_uring (Linux 6.14+): added in this fork, not upstream.
//
// The kernel keeps one queue per possible CPU and hands a request to the
// queue of the CPU its caller runs on; the ring becomes ready (and the
// kernel stops sending requests to /dev/fuse) once every queue has
// registered at least one entry. An entry is a pair of user buffers: a
// header (struct fuse_uring_req_header: fuse_in_header or
// fuse_out_header, the opcode's first argument, and the commit id and
// payload size) and a payload (the other arguments, write data, and every
// reply argument). A REGISTER command gives the kernel an entry; the
// command completes when a request has been copied into it; the reply goes
// back with COMMIT_AND_FETCH, which also hands the entry back for the next
// request. FORGET, INTERRUPT and notifications stay on /dev/fuse, which
// go-fuse's reader loop keeps serving.
//
// Each queue has its own io_uring, served by one goroutine locked to its
// thread (the submitter of the queue's commands, in whose context the
// kernel copies requests into the buffers). It hands every request to a
// goroutine of its own, as the /dev/fuse path does (a request may block,
// e.g. an fsync waiting for a commit), which serves it through the same
// protocolServer.handleIov as virtiofs and queues the commit; an eventfd
// read in the ring wakes the queue thread when it sleeps.
//
// Teardown: when the connection ends (unmount, abort), the kernel ends
// every command with an error (ENOTCONN, ECONNABORTED) whether its entry
// was waiting or held by a handler, so each queue thread sees all its
// entries dead and exits; Server.Serve also tells the queues to stop (and
// waits at most uringStopTimeout) once /dev/fuse reports ENODEV. A queue
// closes its ring and eventfd before its thread exits, and unmaps the
// buffers once its last handler has returned. If the daemon dies, the
// kernel cancels the commands itself when the rings are released. If a
// queue fails while the connection is alive, requests for its CPU would
// wait forever, so it aborts the connection (/sys/fs/fuse/connections)
// instead: a loud failure, never a hang.
package fuse

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// URingModuleParam is the fuse module parameter that must read Y for
// FUSE over io_uring; the kernel offers FUSE_OVER_IO_URING at INIT only
// then.
const URingModuleParam = "/sys/module/fuse/parameters/enable_uring"

// Kernel ABI: include/uapi/linux/io_uring.h and include/uapi/linux/fuse.h.
const (
	uringSetupCQSize    = 1 << 3
	uringSetupSQE128    = 1 << 10
	uringFeatSingleMmap = 1 << 0
	uringOpRead         = 22
	uringOpURingCmd     = 46
	uringEnterGetEvents = 1 << 0
	uringOffSQRing      = 0
	uringOffCQRing      = 0x8000000
	uringOffSQEs        = 0x10000000
	uringSQESize        = 128 // IORING_SETUP_SQE128: uring_cmd needs the 80-byte command area
	uringCQESize        = 16

	fuseURingCmdRegister       = 1
	fuseURingCmdCommitAndFetch = 2

	// struct fuse_uring_req_header
	uringInOutOff   = 0   // fuse_in_header in, fuse_out_header out (128 bytes)
	uringOpInOff    = 128 // the request's first argument (128 bytes)
	uringOpInSize   = 128
	uringEntOff     = 256 // struct fuse_uring_ent_in_out {flags, commit_id u64; payload_sz, padding u32; reserved u64}
	uringHeaderSize = 288
)

const (
	// uringQueueDepth is the number of entries (requests in flight)
	// per queue.
	uringQueueDepth = 16
	// uringEntStride is the space of one entry in a queue's header
	// mapping: the header, then its iovec[2].
	uringEntStride = 512
	// uringEventTag is the user_data of the eventfd read.
	uringEventTag = 1 << 32
	// uringStopTimeout bounds how long Serve waits for the queues.
	uringStopTimeout = 5 * time.Second
	// uringStartTimeout bounds how long NewServer waits for the
	// queues to submit their registrations.
	uringStartTimeout = 10 * time.Second
)

// uringParams is struct io_uring_params.
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// uring is one io_uring: its fd and the mapped submission and completion
// rings. Only its queue thread touches it.
type uring struct {
	fd                 int
	sqMem, cqMem, sqes []byte
	sqHead, sqTail     *uint32
	sqMask, sqEntries  uint32
	sqArray            []byte
	cqHead, cqTail     *uint32
	cqMask             uint32
	cqes               []byte
	sharedMmap         bool
}

func newURing(entries uint32) (r *uring, err error) {
	p := uringParams{flags: uringSetupSQE128 | uringSetupCQSize, cqEntries: 2 * entries}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r = &uring{fd: int(fd)}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uringCQESize)
	r.sharedMmap = p.features&uringFeatSingleMmap != 0
	if r.sharedMmap {
		sqSize = max(sqSize, cqSize)
	}
	if r.sqMem, err = unix.Mmap(r.fd, uringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("mmap io_uring SQ ring: %w", err)
	}
	if r.sharedMmap {
		r.cqMem = r.sqMem
	} else if r.cqMem, err = unix.Mmap(r.fd, uringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("mmap io_uring CQ ring: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, uringOffSQEs, int(p.sqEntries)*uringSQESize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("mmap io_uring SQEs: %w", err)
	}
	r.sqHead = (*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.ringMask]))
	r.sqEntries = p.sqEntries
	r.sqArray = r.sqMem[p.sqOff.array : p.sqOff.array+p.sqEntries*4]
	r.cqHead = (*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.ringMask]))
	r.cqes = r.cqMem[p.cqOff.cqes : p.cqOff.cqes+p.cqEntries*uringCQESize]
	return r, nil
}

// nextSQE returns the next free submission entry, zeroed; advance
// publishes it. The caller never queues more than sqEntries at once.
func (r *uring) nextSQE() []byte {
	tail := *r.sqTail
	if tail-atomic.LoadUint32(r.sqHead) >= r.sqEntries {
		panic("fuse: io_uring submission queue overflow")
	}
	idx := tail & r.sqMask
	sqe := r.sqes[idx*uringSQESize : (idx+1)*uringSQESize]
	clear(sqe)
	binary.LittleEndian.PutUint32(r.sqArray[idx*4:], idx)
	return sqe
}

func (r *uring) advance() { atomic.StoreUint32(r.sqTail, *r.sqTail+1) }

// enter submits every queued entry and, if wait, waits for at least one
// completion. EINTR is retried.
func (r *uring) enter(wait bool) error {
	for {
		toSubmit := *r.sqTail - atomic.LoadUint32(r.sqHead)
		var minComplete, flags uintptr
		if wait {
			minComplete, flags = 1, uringEnterGetEvents
		}
		if toSubmit == 0 && !wait {
			return nil
		}
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), minComplete, flags, 0, 0)
		switch errno {
		case 0:
			if *r.sqTail != atomic.LoadUint32(r.sqHead) {
				continue // partly submitted
			}
			return nil
		case unix.EINTR, unix.EAGAIN:
			if !wait && *r.sqTail == atomic.LoadUint32(r.sqHead) {
				return nil
			}
			if wait && r.cqReady() {
				// Interrupted after completions arrived: reap
				// first (the rest is submitted next time).
				return nil
			}
			continue
		default:
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
	}
}

func (r *uring) cqReady() bool { return atomic.LoadUint32(r.cqTail) != *r.cqHead }

// reap calls f for every completion.
func (r *uring) reap(f func(userData uint64, res int32)) {
	head := *r.cqHead
	for tail := atomic.LoadUint32(r.cqTail); head != tail; head++ {
		cqe := r.cqes[(head&r.cqMask)*uringCQESize:]
		f(binary.LittleEndian.Uint64(cqe), int32(binary.LittleEndian.Uint32(cqe[8:])))
	}
	atomic.StoreUint32(r.cqHead, head)
}

func (r *uring) close() {
	if r.sqes != nil {
		unix.Munmap(r.sqes)
	}
	if r.cqMem != nil && !r.sharedMmap {
		unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		unix.Munmap(r.sqMem)
	}
	r.sqes, r.cqMem, r.sqMem = nil, nil, nil
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// uringTransport serves a Server's requests through FUSE over io_uring.
type uringTransport struct {
	ms       *Server
	queues   []*uringQueue
	started  bool
	devFD    int           // the /dev/fuse fd, open until Serve has stopped the queues
	requests atomic.Uint64 // requests served through the rings
}

// uringQueue is one kernel queue: its ring, entries and queue thread.
type uringQueue struct {
	t      *uringTransport
	qid    int
	ring   *uring
	hdrMem []byte // uringEntStride per entry, then the eventfd buffer
	payMem []byte
	ents   []uringEnt
	evfd   int
	done   chan struct{} // closed when the queue thread has exited

	mu       sync.Mutex
	commits  []uringCommit // replies ready to commit
	sleeping bool          // the queue thread waits (or is about to) in io_uring_enter
	closing  bool          // stop asked
	released bool          // ring and eventfd closed: replies are dropped
	handlers int           // handler goroutines running
}

type uringEnt struct {
	hdr     []byte // struct fuse_uring_req_header
	payload []byte
	scratch []byte // copy of a request's payload that its reply may overwrite
}

type uringCommit struct {
	ent int
	id  uint64
}

// uringEnabled reports whether the module parameter reads Y.
func uringEnabled() error {
	b, err := os.ReadFile(URingModuleParam)
	if err != nil {
		return fmt.Errorf("FUSE over io_uring needs Linux 6.14+ with CONFIG_FUSE_IO_URING: %w", err)
	}
	if strings.TrimSpace(string(b)) != "Y" {
		return fmt.Errorf("FUSE over io_uring is disabled: %s reads %q, not Y", URingModuleParam, strings.TrimSpace(string(b)))
	}
	return nil
}

// possibleCPUs parses a kernel CPU list ("0-3,5") and returns the number
// of queues the kernel makes: one per possible CPU, indexed by CPU
// number, so the highest CPU + 1.
func possibleCPUs(list string) (int, error) {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return 0, fmt.Errorf("bad CPU list %q", list)
		}
		n = max(n, b+1)
	}
	return n, nil
}

// uringPayloadSize is the size of an entry's payload buffer: the kernel
// requires at least max(8 KiB, max_write, max_pages pages), and max_pages
// is what doInit derives from maxWrite.
func uringPayloadSize(maxWrite, pageSize int) int {
	maxPages := (maxWrite-1)/pageSize + 1
	return max(_FUSE_MIN_READ_BUFFER, maxWrite, maxPages*pageSize)
}

func newURingTransport(ms *Server) (t *uringTransport, err error) {
	if err := uringEnabled(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return nil, err
	}
	nq, err := possibleCPUs(string(b))
	if err != nil {
		return nil, err
	}
	t = &uringTransport{ms: ms}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	paySize := uringPayloadSize(ms.opts.MaxWrite, syscall.Getpagesize())
	for qid := 0; qid < nq; qid++ {
		q := &uringQueue{t: t, qid: qid, evfd: -1, done: make(chan struct{})}
		t.queues = append(t.queues, q)
		if q.ring, err = newURing(2 * uringQueueDepth); err != nil {
			return nil, err
		}
		if q.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("eventfd: %w", err)
		}
		anon := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
		if q.hdrMem, err = unix.Mmap(-1, 0, uringQueueDepth*uringEntStride+8, unix.PROT_READ|unix.PROT_WRITE, anon); err != nil {
			return nil, err
		}
		if q.payMem, err = unix.Mmap(-1, 0, uringQueueDepth*paySize, unix.PROT_READ|unix.PROT_WRITE, anon); err != nil {
			return nil, err
		}
		for i := 0; i < uringQueueDepth; i++ {
			e := uringEnt{
				hdr:     q.hdrMem[i*uringEntStride : i*uringEntStride+uringHeaderSize],
				payload: q.payMem[i*paySize : (i+1)*paySize],
			}
			iov := q.hdrMem[i*uringEntStride+uringHeaderSize:]
			binary.LittleEndian.PutUint64(iov[0:], uint64(uintptr(unsafe.Pointer(&e.hdr[0]))))
			binary.LittleEndian.PutUint64(iov[8:], uint64(len(e.hdr)))
			binary.LittleEndian.PutUint64(iov[16:], uint64(uintptr(unsafe.Pointer(&e.payload[0]))))
			binary.LittleEndian.PutUint64(iov[24:], uint64(len(e.payload)))
			q.ents = append(q.ents, e)
		}
	}
	return t, nil
}

// start registers every queue's entries; called after INIT.
func (t *uringTransport) start() error {
	if t.ms.negotiatedFlags&CAP_OVER_IO_URING == 0 {
		return fmt.Errorf("the kernel did not offer FUSE over io_uring at INIT (%s must read Y)", URingModuleParam)
	}
	t.started = true
	t.ms.fuseFD.withFD(func(fd int) { t.devFD = fd })
	errs := make(chan error, len(t.queues))
	for _, q := range t.queues {
		go q.run(errs)
	}
	timeout := time.NewTimer(uringStartTimeout)
	defer timeout.Stop()
	for range t.queues {
		select {
		case err := <-errs:
			if err != nil {
				return err
			}
		case <-timeout.C:
			return fmt.Errorf("FUSE over io_uring: queues not registered after %v", uringStartTimeout)
		}
	}
	t.ms.opts.Logger.Printf("fuse: serving through io_uring: %d queues of %d entries", len(t.queues), uringQueueDepth)
	return nil
}

// stop tells the queues to exit and waits for them (at most
// uringStopTimeout). Called once the connection is gone.
func (t *uringTransport) stop() {
	if t == nil || !t.started {
		return
	}
	for _, q := range t.queues {
		q.mu.Lock()
		q.closing = true
		if !q.released {
			q.wakeLocked()
		}
		q.mu.Unlock()
	}
	timeout := time.NewTimer(uringStopTimeout)
	defer timeout.Stop()
	for _, q := range t.queues {
		select {
		case <-q.done:
		case <-timeout.C:
			t.ms.opts.Logger.Printf("fuse: io_uring queue %d did not stop within %v", q.qid, uringStopTimeout)
			return
		}
	}
}

// close releases the transport: stops started queues, frees the others.
func (t *uringTransport) close() {
	if t == nil {
		return
	}
	if t.started {
		t.stop()
		return
	}
	for _, q := range t.queues {
		q.release()
	}
}

// wakeLocked wakes the queue thread if it sleeps. q.mu is held, so the
// eventfd is open.
func (q *uringQueue) wakeLocked() {
	if q.sleeping {
		q.sleeping = false
		var one [8]byte
		binary.LittleEndian.PutUint64(one[:], 1)
		unix.Write(q.evfd, one[:])
	}
}

// prepCmd queues a REGISTER or COMMIT_AND_FETCH of entry i.
func (q *uringQueue) prepCmd(i int, op uint32, commitID uint64) {
	sqe := q.ring.nextSQE()
	sqe[0] = uringOpURingCmd
	binary.LittleEndian.PutUint32(sqe[4:], uint32(q.t.devFD))
	binary.LittleEndian.PutUint32(sqe[8:], op) // cmd_op
	if op == fuseURingCmdRegister {
		binary.LittleEndian.PutUint64(sqe[16:], uint64(uintptr(unsafe.Pointer(&q.hdrMem[i*uringEntStride+uringHeaderSize])))) // addr: iovec[2]
		binary.LittleEndian.PutUint32(sqe[24:], 2)                                                                            // len
	}
	binary.LittleEndian.PutUint64(sqe[32:], uint64(i)) // user_data
	// struct fuse_uring_cmd_req in the command area (offset 48)
	binary.LittleEndian.PutUint64(sqe[56:], commitID)
	binary.LittleEndian.PutUint16(sqe[64:], uint16(q.qid))
	q.ring.advance()
}

// prepEventRead queues a read of the eventfd.
func (q *uringQueue) prepEventRead() {
	sqe := q.ring.nextSQE()
	sqe[0] = uringOpRead
	binary.LittleEndian.PutUint32(sqe[4:], uint32(q.evfd))
	binary.LittleEndian.PutUint64(sqe[8:], ^uint64(0)) // off -1: the fd's position
	binary.LittleEndian.PutUint64(sqe[16:], uint64(uintptr(unsafe.Pointer(&q.hdrMem[uringQueueDepth*uringEntStride]))))
	binary.LittleEndian.PutUint32(sqe[24:], 8)
	binary.LittleEndian.PutUint64(sqe[32:], uringEventTag)
	q.ring.advance()
}

// run is the queue thread: it registers the entries, then hands every
// request to a handler and submits the handlers' replies, until every
// entry is dead (the connection ended) or stop.
func (q *uringQueue) run(registered chan<- error) {
	defer close(q.done)
	// Never unlocked: the thread is the submitter of the queue's
	// commands and exits with this goroutine, after the ring is closed.
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(q.qid)
	unix.SchedSetaffinity(0, &set) // best effort: the queue's CPU
	for i := range q.ents {
		q.prepCmd(i, fuseURingCmdRegister, 0)
	}
	q.prepEventRead()
	if err := q.ring.enter(false); err != nil {
		registered <- fmt.Errorf("FUSE over io_uring: register queue %d: %w", q.qid, err)
		q.release()
		return
	}
	registered <- nil
	live := len(q.ents)
	var commits, inline []uringCommit
	var fatal error
	for live > 0 && fatal == nil {
		q.mu.Lock()
		commits, q.commits = q.commits, commits[:0]
		closing := q.closing
		// From here until the reaping below, a handler's commit must
		// wake the thread: the wait below ends only on a completion.
		q.sleeping = !closing
		q.mu.Unlock()
		if closing {
			break
		}
		for _, c := range commits {
			q.prepCmd(c.ent, fuseURingCmdCommitAndFetch, c.id)
		}
		for _, c := range inline {
			q.prepCmd(c.ent, fuseURingCmdCommitAndFetch, c.id)
		}
		inline = inline[:0]
		if fatal = q.ring.enter(true); fatal != nil {
			break
		}
		q.mu.Lock()
		q.sleeping = false
		q.mu.Unlock()
		q.ring.reap(func(ud uint64, res int32) {
			if ud == uringEventTag {
				if res < 0 {
					fatal = fmt.Errorf("eventfd read: %w", syscall.Errno(-res))
					return
				}
				q.prepEventRead()
				return
			}
			if res < 0 {
				live--
				switch errno := syscall.Errno(-res); errno {
				case unix.ENOTCONN, unix.ECONNABORTED, unix.ECANCELED:
				default:
					q.t.ms.opts.Logger.Printf("fuse: io_uring queue %d entry %d: %v", q.qid, ud, errno)
				}
				return
			}
			i := int(ud)
			if uringMayWait(binary.LittleEndian.Uint32(q.ents[i].hdr[uringInOutOff+4:])) {
				q.mu.Lock()
				q.handlers++
				q.mu.Unlock()
				go q.serve(i)
				return
			}
			inline = append(inline, q.answer(i))
		})
	}
	if fatal != nil {
		q.t.ms.opts.Logger.Printf("fuse: io_uring queue %d failed, aborting the connection: %v", q.qid, fatal)
		q.t.ms.abortConnection()
	}
	q.release()
}

// uringMayWait reports whether a request may wait for long (for a
// commit to be durable, for a lock, for a remote): such requests are
// served in goroutines of their own, the others by the queue thread
// itself, which saves two thread switches per request. Nothing a request
// served by the queue thread waits for depends on another FUSE request.
func uringMayWait(opcode uint32) bool {
	switch opcode {
	case _OP_FSYNC, _OP_FSYNCDIR, _OP_SETLKW, _OP_IOCTL, _OP_POLL:
		return true
	}
	return false
}

// serve answers the request in entry i in a goroutine of its own and
// queues its commit for the queue thread.
func (q *uringQueue) serve(i int) {
	c := q.answer(i)
	q.mu.Lock()
	q.handlers--
	if q.released {
		free := q.handlers == 0
		q.mu.Unlock()
		if free {
			q.freeBuffers()
		}
		return
	}
	q.commits = append(q.commits, c)
	q.wakeLocked()
	q.mu.Unlock()
}

// answer serves the request in entry i and leaves the reply in the entry.
func (q *uringQueue) answer(i int) uringCommit {
	e := &q.ents[i]
	commitID := binary.LittleEndian.Uint64(e.hdr[uringEntOff+8:])
	unique := binary.LittleEndian.Uint64(e.hdr[uringInOutOff+8:])
	in, err := uringRequest(e.hdr, e.payload, &e.scratch)
	var n int
	st := EIO
	if err != nil {
		q.t.ms.opts.Logger.Printf("fuse: io_uring queue %d: %v", q.qid, err)
	} else {
		ms := q.t.ms
		req := ms.reqPool.Get().(*requestAlloc)
		n, st = ms.protocolServer.handleIov(req, in, [][]byte{e.hdr[uringInOutOff : uringInOutOff+int(sizeOfOutHeader)], e.payload})
		if req.interrupted {
			req.interrupted = false
			req.cancel = make(chan struct{})
		}
		req.clear()
		ms.reqPool.Put(req)
		q.t.requests.Add(1)
	}
	payloadSize := uringReply(e.hdr, n, st, unique)
	binary.LittleEndian.PutUint32(e.hdr[uringEntOff+16:], payloadSize)
	return uringCommit{i, commitID}
}

// uringRequest returns the request in an entry as the byte stream
// /dev/fuse would deliver: fuse_in_header, the first argument (op_in:
// the header's length minus the header and the payload), then the
// payload. A payload other than write data is copied to scratch, since
// the reply is written over the payload buffer.
func uringRequest(hdr, payload []byte, scratch *[]byte) ([][]byte, error) {
	inLen := int(binary.LittleEndian.Uint32(hdr[uringInOutOff:]))
	opcode := binary.LittleEndian.Uint32(hdr[uringInOutOff+4:])
	paySize := int(binary.LittleEndian.Uint32(hdr[uringEntOff+16:]))
	inHeader := int(unsafe.Sizeof(InHeader{}))
	opSize := inLen - inHeader - paySize
	if paySize > len(payload) || opSize < 0 || opSize > uringOpInSize {
		return nil, fmt.Errorf("bad request: opcode %d, length %d, payload %d", opcode, inLen, paySize)
	}
	p := payload[:paySize]
	if opcode != _OP_WRITE && paySize > 0 {
		*scratch = append((*scratch)[:0], p...)
		p = *scratch
	}
	return [][]byte{hdr[uringInOutOff : uringInOutOff+inHeader], hdr[uringOpInOff : uringOpInOff+opSize], p}, nil
}

// uringReply completes the reply in an entry after handleIov wrote n
// bytes (fuse_out_header into the header, the rest into the payload) and
// returns the payload size for fuse_uring_ent_in_out. A failed or
// suppressed reply becomes a bare header (EIO, or success for a request
// that needs none, such as NOTIFY_REPLY): the entry goes back to the
// kernel either way.
func uringReply(hdr []byte, n int, st Status, unique uint64) uint32 {
	outHeader := int(sizeOfOutHeader)
	if st.Ok() && n >= outHeader {
		return uint32(n - outHeader)
	}
	errno := int32(0)
	if !st.Ok() {
		errno = -int32(st)
	}
	binary.LittleEndian.PutUint32(hdr[uringInOutOff:], uint32(outHeader))
	binary.LittleEndian.PutUint32(hdr[uringInOutOff+4:], uint32(errno))
	binary.LittleEndian.PutUint64(hdr[uringInOutOff+8:], unique)
	return 0
}

// release closes the ring and the eventfd (the kernel cancels the
// ring's commands) and frees the buffers once no handler uses them.
func (q *uringQueue) release() {
	q.mu.Lock()
	if q.released {
		q.mu.Unlock()
		return
	}
	q.released = true
	if q.ring != nil {
		q.ring.close()
	}
	if q.evfd >= 0 {
		unix.Close(q.evfd)
		q.evfd = -1
	}
	free := q.handlers == 0
	q.mu.Unlock()
	if free {
		q.freeBuffers()
	}
}

func (q *uringQueue) freeBuffers() {
	if q.hdrMem != nil {
		unix.Munmap(q.hdrMem)
	}
	if q.payMem != nil {
		unix.Munmap(q.payMem)
	}
	q.hdrMem, q.payMem, q.ents = nil, nil, nil
}

// abortConnection aborts the FUSE connection through
// /sys/fs/fuse/connections (the device minor of the mount), so that no
// request waits for a queue that is gone.
func (ms *Server) abortConnection() {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		ms.opts.Logger.Printf("fuse: abort: %v", err)
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 || fields[4] != ms.mountPoint {
			continue
		}
		_, minor, _ := strings.Cut(fields[2], ":")
		if err := os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0); err != nil {
			ms.opts.Logger.Printf("fuse: abort: %v", err)
		}
		return
	}
	ms.opts.Logger.Printf("fuse: abort: %s not found in /proc/self/mountinfo", ms.mountPoint)
}

// URingRequests is the number of requests served through FUSE over
// io_uring (MountOptions.IOUring); 0 without it.
func (ms *Server) URingRequests() uint64 {
	if ms.uring == nil {
		return 0
	}
	return ms.uring.requests.Load()
}
