package node_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/redact"
)

// namedModel answers every call with its name, and keeps the requests it was sent.
// While hold is open, a call waits for it to close (or for its context).
type namedModel struct {
	name string
	hold chan struct{}
	mu   sync.Mutex
	reqs []llm.Request
}

func (m *namedModel) Name() string { return m.name }

func (m *namedModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, r)
	m.mu.Unlock()
	if m.hold != nil {
		select {
		case <-m.hold:
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "answered by " + m.name}}, nil
}

func (m *namedModel) requests() []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reqs)
}

// tasksEnded reads session's events once n tasks of it ended.
func tasksEnded(t *testing.T, n *node.Node, session string, tasks int) []messages.Envelope {
	t.Helper()
	var events []messages.Envelope
	waitFor(t, 10*time.Second, "the session's tasks to end", func() bool {
		events = readAll(t, n.Log(), session)
		ended := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				ended++
			}
		}
		return ended >= tasks
	})
	return events
}

// A node stopped while a task's model call is in flight, restarted with another
// system prompt and another default model: the call is made again as its
// model.requested recorded it, to the recorded model with the recorded prompt
// (its hash), not built from the new configuration, and the task ends under the
// configuration it began with. A task submitted after the restart runs under the
// new configuration. Under decision rules 6 the call went to the new model with
// the new prompt while the log named the old model and the old prompt's hash.
func TestACallInFlightIsReissuedUnderTheRecordedConfiguration(t *testing.T) {
	dir := t.TempDir()
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	first := &namedModel{name: "model-a", hold: held}
	_, stop1 := startWithTask(t, node.Config{Model: first, SystemPrompt: "You are the first configuration.", DataDir: dir, HandoffGrace: heldCallGrace}, node.Task{Input: "hello", SessionID: "s"})
	waitFor(t, 10*time.Second, "the model call", func() bool { return len(first.requests()) == 1 })
	stop1() // closed with the call unanswered

	// The new configuration: model-b by default, model-a still served to an agent.
	again, second := &namedModel{name: "model-a"}, &namedModel{name: "model-b"}
	n2 := nodetest.Start(t, node.Config{Model: second, SystemPrompt: "You are the second configuration.", DataDir: dir,
		Agents: []node.NamedAgent{{Name: "legacy", Model: again}}})
	events := tasksEnded(t, n2, "s", 1)
	requested := payloads[*messages.ModelRequested](t, events)
	if len(requested) != 1 || requested[0].Model != "model-a" {
		t.Fatalf("model requests %+v; want the one recorded on the first node", requested)
	}
	reissued := again.requests()
	if len(reissued) != 1 || len(second.requests()) != 0 {
		t.Fatalf("the call in flight went to model-a %d times and to model-b %d times; want model-a once", len(reissued), len(second.requests()))
	}
	r := reissued[0]
	if r.Key != requested[0].Key || llm.PromptHash(r) != requested[0].PromptHash || !slices.Equal(r.Models, []string{"model-a"}) ||
		!strings.HasPrefix(r.Messages[0].Content, "You are the first configuration.") {
		t.Fatalf("the call re-issued: key %s, models %v, prompt hash %s, system %q, tools %d; recorded key %s, model-a, hash %s, tools %v",
			r.Key, r.Models, llm.PromptHash(r), r.Messages[0].Content, len(r.Tools), requested[0].Key, requested[0].PromptHash, requested[0].Tools)
	}
	completed := payloads[*messages.TaskCompleted](t, events)
	if len(completed) != 1 || completed[0].Output != "answered by model-a" {
		t.Fatalf("the task's end: %+v", completed)
	}

	// A new task runs under the new configuration, recorded with it.
	if _, err := n2.Submit(context.Background(), node.Task{Input: "and now?", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	events = tasksEnded(t, n2, "s", 2)
	// Each configuration in its stream, none with the tasks.
	tasks := payloads[*messages.TaskSubmitted](t, events)
	if len(tasks) != 2 || tasks[0].Config != nil || tasks[1].Config != nil || tasks[0].ConfigDigest == tasks[1].ConfigDigest {
		t.Fatalf("the tasks recorded %+v", tasks)
	}
	configs, err := actors.LoadConfigs(context.Background(), n2.Log(), actors.NamedConfigs(events))
	if err != nil {
		t.Fatal(err)
	}
	if c0, c1 := configs[tasks[0].ConfigDigest], configs[tasks[1].ConfigDigest]; c0 == nil || c0.SystemPrompt != "You are the first configuration." ||
		c1 == nil || c1.SystemPrompt != "You are the second configuration." || c1.Model != "model-b" {
		t.Fatalf("the configurations' streams hold %+v", configs)
	}
	requested = payloads[*messages.ModelRequested](t, events)
	calls := second.requests()
	if len(requested) != 2 || requested[1].Model != "model-b" || len(calls) != 1 || llm.PromptHash(calls[0]) != requested[1].PromptHash ||
		calls[0].Models != nil || !strings.HasPrefix(calls[0].Messages[0].Content, "You are the second configuration.") {
		t.Fatalf("the new task's requests %+v, its calls to model-b %+v", requested, calls)
	}
	if len(again.requests()) != 1 {
		t.Fatalf("model-a was called %d times; want once", len(again.requests()))
	}
}

// A task whose system prompt holds one of the node's secrets records it redacted.
// The node is stopped while the task's model call is in flight and restarted with
// the prompt edited, the secret still in it: the call is made again with the
// secret in its place, as first sent (its recorded hash), never with
// "[REDACTED]", and verify with the new configuration reports the session
// deterministic. Restarted with a prompt that lost the secret, the task fails
// with model_error saying why, and its model is not called. Under rules 7 as
// first built the model was sent the recorded prompt, "[REDACTED]" in the secret's
// place, and verify with the new configuration diverged at the first model request.
func TestACallInFlightIsReissuedWithTheSecretsOfItsPrompt(t *testing.T) {
	const secret = "tok-Zq81mPx0-deploy-7731"
	first := "You are the deploy bot. Log in with " + secret + " when asked."
	for _, c := range []struct {
		name, prompt string
		keeps        bool
	}{
		{"kept", "You are the CHANGED deploy bot, terse. Log in with " + secret + " when asked.", true},
		{"lost", "You are the deploy bot. Log in with the vault's token when asked.", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			held := make(chan struct{})
			t.Cleanup(func() { close(held) })
			m1 := &namedModel{name: "model-a", hold: held}
			_, stop1 := startWithTask(t, node.Config{Model: m1, SystemPrompt: first, DataDir: dir, Secrets: []string{secret}, HandoffGrace: heldCallGrace}, node.Task{Input: "deploy", SessionID: "s"})
			waitFor(t, 10*time.Second, "the model call", func() bool { return len(m1.requests()) == 1 })
			stop1()

			m2 := &namedModel{name: "model-a"}
			cfg := node.Config{Model: m2, SystemPrompt: c.prompt, DataDir: dir, Secrets: []string{secret}}
			n2 := nodetest.Start(t, cfg)
			events := tasksEnded(t, n2, "s", 1)
			for _, e := range events {
				if strings.Contains(string(e.Payload), secret) {
					t.Fatalf("event %d holds the secret: %s", e.Seq, e.Payload)
				}
			}
			calls := m2.requests()
			for _, r := range calls {
				if strings.Contains(r.Messages[0].Content, redact.Redacted) {
					t.Fatalf("the model was sent %q", r.Messages[0].Content)
				}
			}
			if !c.keeps {
				failed := payloads[*messages.TaskFailed](t, events)
				if len(calls) != 0 || len(failed) != 1 || failed[0].Reason != messages.ReasonModelError || !strings.Contains(failed[0].Error, "secret") {
					t.Fatalf("the model was called %d times; the task's end %+v", len(calls), failed)
				}
			} else {
				requested := payloads[*messages.ModelRequested](t, events)
				if len(calls) != 1 || len(requested) != 1 || calls[0].Messages[0].Content != first || llm.PromptHash(calls[0]) != requested[0].PromptHash {
					t.Fatalf("the calls re-issued %+v; recorded %+v; failed %+v", calls, requested, payloads[*messages.TaskFailed](t, events)[0])
				}
			}
			if !c.keeps {
				return
			}
			all, err := cfg.AllAgents()
			if err != nil {
				t.Fatal(err)
			}
			configs, err := actors.LoadConfigs(context.Background(), n2.Log(), actors.NamedConfigs(events))
			if err != nil {
				t.Fatal(err)
			}
			if div, err := actors.VerifyRecorded(all, events, 1, configs); err != nil || div != nil {
				t.Fatalf("verify with the new configuration: %v %v", div, err)
			}
		})
	}
}
