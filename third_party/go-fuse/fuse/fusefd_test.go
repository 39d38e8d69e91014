// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"bytes"
	"io"
	"os"
	"testing"
	"unsafe"
)

// pipeFD returns a fuseFD whose fd is the write end of a pipe, and the
// read end.
func pipeFD(t *testing.T) (*fuseFD, *os.File) {
	t.Helper()
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close(); wr.Close() })
	conn, err := wr.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return &fuseFD{file: wr, conn: conn}, rd
}

// TestWritevReq: a request's reused fdCall writes exactly the pieces it
// is given each time (empty ones skipped), keeps none of them alive after
// the write, and a write to a closed fd fails instead of looping.
func TestWritevReq(t *testing.T) {
	r, rd := pipeFD(t)
	req := &request{}
	for i, pieces := range [][][]byte{
		{[]byte("header"), []byte("data"), []byte("payload")},
		{[]byte("h2"), nil},
		{[]byte("h3"), {}, []byte("p3")},
	} {
		if err := r.writevReq(req, pieces...); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		want := bytes.Join(pieces, nil)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(rd, got); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("write %d: pipe got %q, want %q", i, got, want)
		}
		c := req.call
		for j, b := range c.iovArr {
			if b != nil {
				t.Fatalf("write %d: fdCall keeps piece %d (%q) alive", i, j, b)
			}
		}
		if c.iov != nil || c.err != nil || c.buf != nil {
			t.Fatalf("write %d: fdCall keeps iov %v, err %v, buf %v", i, c.iov, c.err, c.buf)
		}
	}
	r.file.Close()
	if err := r.writevReq(req, []byte("late")); err == nil {
		t.Fatal("write to a closed fd: no error")
	}
	if req.call.iovArr[0] != nil {
		t.Fatal("failed write: fdCall keeps its piece alive")
	}
}

// TestReadRequestBuffers: a request read into a pooled buffer (large
// enough to be kept, or copied inline when small) returns that buffer to
// readPool exactly once: after each returnRequest, and after a failed
// read, the in-flight accounting is back at zero and the request holds
// no read buffer.
func TestReadRequestBuffers(t *testing.T) {
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	defer wr.Close()
	conn, err := rd.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ms := &Server{maxReaders: 4, singleReader: true, opts: &MountOptions{MaxInflightRequestBytes: 1 << 30}}
	readBufSize, readBufBytes, reqAllocBytes := requestAccountingSizes(1 << 16)
	ms.reqPool.New = func() any { return &requestAlloc{request: request{cancel: make(chan struct{})}} }
	ms.readPool.New = func() any {
		buf := make([]byte, readBufBytes)
		buf = alignSlice(buf, unsafe.Sizeof(WriteIn{}), logicalBlockSize, uintptr(readBufSize))
		return &buf
	}
	r := &fuseFD{server: ms, file: rd, conn: conn, reqPool: &ms.reqPool, readPool: &ms.readPool,
		buffers: &ms.buffers, readBufBytes: readBufBytes, reqAllocBytes: reqAllocBytes}
	for i, size := range []int{4096, 100, 60000, int(unsafe.Sizeof(InHeader{}))} {
		msg := make([]byte, size)
		for j := range msg[unsafe.Sizeof(InHeader{}):] {
			msg[int(unsafe.Sizeof(InHeader{}))+j] = byte(i + j)
		}
		if _, err := wr.Write(msg); err != nil {
			t.Fatal(err)
		}
		req, st := r.readRequest()
		if !st.Ok() || req == nil {
			t.Fatalf("read %d: %v, %v", i, req, st)
		}
		if !bytes.Equal(req.inputBuf, msg) {
			t.Fatalf("read %d: input of %d bytes differs from the %d written", i, len(req.inputBuf), len(msg))
		}
		if kept := req.bufferPoolInputPtr != nil; kept != (size >= len(req.smallInputBuf)) {
			t.Fatalf("read %d (%d bytes): read buffer kept %v", i, size, kept)
		}
		if c := req.call; c.buf != nil || c.err != nil {
			t.Fatalf("read %d: fdCall keeps buf %d bytes, err %v", i, len(c.buf), c.err)
		}
		r.returnRequest(req)
		if req.bufferPoolInputPtr != nil || req.bufferPoolInputBuf != nil {
			t.Fatalf("read %d: a returned request holds its read buffer", i)
		}
		if r.inflightRequestBytes != 0 || r.reqReaders != 0 {
			t.Fatalf("read %d: after return, in flight %d bytes, %d readers; want 0, 0", i, r.inflightRequestBytes, r.reqReaders)
		}
	}
	wr.Close() // read gives 0 bytes: a short read
	if req, st := r.readRequest(); req != nil || st != EINVAL {
		t.Fatalf("read at EOF: %v, %v; want nil, EINVAL", req, st)
	}
	if r.inflightRequestBytes != 0 || r.reqReaders != 0 {
		t.Fatalf("after a short read: in flight %d bytes, %d readers; want 0, 0", r.inflightRequestBytes, r.reqReaders)
	}
}
