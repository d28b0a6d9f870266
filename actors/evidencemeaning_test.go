package actors_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
)

// An agent's evidence whose search notes that no word of the task is in the
// knowledge base, its hits ranked by meaning alone (a semantic embedder), tells
// the model so under rules 17, read from the recorded result; under rules 16 the
// prompt is the one of the same hits without the note, byte for byte.
func TestEvidenceFoundByMeaningAloneSaysSo(t *testing.T) {
	noWord := "no word of the query is in the knowledge base (common words do not count): the hits are ranked by meaning alone, and their scores rank them against each other, not how well any matches the query"
	const said = "found by meaning alone"
	prompt := func(rules int, notes []string) string {
		t.Helper()
		agent := actors.Agent{Model: "m", SystemPrompt: "You answer questions.", MaxSteps: 3,
			Tools:       []messages.ToolSpec{{Name: "rag", Description: "Searches the knowledge bases.", Parameters: []byte(`{"type":"object"}`)}},
			LoopRepeats: actors.LoopOff, LoopStaleSteps: actors.LoopOff,
			Context: actors.ContextOptions{Evidence: 3}, Sources: actors.ContextSources{KnowledgeTool: "rag", KnowledgeBase: "docs"}}
		st := actors.NewSessionState("s")
		var seq uint64
		apply := func(p messages.Payload, cause string) {
			t.Helper()
			seq++
			e := env(t, p, "s", seq, "task-1")
			e.CausationID = cause
			if err := st.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
		apply(&messages.TaskSubmitted{Input: "Which licence covers zygomorphic quokkas?", Rules: rules}, "")
		d := st.Decide(agent, seq+1, 0)
		call, ok := d.Payload.(*messages.ToolCallRequested)
		if !ok || call.Purpose != actors.PurposeEvidence {
			t.Fatalf("decided %T %+v, want the evidence search", d.Payload, d.Payload)
		}
		apply(call, d.CausationID)
		result, _ := json.Marshal(knowledge.SearchResult{Hits: guideHits[:3], Notes: notes})
		apply(&messages.ToolCallCompleted{Key: call.Key, CallID: call.CallID, Tool: call.Tool, Result: string(result)}, call.Key)
		d = st.Decide(agent, seq+1, 0)
		if _, ok := d.Payload.(*messages.ModelRequested); !ok {
			t.Fatalf("decided %T after the evidence, want the model call", d.Payload)
		}
		apply(d.Payload, d.CausationID)
		msgs := st.Request(agent).Messages
		b, _ := json.Marshal(msgs)
		return string(b)
	}
	if got := prompt(actors.ContextRules, []string{noWord}); strings.Count(got, said) != 3 || !strings.Contains(got, "[faq.md] ("+said) {
		t.Errorf("under rules %d the passages found by meaning alone do not say so, each after its label:\n%s", actors.ContextRules, got)
	}
	if got := prompt(actors.ContextRules, nil); strings.Contains(got, said) {
		t.Errorf("passages that matched words of the task say they were found by meaning alone:\n%s", got)
	}
	if with, without := prompt(16, []string{noWord}), prompt(16, nil); with != without {
		t.Errorf("under rules 16 the note changed the prompt:\n%s\nwant\n%s", with, without)
	}
}
