package manifest

import (
	"encoding/binary"
	"fmt"

	"wsfs/internal/pool"
)

// A manifest reference is a workspace checkpoint payload that names a
// tree by its manifest root instead of holding it (format frozen,
// version 1; golden file testdata/ref-v1.golden):
//
//	ref = magic:"WSFSMREF" version:uvarint root:[32]u8 minNext:uvarint
//
// Fork and restore publish one as the workspace's checkpoint, so that
// their cost does not depend on the size of the tree: recovery loads the
// tree from the manifests (LoadTreeMin with minNext). It is wrapped in the
// seglog checkpoint file like the namespace encoding, whose magic
// ("WSFSNS\0\1") differs from this one's.
const refMagic = "WSFSMREF"

// EncodeRef returns a manifest reference to root with next inode number
// at least minNext.
func EncodeRef(root pool.ID, minNext uint64) []byte {
	b := []byte(refMagic)
	b = binary.AppendUvarint(b, version)
	b = append(b, root[:]...)
	return binary.AppendUvarint(b, minNext)
}

// IsRef reports whether a checkpoint payload is a manifest reference.
func IsRef(payload []byte) bool {
	return len(payload) >= len(refMagic) && string(payload[:len(refMagic)]) == refMagic
}

// DecodeRef decodes a manifest reference; errors wrap ErrBadManifest.
func DecodeRef(payload []byte) (root pool.ID, minNext uint64, err error) {
	d := &decoder{b: payload}
	d.magic(refMagic)
	root = d.id("root")
	minNext = d.uvarint("min next ino")
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return root, minNext, d.err
}
