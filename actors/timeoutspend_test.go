package actors_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// billedModel waits for its context to end, then fails saying what the provider
// billed for the prompt it sent, as a model's client does when its call times out
// after its request went out; deadline says whether that end was a deadline's.
type billedModel struct{ deadline chan bool }

func (billedModel) Name() string { return "billed" }
func (m billedModel) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	<-ctx.Done()
	m.deadline <- errors.Is(context.Cause(ctx), context.DeadlineExceeded)
	return llm.Response{Usage: messages.Usage{PromptTokens: 7}}, ctx.Err()
}

// A model call that ends at its timeout answers with what it says it spent: the
// timeout's cause is a deadline's (context.DeadlineExceeded, as a client counting
// a timed-out request's prompt tells it), and the call has a grace to answer
// itself before the timeout answers for it (with nothing spent).
func TestModelTimeoutKeepsWhatTheCallSpent(t *testing.T) {
	m := billedModel{deadline: make(chan bool, 1)}
	r := newReplies()
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: m, ModelTimeout: 150 * time.Millisecond})
	t.Cleanup(func() { _ = e.Close() })
	req := modelRequest("s", 1)
	e.Perform(req, r.to)
	waitUntil(t, "the timed-out call answered", func() bool { return len(r.of(req.Key)) == 1 })
	got := r.of(req.Key)[0]
	if !strings.Contains(got.Error, actors.ErrModelTimeout.Error()+" after 150ms") {
		t.Fatalf("error %q, want the model timeout", got.Error)
	}
	if got.Usage.PromptTokens != 7 {
		t.Fatalf("usage %+v, want the 7 prompt tokens the call says it spent", got.Usage)
	}
	if !<-m.deadline {
		t.Fatal("the call's context ended with a cause that is not context.DeadlineExceeded")
	}
}

// lateModel answers well once its context has ended: a reply that came after the
// call's timeout (within the grace its performer gives it to say what it spent).
type lateModel struct{}

func (lateModel) Name() string { return "late" }
func (lateModel) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	<-ctx.Done()
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "too late"},
		Usage: messages.Usage{PromptTokens: 7, CompletionTokens: 2}}, nil
}

// A model call that answers well after its timeout cut it, within the grace, is
// still the timeout's failure, with what it spent: the grace lets a call say what
// it spent, not answer after its deadline (the answer was recorded as the call's).
func TestModelTimeoutGraceKeepsNoLateAnswer(t *testing.T) {
	r := newReplies()
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: lateModel{}, ModelTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = e.Close() })
	req := modelRequest("s", 1)
	e.Perform(req, r.to)
	waitUntil(t, "the timed-out call answered", func() bool { return len(r.of(req.Key)) == 1 })
	got := r.of(req.Key)[0]
	if !strings.Contains(got.Error, actors.ErrModelTimeout.Error()) || got.Message != nil {
		t.Fatalf("reply %+v, want the model timeout and no answer", got)
	}
	if got.Usage.PromptTokens != 7 || got.Usage.CompletionTokens != 2 {
		t.Fatalf("usage %+v, want the 7+2 tokens the call says it spent", got.Usage)
	}
}
