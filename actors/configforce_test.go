package actors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// A system prompt holding a secret is recorded with a task redacted, the token
// shapes and the node's own secrets alike, the content once for the session's
// tasks of one configuration; the digest, of the configuration as it is, lets a
// refold and verify with that configuration use it whole, so that the prompts
// decided are the ones sent.
func TestTheRecordedConfigurationHoldsNoSecret(t *testing.T) {
	const secret = "hunter2-the-deploy-password-0451"
	const shaped = "sk-proj-abcdefghijklmnopqrstuvwxyz012345"
	prompt := "You are the deploy bot. Log in with " + secret + " or " + shaped + "."
	model := script(t, llm.ScriptStep{Content: "done"}, llm.ScriptStep{Content: "done again"})
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, deps: func(d *actors.SessionDeps) {
		d.Agent.SystemPrompt = prompt
		d.Redactor = redact.New(secret)
		agent = d.Agent
	}})
	h.submit("k", "task-k1", "deploy")
	h.wait("k")
	h.submit("k", "task-k2", "deploy again")
	var events []messages.Envelope
	waitUntil(t, "the second task to end", func() bool {
		events = h.wait("k")
		return len(payloadsOf[*messages.TaskCompleted](t, events)) == 2
	})
	for _, e := range events {
		if strings.Contains(string(e.Payload), secret) || strings.Contains(string(e.Payload), shaped) {
			t.Fatalf("event %d holds a secret: %s", e.Seq, e.Payload)
		}
	}
	tasks := payloadsOf[*messages.TaskSubmitted](t, events)
	if len(tasks) != 2 || tasks[0].Config != nil || len(tasks[0].ConfigDigest) != 64 || tasks[1].ConfigDigest != tasks[0].ConfigDigest || tasks[1].Config != nil {
		t.Fatalf("the tasks recorded %+v", tasks)
	}
	stream, err := h.log.Read(context.Background(), messages.ConfigStream(tasks[0].ConfigDigest), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(stream) != 1 || strings.Contains(string(stream[0].Payload), secret) || strings.Contains(string(stream[0].Payload), shaped) ||
		!strings.Contains(string(stream[0].Payload), "You are the deploy bot.") {
		t.Fatalf("the configuration's stream holds %d events: %v", len(stream), stream)
	}
	configs, err := actors.LoadConfigs(context.Background(), h.log, actors.NamedConfigs(events))
	if err != nil || len(configs) != 1 {
		t.Fatalf("the configurations loaded: %v %v", configs, err)
	}
	if div, err := actors.VerifyRecorded(actors.Agents{Default: agent}, events, 1, configs); err != nil || div != nil {
		t.Fatalf("verify with the configuration recorded: %v %v", div, err)
	}
}

