package memory_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

func TestCheckNamespace(t *testing.T) {
	for _, ok := range []string{"user:alice", "agent:planner", "team-7.a_b@x"} {
		if err := memory.CheckNamespace(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "user alice", "a/b", "ns\x00", "é", strings.Repeat("a", 129)} {
		if err := memory.CheckNamespace(bad); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestParseTierAndModalityAndImportance(t *testing.T) {
	for _, tier := range memory.Tiers {
		if got, err := memory.ParseTier(string(tier)); err != nil || got != tier {
			t.Errorf("ParseTier(%s) = %v, %v", tier, got, err)
		}
	}
	if _, err := memory.ParseTier("longterm"); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("unknown tier: %v", err)
	}
	if m, err := memory.ParseModality(""); err != nil || m != memory.Text {
		t.Errorf("empty modality: %v %v", m, err)
	}
	if _, err := memory.ParseModality("video"); !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("unknown modality: %v", err)
	}
	for _, bad := range []float64{-0.01, 1.01, math.NaN(), math.Inf(1)} {
		if err := memory.CheckImportance(bad); !errors.Is(err, memory.ErrInvalid) {
			t.Errorf("importance %v: %v", bad, err)
		}
	}
	if err := memory.CheckImportance(0); err != nil {
		t.Error(err)
	}
	if !memory.IsStream(memory.Stream("user:alice")) || memory.IsStream("s-1") {
		t.Error("IsStream")
	}
}
