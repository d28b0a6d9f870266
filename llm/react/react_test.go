package react_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/react"
	"github.com/troupe-run/troupe/messages"
)

var tools = []messages.ToolSpec{
	{Name: "calculator", Description: "Evaluates arithmetic.", Parameters: []byte(`{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"]}`)},
	{Name: "search", Description: "Searches.", Parameters: []byte(`{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer"}}}`)},
}

func TestParseWellFormedAndSloppyReplies(t *testing.T) {
	cases := map[string]struct{ tool, args, answer string }{
		"Thought: I should compute.\nAction: calculator[12 * (7 + 5)]":                    {tool: "calculator", args: `{"expression":"12 * (7 + 5)"}`},
		"  thought:   compute \n\n  action :  calculator [ 2+2 ]  ":                       {tool: "calculator", args: `{"expression":"2+2"}`},
		"Thought: x\nAction: calculator[{\"expression\": \"3*3\"}]":                       {tool: "calculator", args: `{"expression":"3*3"}`},
		"```\nThought: x\nAction: search[query=go actors, limit=3]\n```":                  {tool: "search", args: `{"limit":"3","query":"go actors"}`},
		"Thought: x\nAction: `calculator`\nAction Input: {\"expression\": \"1+1\"}\nmore": {tool: "calculator", args: `{"expression":"1+1"}`},
		"Thought: x\nAction: Calculator[(1+2)*[3]]":                                       {tool: "calculator", args: `{"expression":"(1+2)*[3]"}`},
		"Thought: done\nFinish[144]":                                                      {answer: "144"},
		"Thought: done\nfinish [ The answer is\nmulti-line ]":                             {answer: "The answer is\nmulti-line"},
		"Final Answer: 42": {answer: "42"},
		"Thought: I know it.\nFinish[12]\nAction: calculator[1+1] (ignored: Finish came first)": {answer: "12"},
	}
	for reply, want := range cases {
		msg, err := react.Parse(reply, tools, 3)
		if err != nil {
			t.Errorf("%q: %v", reply, err)
			continue
		}
		if want.answer != "" {
			if msg.Content != want.answer || len(msg.ToolCalls) != 0 {
				t.Errorf("%q: got %+v, want answer %q", reply, msg, want.answer)
			}
			continue
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Name != want.tool || msg.ToolCalls[0].Arguments != want.args || msg.ToolCalls[0].ID != "react_3" {
			t.Errorf("%q: got %+v, want %s %s", reply, msg.ToolCalls, want.tool, want.args)
		}
	}
}

func TestParseGarbage(t *testing.T) {
	for _, reply := range []string{"", "I think the weather is nice.", "Action: teleport[home]", "Action: calculator", "Action: calculator[{\"expression\": }]"} {
		if _, err := react.Parse(reply, tools, 1); err == nil {
			t.Errorf("%q parsed", reply)
		}
	}
}

type textModel struct {
	replies []string
	seen    [][]messages.ChatMessage
}

func (m *textModel) Name() string { return "text" }
func (m *textModel) Capabilities() llm.Capabilities {
	return llm.Capabilities{NativeTools: false}
}
func (m *textModel) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	if len(req.Tools) != 0 {
		return llm.Response{}, errors.New("a text model got native tools")
	}
	m.seen = append(m.seen, req.Messages)
	r := m.replies[0]
	m.replies = m.replies[1:]
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: r}, Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 2}}, nil
}

func TestWrapRetriesGarbageWithAReadableError(t *testing.T) {
	inner := &textModel{replies: []string{"hmm, let me think", "Thought: ok\nAction: calculator[2+2]"}}
	m := react.Wrap(inner, react.Options{})
	req := llm.Request{Step: 1, Tools: tools, Messages: []messages.ChatMessage{{Role: messages.RoleSystem, Content: "sys"}, {Role: messages.RoleUser, Content: "2+2?"}}}
	r, err := m.Generate(context.Background(), req)
	if err != nil || len(r.Message.ToolCalls) != 1 || r.Usage.PromptTokens != 20 {
		t.Fatalf("%+v %v", r, err)
	}
	retry := inner.seen[1]
	if last := retry[len(retry)-1]; last.Role != messages.RoleUser || !strings.Contains(last.Content, "could not be parsed") {
		t.Fatalf("the parse error must go back to the model: %+v", last)
	}
	if !strings.Contains(inner.seen[0][0].Content, "calculator: Evaluates arithmetic.") || !strings.HasPrefix(inner.seen[0][0].Content, "sys") {
		t.Fatalf("tools must be rendered into the system prompt: %s", inner.seen[0][0].Content)
	}
	if !m.Capabilities().NativeTools {
		t.Fatal("the wrapper offers native tools")
	}

	bad := react.Wrap(&textModel{replies: []string{"no", "still no", "never"}}, react.Options{MaxRetries: 2})
	if _, err := bad.Generate(context.Background(), req); !errors.Is(err, react.ErrUnparseable) || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("garbage: %v", err)
	}
}

