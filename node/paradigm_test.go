package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A reflection whose critique never passes completes with its latest draft, and its
// result (RunTask, GET /v1/sessions/{id}) carries the note that says so.
func TestReflectionResultSaysTheCritiqueNeverPassed(t *testing.T) {
	revise := `{"verdict": "revise", "issues": [{"issue": "too vague"}]}`
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{Content: "draft 1"}, {Content: revise}, {Content: "draft 2"}, {Content: revise},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: model, Agents: []node.NamedAgent{{Name: "critic", Paradigm: node.ParadigmReflection}}})
	res, err := n.RunTask(context.Background(), node.Task{Input: "Describe it.", SessionID: "r", Agent: "critic"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "completed" || res.Output != "draft 2" || !strings.Contains(res.Note, "did not pass in 2 rounds") || !strings.Contains(res.Note, "1. too vague") {
		t.Fatalf("result: %+v", res)
	}
	st, ok, err := n.Status(context.Background(), "r")
	if err != nil || !ok || st.Note != res.Note {
		t.Fatalf("status: %+v %v %v", st, ok, err)
	}
}

// A reflection's critic on a model of its own: the node's gateway routes the
// critiques there, and the loop's steps to the node's model.
func TestReflectionCriticModelIsRouted(t *testing.T) {
	main, err := llm.NewScripted(llm.Script{Name: "main", Steps: []llm.ScriptStep{{Content: "draft"}, {Content: `{"verdict": "revise", "issues": [{"issue": "the node's model must not judge"}]}`}}})
	if err != nil {
		t.Fatal(err)
	}
	judge, err := llm.NewScripted(llm.Script{Name: "judge", Steps: []llm.ScriptStep{{Content: "unused"}, {Content: `{"verdict": "pass"}`}}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: main, Agents: []node.NamedAgent{{Name: "critic", Paradigm: node.ParadigmReflection, CriticModel: judge}}})
	var models []string
	res, err := n.RunTaskEach(context.Background(), node.Task{Input: "Describe it.", SessionID: "j", Agent: "critic"}, func(e messages.Envelope) {
		if e.Type == messages.TypeModelResponded {
			if p, err := e.Decode(); err == nil {
				models = append(models, p.(*messages.ModelResponded).Model)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "completed" || res.Output != "draft" || !strings.Contains(res.Note, "passed") {
		t.Fatalf("result: %+v", res)
	}
	if strings.Join(models, ",") != "main,judge" {
		t.Fatalf("models that answered: %v", models)
	}
}
