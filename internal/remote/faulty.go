package remote

import (
	"context"
	"sync"
)

// Faulty wraps a Store for fault-injection tests: Hook is called before
// every operation with the operation's name ("put", "get", "head",
// "delete", "list"), the key and the number of operations before it; a
// non-nil result fails the operation with that error, without reaching
// the store. It is not for use outside tests' fault injection: the real
// store is always underneath.
type Faulty struct {
	Store Store
	Hook  func(op, key string, n int) error

	mu sync.Mutex
	n  int
}

func (f *Faulty) fault(op, key string) error {
	f.mu.Lock()
	n := f.n
	f.n++
	f.mu.Unlock()
	if f.Hook == nil {
		return nil
	}
	if err := f.Hook(op, key, n); err != nil {
		return &Error{Op: op, Store: f.Store.String(), Key: key, Err: err}
	}
	return nil
}

// Ops returns the number of operations so far (failed ones included).
func (f *Faulty) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *Faulty) Put(ctx context.Context, key string, data []byte) error {
	if err := f.fault("put", key); err != nil {
		return err
	}
	return f.Store.Put(ctx, key, data)
}

func (f *Faulty) Get(ctx context.Context, key string) ([]byte, error) {
	if err := f.fault("get", key); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, key)
}

func (f *Faulty) Exists(ctx context.Context, key string) (bool, error) {
	if err := f.fault("head", key); err != nil {
		return false, err
	}
	return f.Store.Exists(ctx, key)
}

func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := f.fault("delete", key); err != nil {
		return err
	}
	return f.Store.Delete(ctx, key)
}

func (f *Faulty) List(ctx context.Context, prefix string) ([]string, error) {
	if err := f.fault("list", prefix); err != nil {
		return nil, err
	}
	return f.Store.List(ctx, prefix)
}

func (f *Faulty) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	if err := f.fault("put", key); err != nil {
		return "", err
	}
	return f.Store.PutIf(ctx, key, data, ifMatch)
}

func (f *Faulty) GetETag(ctx context.Context, key string) ([]byte, string, error) {
	if err := f.fault("get", key); err != nil {
		return nil, "", err
	}
	return f.Store.GetETag(ctx, key)
}

func (f *Faulty) Stat(ctx context.Context, key string) (Info, bool, error) {
	if err := f.fault("head", key); err != nil {
		return Info{}, false, err
	}
	return f.Store.Stat(ctx, key)
}

func (f *Faulty) ListInfo(ctx context.Context, prefix string) ([]Info, error) {
	if err := f.fault("list", prefix); err != nil {
		return nil, err
	}
	return f.Store.ListInfo(ctx, prefix)
}

func (f *Faulty) String() string { return f.Store.String() + " (fault-injecting)" }
