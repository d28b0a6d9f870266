package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

const testKey = "sk-test-7f3c9a1b2d4e6f80"

// deadline bounds every test: nothing here may hang.
func deadline(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newModel(t *testing.T, srv *openaitest.Server, edit ...func(*openai.Config)) *openai.Model {
	t.Helper()
	cfg := openai.Config{Provider: "fake", BaseURL: srv.URL, APIKey: testKey, Model: "fake-model", Timeout: 5 * time.Second}
	for _, e := range edit {
		e(&cfg)
	}
	m, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func conversation() []messages.ChatMessage {
	return []messages.ChatMessage{
		{Role: messages.RoleSystem, Content: "You are terse."},
		{Role: messages.RoleUser, Content: "What is 6*7 and the time?"},
		{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{
			{ID: "call_a", Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{ID: "call_b", Name: "clock", Arguments: `{}`},
		}},
		{Role: messages.RoleTool, Name: "calculator", ToolCallID: "call_a", Content: "42"},
		{Role: messages.RoleTool, Name: "clock", ToolCallID: "call_b", Content: "12:00"},
	}
}

// jsonEqual compares a decoded JSON value with the JSON text want.
func jsonEqual(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Errorf("%s:\n got %s\nwant %s", what, g, want)
	}
}

func TestGeneratePlainCompletion(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(
		messages.ChatMessage{Content: "42, at noon."}, messages.Usage{PromptTokens: 30, CompletionTokens: 5})))
	m := newModel(t, srv)

	r, err := m.Generate(deadline(t), llm.Request{Step: 2, Messages: conversation()})
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "42, at noon."},
		Usage: messages.Usage{PromptTokens: 30, CompletionTokens: 5}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v, want %+v", r, want)
	}
	if m.Name() != "fake-model" || m.Provider() != "fake" {
		t.Fatalf("name %q provider %q", m.Name(), m.Provider())
	}

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want exactly 1", len(reqs))
	}
	req := reqs[0]
	if req.Method != http.MethodPost || req.Path != "/v1/chat/completions" {
		t.Fatalf("%s %s", req.Method, req.Path)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer "+testKey {
		t.Fatalf("authorization header %q", got)
	}
	body := req.JSON(t)
	if body["model"] != "fake-model" {
		t.Fatalf("model %v", body["model"])
	}
	for _, absent := range []string{"stream", "tools", "parallel_tool_calls", "response_format", "temperature"} {
		if _, ok := body[absent]; ok {
			t.Errorf("%s sent but not asked for", absent)
		}
	}
	jsonEqual(t, "messages", body["messages"], `[
		{"role":"system","content":"You are terse."},
		{"role":"user","content":"What is 6*7 and the time?"},
		{"role":"assistant","tool_calls":[
			{"id":"call_a","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}},
			{"id":"call_b","type":"function","function":{"name":"clock","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"call_a","content":"42"},
		{"role":"tool","tool_call_id":"call_b","content":"12:00"}]`)
}

func TestToolDefinitionsAreSentAsFunctions(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(
		messages.ChatMessage{Content: "ok"}, messages.Usage{PromptTokens: 1, CompletionTokens: 1})))
	m := newModel(t, srv, func(c *openai.Config) { c.ParallelToolCalls = new(true) })
	tools := []messages.ToolSpec{
		{Name: "calculator", Description: "Evaluates arithmetic.", Parameters: json.RawMessage(
			`{"type":"object","properties":{"expression":{"type":"string","maxLength":12345678901234567890}},"required":["expression"]}`)},
		{Name: "clock", Description: "Tells the time."},
		{Name: "noop", Parameters: json.RawMessage(`null`)},
	}
	if _, err := m.Generate(deadline(t), llm.Request{Step: 1, Messages: conversation()[:2], Tools: tools}); err != nil {
		t.Fatal(err)
	}
	body := srv.Requests()[0].JSON(t)
	jsonEqual(t, "tools", body["tools"], `[
		{"type":"function","function":{"name":"calculator","description":"Evaluates arithmetic.",
			"parameters":{"type":"object","properties":{"expression":{"type":"string","maxLength":12345678901234567890}},"required":["expression"]}}},
		{"type":"function","function":{"name":"clock","description":"Tells the time.","parameters":{"type":"object","properties":{}}}},
		{"type":"function","function":{"name":"noop","parameters":{"type":"object","properties":{}}}}]`)
	if body["parallel_tool_calls"] != true {
		t.Fatalf("parallel_tool_calls = %v", body["parallel_tool_calls"])
	}
	// The big integer went through untouched (no float64 rounding).
	if !strings.Contains(string(srv.Requests()[0].Body), "12345678901234567890") {
		t.Fatal("schema number was rewritten")
	}
}

