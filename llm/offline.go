package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/messages"
)

// OfflineName is the name the offline model reports in events and output.
const OfflineName = "offline"

// Offline is a deterministic, rule-based planner — not a language model. It exists so
// that a fresh node with no API key still runs real tasks through the real agent loop,
// tools and event log. It understands exactly these tasks (case-insensitive):
//
//   - arithmetic ("What is 12 * (7 + 5)?", "compute sqrt(2)^2"): it calls the
//     calculator tool with the expression, then answers with the tool's result;
//   - the current time or date ("what time is it?", "what's the date in Asia/Tokyo?"):
//     it calls the clock tool, with an IANA zone when one is named;
//   - echo ("echo hello"): it answers with the text after "echo";
//   - delegation ("delegate to researcher: find X"), when it has the delegate tool
//     (sub-agents): it calls delegate with the agent named and the text after the
//     colon as the task, then answers with the sub-agent's answer, or says why the
//     sub-agent failed;
//   - a team's protocols (offlineteam.go): a routing decision, a judge's verdict, a
//     handoff to the peer with the tool a task needs, a stage passing on the answer
//     it builds on, an aggregator listing the members' answers;
//   - the plan_execute paradigm's plans and answers (offline_plan.go).
//
// It knows the paradigms' calls by their Request.Purpose, and answers them narrowly,
// for the paradigms to run with no API key:
//
//   - "critique" (reflection's critic): it passes every answer, {"verdict": "pass"}:
//     it cannot judge one;
//   - "evaluate" (reflexion's evaluator): it judges poor only its own answer that
//     says what it can do instead of doing the task, and passes any other;
//   - "lesson" (reflexion): it writes the lesson of that answer, or of a task that
//     failed, in general terms: what it cannot do, and what to do instead. With
//     that lesson in its system prompt (reflexion found it for a later task), it
//     answers a task it cannot do by saying at once that it needs a real model.
//
// Anything else gets an answer that says what the offline model can do and how to
// configure a real model. The rules look only at the latest user message and at tool
// results that follow it, so the same conversation always yields the same response.
//
// Made by NewOffline, it also reports the cached tokens a provider's prompt cache
// would (PromptCache): Usage.CachedTokens counts, in OpenAI's blocks, the prompt
// prefix it had been sent before in the process. The zero Offline reports none.
type Offline struct {
	cache *PromptCache
}

// NewOffline returns the offline model with a prompt cache of its own.
func NewOffline() Offline { return Offline{cache: NewPromptCache(0)} }

var _ Model = Offline{}

// Name implements Model.
func (Offline) Name() string { return OfflineName }

// Provider names the offline model's provider, itself: two specs that resolve to it
// (the node's "auto" without a key, an agent's "offline") are one model.
func (Offline) Provider() string { return OfflineName }

var (
	// A run of characters that can form an arithmetic expression.
	mathRun     = regexp.MustCompile(`[-+*/%^().,\d\s a-z]*\d[-+*/%^().,\d\s a-z]*`)
	mathOp      = regexp.MustCompile(`\d\s*[-+*/%^]\s*[\d(a-z]|\b(sqrt|abs|round|floor|ceil|min|max|pow|ln|log|exp|sin|cos|tan)\s*\(`)
	ianaTZ      = regexp.MustCompile(`\b([A-Z][A-Za-z_]+/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?|UTC)\b`)
	delegateAsk = regexp.MustCompile(`(?i)^delegate\s+to\s+([a-z][a-z0-9_-]*)\s*:\s*(\S[\s\S]*)$`)
	timeAsk     = regexp.MustCompile(`(?i)\b(time|date|day is it|what day|today)\b`)
	alpha       = regexp.MustCompile(`[a-z_]+`)
	mathFns     = map[string]bool{"sqrt": true, "abs": true, "round": true, "floor": true, "ceil": true, "min": true, "max": true,
		"pow": true, "ln": true, "log": true, "exp": true, "sin": true, "cos": true, "tan": true, "pi": true, "e": true}
)

// Generate implements Model.
func (o Offline) Generate(ctx context.Context, req Request) (Response, error) {
	resp, err := o.generate(ctx, req)
	if err == nil {
		resp.Usage.CachedTokens = o.cache.Observe(req)
	}
	return resp, err
}

