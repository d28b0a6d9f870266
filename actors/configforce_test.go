package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
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
	if len(tasks) != 2 || tasks[0].Config == nil || !strings.Contains(tasks[0].Config.SystemPrompt, "You are the deploy bot.") ||
		len(tasks[0].ConfigDigest) != 64 || tasks[1].ConfigDigest != tasks[0].ConfigDigest || tasks[1].Config != nil {
		t.Fatalf("the tasks recorded %+v", tasks)
	}
	if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify with the configuration recorded: %v %v", div, err)
	}
}
