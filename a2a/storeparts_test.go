package a2a

import (
	"context"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
)

// A task read while its answer streams (tasks/get, the start of a resubscription)
// has the answer artifact's streamed text as one text part, not a part per token:
// the SDKs join an artifact's text parts with a newline (the Python SDK's
// get_artifact_text), so a client polling a non-blocking message's task with them
// read "echo: \nsleep4 \ndisconnect " mid-answer, and the artifact grew by a part
// per token. Parts of other kinds, and text parts with metadata, stay as they are.
func TestTaskStoreJoinsAStreamedAnswersTextParts(t *testing.T) {
	ctx := context.Background()
	store := NewTaskStore(&silentBackend{})
	task := &sdk.Task{ID: "s~t", ContextID: "s", Status: sdk.TaskStatus{State: sdk.TaskStateWorking},
		Artifacts: []*sdk.Artifact{{ID: "answer", Name: "answer", Parts: sdk.ContentParts{
			sdk.TextPart{Text: "echo: "}, sdk.TextPart{Text: "sleep4 "}, sdk.TextPart{Text: "disconnect "},
			sdk.DataPart{Data: map[string]any{"a": 1.0}},
			sdk.TextPart{Text: "x", Metadata: map[string]any{"k": "v"}}, sdk.TextPart{Text: "y"}, sdk.TextPart{Text: "z"},
		}}}}
	if err := store.Save(ctx, task); err != nil {
		t.Fatal(err)
	}
	got, err := store.Get(ctx, "s~t")
	if err != nil {
		t.Fatal(err)
	}
	parts := got.Artifacts[0].Parts
	var texts []string
	for _, p := range parts {
		if tp, ok := p.(sdk.TextPart); ok {
			texts = append(texts, tp.Text)
		} else {
			texts = append(texts, "<other>")
		}
	}
	want := []string{"echo: sleep4 disconnect ", "<other>", "x", "yz"}
	if len(texts) != len(want) {
		t.Fatalf("parts %q, want %q", texts, want)
	}
	for i := range want {
		if texts[i] != want[i] {
			t.Fatalf("parts %q, want %q", texts, want)
		}
	}
	// The saved task itself is unchanged (the SDK appends to it).
	if n := len(task.Artifacts[0].Parts); n != 7 {
		t.Errorf("the saved task has %d parts, want its 7", n)
	}
}
