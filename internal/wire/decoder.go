// Package wire reads the varint-based binary encoding shared by log
// records, checkpoints and manifests.
//
// A Decoder is a cursor over a byte slice with a sticky error: the first
// failure is kept, and every read after it returns a zero value without
// looking at the input, so a decoding function can read a whole structure
// and check Err once at the end. Decoding never panics and never allocates
// more than the input can hold: lengths and counts are checked against the
// bytes left before anything is allocated or sliced.
//
// The encoding accepts only minimal varints (no trailing zero bytes), so
// every value has exactly one encoding: content-addressed manifests and
// CRC-covered records cannot have two spellings of the same value.
package wire

import (
	"encoding/binary"
	"fmt"

	"wsfs/internal/objid"
)

// Decoder reads the encoding from B. Kind is wrapped by every error it
// reports (for example namespace.ErrBadRecord), so callers can test the
// class of a failure with errors.Is.
type Decoder struct {
	B    []byte // the bytes not yet read
	Err  error  // the first failure, wrapping Kind; nil while all reads succeeded
	Kind error
}

// Fail records a failure described by what, unless one is already
// recorded.
func (d *Decoder) Fail(what string) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: %s", d.Kind, what)
	}
}

// Uvarint reads a minimal unsigned varint.
func (d *Decoder) Uvarint(what string) uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B)
	if n <= 0 || n > 1 && d.B[n-1] == 0 {
		d.Fail("bad varint for " + what)
		return 0
	}
	d.B = d.B[n:]
	return v
}

// U32 reads an unsigned varint that must fit 32 bits.
func (d *Decoder) U32(what string) uint32 {
	v := d.Uvarint(what)
	if v > 1<<32-1 {
		d.Fail(what + " does not fit 32 bits")
	}
	return uint32(v)
}

// Varint reads a minimal signed (zig-zag) varint.
func (d *Decoder) Varint(what string) int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.B)
	if n <= 0 || n > 1 && d.B[n-1] == 0 {
		d.Fail("bad varint for " + what)
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Time reads seconds (varint) and nanoseconds (uvarint, below one
// second).
func (d *Decoder) Time(what string) (sec int64, nsec uint32) {
	sec = d.Varint(what + " seconds")
	ns := d.Uvarint(what + " nanoseconds")
	if d.Err == nil && ns >= 1e9 {
		d.Fail(fmt.Sprintf("%s has %d nanoseconds", what, ns))
	}
	return sec, uint32(ns)
}

// Bytes reads a length-prefixed byte string of at most max bytes (no
// limit when max is negative). The result aliases the input (no copy):
// callers keep the input immutable for as long as they keep the result.
func (d *Decoder) Bytes(what string, max int) []byte {
	n := d.Uvarint(what + " length")
	if d.Err != nil {
		return nil
	}
	if max >= 0 && n > uint64(max) {
		d.Fail(fmt.Sprintf("%s length %d exceeds %d", what, n, max))
		return nil
	}
	if n > uint64(len(d.B)) {
		d.Fail(fmt.Sprintf("%s length %d exceeds the %d bytes left", what, n, len(d.B)))
		return nil
	}
	v := d.B[:n:n]
	d.B = d.B[n:]
	return v
}

// Str reads a length-prefixed string of at most max bytes.
func (d *Decoder) Str(what string, max int) string { return string(d.Bytes(what, max)) }

// Byte reads one byte.
func (d *Decoder) Byte(what string) byte {
	if d.Err != nil {
		return 0
	}
	if len(d.B) < 1 {
		d.Fail("missing " + what)
		return 0
	}
	v := d.B[0]
	d.B = d.B[1:]
	return v
}

// ID reads a 32-byte object ID.
func (d *Decoder) ID(what string) (id objid.ID) {
	if d.Err != nil {
		return id
	}
	if len(d.B) < len(id) {
		d.Fail("short " + what)
		return id
	}
	copy(id[:], d.B)
	d.B = d.B[len(id):]
	return id
}

// Count reads an element count and checks that the bytes left can hold
// that many elements of at least minSize bytes each, so a caller can
// allocate count elements without trusting the input (a minSize below 1
// counts as 1). It reports false
// (with Err set) when they cannot, or after an earlier failure.
func (d *Decoder) Count(what string, minSize int) (uint64, bool) {
	minSize = max(minSize, 1)
	n := d.Uvarint(what)
	if d.Err != nil {
		return 0, false
	}
	if n > uint64(len(d.B)/minSize) {
		d.Fail(fmt.Sprintf("%s %d with %d bytes left", what, n, len(d.B)))
		return 0, false
	}
	return n, true
}
