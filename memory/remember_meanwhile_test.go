package memory_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// rewriting is a model that, while it decides a fact, lets another writer rewrite
// the memory it was shown (the user, over HTTP or through the tool), then answers
// UPDATE of that memory with a text made from what it was shown.
type rewriting struct {
	ns      atomic.Pointer[memory.Namespace]
	target  string
	rewrite string
}

func (m *rewriting) Name() string { return "rewriting" }

func (m *rewriting) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	answer := `{"facts": ["User lives in Paris, in the 11th arrondissement"]}`
	if strings.Contains(req.Key, "/decide/") {
		if _, err := m.ns.Load().Update(ctx, "user-edit", m.target, memory.UpdateRequest{Content: &m.rewrite}); err != nil {
			return llm.Response{}, err
		}
		answer = `{"event": "UPDATE", "id": "0", "text": "User lives in Paris (11th arrondissement)", "reason": "more precise"}`
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: answer}}, nil
}

// A memory the write after a task decided to UPDATE, rewritten by its user while
// the model decided, keeps the user's text: the model's text was made from what the
// memory said before, and the update would throw the rewrite away.
func TestRememberDoesNotOverwriteAMemoryRewrittenMeanwhile(t *testing.T) {
	model := &rewriting{rewrite: "User moved from Paris to Lyon in May"}
	f := newWriteFixture(t, model)
	ns := f.ns(t, "user:alice")
	model.ns.Store(ns)
	res, err := ns.Add(wctx(t), "k0", []memory.AddRequest{{Tier: memory.Semantic, Content: "User lives in Paris"}})
	if err != nil {
		t.Fatal(err)
	}
	model.target = res[0].ID
	ds := remember(t, ns, "k1", userTurn("I live in Paris, in the 11th."))
	m, ok := ns.Get(model.target)
	if !ok || m.Content != model.rewrite {
		t.Errorf("the user's rewrite %q was overwritten: %q (%v), decisions %+v", model.rewrite, m.Content, ok, ds)
	}
}
