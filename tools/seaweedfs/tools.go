//go:build tools

// Package tools pins SeaweedFS (Apache-2.0), the second S3 engine the
// remote-tier tests can run against (S3_ENGINE=seaweedfs; the default engine
// is versitygw, see tools/versitygw). It is its own module so that the
// server's dependencies stay out of wsfs's go.mod; its go.mod repeats the
// replace directive of SeaweedFS's own go.mod, which a dependency's replace
// does not carry over. Build it (about 6 minutes on a 2 vCPU VM) with
//
//	cd tools/seaweedfs && go build -o DIR/weed github.com/seaweedfs/seaweedfs/weed
//
// and point WSFS_SEAWEEDFS at the binary. CI does not build it.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
