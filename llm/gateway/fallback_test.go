package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

func failWith(name string, err error) *fakeModel {
	return &fakeModel{name: name, fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, err }}
}

func answering(name, content string) *fakeModel {
	return &fakeModel{name: name, fn: func(int, llm.Request) (llm.Response, error) { return answer(content), nil }}
}

func TestFallbackFallsOverInOrderOnAnyError(t *testing.T) {
	for name, fail := range map[string]error{
		"transient":     &llm.APIError{StatusCode: 503},
		"not transient": &llm.APIError{StatusCode: 401, Message: "bad key"},
	} {
		t.Run(name, func(t *testing.T) {
			first, second, third := failWith("first", fail), answering("second", "from second"), answering("third", "unused")
			m := gateway.Fallback(nil, second, third)(first)
			r, err := m.Generate(context.Background(), ask("q"))
			if err != nil || r.Message.Content != "from second" || r.Model != "second" {
				t.Fatalf("%+v %v", r, err)
			}
			if first.calls.Load() != 1 || second.calls.Load() != 1 || third.calls.Load() != 0 {
				t.Fatalf("calls %d %d %d: each model once, in order, until one answers", first.calls.Load(), second.calls.Load(), third.calls.Load())
			}
			if m.Name() != "first" {
				t.Fatalf("name %q", m.Name())
			}
		})
	}
}

func TestFallbackAnswerOfThePrimaryNamesNoOtherModel(t *testing.T) {
	primary := answering("primary", "ok")
	r, err := gateway.Fallback(nil, answering("backup", "unused"))(primary).Generate(context.Background(), ask("q"))
	if err != nil || r.Model != "" {
		t.Fatalf("%+v %v", r, err)
	}
	// A backup of the same name as the primary (the same model at another endpoint) is
	// not named either.
	r, err = gateway.Fallback(nil, answering("primary", "ok"))(failWith("primary", errors.New("down"))).Generate(context.Background(), ask("q"))
	if err != nil || r.Model != "" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestFallbackEveryModelFailingIsOneErrorNamingEach(t *testing.T) {
	first := failWith("first", &llm.APIError{StatusCode: 500, Message: "boom"})
	second := failWith("second", &llm.APIError{StatusCode: 401, Message: "bad key"})
	_, err := gateway.Fallback(slog.New(slog.DiscardHandler), second)(first).Generate(context.Background(), ask("q"))
	if !errors.Is(err, gateway.ErrAllFailed) || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "bad key") {
		t.Fatalf("%v", err)
	}
	// Without backups, the model is not wrapped: its error is its own.
	only := failWith("only", &llm.APIError{StatusCode: 500})
	if m := gateway.Fallback(nil)(only); m != llm.Model(only) {
		t.Fatal("a fallback without backups must be the model itself")
	}
}

func TestFallbackStopsWhenTheContextIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := &fakeModel{name: "first", fn: func(int, llm.Request) (llm.Response, error) {
		cancel()
		return llm.Response{}, &llm.APIError{StatusCode: 503}
	}}
	second := answering("second", "too late")
	_, err := gateway.Fallback(nil, second)(first).Generate(ctx, ask("q"))
	if !errors.Is(err, context.Canceled) || errors.Is(err, gateway.ErrAllFailed) || second.calls.Load() != 0 {
		t.Fatalf("err %v, second called %d times", err, second.calls.Load())
	}
}
