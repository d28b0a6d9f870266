package actors_test

import (
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// A model call for a session that has somewhere to send deltas streams them, stamped
// with the call's key and step and numbered from 1, before its reply, which carries
// the whole answer; a call for another session does not stream.
func TestLocalEffectsStreamModelDeltas(t *testing.T) {
	s, err := llm.NewScripted(llm.Script{Name: "s", Steps: []llm.ScriptStep{{Content: "one two three"}}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []messages.ModelDelta
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{
		Model: gateway.Chain(s.WithStreaming(4), gateway.Streaming()),
		ModelDeltas: func(req messages.EffectRequest) (func(messages.ModelDelta), func()) {
			if req.SessionID != "watched" {
				return nil, nil
			}
			return func(d messages.ModelDelta) {
				mu.Lock()
				got = append(got, d)
				mu.Unlock()
			}, nil
		},
	})
	defer e.Close()
	for _, sid := range []string{"watched", "unwatched"} {
		key := messages.EffectKey{SessionID: sid, Seq: 3}
		done := make(chan messages.EffectReply, 1)
		e.Perform(messages.EffectRequest{SessionID: sid, Key: key, Model: &messages.ModelCall{Step: 1}}, func(r messages.EffectReply) { done <- r })
		select {
		case r := <-done:
			if r.Error != "" || r.Message.Content != "one two three" {
				t.Fatalf("%s: reply %+v", sid, r)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no reply", sid)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"one ", "two ", "thre", "e"}
	if len(got) != len(want) {
		t.Fatalf("deltas %+v, want %q", got, want)
	}
	for i, d := range got {
		if d.Content != want[i] || d.Seq != uint64(i+1) || d.Key != "watched/3" || d.Step != 1 || d.Attempt != 1 || d.Reset {
			t.Fatalf("delta %d: %+v", i, d)
		}
	}
}
