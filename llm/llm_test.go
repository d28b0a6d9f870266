package llm_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

var specs = []messages.ToolSpec{{Name: "calculator"}, {Name: "clock"}}

func user(s string) []messages.ChatMessage {
	return []messages.ChatMessage{{Role: messages.RoleSystem, Content: "sys"}, {Role: messages.RoleUser, Content: s}}
}

func TestOfflinePlansArithmetic(t *testing.T) {
	cases := map[string]string{
		"What is 12 * (7 + 5)?":       `{"expression":"12 * (7 + 5)"}`,
		"compute sqrt(16) + 2":        `{"expression":"sqrt(16) + 2"}`,
		"what's 3 plus 4":             `{"expression":"3 + 4"}`,
		"Calculate 2^10, please.":     `{"expression":"2^10"}`,
		"How much is 1.5e3 / 3 - 1 ?": `{"expression":"1.5e3 / 3 - 1"}`,
	}
	for in, want := range cases {
		r, err := llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user(in), Tools: specs})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0].Name != "calculator" || r.Message.ToolCalls[0].Arguments != want {
			t.Errorf("%q: got %+v, want calculator %s", in, r.Message, want)
		}
	}
}

func TestOfflineAnswersFromToolResult(t *testing.T) {
	msgs := append(user("What is 12 * (7 + 5)?"),
		messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c", Name: "calculator", Arguments: "{}"}}},
		messages.ChatMessage{Role: messages.RoleTool, Name: "calculator", ToolCallID: "c", Content: "144"})
	r, err := llm.Offline{}.Generate(context.Background(), llm.Request{Step: 2, Messages: msgs, Tools: specs})
	if err != nil {
		t.Fatal(err)
	}
	if r.Message.Content != "144" || len(r.Message.ToolCalls) != 0 {
		t.Fatalf("got %+v", r.Message)
	}
}

func TestOfflineClockEchoAndFallback(t *testing.T) {
	r, _ := llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user("What time is it in Asia/Tokyo?"), Tools: specs})
	if len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0].Arguments != `{"timezone":"Asia/Tokyo"}` {
		t.Fatalf("clock: %+v", r.Message)
	}
	r, _ = llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user("echo Hello, World"), Tools: specs})
	if r.Message.Content != "Hello, World" {
		t.Fatalf("echo: %+v", r.Message)
	}
	r, _ = llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user("write me a poem"), Tools: specs})
	if len(r.Message.ToolCalls) != 0 || r.Message.Content == "" {
		t.Fatalf("fallback: %+v", r.Message)
	}
	if _, err := (llm.Offline{}).Generate(context.Background(), llm.Request{Step: 1}); err == nil {
		t.Fatal("no user message must be an error")
	}
}

func TestScripted(t *testing.T) {
	m, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "a", Name: "calculator", Arguments: `{"expression":"1+1"}`}}},
		{Content: "2"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Generate(context.Background(), llm.Request{Step: 2, Messages: user("x")})
	if err != nil || r.Message.Content != "2" {
		t.Fatalf("step 2: %+v %v", r, err)
	}
	if _, err := m.Generate(context.Background(), llm.Request{Step: 3}); !errors.Is(err, llm.ErrScriptExhausted) {
		t.Fatalf("step 3: %v", err)
	}
	if _, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{}}}); err == nil {
		t.Fatal("an empty step must be rejected")
	}
	if _, err := llm.LoadScript("testdata/missing.json"); err == nil {
		t.Fatal("missing file must be an error")
	}
}

func TestPromptHashIsStable(t *testing.T) {
	a := llm.Request{Messages: user("x"), Tools: specs}
	b := llm.Request{Messages: user("x"), Tools: specs}
	if llm.PromptHash(a) != llm.PromptHash(b) {
		t.Fatal("same request, different hash")
	}
	b.Messages = user("y")
	if llm.PromptHash(a) == llm.PromptHash(b) {
		t.Fatal("different request, same hash")
	}
}

// TestRequestWireRoundTrip fills every field of a Request (by reflection, so a field
// added later is filled too) and checks that its wire form carries it back.
func TestRequestWireRoundTrip(t *testing.T) {
	var r llm.Request
	fill(t, reflect.ValueOf(&r).Elem(), "r")
	back := llm.RequestOf(r.Key, r.Outward, r.Call())
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("a field of llm.Request does not survive its wire form (messages.ModelCall):\n got %+v\nwant %+v", back, r)
	}
}

