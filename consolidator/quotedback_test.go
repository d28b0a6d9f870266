package consolidator_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// A fact distilled from memories whose text writes a tag of the prompt's elements
// is stored as the memories said it, "<" and all: the model copies the text as it
// was quoted ("&lt;/memory>"), and the quoting is the prompt's, not the memory's.
// Before, the stored fact kept "&lt;", which the next prompt quoting it showed as
// the text "&lt;" rather than the "<" that was remembered.
func TestRunStoresADistilledFactWithoutThePromptsQuoting(t *testing.T) {
	mems := episodes()
	for i := range mems[:3] {
		mems[i].Content = "Alice ends her notes with </memory> and ＜/ｍｅｍｏｒｉｅｓ＞."
	}
	f := newFake(mems...)
	answer := `{"fact": "Alice ends her notes with &lt;/memory> and &lt;/ｍｅｍｏｒｉｅｓ＞; 1 &lt; 2 &lt;b>.", "importance": 0.6}`
	rep, err := newConsolidator(t, scripted(t, answer), only(consolidator.Policy{ClusterThreshold: 0.8})).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Distilled != 1 {
		t.Fatalf("nothing distilled:\n%s", rep)
	}
	got, _ := f.get("m_new1")
	if want := "Alice ends her notes with </memory> and </ｍｅｍｏｒｉｅｓ＞; 1 &lt; 2 &lt;b>."; got.Content != want {
		t.Errorf("stored fact %q, want %q", got.Content, want)
	}
}

// A memory whose text names another memory's ID (a note quoting it) does not get
// every judgement of it refused: an answer that repeats an ID the question showed
// in its memories' text names what it read, and is applied, the answer touching
// only the question's memories. Before, such an answer was refused at every run,
// one model call each, the question never settled.
func TestRunAppliesAnAnswerRepeatingAnIDItsMemoriesQuote(t *testing.T) {
	const (
		olderID = "m_0a0a0a0a0a0a0a0a"
		newerID = "m_0b0b0b0b0b0b0b0b"
		otherID = "m_0e0e0e0e0e0e0e0e"
	)
	older := withVector(mem(olderID, memory.Semantic, 0.5, 10*day), 1, 0, 0, 0)
	newer := withVector(mem(newerID, memory.Semantic, 0.5, 5*day), 0.8, 0.6, 0, 0)
	other := withVector(mem(otherID, memory.Semantic, 0.5, 20*day), 0, 0, 0, 1)
	older.Content = "Alice's favourite colour is blue."
	newer.Content = "Alice's favourite colour is green (she said so, see " + otherID + ")."
	other.Content = "Alice said her favourite colour changed."
	f := newFake(older, newer, other)
	answer := judgeAnswer(t, "one favourite colour; the newer cites "+otherID, nil)
	rep, err := newConsolidator(t, scripted(t, answer), only(consolidator.Policy{ConflictThreshold: 0.75})).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := f.get(olderID); m.InvalidAt == nil || rep.Invalidated != 1 || len(rep.Skipped) != 0 {
		t.Errorf("the judgement was not applied:\n%s", rep)
	}
	if m, _ := f.get(otherID); m.InvalidAt != nil {
		t.Errorf("%s, only quoted, was invalidated", otherID)
	}
}
