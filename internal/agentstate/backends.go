package agentstate

// Replica backends compiled into wsfs. Litestream registers a URL scheme for
// each imported backend package; ReplicaSchemes must list the same ones.
// Adding another (gs, abs, sftp, webdav, nats, oss) is one blank import
// here, `go get github.com/benbjohnson/litestream/<name>@<litestream
// version>`, and its scheme in ReplicaSchemes.
import (
	_ "github.com/benbjohnson/litestream/file" // file://
	_ "github.com/benbjohnson/litestream/s3"   // s3:// (AWS and S3-compatible: MinIO, R2, B2, Tigris, ...)
)
