package actors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// doOutput runs r.Do for key with a perform that answers output; it reports whether
// perform ran (the answer was not kept).
func doOutput(t *testing.T, r *actors.EffectResults, key, output string) bool {
	t.Helper()
	performed := false
	rep, err := r.Do(context.Background(), key, func(context.Context) (messages.EffectReply, error) {
		performed = true
		return messages.EffectReply{Key: key, Output: output}, nil
	})
	if err != nil || rep.Output != output {
		t.Fatalf("Do(%s): %+v %v", key, rep, err)
	}
	return performed
}

// The answers EffectResults keeps are bounded by their size as well as their number,
// the oldest going first: a node does not hold every tool output and model reply of
// the last TTL, however large.
func TestEffectResultsKeepAtMostMaxBytes(t *testing.T) {
	r := actors.NewEffectResults(time.Hour, 1000, 1<<20, nil)
	big := strings.Repeat("x", 64<<10)
	for i := range 100 {
		doOutput(t, r, fmt.Sprintf("k%d", i), big)
	}
	if n := r.Len(); n > 16 || n < 8 {
		t.Fatalf("keeps %d answers of 64 KiB, want 8 to 16 within 1 MiB", n)
	}
	if doOutput(t, r, "k99", big) {
		t.Fatal("the newest answer was not kept")
	}
	if !doOutput(t, r, "k0", big) {
		t.Fatal("the oldest answer was kept past the byte bound")
	}
}

func TestEffectResultsKeepAtMostMaxAnswers(t *testing.T) {
	r := actors.NewEffectResults(time.Hour, 100, 1<<30, nil)
	for i := range 1000 {
		doOutput(t, r, fmt.Sprintf("k%d", i), "out")
	}
	if n := r.Len(); n > 100 {
		t.Fatalf("keeps %d answers, want at most 100", n)
	}
	for i := 900; i < 1000; i++ {
		if doOutput(t, r, fmt.Sprintf("k%d", i), "out") {
			t.Fatalf("k%d, one of the 100 newest answers, was not kept", i)
		}
	}
}

// Answers older than the TTL go when no call comes, too: an idle node does not keep
// what it answered before it went idle.
func TestEffectResultsExpireWithoutCalls(t *testing.T) {
	r := actors.NewEffectResults(time.Minute, 1000, 1<<20, nil)
	for i := range 10 {
		doOutput(t, r, fmt.Sprintf("k%d", i), "out")
	}
	r.Expire(time.Now().Add(30 * time.Second))
	if n := r.Len(); n != 10 {
		t.Fatalf("after 30 s: %d answers kept, want 10", n)
	}
	r.Expire(time.Now().Add(2 * time.Minute))
	if n := r.Len(); n != 0 {
		t.Fatalf("after 2 minutes: %d answers kept, want 0", n)
	}
}