func (Offline) generate(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	last := -1
	for i, m := range req.Messages {
		if m.Role == messages.RoleUser && !isBriefing(m) {
			last = i
		}
	}
	if last < 0 {
		return Response{}, fmt.Errorf("llm: offline model: the conversation has no user message")
	}
	if msg, ok := offlinePlanExecute(req); ok {
		return Response{Message: msg, Usage: messages.Usage{
			PromptTokens:     EstimateTokens(req.Messages),
			CompletionTokens: EstimateTokens([]messages.ChatMessage{msg}),
		}}, nil
	}
	if tools, ok := reactTools(req.Messages); ok {
		return offlineReAct(req, tools), nil
	}
	input := strings.TrimSpace(req.Messages[last].Content)
	if msg, ok := offlinePurpose(req.Purpose, input); ok {
		return Response{Message: msg, Usage: messages.Usage{
			PromptTokens:     EstimateTokens(req.Messages),
			CompletionTokens: EstimateTokens([]messages.ChatMessage{msg}),
		}}, nil
	}
	var results []messages.ChatMessage
	for _, m := range req.Messages[last+1:] {
		if m.Role == messages.RoleTool {
			results = append(results, m)
		}
	}
	// A lesson of its own in the system prompt (reflexion's) changes its answer to a
	// task it cannot do: it says so at once, as the lesson tells it.
	learnt := len(req.Messages) > 0 && req.Messages[0].Role == messages.RoleSystem && strings.Contains(req.Messages[0].Content, offlineLessonDo)
	msg := offlinePlan(input, results, req.Step, hasTool(req.Tools), learnt)
	return Response{Message: msg, Usage: messages.Usage{
		PromptTokens:     EstimateTokens(req.Messages),
		CompletionTokens: EstimateTokens([]messages.ChatMessage{msg}),
	}}, nil
}

func hasTool(specs []messages.ToolSpec) func(string) bool {
	return func(name string) bool {
		for _, s := range specs {
			if s.Name == name {
				return true
			}
		}
		return false
	}
}

func offlinePlan(input string, results []messages.ChatMessage, step int, has func(string) bool, learnt bool) messages.ChatMessage {
	answer := func(s string) messages.ChatMessage {
		return messages.ChatMessage{Role: messages.RoleAssistant, Content: s}
	}
	call := func(tool string, args any) messages.ChatMessage {
		b, _ := json.Marshal(args) // maps of strings always encode
		return messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{
			{ID: fmt.Sprintf("call_%d_1", step), Name: tool, Arguments: string(b)},
		}}
	}
	if len(results) == 0 {
		// A team's protocols (offlineteam.go): a routing prompt, a judge's task, a
		// member's task, whose own rules see only the task.
		if msg, ok := offlineTeam(input); ok {
			return msg
		}
		task, msg, ok := offlineMember(input, has)
		if ok {
			return msg
		}
		input = task
	}
	if len(results) > 0 {
		r := results[len(results)-1]
		switch r.Name {
		case "calculator":
			if strings.HasPrefix(r.Content, "error: ") {
				return answer("The calculator could not evaluate that: " + strings.TrimPrefix(r.Content, "error: "))
			}
			return answer(r.Content)
		case "clock":
			if strings.HasPrefix(r.Content, "error: ") {
				return answer("The clock could not answer: " + strings.TrimPrefix(r.Content, "error: "))
			}
			return answer("It is " + r.Content + ".")
		case "delegate":
			if strings.HasPrefix(r.Content, "error: ") {
				return answer("The sub-agent did not answer: " + strings.TrimPrefix(r.Content, "error: "))
			}
		}
		return answer(r.Content)
	}
	if m := delegateAsk.FindStringSubmatch(input); m != nil && has("delegate") {
		return call("delegate", map[string]string{"agent": strings.ToLower(m[1]), "task": strings.TrimSpace(m[2])})
	}
	lower := strings.ToLower(input)
	if rest, ok := strings.CutPrefix(lower, "echo"); ok && (rest == "" || rest[0] == ' ' || rest[0] == ':') {
		return answer(strings.TrimSpace(strings.TrimLeft(input[4:], ": ")))
	}
	if expr := findExpression(lower); expr != "" && has("calculator") {
		return call("calculator", map[string]string{"expression": expr})
	}
	if timeAsk.MatchString(input) && has("clock") {
		args := map[string]string{}
		if tz := ianaTZ.FindString(input); tz != "" {
			args["timezone"] = tz
		}
		return call("clock", args)
	}
	if learnt {
		return answer("This task needs a real language model, which this node does not have: set OPENAI_API_KEY " +
			"(or another provider's key) and run it again. (A lesson from an earlier task: say so at once.)")
	}
	return answer(offlineCannot + ": " +
		"I can do arithmetic with the calculator (\"What is 12 * (7 + 5)?\"), tell the time with the clock " +
		"(\"What time is it in Europe/Paris?\"), and echo text (\"echo hello\"). " +
		"Set OPENAI_API_KEY (or another provider's key) to run tasks on a real model.")
}

// findExpression extracts an arithmetic expression from a question, or "".
func findExpression(lower string) string {
	s := strings.NewReplacer("?", " ", "=", " ", "×", "*", "÷", "/", " x ", " * ", "plus", "+", "minus", "-", "times", "*", "divided by", "/").Replace(lower)
	// Words that are not function names or constants separate expressions.
	s = alpha.ReplaceAllStringFunc(s, func(w string) string {
		if mathFns[w] {
			return w
		}
		return "|"
	})
	best := ""
	for _, m := range mathRun.FindAllString(s, -1) {
		m = strings.Trim(m, " .,\t\n")
		if mathOp.MatchString(m) && len(m) > len(best) {
			best = m
		}
	}
	return strings.Join(strings.Fields(best), " ")
}

