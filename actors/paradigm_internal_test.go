package actors

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// reviewParadigm is a paradigm of this test only: it looks a word up with a tool
// call of its own, lets the loop answer, asks a "critique" model call whether the
// answer is good, and sends the loop back once when it is not.
type reviewParadigm struct{}

func (reviewParadigm) Name() string { return "review" }

func (reviewParadigm) begin(messages.TaskSubmitted) taskRun { return &reviewRun{} }

type reviewRun struct {
	looked   bool   // the lookup was requested
	evidence string // its result
	verdicts []string
	draft    string
}

func (r *reviewRun) fold(f fold, e messages.Envelope, p messages.Payload) {
	switch p := p.(type) {
	case *messages.ToolCallRequested:
		if p.Purpose == "lookup" {
			r.looked = true
		}
	case *messages.ToolCallCompleted:
		if p.CallID == "lookup" {
			r.evidence = p.Result
		}
	case *messages.ModelRequested:
		if p.Purpose == "critique" {
			r.draft = f.t.reply.Message.Content
		}
	case *messages.ModelResponded:
		if p.Message.Content == "again" || p.Message.Content == "pass" {
			r.verdicts = append(r.verdicts, p.Message.Content)
			if p.Message.Content == "again" {
				f.resume(messages.ChatMessage{Role: messages.RoleUser, Content: "Try again."})
			}
		}
	}
}

func (r *reviewRun) decide(v *view) *Decision {
	switch {
	case !r.looked:
		return v.call("lookup", "lookup", "dictionary", `{"word":"troupe"}`, v.task().Input)
	case r.evidence == "":
		return nil
	}
	if out, replyID, ok := v.loopAnswer(); ok {
		if n := len(r.verdicts); n > 0 && r.verdicts[n-1] == "pass" && r.draft == out {
			return v.complete(out, replyID)
		}
		if r.draft != out || len(r.verdicts) == 0 {
			return v.model("critique", replyID)
		}
	}
	return v.loop()
}

func (r *reviewRun) prompt(v *view, purpose string) llm.Request {
	return llm.Request{Messages: []messages.ChatMessage{v.systemMessage("You judge answers."),
		{Role: messages.RoleUser, Content: fmt.Sprintf("Task: %s\nEvidence: %s\nAnswer: %s", v.task().Input, r.evidence, r.draft)}}}
}

func (r *reviewRun) section() string { return "Evidence: " + r.evidence }

// runScripted drives a state like a session actor does, answering its model calls
// from replies (by purpose, in order) and its tool calls with tool, and returns the
// events it recorded.
func runScripted(t *testing.T, as Agents, input string, replies map[string][]string, tool func(messages.ToolCallRequested) string) ([]messages.Envelope, []llm.Request) {
	t.Helper()
	const sid = "s"
	st := NewSessionState(sid).WithAgents(as)
	var events []messages.Envelope
	var requests []llm.Request
	add := func(p messages.Payload, cause, task string, actor ...string) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := st.LastSeq + 1
		e.ID, e.SessionID, e.Seq, e.TS, e.CausationID, e.CorrelationID, e.Actor = effectKey(sid, seq), sid, seq, int64(seq), cause, task, "session"
		if len(actor) > 0 {
			e.Actor = actor[0]
		}
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	add(&messages.TaskSubmitted{Input: input, Agent: "reviewer", Rules: ContextRules}, "", "")
	task := events[0].ID
	agent, _ := as.For("reviewer")
	for range 100 {
		if d := st.DecideAmong(as, st.LastSeq+1, int64(st.LastSeq+1)); d != nil {
			add(d.Payload, d.CausationID, d.TaskID)
			continue
		}
		if _, reqID, ok := st.PendingModel(); ok {
			req := st.Request(agent)
			requests = append(requests, req)
			purpose := ""
			if st.active.pending != nil {
				purpose = st.active.pending.req.Purpose
			}
			if len(replies[purpose]) == 0 {
				t.Fatalf("no scripted reply left for purpose %q", purpose)
			}
			content := replies[purpose][0]
			replies[purpose] = replies[purpose][1:]
			add(&messages.ModelResponded{Key: st.pendingModelText(), Model: "m", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: content},
				Usage: messages.Usage{PromptTokens: 3, CompletionTokens: 1}}, reqID, task, "model")
			continue
		}
		if pcs := st.PendingCalls(); len(pcs) > 0 {
			pc := pcs[0]
			add(&messages.ToolCallCompleted{Key: pc.Request.Key, CallID: pc.Request.CallID, Tool: pc.Request.Tool, Result: tool(pc.Request)}, pc.EventID, task, "tool")
			continue
		}
		return events, requests
	}
	t.Fatal("the task did not settle in 100 moves")
	return nil, nil
}