func TestParallelToolCallsInResponse(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(messages.ChatMessage{ToolCalls: []messages.ToolCall{
		{ID: "call_1", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{ID: "call_2", Name: "clock", Arguments: `{"timezone":"UTC"}`},
		{ID: "", Name: "echo", Arguments: `{"text":"hi"}`}, // a server that omits ids
	}}, messages.Usage{PromptTokens: 10, CompletionTokens: 20})))
	r, err := newModel(t, srv).Generate(deadline(t), llm.Request{Step: 3, Messages: conversation()[:2]})
	if err != nil {
		t.Fatal(err)
	}
	want := []messages.ToolCall{
		{ID: "call_1", Name: "calculator", Arguments: `{"expression":"6*7"}`},
		{ID: "call_2", Name: "clock", Arguments: `{"timezone":"UTC"}`},
		{ID: "call_3_3", Name: "echo", Arguments: `{"text":"hi"}`},
	}
	if r.Message.Role != messages.RoleAssistant || r.Message.Content != "" || !reflect.DeepEqual(r.Message.ToolCalls, want) {
		t.Fatalf("got %+v", r.Message)
	}
}

func TestUsageCountsCachedTokens(t *testing.T) {
	deepseek := `{"id":"x","object":"chat.completion","created":1,"model":"deepseek-chat",
		"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
		"usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}}`
	noUsage := `{"id":"x","object":"chat.completion","created":1,"model":"m",
		"choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}]}`
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Completion(messages.ChatMessage{Content: "hi"}, messages.Usage{PromptTokens: 2048, CompletionTokens: 9, CachedTokens: 1920}),
		openaitest.Reply{Body: deepseek},
		openaitest.Reply{Body: noUsage},
	))
	m := newModel(t, srv)
	req := llm.Request{Step: 1, Messages: conversation()[:2]}
	for i, want := range []messages.Usage{
		{PromptTokens: 2048, CompletionTokens: 9, CachedTokens: 1920},
		{PromptTokens: 100, CompletionTokens: 7, CachedTokens: 64},
		{}, // not reported: left for the gateway's tokenizer
	} {
		r, err := m.Generate(deadline(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if r.Usage != want {
			t.Errorf("reply %d: usage %+v, want %+v", i, r.Usage, want)
		}
	}
}

func TestResponseFormatAndExtras(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Completion(messages.ChatMessage{Content: `{"a":1}`}, messages.Usage{PromptTokens: 1, CompletionTokens: 1}),
		openaitest.Completion(messages.ChatMessage{Content: `{"answer":42}`}, messages.Usage{PromptTokens: 1, CompletionTokens: 1}),
	))
	temp, maxTok, seed := 0.2, 256, int64(7)
	m := newModel(t, srv, func(c *openai.Config) {
		c.ResponseFormat = openai.JSONMode()
		c.Temperature, c.MaxTokens, c.Seed, c.Stop = &temp, &maxTok, &seed, []string{"END"}
		c.ExtraHeaders = map[string]string{"X-Troupe-Tenant": "acme"}
		c.ExtraBody = map[string]json.RawMessage{"enable_thinking": json.RawMessage(`false`)}
	})
	req := llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "answer in JSON"}}}
	if _, err := m.Generate(deadline(t), req); err != nil {
		t.Fatal(err)
	}
	structured, err := m.WithResponseFormat(openai.JSONSchema("answer",
		json.RawMessage(`{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"],"additionalProperties":false}`)))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := structured.Generate(deadline(t), req); err != nil || r.Message.Content != `{"answer":42}` {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := m.WithResponseFormat(&openai.ResponseFormat{Type: openai.FormatJSONSchema}); err == nil {
		t.Fatal("a schema format without a name or schema must be rejected")
	}

	reqs := srv.Requests()
	first := reqs[0].JSON(t)
	jsonEqual(t, "json mode", first["response_format"], `{"type":"json_object"}`)
	if first["temperature"] != 0.2 || first["max_tokens"] != 256.0 || first["seed"] != 7.0 || first["enable_thinking"] != false {
		t.Fatalf("options not sent: %s", reqs[0].Body)
	}
	jsonEqual(t, "stop", first["stop"], `["END"]`)
	if reqs[0].Header.Get("X-Troupe-Tenant") != "acme" {
		t.Fatal("extra header not sent")
	}
	jsonEqual(t, "json schema", reqs[1].JSON(t)["response_format"], `{"type":"json_schema","json_schema":{"name":"answer","strict":true,
		"schema":{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"],"additionalProperties":false}}}`)
}

