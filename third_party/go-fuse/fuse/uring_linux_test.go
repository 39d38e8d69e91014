// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"
)

func TestURingPossibleCPUs(t *testing.T) {
	for _, c := range []struct {
		list string
		want int
	}{{"0", 1}, {"0-1\n", 2}, {"0-3,5", 6}, {"0,2-7", 8}} {
		if got, err := possibleCPUs(c.list); err != nil || got != c.want {
			t.Errorf("possibleCPUs(%q) = %d, %v; want %d", c.list, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1"} {
		if _, err := possibleCPUs(bad); err == nil {
			t.Errorf("possibleCPUs(%q): no error", bad)
		}
	}
}

func TestURingPayloadSize(t *testing.T) {
	for _, c := range []struct{ maxWrite, want int }{
		{1 << 20, 1 << 20},
		{4096, 8192},              // at least FUSE_MIN_READ_BUFFER
		{128*1024 + 1, 33 * 4096}, // whole pages (max_pages)
	} {
		if got := uringPayloadSize(c.maxWrite, 4096); got != c.want {
			t.Errorf("uringPayloadSize(%d) = %d, want %d", c.maxWrite, got, c.want)
		}
	}
}

// entry builds a ring entry holding a request: in header, first argument
// in op_in, the rest in the payload.
func entry(opcode uint32, unique uint64, arg0, rest []byte) (hdr, payload []byte) {
	hdr = make([]byte, uringHeaderSize)
	payload = make([]byte, 8192)
	inHeader := int(unsafe.Sizeof(InHeader{}))
	binary.LittleEndian.PutUint32(hdr[0:], uint32(inHeader+len(arg0)+len(rest)))
	binary.LittleEndian.PutUint32(hdr[4:], opcode)
	binary.LittleEndian.PutUint64(hdr[8:], unique)
	copy(hdr[uringOpInOff:], arg0)
	copy(payload, rest)
	binary.LittleEndian.PutUint64(hdr[uringEntOff+8:], unique) // commit_id
	binary.LittleEndian.PutUint32(hdr[uringEntOff+16:], uint32(len(rest)))
	return hdr, payload
}

func TestURingRequest(t *testing.T) {
	writeIn := bytes.Repeat([]byte{1}, int(unsafe.Sizeof(WriteIn{})))
	data := bytes.Repeat([]byte{2}, 5000)
	hdr, payload := entry(_OP_WRITE, 7, writeIn, data)
	var scratch []byte
	in, err := uringRequest(hdr, payload, &scratch)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 3 || len(in[0]) != int(unsafe.Sizeof(InHeader{})) || !bytes.Equal(in[1], writeIn) || !bytes.Equal(in[2], data) {
		t.Fatalf("WRITE split into %d/%d/%d bytes", len(in[0]), len(in[1]), len(in[2]))
	}
	if &in[2][0] != &payload[0] {
		t.Error("WRITE data copied; want it read in place")
	}

	// LOOKUP: no first argument (op_in empty), the name in the payload,
	// copied away from the buffer its reply overwrites.
	hdr, payload = entry(_OP_LOOKUP, 8, nil, []byte("name\x00"))
	if in, err = uringRequest(hdr, payload, &scratch); err != nil {
		t.Fatal(err)
	}
	if len(in[1]) != 0 || string(in[2]) != "name\x00" || &in[2][0] == &payload[0] {
		t.Errorf("LOOKUP split: op_in %d bytes, payload %q (copied: %v)", len(in[1]), in[2], &in[2][0] != &payload[0])
	}

	// A length that does not add up is refused, not read past.
	binary.LittleEndian.PutUint32(hdr[0:], 10)
	if _, err := uringRequest(hdr, payload, &scratch); err == nil {
		t.Error("short length: no error")
	}
	binary.LittleEndian.PutUint32(hdr[0:], 4096)
	if _, err := uringRequest(hdr, payload, &scratch); err == nil {
		t.Error("first argument over 128 bytes: no error")
	}
}

func TestURingReply(t *testing.T) {
	hdr := make([]byte, uringHeaderSize)
	if got := uringReply(hdr, 16+120, OK, 9); got != 120 {
		t.Errorf("reply payload size %d, want 120", got)
	}
	for _, c := range []struct {
		n     int
		st    Status
		errno int32
	}{{0, EIO, -5}, {0, OK, 0}} {
		got := uringReply(hdr, c.n, c.st, 9)
		h := (*OutHeader)(unsafe.Pointer(&hdr[0]))
		if got != 0 || h.Length != 16 || h.Status != c.errno || h.Unique != 9 {
			t.Errorf("uringReply(%d, %v) = %d, header %+v", c.n, c.st, got, *h)
		}
	}
}
