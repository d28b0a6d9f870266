package llm

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// The offline model plans only compound arithmetic as parallel calculator steps;
// anything else is one goal step, and a question without the calculator too.
func TestOfflinePlansCompoundArithmeticOnly(t *testing.T) {
	ask := func(system, task string) string {
		t.Helper()
		r, err := Offline{}.Generate(context.Background(), Request{Messages: []messages.ChatMessage{
			{Role: messages.RoleSystem, Content: system}, {Role: messages.RoleUser, Content: "Task: " + task}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Message.Content
	}
	withCalc := "<plan_request>\nTools a step may call:\n- calculator: Evaluates. Arguments: {}\n</plan_request>"
	for task, want := range map[string]string{
		"What is 2+3 and what is 4*5?":   `{"steps":[{"id":"s1","goal":"compute 2+3","tool":"calculator","args":{"expression":"2+3"},"deps":[]},{"id":"s2","goal":"compute 4*5","tool":"calculator","args":{"expression":"4*5"},"deps":[]}],"answer":"give each result"}`,
		"What is 2+3 and tell me a joke": `{"steps":[{"id":"s1","goal":"What is 2+3 and tell me a joke","deps":[]}],"answer":"give the result"}`,
	} {
		if got := ask(withCalc, task); got != want {
			t.Errorf("%s:\n got %s\nwant %s", task, got, want)
		}
	}
	if got := ask("<plan_request>\nTools a step may call:\n</plan_request>", "What is 2+3 and what is 4*5?"); got != `{"steps":[{"id":"s1","goal":"What is 2+3 and what is 4*5?","deps":[]}],"answer":"give the result"}` {
		t.Errorf("without the calculator: %s", got)
	}
	r, err := Offline{}.Generate(context.Background(), Request{Messages: []messages.ChatMessage{{Role: messages.RoleSystem, Content: "x"},
		{Role: messages.RoleUser, Content: "Task: q\n\n<step_results>\n[s1] compute 2+3\n5\n[s2] compute 4*5\n20\n</step_results>"}}})
	if err != nil || r.Message.Content != "2+3 = 5 and 4*5 = 20" {
		t.Errorf("join: %q %v", r.Message.Content, err)
	}
}