func TestInvalidRequestsAreNotSent(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence())
	m := newModel(t, srv)
	for name, req := range map[string]llm.Request{
		"empty":             {Step: 1},
		"tool without id":   {Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleTool, Content: "42"}}},
		"unknown role":      {Step: 1, Messages: []messages.ChatMessage{{Role: "narrator", Content: "x"}}},
		"call without id":   {Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{Name: "x"}}}}},
		"schema not JSON":   {Step: 1, Messages: conversation()[:2], Tools: []messages.ToolSpec{{Name: "x", Parameters: json.RawMessage(`{`)}}},
		"schema not object": {Step: 1, Messages: conversation()[:2], Tools: []messages.ToolSpec{{Name: "x", Parameters: json.RawMessage(`[1]`)}}},
	} {
		_, err := m.Generate(deadline(t), req)
		if !errors.Is(err, openai.ErrInvalidRequest) || errors.Is(err, llm.ErrTransient) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := len(srv.Requests()); n != 0 {
		t.Fatalf("%d invalid requests were sent", n)
	}
}

func TestConfigValidation(t *testing.T) {
	ok := openai.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "m"}
	for name, edit := range map[string]func(*openai.Config){
		"no base url":   func(c *openai.Config) { c.BaseURL = "" },
		"relative url":  func(c *openai.Config) { c.BaseURL = "/v1" },
		"ftp url":       func(c *openai.Config) { c.BaseURL = "ftp://example.com/v1" },
		"creds in url":  func(c *openai.Config) { c.BaseURL = "https://user:pw@example.com/v1" },
		"no model":      func(c *openai.Config) { c.Model = "" },
		"neg timeout":   func(c *openai.Config) { c.Timeout = -time.Second },
		"reserved body": func(c *openai.Config) { c.ExtraBody = map[string]json.RawMessage{"model": json.RawMessage(`"x"`)} },
		"bad format":    func(c *openai.Config) { c.ResponseFormat = &openai.ResponseFormat{Type: "yaml"} },
	} {
		c := ok
		edit(&c)
		if _, err := openai.New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	m, err := openai.New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if c := llm.CapabilitiesOf(m); !c.NativeTools || !c.Streaming || !c.JSONMode {
		t.Fatalf("capabilities %+v", c)
	}
	if m.Provider() != openai.DefaultProvider {
		t.Fatalf("provider %q", m.Provider())
	}
}

// The SDK's own environment defaults (OPENAI_BASE_URL, OPENAI_ORG_ID, ...) must not
// leak into a configured client: a DeepSeek key must never go to api.openai.com.
func TestEnvironmentIsIgnored(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-environment")
	t.Setenv("OPENAI_ORG_ID", "org-from-environment")
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Completion(
		messages.ChatMessage{Content: "ok"}, messages.Usage{PromptTokens: 1, CompletionTokens: 1})))
	if _, err := newModel(t, srv).Generate(deadline(t), llm.Request{Step: 1, Messages: conversation()[:2]}); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	if h.Get("Authorization") != "Bearer "+testKey || h.Get("OpenAI-Organization") != "" {
		t.Fatalf("environment leaked into the request: %v", h)
	}
}

// Cancelling a call's context closes its HTTP request: the provider sees the client
// go away (and stops spending tokens on an answer nobody reads).
func TestCancelClosesTheProviderRequest(t *testing.T) {
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Hold: true} })
	m := newModel(t, srv)
	ctx, cancel := context.WithCancel(deadline(t))
	errc := make(chan error, 1)
	go func() {
		_, err := m.Generate(ctx, llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}})
		errc <- err
	}()
	for len(srv.Requests()) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the request never reached the server")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	select {
	case <-srv.Disconnected():
	case <-time.After(time.Second):
		t.Fatal("the server did not see the request closed within a second of the cancel")
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Generate: %v, want context.Canceled", err)
	}
}
