package manifest

import (
	"encoding/binary"
	"fmt"
	"wsfs/internal/objid"
)

// A manifest reference is a workspace checkpoint payload that names a
// tree by its manifest root instead of holding it (golden files
// testdata/ref-v1.golden, testdata/ref-v2.golden):
//
//	ref v1 = magic:"WSFSMREF" version:uvarint(1) root:[32]u8 minNext:uvarint
//	ref v2 = magic:"WSFSMREF" version:uvarint(2) root:[32]u8 minNext:uvarint base:uvarint
//
// Fork and restore publish one as the workspace's checkpoint, so that
// their cost does not depend on the size of the tree: recovery loads the
// tree from the manifests (LoadTreeMin with minNext). Version 2 (online
// restore) adds base: the loaded tree is renumbered with
// namespace.Tree.Renumber(base), every inode but the root moving to
// ino-2+base, so that it reuses no inode number of the tree it replaced;
// base 0 means no renumbering. Version 1 is written for base 0, so forks
// and offline restores stay readable by older binaries. It is wrapped in
// the seglog checkpoint file like the namespace encoding, whose magic
// ("WSFSNS\0\1") differs from this one's.
const refMagic = "WSFSMREF"

// refVersionBase is the reference version with an inode base.
const refVersionBase = 2

// EncodeRef returns a manifest reference to root with next inode number
// at least minNext (version 1).
func EncodeRef(root objid.ID, minNext uint64) []byte {
	b := []byte(refMagic)
	b = binary.AppendUvarint(b, version)
	b = append(b, root[:]...)
	return binary.AppendUvarint(b, minNext)
}

// EncodeRefBase returns a manifest reference to root whose tree is
// renumbered from base (version 2; version 1 if base is 0). minNext
// applies to the tree after renumbering.
func EncodeRefBase(root objid.ID, minNext, base uint64) []byte {
	if base == 0 {
		return EncodeRef(root, minNext)
	}
	b := []byte(refMagic)
	b = binary.AppendUvarint(b, refVersionBase)
	b = append(b, root[:]...)
	b = binary.AppendUvarint(b, minNext)
	return binary.AppendUvarint(b, base)
}

// IsRef reports whether a checkpoint payload is a manifest reference.
func IsRef(payload []byte) bool {
	return len(payload) >= len(refMagic) && string(payload[:len(refMagic)]) == refMagic
}

// DecodeRef decodes a manifest reference of either version, ignoring a
// version 2 base (for readers that need only the root: GC marking);
// errors wrap ErrBadManifest.
func DecodeRef(payload []byte) (root objid.ID, minNext uint64, err error) {
	root, minNext, _, err = DecodeRefBase(payload)
	return root, minNext, err
}

// DecodeRefBase decodes a manifest reference of either version; base is
// 0 for version 1. Errors wrap ErrBadManifest.
func DecodeRefBase(payload []byte) (root objid.ID, minNext, base uint64, err error) {
	d := newDecoder(payload)
	if len(d.B) < len(refMagic) || string(d.B[:len(refMagic)]) != refMagic {
		d.Fail("bad magic (want " + refMagic + ")")
		return root, 0, 0, d.Err
	}
	d.B = d.B[len(refMagic):]
	v := d.Uvarint("version")
	if d.Err == nil && v != version && v != refVersionBase {
		d.Fail(fmt.Sprintf("manifest reference version %d, this wsfs reads versions %d and %d", v, version, refVersionBase))
	}
	root = d.ID("root")
	minNext = d.Uvarint("min next ino")
	if v == refVersionBase {
		if base = d.Uvarint("inode base"); d.Err == nil && base < 2 {
			d.Fail(fmt.Sprintf("inode base %d (must be at least 2)", base))
		}
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Fail(fmt.Sprintf("%d trailing bytes", len(d.B)))
	}
	return root, minNext, base, d.Err
}
