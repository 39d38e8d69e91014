//go:build tools

// Package tools pins the S3 server the remote-tier tests run against
// (versitygw, Apache-2.0). It is its own module so that the server's
// dependencies stay out of wsfs's go.mod. Build it with
//
//	cd tools/versitygw && go build -o DIR/versitygw github.com/versity/versitygw/cmd/versitygw
//
// (.ci/run and the test helper in internal/remote/s3test do).
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