// fill sets every field reachable from v to a non-zero value derived from path.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(len(path)))
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		v.SetUint(uint64(len(path)))
	case reflect.Float64:
		v.SetFloat(float64(len(path)) + 0.5)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(`{"p":"` + path + `"}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0), path+"[0]")
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), path)
		v.Set(p)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+".key")
		fill(t, e, path+".value")
		m.SetMapIndex(k, e)
		v.Set(m)
	default:
		t.Fatalf("fill: %s has kind %s; teach fill about it", path, v.Kind())
	}
}

// TestPromptHashIsTheSHA256OfTheEncodings pins what PromptHash hashes: the messages
// and the tools, each encoded as JSON and ended by a newline. Recorded sessions carry
// it, so it must not change.
func TestPromptHashIsTheSHA256OfTheEncodings(t *testing.T) {
	req := llm.Request{
		Messages: []messages.ChatMessage{{Role: messages.RoleSystem, Content: "be <brief>"}, {Role: messages.RoleUser, Content: "What is 12 * (7 + 5)?"}},
		Tools:    []messages.ToolSpec{{Name: "calculator", Description: "evaluates & answers", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}
	m, err := json.Marshal(req.Messages)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := json.Marshal(req.Tools)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(string(m) + "\n" + string(tl) + "\n"))
	want := hex.EncodeToString(sum[:])
	for range 3 { // the hasher is reused
		if got := llm.PromptHash(req); got != want {
			t.Fatalf("PromptHash = %s, want %s", got, want)
		}
	}
	if llm.PromptHash(llm.Request{Messages: req.Messages}) == want {
		t.Fatal("the tools are not hashed")
	}
	// Tools equal to the last ones hash the same; changed ones, even in place, do not.
	hashes := map[string]string{}
	for _, c := range []struct {
		name  string
		tools []messages.ToolSpec
	}{
		{"nil", nil},
		{"empty", []messages.ToolSpec{}},
		{"nil again", nil},
		{"one", req.Tools},
		{"a copy", []messages.ToolSpec{{Name: "calculator", Description: "evaluates & answers", Parameters: json.RawMessage(`{"type":"object"}`)}}},
	} {
		tl, err := json.Marshal(c.tools)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(string(m) + "\n" + string(tl) + "\n"))
		hashes[c.name] = hex.EncodeToString(sum[:])
		if got := llm.PromptHash(llm.Request{Messages: req.Messages, Tools: c.tools}); got != hashes[c.name] {
			t.Fatalf("%s: PromptHash = %s, want %s", c.name, got, hashes[c.name])
		}
	}
	if hashes["nil"] == hashes["empty"] || hashes["one"] != hashes["a copy"] {
		t.Fatalf("hashes %v: nil and empty tools must differ, equal ones not", hashes)
	}
	req.Tools[0].Parameters[2] = 'T' // {"Type":...
	if llm.PromptHash(req) == hashes["one"] {
		t.Fatal("a schema changed in place hashes as before")
	}
}

// "delegate to <agent>: <task>" calls delegate when the agent has it (sub-agents),
// and is answered with the sub-agent's answer or why it failed; without the tool,
// the rules go on as before (here: arithmetic).
func TestOfflineDelegates(t *testing.T) {
	withDelegate := append([]messages.ToolSpec{{Name: "delegate"}}, specs...)
	in := "Delegate to Math-Whiz: What is 6 * 7?"
	r, _ := llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user(in), Tools: withDelegate})
	if len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0].Name != "delegate" ||
		r.Message.ToolCalls[0].Arguments != `{"agent":"math-whiz","task":"What is 6 * 7?"}` {
		t.Fatalf("delegate: %+v", r.Message)
	}
	r, _ = llm.Offline{}.Generate(context.Background(), llm.Request{Step: 1, Messages: user(in), Tools: specs})
	if len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0].Name != "calculator" {
		t.Fatalf("without the delegate tool: %+v", r.Message)
	}
	for result, want := range map[string]string{"42": "42", "error: sub-agent math-whiz failed (max_steps)": "The sub-agent did not answer: sub-agent math-whiz failed (max_steps)"} {
		msgs := append(user(in), messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c", Name: "delegate", Arguments: "{}"}}},
			messages.ChatMessage{Role: messages.RoleTool, Name: "delegate", ToolCallID: "c", Content: result})
		r, _ = llm.Offline{}.Generate(context.Background(), llm.Request{Step: 2, Messages: msgs, Tools: withDelegate})
		if r.Message.Content != want {
			t.Errorf("after %q: %+v, want %q", result, r.Message, want)
		}
	}
}
