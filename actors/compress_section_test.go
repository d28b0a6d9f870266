package actors

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// hugeInput returns a task's input of far more tokens than a small window holds,
// its purpose at its head and a detail at its tail.
func hugeInput() string {
	var b strings.Builder
	b.WriteString("Reconcile the ledger below and report the total.\n")
	for i := range 400 {
		fmt.Fprintf(&b, "entry %d: account A-%03d moved %d.%02d units to account B-%03d\n", i, i%97, i*7, i%100, (i*13)%89)
	}
	b.WriteString("The total must be given in units.")
	return b.String()
}

// sectionAgent is an agent whose window the huge input does not fit.
func sectionAgent(model string) Agent {
	a := compressAgent(Compression{Model: model})
	a.Context.Window, a.Context.ReservedOutput = 600, 100
	return a
}

// modelRequests returns the recorded model requests, in order.
func (r *compressRun) modelRequests() []*messages.ModelRequested {
	var out []*messages.ModelRequested
	for _, e := range r.events {
		if p, _ := e.Decode(); p != nil {
			if mr, ok := p.(*messages.ModelRequested); ok {
				out = append(out, mr)
			}
		}
	}
	return out
}

func reportHas(items []messages.ContextItem, id, reason string) bool {
	return slices.ContainsFunc(items, func(ci messages.ContextItem) bool { return ci.ID == id && ci.Reason == reason })
}

// A task whose input alone exceeds the window, with a model for summaries: the
// session makes one recorded condense-section call before the loop's, folds its
// answer, and the loop's request carries the summary, marked as one, within the
// budget, in place of a truncated input; its report lists the input replaced. The
// log keeps the input whole; a refold after the answer does not call again, and
// the session verifies.
func TestCompressSectionSummarisesAnInputOverTheWindow(t *testing.T) {
	input := hugeInput()
	r := newCompressRun(t, sectionAgent(""), scripted(t, "m", 2, func(int) string { return "the total is 12345 units" }),
		scripted(t, "summariser", 2, func(int) string {
			return "Reconcile 400 ledger entries between A and B accounts; report the total in units."
		}), noTools)
	r.task(input)

	if !slices.Equal(r.purposes, []string{pctx.PurposeCondenseSection, ""}) {
		t.Fatalf("purposes %q, want one condense-section call, then the loop's", r.purposes)
	}
	condense := r.ofPurpose(pctx.PurposeCondenseSection)[0]
	if prompt := condense.Messages[len(condense.Messages)-1].Content; !strings.Contains(prompt, "the task's input") || !strings.Contains(prompt, "Reconcile the ledger below") {
		t.Fatalf("the condense call's prompt is %.200q, want the task's input", prompt)
	}
	loop := r.lastLoop()
	sent := sentText(loop)
	if !strings.Contains(sent, "[Summary of the task's input (") || !strings.Contains(sent, "the original is in the session's log]\nReconcile 400 ledger entries") {
		t.Fatalf("the loop sent %.400q, want the input's summary, marked as one", sent)
	}
	if strings.Contains(sent, "tokens truncated]") || strings.Contains(sent, "entry 399") {
		t.Fatalf("the loop sent %.400q, want no truncation and no entry of the input", sent)
	}
	reqs := r.modelRequests()
	if len(reqs) != 2 || reqs[0].Purpose != pctx.PurposeCondenseSection || reqs[0].Model != "m" {
		t.Fatalf("recorded requests %+v, want the condense call to the agent's model, then the loop's", reqs)
	}
	rep := reqs[1].Context
	if rep == nil || rep.Over != 0 || rep.Used > rep.Budget || len(rep.Truncated) != 0 {
		t.Fatalf("the loop's report %+v, want it within budget, nothing truncated", rep)
	}
	if !reportHas(rep.Dropped, "task", pctx.ReasonReplaced+"summary/task") || !reportHas(rep.Kept, "summary/task", "") {
		t.Fatalf("the loop's report keeps %+v, drops %+v: want task replaced by summary/task", rep.Kept, rep.Dropped)
	}
	if got := r.st.history[r.st.tasks[0].start].Content; got != input {
		t.Fatalf("the session's history holds %.100q, want the input whole", got)
	}
	if status, out, _ := r.st.Status(); status != messages.StatusCompleted || out != "the total is 12345 units" {
		t.Fatalf("the task: %s %q", status, out)
	}
	r.verify()

	// Refold up to the condense call's answer: the next decision is the loop's call.
	at := slices.IndexFunc(r.events, func(e messages.Envelope) bool { return e.Type == messages.TypeModelResponded })
	st := r.refold(at + 1)
	d := st.DecideAmong(r.as, st.LastSeq+1, int64(st.LastSeq+1))
	if mr, ok := d.Payload.(*messages.ModelRequested); !ok || mr.Purpose != "" || llm.PromptHash(st.Request(r.as.Default)) != llm.PromptHash(loop) {
		t.Fatalf("refolded after the condense answer, decided %+v, want the loop's call with the summary", d.Payload)
	}
	// Refold up to the condense call's request: the same call is pending.
	st = r.refold(at)
	if again := st.Request(r.as.Default); again.Purpose != pctx.PurposeCondenseSection || llm.PromptHash(again) != llm.PromptHash(condense) {
		t.Fatalf("refolded mid-call, the request is %q, want the condense call's", again.Purpose)
	}
}

