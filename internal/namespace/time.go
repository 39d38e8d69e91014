package namespace

import (
	"fmt"
	"time"
)

// Timestamp is a file time as the kernel passes it (struct timespec): Sec
// is seconds since the Unix epoch, any int64, and Nsec the nanoseconds
// within it, 0 to 999,999,999. It holds every time utimensat(2) can set,
// including those that int64 nanoseconds cannot (before 1677-09-21 or
// after 2262-04-11), which the formats before the wide time encodings
// wrapped silently. The zero value is the epoch.
type Timestamp struct {
	Sec  int64
	Nsec uint32
}

// FromNs is the timestamp of unix nanoseconds ns (the wall clock).
func FromNs(ns int64) Timestamp {
	sec, nsec := ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return Timestamp{Sec: sec, Nsec: uint32(nsec)}
}

// Valid reports whether Nsec is within a second.
func (t Timestamp) Valid() bool { return t.Nsec < 1e9 }

// The int64 nanosecond range, in seconds: [-9223372037 s + 145224192 ns,
// 9223372036 s + 854775807 ns].
const (
	minNsSec, minNsNsec = -9223372037, 145224192
	maxNsSec, maxNsNsec = 9223372036, 854775807
)

// FitsNs reports whether t is a whole number of int64 unix nanoseconds:
// what the narrow (version 1) encodings can hold.
func (t Timestamp) FitsNs() bool {
	switch {
	case !t.Valid():
		return false
	case t.Sec > minNsSec && t.Sec < maxNsSec:
		return true
	case t.Sec == minNsSec:
		return t.Nsec >= minNsNsec
	case t.Sec == maxNsSec:
		return t.Nsec <= maxNsNsec
	}
	return false
}

// Ns returns t in unix nanoseconds; only meaningful if t.FitsNs().
func (t Timestamp) Ns() int64 { return t.Sec*1e9 + int64(t.Nsec) }

// Time returns t as a time.Time (which holds every Timestamp).
func (t Timestamp) Time() time.Time { return time.Unix(t.Sec, int64(t.Nsec)) }

func (t Timestamp) String() string {
	if !t.Valid() {
		return fmt.Sprintf("invalid(%d s %d ns)", t.Sec, t.Nsec)
	}
	return t.Time().UTC().Format(time.RFC3339Nano)
}

// Before reports whether t is earlier than u.
func (t Timestamp) Before(u Timestamp) bool {
	return t.Sec < u.Sec || t.Sec == u.Sec && t.Nsec < u.Nsec
}