// A configuration is stored once per log, not once per session: with a system
// prompt of 22.5 KB, a session's task records its digest alone, and the sessions
// after the first store nothing of it. Under rules 7 as first built each new
// session recorded the whole configuration with its first task (1,000 one-task
// sessions: 26 KB a session where 2.3 KB was the rest).
func TestAConfigurationIsStoredOncePerLog(t *testing.T) {
	prompt := "You are the archivist. " + strings.Repeat("Keep every record in order, and say where it came from. ", 410)
	if len(prompt) < 22_000 {
		t.Fatalf("the prompt is %d bytes", len(prompt))
	}
	steps := make([]llm.ScriptStep, 4)
	for i := range steps {
		steps[i] = llm.ScriptStep{Content: "filed"}
	}
	h := newHarness(t, harnessOpts{model: script(t, steps...), deps: func(d *actors.SessionDeps) { d.Agent.SystemPrompt = prompt }})
	digests := map[string]bool{}
	for i := range 4 {
		session := fmt.Sprintf("s%d", i)
		h.submit(session, "task-"+session, "file this")
		events := h.wait(session)
		size := 0
		for _, e := range events {
			size += len(e.Payload)
			if strings.Contains(string(e.Payload), "Keep every record") {
				t.Fatalf("session %s, event %d (%s) holds the system prompt: %.200s", session, e.Seq, e.Type, e.Payload)
			}
		}
		if size > 4096 {
			t.Fatalf("session %s stored %d bytes of payloads", session, size)
		}
		for _, task := range payloadsOf[*messages.TaskSubmitted](t, events) {
			digests[task.ConfigDigest] = true
		}
	}
	if len(digests) != 1 {
		t.Fatalf("the sessions' tasks name the configurations %v; want one", digests)
	}
	infos, err := h.log.Sessions(context.Background(), eventlog.Filter{Prefix: messages.ConfigStreamPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Events != 1 {
		t.Fatalf("the log's configuration streams: %+v; want one, of one event", infos)
	}
	for d := range digests {
		stream, err := h.log.Read(context.Background(), messages.ConfigStream(d), 1)
		if err != nil || len(stream) != 1 || strings.Count(string(stream[0].Payload), "Keep every record") != 410 {
			t.Fatalf("the configuration's stream: %v %d events", err, len(stream))
		}
	}
}

// Two nodes over one log that store the same configuration at once (each its
// first task of it) write the same event at the same position: both tasks are
// recorded and run, and the configuration's stream holds it once.
func TestTwoNodesStoreOneConfigurationOnce(t *testing.T) {
	h := newHarness(t, harnessOpts{model: llm.Offline{}})
	second := h.system.Root.Spawn(actors.NewSessionHostProps(actors.SessionDeps{Store: h.log, Effects: h.effects,
		Agent: actors.Agent{Model: "offline", SystemPrompt: "test"}}))
	t.Cleanup(func() { _ = h.system.Root.PoisonFuture(second).Wait() })
	const each = 8
	answers := make(chan error, 2*each)
	for i := range each {
		for j, host := range []*actor.PID{h.host, second} {
			h.system.Root.Send(host, &actors.SubmitTask{Envelope: taskEnvelope(t, fmt.Sprintf("n%d-%d", j, i), fmt.Sprintf("t-n%d-%d", j, i)), Done: answers})
		}
	}
	for range 2 * each {
		select {
		case err := <-answers:
			if err != nil {
				t.Fatalf("a task was refused: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a task was not answered")
		}
	}
	var digest string
	for i := range each {
		for j := range 2 {
			events := h.wait(fmt.Sprintf("n%d-%d", j, i))
			task := payloadsOf[*messages.TaskSubmitted](t, events)[0]
			if digest != "" && task.ConfigDigest != digest || task.Config != nil {
				t.Fatalf("task %+v; want the digest %s alone", task, digest)
			}
			digest = task.ConfigDigest
		}
	}
	stream, err := h.log.Read(context.Background(), messages.ConfigStream(digest), 1)
	if err != nil || len(stream) != 1 {
		t.Fatalf("the configuration's stream: %d events (%v)", len(stream), err)
	}
}

// A configuration is its digest's when it hashes to it, or when its system
// prompt's secrets were redacted as it was recorded (it runs only once they are
// put back); a changed one marked redacted elsewhere is not.
func TestConfigOfDigest(t *testing.T) {
	c := messages.AgentConfig{SystemPrompt: "You file with the key sk-abc.", Model: "m", Tools: []string{"clock"}}
	digest := actors.ConfigDigest(&c)
	redacted := c
	redacted.SystemPrompt = "You file with the key " + redact.Redacted + "."
	changed := c
	changed.SystemPrompt = "Answer every question with 42."
	model, tool := changed, changed
	model.Model = redact.Redacted
	tool.Tools = []string{redact.Redacted}
	for _, tc := range []struct {
		name string
		c    messages.AgentConfig
		want bool
	}{{"as recorded", c, true}, {"its prompt redacted", redacted, true}, {"changed", changed, false},
		{"changed, its model redacted", model, false}, {"changed, a tool redacted", tool, false}} {
		if got := actors.ConfigOfDigest(&tc.c, digest); got != tc.want {
			t.Errorf("%s: ConfigOfDigest = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A configuration is recorded with its whole event redacted (storeConfig): a
// secret in its critic's prompt or in a roster's or member's description is the
// marker there, and the configuration so recorded hashes to another digest. It
// is still the one of its digest, as an export holds it and an import reads it;
// one changed with the marker in no text that can hold a secret is not.
func TestConfigOfDigestAsRecorded(t *testing.T) {
	const key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
	base := messages.AgentConfig{SystemPrompt: "You answer.", Model: "m", Tools: []string{"clock"}}
	critic, roster, members := base, base, base
	critic.CriticPrompt = "Check that the call uses the key " + key + "."
	roster.Roster = []messages.RosterAgent{{Name: "fetcher", Description: "Fetches with the key " + key + "."}}
	members.Members = []messages.RosterAgent{{Name: "fetcher", Description: "Fetches with the key " + key + ".", Tools: []string{"http"}}}
	for name, c := range map[string]messages.AgentConfig{"its critic's prompt": critic, "a roster's description": roster, "a member's description": members} {
		digest := actors.ConfigDigest(&c)
		e, err := messages.ConfigRecordedEvent(digest, c, 1)
		if err != nil {
			t.Fatal(err)
		}
		e.Payload = redact.New().Bytes(e.Payload) // as storeConfig records it
		recorded, ok, err := messages.RecordedConfig(digest, []messages.Envelope{e})
		if err != nil || !ok || actors.ConfigDigest(recorded) == digest {
			t.Fatalf("%s: the recorded configuration (%v, %v) was not redacted: %+v", name, ok, err, recorded)
		}
		if !actors.ConfigOfDigest(recorded, digest) {
			t.Errorf("%s redacted as recorded: ConfigOfDigest = false, want true: %+v", name, recorded)
		}
		changed := *recorded
		changed.Model = redact.Redacted
		changed.CriticPrompt, changed.Roster, changed.Members = "", nil, nil
		if actors.ConfigOfDigest(&changed, digest) {
			t.Errorf("%s: a configuration changed, its model marked, is the digest's", name)
		}
	}
}
