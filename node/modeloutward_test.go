package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// idempotencyKeys are the Idempotency-Key headers of srv's chat requests, in order.
func idempotencyKeys(srv *openaitest.Server) []string {
	var keys []string
	for _, r := range srv.Requests() {
		if r.Is("/chat/completions") {
			keys = append(keys, r.Header.Get("Idempotency-Key"))
		}
	}
	return keys
}

// Two deployments (two event logs) whose sessions have the same name call one
// provider at the same seq under two Idempotency-Keys: a provider that dedupes by
// the header does not answer the second with the first one's completion.
func TestModelCallsOfTwoLogsWithOneSessionNameHaveTwoIdempotencyKeys(t *testing.T) {
	ok := messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Completion(ok, messages.Usage{PromptTokens: 1, CompletionTokens: 1})
	})
	for _, ask := range []string{"alice: my account number is 123", "bob: what is my account number?"} {
		n := nodetest.Start(t, node.Config{Model: providerModel(t, srv, "m")})
		nodetest.Run(t, n, "support", ask)
	}
	keys := idempotencyKeys(srv)
	if len(keys) != 2 || keys[0] == "" || keys[0] == keys[1] {
		t.Fatalf("the two logs' calls were sent with the Idempotency-Keys %q: want two", keys)
	}
}

// A node that stops while its model call is out, and resumes the session from its
// log, issues the call again under the same Idempotency-Key.
func TestModelCallResumedAfterARestartKeepsItsIdempotencyKey(t *testing.T) {
	ok := messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok"}
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Hold: true},
		openaitest.Completion(ok, messages.Usage{PromptTokens: 1, CompletionTokens: 1})))
	dir := t.TempDir()
	a, stop := nodetest.StartWithStop(t, node.Config{DataDir: dir, Model: providerModel(t, srv, "m")})
	if _, err := a.Submit(context.Background(), node.Task{Input: "hi", SessionID: "support"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the model call sent", func() bool { return len(idempotencyKeys(srv)) > 0 })
	stop()

	again := nodetest.Start(t, node.Config{DataDir: dir, Model: providerModel(t, srv, "m")})
	waitFor(t, 60*time.Second, "the resumed task completed", func() bool {
		events, err := again.Log().Read(context.Background(), "support", 1)
		return err == nil && len(events) > 0 && events[len(events)-1].Type == messages.TypeTaskCompleted
	})
	keys := idempotencyKeys(srv)
	if len(keys) < 2 || keys[0] == "" {
		t.Fatalf("the calls were sent with the Idempotency-Keys %q", keys)
	}
	for _, k := range keys[1:] {
		if k != keys[0] {
			t.Fatalf("the call was sent with the Idempotency-Key %q, then resumed with %q: want one", keys[0], k)
		}
	}
}
