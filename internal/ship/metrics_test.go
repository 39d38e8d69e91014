package ship

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"wsfs/internal/remote"
	"wsfs/internal/remote/s3test"
)

// TestShipperMetrics: the collector exports the shipper's progress and
// counts failed rounds by kind, and retries, against a real S3 server with
// faults injected.
func TestShipperMetrics(t *testing.T) {
	srv := s3test.Start(t)
	e := newEnv(t, 21)
	defer func() { e.ws.Close() }()
	f := &remote.Faulty{Store: srv.Store(t, "metrics")}
	fail := 0
	f.Hook = func(op, key string, n int) error {
		if fail > 0 {
			fail--
			return fmt.Errorf("injected: %w", syscall.ECONNREFUSED)
		}
		return nil
	}
	sh := New(Options{Dir: e.dir(), Name: "ws", Pool: e.pool, Store: f})
	reg := prometheus.NewRegistry()
	if err := reg.Register(sh.Collector()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		e.step()
	}
	g := e.commit()
	fail = 2
	for range 2 {
		if _, err := sh.Round(ctx); err == nil {
			t.Fatal("a round with an injected fault succeeded")
		}
	}
	if got, err := sh.Round(ctx); err != nil || got != g {
		t.Fatalf("round after the faults: %d, %v; want %d", got, err, g)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			name := mf.GetName()
			for _, l := range m.Label {
				if l.GetName() == "kind" {
					name += "{" + l.GetValue() + "}"
				}
			}
			switch {
			case m.Counter != nil:
				vals[name] = m.Counter.GetValue()
			case m.Gauge != nil:
				vals[name] = m.Gauge.GetValue()
			}
		}
	}
	want := map[string]func(float64) bool{
		"wsfs_ship_shipped_group":             func(v float64) bool { return v == float64(g) },
		"wsfs_ship_local_group":               func(v float64) bool { return v == float64(g) },
		"wsfs_ship_rounds_total":              func(v float64) bool { return v == 3 },
		"wsfs_ship_retries_total":             func(v float64) bool { return v == 2 },
		"wsfs_ship_errors_total{unreachable}": func(v float64) bool { return v == 2 },
		"wsfs_ship_consecutive_failures":      func(v float64) bool { return v == 0 },
		"wsfs_ship_objects_uploaded_total":    func(v float64) bool { return v > 0 },
		"wsfs_ship_bytes_total":               func(v float64) bool { return v > 0 },
		"wsfs_ship_lag_seconds":               func(v float64) bool { return v == 0 },
		"wsfs_ship_lag_p99_seconds":           func(v float64) bool { return v >= 0 },
	}
	for name, ok := range want {
		v, found := vals[name]
		if !found || !ok(v) {
			t.Errorf("%s = %v (exported: %v)", name, v, found)
		}
	}
	if t.Failed() {
		t.Logf("all: %v", vals)
	}
}

func TestErrorKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&remote.Error{Op: "put", Key: "k", Err: syscall.ECONNREFUSED}, ErrKindUnreachable},
		{&remote.Error{Op: "put", Key: "k", Err: fmt.Errorf("%w", remote.ErrPrecondition)}, ErrKindConflict},
		{&LeaseError{Workspace: "ws"}, ErrKindLease},
		{&CorruptRemoteError{Key: "k"}, ErrKindCorrupt},
		{fmt.Errorf("read segment: %w", syscall.EIO), ErrKindLocal},
		{&remote.Error{Op: "get", Key: "k", Err: errors.New("api error: StatusCode: 503")}, ErrKindThrottled},
	} {
		if got := ErrorKind(c.err); got != c.want {
			t.Errorf("ErrorKind(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
