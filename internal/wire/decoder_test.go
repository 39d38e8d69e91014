package wire

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

var errKind = errors.New("bad thing")

func TestDecoderReads(t *testing.T) {
	var b []byte
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -7)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = append(b, 9)
	id := make([]byte, 32)
	id[0], id[31] = 1, 2
	b = append(b, id...)
	b = binary.AppendVarint(b, 1700000000)
	b = binary.AppendUvarint(b, 999999999)
	d := &Decoder{B: b, Kind: errKind}
	if v := d.Uvarint("u"); v != 300 {
		t.Fatalf("uvarint %d", v)
	}
	if v := d.Varint("v"); v != -7 {
		t.Fatalf("varint %d", v)
	}
	if s := d.Str("s", 3); s != "abc" {
		t.Fatalf("str %q", s)
	}
	if v := d.Byte("b"); v != 9 {
		t.Fatalf("byte %d", v)
	}
	if got := d.ID("id"); got[0] != 1 || got[31] != 2 {
		t.Fatalf("id %x", got)
	}
	if sec, ns := d.Time("t"); sec != 1700000000 || ns != 999999999 {
		t.Fatalf("time %d %d", sec, ns)
	}
	if d.Err != nil || len(d.B) != 0 {
		t.Fatalf("err %v, %d bytes left", d.Err, len(d.B))
	}
}

// TestDecoderRefuses: each malformed input fails with an error wrapping
// Kind, and the error is sticky (later reads return zero values and keep
// the first error).
func TestDecoderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		read func(d *Decoder)
		want string
	}{
		{"empty uvarint", nil, func(d *Decoder) { d.Uvarint("x") }, "bad varint for x"},
		{"non-minimal uvarint", []byte{0x81, 0x00}, func(d *Decoder) { d.Uvarint("x") }, "bad varint for x"},
		{"non-minimal varint", []byte{0x80, 0x00}, func(d *Decoder) { d.Varint("x") }, "bad varint for x"},
		{"overlong uvarint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, func(d *Decoder) { d.Uvarint("x") }, "bad varint"},
		{"u32 overflow", binary.AppendUvarint(nil, 1<<32), func(d *Decoder) { d.U32("mode") }, "mode does not fit 32 bits"},
		{"bytes over max", append(binary.AppendUvarint(nil, 4), "abcd"...), func(d *Decoder) { d.Bytes("name", 3) }, "name length 4 exceeds 3"},
		{"bytes past end", append(binary.AppendUvarint(nil, 5), "abcd"...), func(d *Decoder) { d.Bytes("name", -1) }, "exceeds the 4 bytes left"},
		{"missing byte", nil, func(d *Decoder) { d.Byte("kind") }, "missing kind"},
		{"short id", make([]byte, 31), func(d *Decoder) { d.ID("object") }, "short object"},
		{"nanoseconds", append(binary.AppendVarint(nil, 1), binary.AppendUvarint(nil, 1e9)...), func(d *Decoder) { d.Time("mtime") }, "mtime has 1000000000 nanoseconds"},
		{"count beyond input", append(binary.AppendUvarint(nil, 3), make([]byte, 95)...), func(d *Decoder) { d.Count("chunk count", 32) }, "chunk count 3 with 95 bytes left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Decoder{B: tc.in, Kind: errKind}
			tc.read(d)
			if d.Err == nil || !errors.Is(d.Err, errKind) || !strings.Contains(d.Err.Error(), tc.want) {
				t.Fatalf("err %v, want %q wrapping %v", d.Err, tc.want, errKind)
			}
			first := d.Err
			if v := d.Uvarint("later"); v != 0 || d.Err != first {
				t.Fatalf("not sticky: %d, %v", v, d.Err)
			}
		})
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add([]byte{0x05, 'h', 'e', 'l', 'l', 'o', 0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		d := &Decoder{B: in, Kind: errKind}
		for i := 0; i < 8 && d.Err == nil; i++ {
			d.Bytes("b", 64)
			d.Varint("v")
			d.Count("c", 32)
			d.ID("id")
		}
		if d.Err == nil && len(d.B) > len(in) {
			t.Fatal("read grew the input")
		}
	})
}