// A paradigm's calls and model calls with a purpose are folded into its run, not
// into the conversation; the loop it lets run sees its section and the messages it
// resumes with; and the recorded session verifies.
func TestParadigmMovesFoldAndVerify(t *testing.T) {
	dict := messages.ToolSpec{Name: "dictionary", Description: "looks a word up"}
	as := Agents{Named: map[string]Agent{"reviewer": {Name: "reviewer", Model: "m", SystemPrompt: "You answer.", Tools: []messages.ToolSpec{dict}, Paradigm: reviewParadigm{}}}}
	lookups := 0
	events, requests := runScripted(t, as, "What is a troupe?", map[string][]string{
		"":         {"a group", "a company of actors"},
		"critique": {"again", "pass"},
	}, func(r messages.ToolCallRequested) string {
		lookups++
		if r.Purpose != "lookup" {
			t.Errorf("tool call %+v has no lookup purpose", r)
		}
		return "a company of performers"
	})
	last, err := events[len(events)-1].Decode()
	if err != nil {
		t.Fatal(err)
	}
	done, ok := last.(*messages.TaskCompleted)
	if !ok || done.Output != "a company of actors" || done.Steps != 4 || done.Usage.PromptTokens != 12 {
		t.Fatalf("last event %s %+v, want the revised answer after 4 model calls", events[len(events)-1].Type, last)
	}
	if lookups != 1 {
		t.Fatalf("the lookup ran %d times, want 1", lookups)
	}
	// The loop's requests carry the run's section and, the second time, the
	// critique's request to try again; the critique's verdicts are not in them.
	if len(requests) != 4 {
		t.Fatalf("%d model requests, want 4", len(requests))
	}
	loop2 := requests[2]
	if !strings.Contains(loop2.Messages[0].Content, "Evidence: a company of performers") {
		t.Fatalf("the loop's system prompt lacks the run's section: %q", loop2.Messages[0].Content)
	}
	var contents []string
	for _, m := range loop2.Messages[1:] {
		contents = append(contents, string(m.Role)+":"+m.Content)
	}
	if got, want := strings.Join(contents, "|"), "user:What is a troupe?|assistant:a group|user:Try again."; got != want {
		t.Fatalf("the loop's second conversation is %q, want %q", got, want)
	}
	if c := requests[1].Messages[1].Content; !strings.Contains(c, "Answer: a group") {
		t.Fatalf("the first critique saw %q, want the first draft", c)
	}
	div, err := VerifyAmong(as, events)
	if err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
	// A changed paradigm prompt is a divergence.
	as.Named["reviewer"] = Agent{Name: "reviewer", Model: "m", SystemPrompt: "You answer briefly.", Tools: []messages.ToolSpec{dict}, Paradigm: reviewParadigm{}}
	if div, err := VerifyAmong(as, events); err != nil || div == nil {
		t.Fatalf("verify with a changed prompt: %v %v, want a divergence", div, err)
	}
}

// A paradigm's own prompt is fitted to the agent's window like the loop's: the
// critique's prompt, too long with its evidence, is cut with a marker, every call
// stays within its budget, and the session verifies.
func TestParadigmPromptFitsTheWindow(t *testing.T) {
	dict := messages.ToolSpec{Name: "dictionary", Description: "looks a word up"}
	as := Agents{Named: map[string]Agent{"reviewer": {Name: "reviewer", Model: "m", SystemPrompt: "You answer.", Tools: []messages.ToolSpec{dict},
		Paradigm: reviewParadigm{}, Context: ContextOptions{Window: 600, ReservedOutput: 100}}}}
	long := strings.Repeat("a company of performers, ", 400)
	events, requests := runScripted(t, as, "What is a troupe?", map[string][]string{"": {"a group"}, "critique": {"pass"}},
		func(messages.ToolCallRequested) string { return long })
	var purposes []string
	for _, e := range events {
		if e.Type != messages.TypeModelRequested {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		mr := p.(*messages.ModelRequested)
		purposes = append(purposes, mr.Purpose)
		if r := mr.Context; r == nil || r.Used > r.Budget || r.Over != 0 || r.Window != 600 {
			t.Fatalf("the %q call's context: %+v", mr.Purpose, r)
		}
	}
	if strings.Join(purposes, ",") != ",critique" || len(requests) != 2 {
		t.Fatalf("calls %q, %d requests", purposes, len(requests))
	}
	// Its middle is cut: the task ahead, the answer to review at the end.
	if c := requests[1].Messages[1].Content; !strings.HasPrefix(c, "Task: What is a troupe?\nEvidence: a company") ||
		!strings.Contains(c, " tokens truncated]\n") || !strings.HasSuffix(c, "\nAnswer: a group") {
		t.Fatalf("the critique's prompt was not cut in the middle with a marker: %q…%q", c[:60], c[len(c)-60:])
	}
	// The loop's call left the section out rather than go over: its system message
	// is the prompt alone.
	if c := requests[0].Messages[0].Content; c != "You answer." {
		t.Fatalf("the loop's system message: %.80q", c)
	}
	if div, err := VerifyAmong(as, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
}
