package objid

import (
	"bytes"
	"strings"
	"testing"
)

func TestID(t *testing.T) {
	// BLAKE3-256 of the empty input, from the BLAKE3 test vectors.
	const emptyHash = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
	if got := Sum(nil).String(); got != emptyHash {
		t.Fatalf("Sum(nil) = %s, want %s", got, emptyHash)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 12_500)
	h := NewHasher()
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 7919)
		h.Write(rest[:n])
		rest = rest[n:]
	}
	if h.Sum() != Sum(data) {
		t.Fatal("streaming Hasher and Sum disagree")
	}

	valid := Sum([]byte("x")).String()
	tests := []struct {
		in      string
		wantErr bool
	}{
		{valid, false},
		{emptyHash, false},
		{strings.ToUpper(valid), true},
		{valid[:63], true},
		{valid + "0", true},
		{"", true},
		{strings.Repeat("g", 64), true},
	}
	for _, tt := range tests {
		id, err := Parse(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("Parse(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && id.String() != tt.in {
			t.Errorf("Parse(%q).String() = %q", tt.in, id.String())
		}
	}
}
