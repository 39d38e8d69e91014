package pool

import (
	"encoding/hex"
	"fmt"
	"io"

	"github.com/zeebo/blake3"
)

// ID names a pool object: the BLAKE3-256 hash of its content.
type ID [32]byte

// Sum returns the ID of data.
//
// The hash is BLAKE3 (github.com/zeebo/blake3), chosen by measurement
// (docs/benchmarks.md, "Content hash"): it ties SHA-256 at 4 KiB (below
// the inline threshold, so rarely pooled) and is twice as fast from 64 KiB
// up, where pooled objects live.
//
// The algorithm is part of the on-disk format: changing it orphans every
// object in every pool.
func Sum(data []byte) ID {
	return ID(blake3.Sum256(data))
}

// Hasher computes an ID incrementally; write the content, then call Sum.
type Hasher interface {
	io.Writer
	// Sum returns the ID of everything written so far. It does not change
	// the state: more writes may follow.
	Sum() ID
}

// NewHasher returns a Hasher computing the same function as Sum.
func NewHasher() Hasher { return &hasher{h: blake3.New()} }

type hasher struct{ h *blake3.Hasher }

func (h *hasher) Write(p []byte) (int, error) { return h.h.Write(p) }

func (h *hasher) Sum() ID {
	var id ID
	h.h.Sum(id[:0])
	return id
}

// String returns the 64 lowercase hex digits of id, the object's file name.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// ParseID parses the 64 lowercase hex digits produced by String. Upper-case
// digits are refused so that every object has exactly one file name.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return ID{}, fmt.Errorf("pool: parse id %q: want %d hex digits, have %d", s, 2*len(id), len(s))
	}
	if !isLowerHex(s) {
		return ID{}, fmt.Errorf("pool: parse id %q: not all lowercase hex digits", s)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return ID{}, fmt.Errorf("pool: parse id %q: %w", s, err)
	}
	return id, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