func TestRenderTurnsToolTurnsIntoText(t *testing.T) {
	msgs := []messages.ChatMessage{
		{Role: messages.RoleUser, Content: "2+2?"},
		{Role: messages.RoleAssistant, Content: "compute", ToolCalls: []messages.ToolCall{{ID: "react_1", Name: "calculator", Arguments: `{"expression":"2+2"}`}}},
		{Role: messages.RoleTool, ToolCallID: "react_1", Name: "calculator", Content: "4"},
	}
	out := react.Render(msgs, tools)
	if out[0].Role != messages.RoleSystem || out[2].Content != "Thought: compute\nAction: calculator[{\"expression\":\"2+2\"}]" || out[3].Content != "Observation: 4" || out[3].Role != messages.RoleUser {
		t.Fatalf("%+v", out)
	}
}

// key=value inputs keep quoted commas and escapes; an input whose "keys" are not
// the tool's parameters (a URL's scheme, a "Note:" prefix) is the value of its one
// required parameter instead.
func TestParseKeyValueArguments(t *testing.T) {
	specs := append([]messages.ToolSpec{
		{Name: "http_fetch", Parameters: []byte(`{"type":"object","properties":{"url":{"type":"string"},"method":{"type":"string"}},"required":["url"]}`)},
	}, tools...)
	for input, want := range map[string]string{
		`search[query="go, actors", limit=3]`:                    `{"limit":"3","query":"go, actors"}`,
		`search[query='it\'s "quoted"']`:                         `{"query":"it's \"quoted\""}`,
		`search[query="line\nbreak"]`:                            `{"query":"line\nbreak"}`,
		`http_fetch[https://example.com/a?b=c]`:                  `{"url":"https://example.com/a?b=c"}`,
		`http_fetch[url=https://example.com/a?b=c, method=HEAD]`: `{"method":"HEAD","url":"https://example.com/a?b=c"}`,
		`calculator[note: 2+2]`:                                  `{"expression":"note: 2+2"}`,
	} {
		msg, err := react.Parse("Thought: t\nAction: "+input, specs, 1)
		if err != nil || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Arguments != want {
			t.Errorf("%s: %+v, %v; want %s", input, msg.ToolCalls, err, want)
		}
	}
}

// nativeModel calls tools natively; it records whether it was offered them.
type nativeModel struct{ gotTools []int }

func (m *nativeModel) Name() string { return "native" }
func (m *nativeModel) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.gotTools = append(m.gotTools, len(req.Tools))
	if len(req.Tools) != 0 {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"2+2"}`}}}}, nil
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "Thought: ok\nAction: calculator[2+2]"}}, nil
}

// With OnRequest, a model with native tools gets them natively, unless the request
// asks for the text protocol (an agent of the react paradigm).
func TestWrapOnRequestSpeaksTheProtocolWhenAsked(t *testing.T) {
	inner := &nativeModel{}
	m := react.Wrap(inner, react.Options{OnRequest: true})
	req := llm.Request{Step: 1, Tools: tools, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "2+2?"}}}
	for _, protocol := range []string{"", llm.ProtocolReAct} {
		req.Protocol = protocol
		r, err := m.Generate(context.Background(), req)
		if err != nil || len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0].Name != "calculator" {
			t.Fatalf("protocol %q: %+v %v", protocol, r, err)
		}
	}
	if len(inner.gotTools) != 2 || inner.gotTools[0] != len(tools) || inner.gotTools[1] != 0 {
		t.Fatalf("tools offered natively per call = %v, want [%d 0]: native without a protocol, text with react", inner.gotTools, len(tools))
	}
}
