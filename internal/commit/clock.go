package commit

import "time"

// Clock is the committer's source of time, injected so that tests can close
// groups by moving time instead of sleeping (the shape of tailscale's
// tstime.Clock).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on the returned channel
	// once d has elapsed (at once if d <= 0), like time.NewTimer.
	NewTimer(d time.Duration) (Timer, <-chan time.Time)
}

// Timer is a timer made by Clock.NewTimer.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it was still
	// armed, like (*time.Timer).Stop.
	Stop() bool
}

// SystemClock is the Clock of package time; it is the default.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a *time.Timer and its channel.
func (SystemClock) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := time.NewTimer(d)
	return t, t.C
}
