// Package remote is wsfs's object-store tier: a small Store interface (what
// the shipper and pull need from S3 and nothing more), its implementation
// on any S3-compatible service with the AWS SDK for Go v2, the "remote"
// section of the host config, and a fault-injecting wrapper for tests.
//
// # Layout in the bucket
//
// Everything lives under the configured prefix P (may be empty):
//
//	P/objects/<64 hex>                  pool objects, named by BLAKE3 hash:
//	                                    shared by every workspace and host
//	P/workspaces/NAME/head              the workspace's head (JSON, see ship)
//	P/workspaces/NAME/log/<F>-<L>.seg   groups F..L of the log, segment format
//	P/workspaces/NAME/checkpoint/<G>.ckpt  checkpoint file of group G
//	P/agent/NAME/...                    the Litestream replica of the agent state
//
// The head is written last; everything it names was uploaded before it
// (see internal/ship for the ordering argument).
package remote

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is wrapped by Get when the key does not exist.
var ErrNotFound = errors.New("remote: no such object")

// ErrPrecondition is wrapped by PutIf when its condition does not hold
// (another writer changed or created the object).
var ErrPrecondition = errors.New("remote: precondition failed (the object was changed by another writer)")

// Store is an object store: whole-object put and get, existence, delete,
// list by prefix. Keys are relative to the store's prefix. A Put is atomic
// (a reader sees the old object, none, or the whole new one) and
// read-after-write consistent, as S3 has guaranteed since 2020.
type Store interface {
	Put(ctx context.Context, key string, data []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	// Exists reports whether key exists (a HEAD request).
	Exists(ctx context.Context, key string) (bool, error)
	Delete(ctx context.Context, key string) error
	// List returns every key under prefix, in lexical order.
	List(ctx context.Context, prefix string) ([]string, error)
	// PutIf is a conditional Put: only if the object is version ifMatch
	// (an ETag), or, with ifMatch "", only if it does not exist. A failed
	// condition wraps ErrPrecondition. It returns the new ETag.
	PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error)
	// GetETag is Get that also returns the object's ETag.
	GetETag(ctx context.Context, key string) ([]byte, string, error)
	// Stat is Exists that also describes the object (HEAD).
	Stat(ctx context.Context, key string) (Info, bool, error)
	// ListInfo is List with each object's size and modification time.
	ListInfo(ctx context.Context, prefix string) ([]Info, error)
	// String names the store in messages: endpoint, bucket and prefix,
	// never credentials.
	String() string
}

// Info describes a stored object.
type Info struct {
	Key      string
	Size     int64
	Modified time.Time
}

// ObjectKey is the key of pool object hex (64 lowercase hex digits).
func ObjectKey(hex string) string { return "objects/" + hex }

// WorkspaceKey is the key of file rel of workspace name.
func WorkspaceKey(name, rel string) string { return "workspaces/" + name + "/" + rel }

// AgentKey is the key, without a trailing slash, under which Litestream
// keeps workspace name's agent state replica (Config.AgentStateURL).
func AgentKey(name string) string { return "agent/" + name }

// Error wraps a failed store operation with the key and what to do.
type Error struct {
	Op    string // put, get, head, delete, list
	Store string // Store.String()
	Key   string
	Err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("remote %s %s in %s: %v", e.Op, e.Key, e.Store, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
