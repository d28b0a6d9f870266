package actors_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// hugeErrorModel fails every call with an error of 5 MiB, as a provider's error
// body read whole would.
type hugeErrorModel struct{}

func (hugeErrorModel) Name() string { return "huge-error" }

func (hugeErrorModel) Generate(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{}, errors.New("provider said: " + strings.Repeat("é", 5<<19)) // 5 MiB
}

// A model call's error reaches the session's reply as its head and a note, at
// most actors.MaxModelError bytes and valid UTF-8: the reply is recorded in the
// session's events and read by a team's re-dispatch, a parent's delegate result
// and the task's result, none of which should carry 5 MiB a provider wrote.
func TestLocalEffectsBoundAModelsError(t *testing.T) {
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: hugeErrorModel{}})
	defer e.Close()
	key := messages.EffectKey{SessionID: "s", Seq: 3}
	done := make(chan messages.EffectReply, 1)
	e.Perform(messages.EffectRequest{SessionID: "s", Key: key, Model: &messages.ModelCall{Step: 1}}, func(r messages.EffectReply) { done <- r })
	select {
	case r := <-done:
		if len(r.Error) > actors.MaxModelError || !utf8.ValidString(r.Error) || !strings.HasPrefix(r.Error, "provider said: éé") {
			t.Fatalf("error of %d bytes (valid UTF-8: %v), bound %d: %.40q", len(r.Error), utf8.ValidString(r.Error), actors.MaxModelError, r.Error)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply")
	}
}