// The ReAct text protocol (package llm/react) as its prompt says it: the tools are
// listed in the system message, a tool's result comes back as a user message
// "Observation: …", and a reply is "Action: tool[input]" or "Finish[answer]".
const (
	reactToolsHeader = "You can use these tools:\n"
	reactFormat      = "Reply in exactly this format:"
	reactObservation = "Observation: "
)

// reactTools returns the names of the tools a conversation rendered in the ReAct
// text protocol lists, and false when it is not one.
func reactTools(msgs []messages.ChatMessage) ([]string, bool) {
	if len(msgs) == 0 || msgs[0].Role != messages.RoleSystem || !strings.Contains(msgs[0].Content, reactFormat) {
		return nil, false
	}
	_, list, ok := strings.Cut(msgs[0].Content, reactToolsHeader)
	if !ok {
		return nil, false
	}
	var names []string
	for _, line := range strings.Split(list, "\n") {
		name, _, ok := strings.Cut(strings.TrimPrefix(line, "- "), ":")
		if !strings.HasPrefix(line, "- ") || !ok {
			break
		}
		names = append(names, name)
	}
	return names, true
}

// offlineReAct answers a conversation in the ReAct text protocol as offlinePlan
// answers one with native tools: the task is the latest user message that is not an
// observation, the observations after it are its tools' results.
func offlineReAct(req Request, tools []string) Response {
	last := -1
	for i, m := range req.Messages {
		if m.Role == messages.RoleUser && !strings.HasPrefix(m.Content, reactObservation) && !isBriefing(m) {
			last = i
		}
	}
	var input string
	var results []messages.ChatMessage
	if last >= 0 {
		input = strings.TrimSpace(req.Messages[last].Content)
		for _, m := range req.Messages[last+1:] {
			if obs, ok := strings.CutPrefix(m.Content, reactObservation); ok && m.Role == messages.RoleUser {
				results = append(results, messages.ChatMessage{Role: messages.RoleTool, Content: obs})
			}
		}
	}
	has := func(name string) bool { return slices.Contains(tools, name) }
	learnt := len(req.Messages) > 0 && req.Messages[0].Role == messages.RoleSystem && strings.Contains(req.Messages[0].Content, offlineLessonDo)
	plan := offlinePlan(input, results, req.Step, has, learnt)
	var text string
	if len(plan.ToolCalls) > 0 {
		c := plan.ToolCalls[0]
		text = fmt.Sprintf("Thought: the %s tool gives this exactly.\nAction: %s[%s]", c.Name, c.Name, c.Arguments)
	} else {
		text = "Thought: I have what I need.\nFinish[" + plan.Content + "]"
	}
	msg := messages.ChatMessage{Role: messages.RoleAssistant, Content: text}
	return Response{Message: msg, Usage: messages.Usage{
		PromptTokens:     EstimateTokens(req.Messages),
		CompletionTokens: EstimateTokens([]messages.ChatMessage{msg}),
	}}
}

// offlineLessonDo is what to do instead in the lesson the offline model writes of
// a task it could not do; with it in its system prompt, it does so.
const offlineLessonDo = "Say at once that such a task needs a real language model (set OPENAI_API_KEY or another provider's key), " +
	"or restate it as arithmetic, a time question or echo."

// offlineCannot opens the offline model's answer to a task it cannot do.
const offlineCannot = "I am Troupe's offline model, a rule-based planner rather than a language model"

// offlinePurpose answers a paradigm's call (Request.Purpose) whose prompt ends with
// the user message input; ok is false for a purpose it does not know.
func offlinePurpose(purpose, input string) (messages.ChatMessage, bool) {
	answer := func(s string) (messages.ChatMessage, bool) {
		return messages.ChatMessage{Role: messages.RoleAssistant, Content: s}, true
	}
	cannot := strings.Contains(input, offlineCannot)
	switch purpose {
	case "critique":
		return answer(`{"verdict": "pass"}`)
	case "evaluate":
		if cannot {
			return answer(`{"verdict": "revise", "issues": [{"issue": "The answer lists what the offline model can do instead of doing the task.", ` +
				`"suggestion": "Do the task with a real model, or ask for arithmetic, the time or echo."}]}`)
		}
		return answer(`{"verdict": "pass"}`)
	case "lesson":
		if cannot {
			return answer(`{"what_went_wrong": "The task asked for something beyond arithmetic, the time and echo, and the offline model answered with what it can do instead.", ` +
				`"do_instead": "` + offlineLessonDo + `"}`)
		}
		return answer(`{"what_went_wrong": "The task ended without a good answer: see how it went above.", ` +
			`"do_instead": "Break the task into arithmetic, time or echo steps the tools can do, or run it on a real language model."}`)
	}
	return messages.ChatMessage{}, false
}

// isBriefing reports whether m is a context's closing briefing: the items a
// context builder sends after the conversation (gathered evidence, memories,
// notes), each section in its tags (pipelines/context). It is nobody's turn: the
// task and the tools' results are before it.
func isBriefing(m messages.ChatMessage) bool {
	if m.Role != messages.RoleUser {
		return false
	}
	for _, tag := range []string{"<task>\n", "<state>\n", "<evidence>\n", "<output>\n"} {
		if strings.HasPrefix(m.Content, tag) {
			return true
		}
	}
	return false
}
