package actors

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

func TestCallHashIsOfTheJSONValue(t *testing.T) {
	same := [][2]string{
		{`{"a":1,"b":[1,"x"]}`, ` { "b" : [ 1.0 , "x" ] , "a" : 1e0 } `},
		{`{"s":"A\n\u00e9"}`, `{"s":"\u0041\u000a` + "é" + `"}`},
		{`{"emoji":"\ud83d\ude00"}`, `{"emoji":"😀"}`},
		{`[true,false,null]`, "[true, false,\nnull]"},
		{`{"n":0}`, `{"n":-0}`},
		{`not json {`, `not json {`},
	}
	for _, p := range same {
		if callHash("t", p[0]) != callHash("t", p[1]) {
			t.Errorf("%s and %s hash apart", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":1,"b":2}`, `{"a":2,"b":1}`},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`{"a":"1"}`, `{"a":1}`},
		{`{"a":{"b":1}}`, `{"a":{"c":1}}`},
		{`{"a":1}`, `{"a":1}x`},
		{`not json {`, `not  json {`},
		{`[]`, `{}`},
		{`""`, `null`},
	}
	for _, p := range differ {
		if callHash("t", p[0]) == callHash("t", p[1]) {
			t.Errorf("%s and %s hash alike", p[0], p[1])
		}
	}
	if callHash("a", `{}`) == callHash("b", `{}`) || callHash("ab", "c") == callHash("a", "bc") {
		t.Error("the tool's name does not count")
	}
	deep := ""
	for range maxJSONDepth + 10 {
		deep += "["
	}
	if callHash("t", deep) == callHash("t", deep+"[") {
		t.Error("deep arguments hash alike")
	}
}

func TestCallHashAllocatesNothing(t *testing.T) {
	args := `{"expression": "12 * (7 + 5)", "opts": {"precise": true, "digits": [1, 2.5e3]}, "s": "\u00e9\n"}`
	if n := testing.AllocsPerRun(100, func() { callHash("calculator", args) }); n != 0 {
		t.Errorf("callHash allocates %.0f times a call", n)
	}
}

// A paradigm's model calls keep to the task's token budget as the loop's do.
func TestParadigmModelCallsKeepToTheTokenBudget(t *testing.T) {
	dict := messages.ToolSpec{Name: "dictionary", Description: "looks a word up"}
	for _, c := range []struct {
		budget, steps int
	}{
		{4, 1}, // the loop's answer used 4 tokens: no critique call
		{6, 2}, // the critique's 4 more reach 8: the loop's next call is not made
	} {
		as := Agents{Named: map[string]Agent{"reviewer": {Name: "reviewer", Model: "m", Tools: []messages.ToolSpec{dict}, Paradigm: reviewParadigm{}, MaxTokens: c.budget}}}
		events, _ := runScripted(t, as, "What is a troupe?", map[string][]string{"": {"a group"}, "critique": {"again"}},
			func(messages.ToolCallRequested) string { return "a company of performers" })
		last, err := events[len(events)-1].Decode()
		if err != nil {
			t.Fatal(err)
		}
		f, ok := last.(*messages.TaskFailed)
		if !ok || f.Reason != messages.ReasonTokenBudget || f.Steps != c.steps || !strings.Contains(f.Error, fmt.Sprintf("its budget is %d", c.budget)) {
			t.Errorf("budget %d: the task ended with %+v, want token_budget after %d model calls", c.budget, last, c.steps)
		}
		if div, err := VerifyAmong(as, events); err != nil || div != nil {
			t.Errorf("budget %d: verify: %v %v", c.budget, div, err)
		}
	}
}
