package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/react"
	"github.com/troupe-run/troupe/messages"
)

// Wrapped in the ReAct text protocol, the offline model reads the tools from the
// prompt and the results from the observations: an action, then the answer.
func TestOfflineSpeaksTheReActProtocol(t *testing.T) {
	calc := messages.ToolSpec{Name: "calculator", Description: "Evaluates arithmetic.", Parameters: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}}}`)}
	m := react.Wrap(llm.Offline{}, react.Options{})
	req := llm.Request{Messages: []messages.ChatMessage{{Role: messages.RoleSystem, Content: "You compute."},
		{Role: messages.RoleUser, Content: "What is 12 * (7 + 5)?"}}, Tools: []messages.ToolSpec{calc}, Step: 1}
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Message.ToolCalls) != 1 || resp.Message.ToolCalls[0].Name != "calculator" {
		t.Fatalf("first reply %+v, want a calculator call", resp.Message)
	}
	call := resp.Message.ToolCalls[0]
	req.Messages = append(req.Messages, resp.Message, messages.ChatMessage{Role: messages.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: "144"})
	req.Step = 2
	if resp, err = m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(resp.Message.ToolCalls) != 0 || !strings.Contains(resp.Message.Content, "144") {
		t.Fatalf("second reply %+v, want the answer 144", resp.Message)
	}
}

// A context's closing briefing (gathered evidence or memories after the
// conversation) is nobody's turn: the offline model still answers the task and
// reads the tools' results before it.
func TestOfflineReadsTheTaskBeforeTheBriefing(t *testing.T) {
	calc := messages.ToolSpec{Name: "calculator", Description: "Evaluates arithmetic.", Parameters: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}}}`)}
	briefing := messages.ChatMessage{Role: messages.RoleUser, Content: "<evidence>\n[guide.md > Maths]\nTwelve twelves are a gross.\n</evidence>"}
	req := llm.Request{Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "What is 12 * (7 + 5)?"}, briefing},
		Tools: []messages.ToolSpec{calc}, Step: 1}
	resp, err := llm.Offline{}.Generate(context.Background(), req)
	if err != nil || len(resp.Message.ToolCalls) != 1 || resp.Message.ToolCalls[0].Name != "calculator" {
		t.Fatalf("first reply %+v %v, want a calculator call", resp.Message, err)
	}
	call := resp.Message.ToolCalls[0]
	req.Messages = []messages.ChatMessage{req.Messages[0], resp.Message, {Role: messages.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: "144"}, briefing}
	req.Step = 2
	if resp, err = (llm.Offline{}).Generate(context.Background(), req); err != nil || len(resp.Message.ToolCalls) != 0 || !strings.Contains(resp.Message.Content, "144") {
		t.Fatalf("second reply %+v %v, want the answer 144", resp.Message, err)
	}
}
