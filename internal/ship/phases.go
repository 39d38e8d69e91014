package ship

import (
	"maps"
	"time"
)

// Where a step's time goes (issue 9's lag target): every step adds the
// time it spent in each phase to Stats.Phases, and the lag of every
// shipped group is split in two — from the moment the shipper saw it
// durable until its objects (and those of every group before it) were
// all in the bucket, and from then until the head naming it was written
// (the steps' checkpoint, batch and head PUTs) — kept for the group with
// the largest lag (Stats.WorstLag). Measurement only: nothing depends on
// these figures.

// Phase names in Stats.Phases.
const (
	PhaseRead       = "read"       // list, read and fdatasync the log
	PhaseLease      = "lease"      // renew the lease (AcquireLease)
	PhaseWait       = "wait"       // a Round waiting for its objects (Run's steps never wait)
	PhaseCheckpoint = "checkpoint" // PUT of a checkpoint
	PhaseBatches    = "batches"    // PUT of the log batches
	PhaseHead       = "head"       // PUT of the head
	PhaseSnapshots  = "snapshots"  // shipping the snapshot catalog
)

// PhaseTime is the time spent in one phase, over all steps.
type PhaseTime struct {
	Count        int64   `json:"count"`
	TotalSeconds float64 `json:"total_seconds"`
	MaxSeconds   float64 `json:"max_seconds"`
}

// LagSplit is the lag of one shipped group, split: ObjectsSeconds from
// the moment the shipper saw it durable to the moment every object of
// it and of the groups before it was in the bucket, StepSeconds from
// then to the head naming it.
type LagSplit struct {
	Group          uint64  `json:"group"`
	Seconds        float64 `json:"seconds"`
	ObjectsSeconds float64 `json:"objects_seconds"`
	StepSeconds    float64 `json:"step_seconds"`
}

// phase adds d to phase name's time. Safe for concurrent use.
func (s *Shipper) phase(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stats.Phases == nil {
		s.stats.Phases = map[string]PhaseTime{}
	}
	p := s.stats.Phases[name]
	p.Count++
	p.TotalSeconds += d.Seconds()
	p.MaxSeconds = max(p.MaxSeconds, d.Seconds())
	s.stats.Phases[name] = p
}

// timed runs f and adds its time to phase name.
func (s *Shipper) timed(name string, f func() error) error {
	t0 := time.Now()
	err := f()
	s.phase(name, time.Since(t0))
	return err
}

// clonePhases is for Stats' copy.
func clonePhases(p map[string]PhaseTime) map[string]PhaseTime { return maps.Clone(p) }
