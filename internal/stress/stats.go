package stress

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of samples by the
// nearest-rank method: the smallest sample such that at least p % of all
// samples are less than or equal to it. It returns 0 for no samples. samples
// need not be sorted; they are not modified.
func Percentile(samples []int64, p float64) int64 {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []int64, p float64) int64 {
	if len(s) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// LatencySummary holds the percentiles of one operation kind, in milliseconds.
type LatencySummary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// SummarizeLatency computes the percentiles of latency samples given in nanoseconds.
func SummarizeLatency(samples []int64) LatencySummary {
	if len(samples) == 0 {
		return LatencySummary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return LatencySummary{
		Count: len(s),
		P50:   ms(percentileSorted(s, 50)),
		P95:   ms(percentileSorted(s, 95)),
		P99:   ms(percentileSorted(s, 99)),
		Max:   ms(s[len(s)-1]),
	}
}

func ms(ns int64) float64 { return float64(ns) / float64(time.Millisecond) }

// Median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