// Without a model for summaries (none, or the offline model), or with the task's
// last step left only, no call is made: the input is cut with a visible marker.
func TestCompressSectionWithoutAModelTruncatesWithAMarker(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		steps       int
	}{{"none", NoSummaryModel, 10}, {"offline", llm.OfflineName, 10}, {"last step", "", 1}} {
		a := sectionAgent(tc.model)
		a.MaxSteps = tc.steps
		r := newCompressRun(t, a, scripted(t, "m", 2, func(int) string { return "done" }),
			scripted(t, "summariser", 2, func(int) string { return "summary" }), noTools)
		r.task(hugeInput())
		if !slices.Equal(r.purposes, []string{""}) {
			t.Fatalf("%s: purposes %q, want the loop's call only", tc.name, r.purposes)
		}
		sent := sentText(r.lastLoop())
		if !strings.Contains(sent, "tokens truncated]") || strings.Contains(sent, "[Summary of") {
			t.Fatalf("%s: the loop sent %.300q, want the input cut with a marker", tc.name, sent)
		}
		rep := r.modelRequests()[0].Context
		if !reportHas(rep.Truncated, "task", "") {
			t.Fatalf("%s: the report truncates %+v, want the task", tc.name, rep.Truncated)
		}
		r.verify()
	}
}

// A tool result too big for the window, the answer to the model's latest move:
// its summary stands for it in its group, a tool message answering the same call,
// and the next request sends the call and the summary within the budget.
func TestCompressSectionSummarisesALatestToolResult(t *testing.T) {
	model := scriptOf(t, "m", callStep("call_1", "fetch", `{"url":"ledger"}`), llm.ScriptStep{Content: "the total is 12345 units"})
	r := newCompressRun(t, sectionAgent(""), model,
		scripted(t, "summariser", 2, func(int) string { return "The ledger has 400 entries from A to B accounts." }),
		func(messages.ToolCallRequested) string { return hugeInput() })
	r.task("Reconcile the ledger at ledger and report the total.")

	if !slices.Equal(r.purposes, []string{"", pctx.PurposeCondenseSection, ""}) {
		t.Fatalf("purposes %q, want the loop's call, a condense-section call, the loop's", r.purposes)
	}
	loop := r.lastLoop()
	var result *messages.ChatMessage
	for i, m := range loop.Messages {
		if m.Role == messages.RoleTool {
			result = &loop.Messages[i]
			if i == 0 || len(loop.Messages[i-1].ToolCalls) == 0 || loop.Messages[i-1].ToolCalls[0].ID != "call_1" {
				t.Fatalf("the result is sent without its call: %q", conversation(loop))
			}
		}
	}
	if result == nil || result.ToolCallID != "call_1" || !strings.HasPrefix(result.Content, "[Summary of the result of fetch (call_1) (") ||
		!strings.HasSuffix(result.Content, "The ledger has 400 entries from A to B accounts.") {
		t.Fatalf("the loop sent the result %+v, want its summary answering call_1", result)
	}
	rep := r.modelRequests()[2].Context
	if rep.Over != 0 || !reportHas(rep.Dropped, "turn/2", pctx.ReasonReplaced+"summary/turn/2") {
		t.Fatalf("the loop's report %+v, want it within budget and turn/2 replaced by summary/turn/2", rep)
	}
	r.verify()
}

// Core memory too big for the window: its summary stays in the State section of
// the system message, marked as one, and the input is sent whole.
func TestCompressSectionSummarisesCoreMemory(t *testing.T) {
	r := newCompressRun(t, sectionAgent(""), scripted(t, "m", 2, func(int) string { return "done" }),
		scripted(t, "summariser", 2, func(int) string { return "Accounts A and B exchange units daily." }), noTools)
	r.add(&messages.TaskSubmitted{Input: "What do you know of the accounts?", Memory: hugeInput(), Rules: ContextRules}, "", "", "ingress")
	r.settle()

	if !slices.Equal(r.purposes, []string{pctx.PurposeCondenseSection, ""}) {
		t.Fatalf("purposes %q, want one condense-section call, then the loop's", r.purposes)
	}
	loop := r.lastLoop()
	sys := loop.Messages[0]
	if sys.Role != messages.RoleSystem || !strings.Contains(sys.Content, "[Summary of the agent's core memory (") ||
		!strings.Contains(sys.Content, "Accounts A and B exchange units daily.") || strings.Contains(sys.Content, "entry 7:") {
		t.Fatalf("the system message is %.400q, want core memory's summary in it", sys.Content)
	}
	if got := conversation(loop); !slices.Contains(got, "user: What do you know of the accounts?") {
		t.Fatalf("the loop sent %q, want the input whole", got)
	}
	rep := r.modelRequests()[1].Context
	if rep.Over != 0 || !reportHas(rep.Dropped, "memory/core", pctx.ReasonReplaced+"summary/memory/core") {
		t.Fatalf("the loop's report %+v, want memory/core replaced by summary/memory/core", rep)
	}
	r.verify()
}
