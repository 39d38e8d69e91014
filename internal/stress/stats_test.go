package stress

import "testing"

func TestPercentile(t *testing.T) {
	samples := []int64{15, 20, 35, 40, 50} // the nearest-rank example
	for _, c := range []struct {
		p    float64
		want int64
	}{{5, 15}, {30, 20}, {40, 20}, {50, 35}, {100, 50}, {0, 15}} {
		if got := Percentile(samples, c.p); got != c.want {
			t.Errorf("Percentile(%v, %v) = %d, want %d", samples, c.p, got, c.want)
		}
	}
	shuffled := []int64{50, 15, 40, 20, 35}
	if got := Percentile(shuffled, 50); got != 35 {
		t.Errorf("unsorted input: p50 = %d, want 35", got)
	}
	if shuffled[0] != 50 {
		t.Error("Percentile modified its input")
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("no samples: %d, want 0", got)
	}
	var hundred []int64
	for i := int64(1); i <= 100; i++ {
		hundred = append(hundred, i)
	}
	for _, p := range []float64{50, 95, 99} {
		if got := Percentile(hundred, p); got != int64(p) {
			t.Errorf("1..100: p%v = %d, want %d", p, got, int64(p))
		}
	}
}

func TestSummarizeLatency(t *testing.T) {
	var s []int64
	for i := int64(1); i <= 100; i++ {
		s = append(s, i*1_000_000) // 1..100 ms
	}
	got := SummarizeLatency(s)
	want := LatencySummary{Count: 100, P50: 50, P95: 95, P99: 99, Max: 100}
	if got != want {
		t.Fatalf("SummarizeLatency = %+v, want %+v", got, want)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
