package ship

import (
	"context"
	"errors"
	"strings"

	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"wsfs/internal/pool"
	"wsfs/internal/remote"
)

// Error kinds, as counted in Stats.Errors and the metric
// wsfs_ship_errors_total{kind}.
const (
	ErrKindUnreachable = "unreachable" // no answer: connection refused or reset, timeout
	ErrKindThrottled   = "throttled"   // 503 SlowDown, 429, throttling codes
	ErrKindServer      = "server"      // other 5xx and unexpected answers of the store
	ErrKindAuth        = "auth"        // wrong or missing credentials, access denied
	ErrKindNoBucket    = "no_bucket"   // the bucket does not exist
	ErrKindLease       = "lease"       // the lease is another host's
	ErrKindConflict    = "conflict"    // a conditional write lost (another writer)
	ErrKindLocal       = "local"       // the local log, checkpoint or pool
	ErrKindCorrupt     = "corrupt"     // a remote file that does not verify
	ErrKindOther       = "other"
)

// ErrorKind classifies a round's error for the metrics.
func ErrorKind(err error) string {
	var le *LeaseError
	var ce *CorruptRemoteError
	var me *pool.MissingObjectError
	var ae smithy.APIError
	var re *remote.Error
	switch {
	case errors.As(err, &le):
		return ErrKindLease
	case errors.Is(err, remote.ErrPrecondition):
		return ErrKindConflict
	case errors.As(err, &ce):
		return ErrKindCorrupt
	case errors.As(err, &me):
		return ErrKindLocal
	case errors.As(err, &ae):
		code := ae.ErrorCode()
		switch {
		case strings.Contains(code, "Throttl") || code == "SlowDown" || code == "TooManyRequests" || code == "RequestLimitExceeded":
			return ErrKindThrottled
		case code == "NoSuchBucket":
			return ErrKindNoBucket
		case code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "Forbidden" || code == "ExpiredToken":
			return ErrKindAuth
		}
		return ErrKindServer
	case errors.Is(err, context.DeadlineExceeded):
		return ErrKindUnreachable
	case errors.As(err, &re):
		s := err.Error()
		switch {
		case strings.Contains(s, "connection refused") || strings.Contains(s, "connection reset") || strings.Contains(s, "no such host") || strings.Contains(s, "timeout") || strings.Contains(s, "EOF"):
			return ErrKindUnreachable
		case strings.Contains(s, "StatusCode: 503") || strings.Contains(s, "StatusCode: 429"):
			return ErrKindThrottled
		case strings.Contains(s, "StatusCode: 403"):
			return ErrKindAuth
		}
		return ErrKindServer
	case errors.Is(err, context.Canceled):
		return ErrKindOther
	}
	return ErrKindLocal
}

// Collector exports a Shipper's statistics as Prometheus metrics (labelled
// with the workspace), read at scrape time:
//
//	wsfs_ship_lag_seconds            gauge: age of the oldest durable group not yet shipped
//	wsfs_ship_last_lag_seconds       gauge: lag of the last shipped group
//	wsfs_ship_lag_p50_seconds, _p99  gauges over the last 4096 shipped groups
//	wsfs_ship_shipped_group, wsfs_ship_local_group
//	wsfs_ship_bytes_total, wsfs_ship_objects_uploaded_total, wsfs_ship_objects_present_total
//	wsfs_ship_checkpoints_total, wsfs_ship_snapshots_total, wsfs_ship_snapshots_removed_total
//	wsfs_ship_rounds_total, wsfs_ship_retries_total (rounds after a failed one)
//	wsfs_ship_errors_total{kind}     failed rounds by ErrorKind
//	wsfs_ship_consecutive_failures   gauge
func (s *Shipper) Collector() prometheus.Collector { return &shipCollector{s: s} }

type shipCollector struct{ s *Shipper }

func (c *shipCollector) Describe(chan<- *prometheus.Desc) {} // unchecked collector

func (c *shipCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Status()
	lbl := prometheus.Labels{"workspace": c.s.opts.Name}
	g := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, nil, lbl), prometheus.GaugeValue, v)
	}
	cnt := func(name, help string, v int64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, nil, lbl), prometheus.CounterValue, float64(v))
	}
	g("wsfs_ship_lag_seconds", "How long the oldest durable group not yet shipped has waited (0: all shipped).", st.LagSeconds)
	g("wsfs_ship_last_lag_seconds", "Lag of the last shipped group, from durable to named by the remote head.", st.LastLagSeconds)
	g("wsfs_ship_lag_p50_seconds", "Median lag over the last 4096 shipped groups.", st.LagP50)
	g("wsfs_ship_lag_p99_seconds", "99th percentile lag over the last 4096 shipped groups.", st.LagP99)
	g("wsfs_ship_shipped_group", "The last group the remote head names.", float64(st.Shipped))
	g("wsfs_ship_local_group", "The last durable group read from the local log.", float64(st.Local))
	g("wsfs_ship_consecutive_failures", "Failed rounds in a row (0: the last round worked).", float64(st.ConsecutiveFails))
	cnt("wsfs_ship_bytes_total", "Bytes uploaded (objects, log batches, checkpoints, heads, snapshot entries).", st.BytesUploaded)
	cnt("wsfs_ship_objects_uploaded_total", "Pool objects uploaded.", st.ObjectsUploaded)
	cnt("wsfs_ship_objects_present_total", "Pool objects found already in the bucket (not uploaded).", st.ObjectsPresent)
	cnt("wsfs_ship_checkpoints_total", "Checkpoints shipped.", st.Checkpoints)
	cnt("wsfs_ship_snapshots_total", "Snapshot entries shipped.", st.SnapshotsShipped)
	cnt("wsfs_ship_snapshots_removed_total", "Snapshot entries removed from the bucket.", st.SnapshotsRemoved)
	cnt("wsfs_ship_rounds_total", "Shipping rounds run.", st.Rounds)
	cnt("wsfs_ship_retries_total", "Rounds run after a failed round.", st.Retries)
	d := prometheus.NewDesc("wsfs_ship_errors_total", "Failed shipping rounds, by kind of error.", []string{"kind"}, lbl)
	for kind, n := range st.Errors {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), kind)
	}
}

// RemoteDown reports whether err means the remote could not answer for
// now (unreachable, throttled, or a 5xx answer), as opposed to one that
// answered no (a missing bucket, refused credentials, another host's
// lease) or a local failure.
func RemoteDown(err error) bool {
	switch ErrorKind(err) {
	case ErrKindUnreachable, ErrKindThrottled:
		return true
	case ErrKindServer:
		var re interface{ HTTPStatusCode() int }
		return errors.As(err, &re) && re.HTTPStatusCode() >= 500
	}
	return false
}
