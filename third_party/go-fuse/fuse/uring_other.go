// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

//go:build !linux

package fuse

import "errors"

// uringTransport is FUSE over io_uring, which only Linux has.
type uringTransport struct{}

func newURingTransport(ms *Server) (*uringTransport, error) {
	return nil, errors.New("FUSE over io_uring needs Linux")
}

func (t *uringTransport) start() error { return nil }
func (t *uringTransport) stop()        {}
func (t *uringTransport) close()       {}

// URingRequests is the number of requests served through FUSE over
// io_uring: always 0 off Linux.
func (ms *Server) URingRequests() uint64 { return 0 }
