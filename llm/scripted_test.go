package llm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// The scripted model streams its content in pieces (never splitting a character)
// once WithStreaming sets their size, and nothing without.
func TestScriptedStreamsInChunks(t *testing.T) {
	s, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "héllo wörld", ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calc", Arguments: "{}"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var pieces []string
	on := func(d llm.Delta) error {
		pieces = append(pieces, d.Content+d.ToolName)
		return nil
	}
	if _, err := s.Stream(context.Background(), llm.Request{Step: 1}, on); err != nil || len(pieces) != 0 {
		t.Fatalf("without WithStreaming: %q %v", pieces, err)
	}
	resp, err := s.WithStreaming(2).Stream(context.Background(), llm.Request{Step: 1}, on)
	if err != nil || resp.Message.Content != "héllo wörld" {
		t.Fatal(resp, err)
	}
	want := []string{"hé", "ll", "o ", "wö", "rl", "d", "calc"}
	if strings.Join(pieces, "|") != strings.Join(want, "|") {
		t.Fatalf("pieces %q, want %q", pieces, want)
	}
}
