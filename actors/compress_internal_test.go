package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// compressRun drives a session's state as a session actor does, with real models
// (llm.Scripted): the loop's calls go to model, compression's calls (a purpose) to
// summariser; tool calls are answered by tool. It records every event and every
// request sent.
type compressRun struct {
	t          testing.TB
	as         Agents
	st         *SessionState
	events     []messages.Envelope
	sent       []llm.Request
	usage      []messages.Usage
	model      llm.Model
	summariser llm.Model
	tool       func(messages.ToolCallRequested) string
	// keepRequests off keeps only the requests' purposes and usage (long runs).
	keepRequests bool
	purposes     []string
	// onRequest, when set, sees every request sent.
	onRequest func(llm.Request)
}

const compressSession = "s"

func newCompressRun(t testing.TB, a Agent, model, summariser llm.Model, tool func(messages.ToolCallRequested) string) *compressRun {
	as := Agents{Default: a}
	return &compressRun{t: t, as: as, st: NewSessionState(compressSession).WithAgents(as), model: model, summariser: summariser, tool: tool, keepRequests: true}
}

func (r *compressRun) add(p messages.Payload, cause, task, actor string) {
	r.t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		r.t.Fatal(err)
	}
	seq := r.st.LastSeq + 1
	e.ID, e.SessionID, e.Seq, e.TS, e.CausationID, e.CorrelationID, e.Actor = effectKey(compressSession, seq), compressSession, seq, int64(seq), cause, task, actor
	if err := r.st.applyEncoded(e, p); err != nil {
		r.t.Fatal(err)
	}
	r.events = append(r.events, e)
}

// task submits input and runs it until the session waits on nothing.
func (r *compressRun) task(input string) {
	r.t.Helper()
	r.add(&messages.TaskSubmitted{Input: input, Rules: ContextRules}, "", "", "ingress")
	r.settle()
}

// settle decides and performs until the session has nothing to do.
func (r *compressRun) settle() {
	r.t.Helper()
	for range 1000 {
		task := r.st.Active()
		if d := r.st.DecideAmong(r.as, r.st.LastSeq+1, int64(r.st.LastSeq+1)); d != nil {
			r.add(d.Payload, d.CausationID, d.TaskID, "session")
			continue
		}
		if _, reqID, ok := r.st.PendingModel(); ok {
			req := r.st.Request(r.as.Default)
			m, sent := r.model, req
			if req.Purpose != "" {
				m = r.summariser
			} else {
				sent.Step = r.loopStep() // the loop's script counts its own calls
			}
			resp, err := m.Generate(context.Background(), sent)
			p := &messages.ModelResponded{Key: r.st.pendingModelText(), Model: m.Name(), Message: resp.Message, Usage: resp.Usage}
			if err != nil {
				p.Error = err.Error()
			}
			r.purposes = append(r.purposes, req.Purpose)
			if r.onRequest != nil {
				r.onRequest(req)
			}
			r.usage = append(r.usage, resp.Usage)
			if r.keepRequests {
				r.sent = append(r.sent, req)
			}
			r.add(p, reqID, task, "model")
			continue
		}
		if pcs := r.st.PendingCalls(); len(pcs) > 0 {
			pc := pcs[0]
			r.add(&messages.ToolCallCompleted{Key: pc.Request.Key, CallID: pc.Request.CallID, Tool: pc.Request.Tool, Result: r.tool(pc.Request)}, pc.EventID, task, "tool")
			continue
		}
		return
	}
	r.t.Fatal("the session did not settle in 1000 moves")
}

// loopStep returns the number of the loop's model call in flight within its task:
// its step less the compression calls before it.
func (r *compressRun) loopStep() int {
	t := r.st.active
	n := t.Steps
	for i := len(r.events) - 1; i >= 0 && r.events[i].ID != t.ID; i-- {
		if r.events[i].Type == messages.TypeModelRequested && strings.Contains(string(r.events[i].Payload), `"purpose":`) {
			n--
		}
	}
	return n
}

// lastLoop returns the latest request of the agent's loop.
func (r *compressRun) lastLoop() llm.Request {
	for i := len(r.sent) - 1; i >= 0; i-- {
		if r.sent[i].Purpose == "" {
			return r.sent[i]
		}
	}
	r.t.Fatal("no loop request was sent")
	return llm.Request{}
}

// ofPurpose returns the requests sent with this purpose.
func (r *compressRun) ofPurpose(purpose string) []llm.Request {
	var out []llm.Request
	for _, q := range r.sent {
		if q.Purpose == purpose {
			out = append(out, q)
		}
	}
	return out
}

// verify checks that the recorded session verifies and that a refold of every
// prefix of it decides what was recorded next, and issues no compression call
// whose answer is recorded.
func (r *compressRun) verify() {
	r.t.Helper()
	if div, err := VerifyAmong(r.as, r.events); err != nil || div != nil {
		r.t.Fatalf("verify: %v %v", div, err)
	}
}

// refold returns the state folded from the first n recorded events.
func (r *compressRun) refold(n int) *SessionState {
	r.t.Helper()
	st := NewSessionState(compressSession).WithAgents(r.as)
	for _, e := range r.events[:n] {
		if err := st.Apply(e); err != nil {
			r.t.Fatal(err)
		}
	}
	return st
}

// scripted returns a scripted model whose every step answers content(step).
func scripted(t testing.TB, name string, steps int, content func(step int) string) *llm.Scripted {
	t.Helper()
	s := llm.Script{Name: name}
	for i := range steps {
		s.Steps = append(s.Steps, llm.ScriptStep{Content: content(i + 1)})
	}
	m, err := llm.NewScripted(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func compressAgent(c Compression) Agent {
	return Agent{Name: "default", Model: "m", SystemPrompt: "You are a careful assistant.", Context: ContextOptions{Compression: c}, MaxSteps: 10,
		Tools: []messages.ToolSpec{{Name: "fetch", Description: "fetches a page"}}}
}

func noTools(r messages.ToolCallRequested) string { return "unused" }

// conversation returns the contents of a request's messages after its system
// message, role-prefixed.
func conversation(req llm.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == messages.RoleSystem {
			continue
		}
		out = append(out, string(m.Role)+": "+m.Content)
	}
	return out
}

// The sliding window sends the latest turns only, moving two at a time, with a
// marker of how many it left out, and the task always; it makes no model call of
// its own.
func TestCompressWindowKeepsTheLatestTurnsAndTheTask(t *testing.T) {
	r := newCompressRun(t, compressAgent(Compression{Strategy: pctx.CompressWindow, Window: 4, Step: 2}),
		scripted(t, "m", 10, func(int) string { return "noted" }), nil, noTools)
	for i := range 6 {
		r.task(fmt.Sprintf("fact %d", i))
	}
	// 12 turns (6 tasks of a question and an answer), the 6th task's question the
	// 11th: the window keeps turns 9..11 (stepped: between 4 and 5 turns).
	got := conversation(r.lastLoop())
	want := []string{"user: [6 earlier turns of this conversation are not shown]", "user: fact 3", "assistant: noted", "user: fact 4", "assistant: noted", "user: fact 5"}
	if !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
	if n := len(r.sent); n != 6 || slices.ContainsFunc(r.purposes, func(p string) bool { return p != "" }) {
		t.Fatalf("%d calls with purposes %q, want the loop's 6 only", n, r.purposes)
	}
	r.verify()
}

// The summary strategy summarises the turns that leave the window, incrementally
// (the previous summary and the turns that left since), before the loop's call; the
// loop sends the summary and the window; a refold after the summary's answer does
// not call it again, and one before it issues it again with the same key and prompt.
func TestCompressSummaryIsIncrementalRecordedAndNotRepeated(t *testing.T) {
	r := newCompressRun(t, compressAgent(Compression{Strategy: pctx.CompressSummary, Window: 4, Step: 2}),
		scripted(t, "m", 10, func(int) string { return "noted" }),
		scripted(t, "summariser", 10, func(step int) string { return fmt.Sprintf("summary %d", step) }), noTools)
	for i := range 8 {
		r.task(fmt.Sprintf("fact %d", i))
	}
	calls := r.ofPurpose(pctx.PurposeSummarise)
	if len(calls) < 2 {
		t.Fatalf("%d summarise calls, want at least 2", len(calls))
	}
	first, second := calls[0].Messages[1].Content, calls[1].Messages[1].Content
	if strings.Contains(first, "summary so far") || !strings.Contains(first, "<turn role=\"user\">fact 0</turn>") {
		t.Fatalf("the first summary's prompt is %q, want the first turns and no earlier summary", first)
	}
	if !strings.Contains(second, "The summary so far:\nsummary 1") || strings.Contains(second, "fact 0") {
		t.Fatalf("the second summary's prompt is %q, want summary 1 and only the turns that left since", second)
	}
	last := conversation(r.lastLoop())
	if last[0] != "user: "+pctx.SummaryHeader+"\nsummary 1" {
		t.Fatalf("the loop's conversation begins %q, want the latest summary", last[0])
	}
	if len(last) > 1+5+1 {
		t.Fatalf("the loop sent %d messages: %q", len(last), last)
	}
	r.verify()

	// Refold up to the first summary's request: the same call is pending, with the
	// same key and the same prompt; refold past its answer: the next decision is the
	// loop's call, not the summary again.
	req := slices.IndexFunc(r.events, func(e messages.Envelope) bool {
		p, _ := e.Decode()
		mr, ok := p.(*messages.ModelRequested)
		return ok && mr.Purpose == pctx.PurposeSummarise
	})
	st := r.refold(req + 1)
	key, _, ok := st.PendingModel()
	if !ok || key.Seq != r.events[req].Seq {
		t.Fatalf("refolded mid-summary: pending %v %v, want the summary's call", key, ok)
	}
	again := st.Request(r.as.Default)
	if again.Purpose != pctx.PurposeSummarise || llm.PromptHash(again) != llm.PromptHash(calls[0]) {
		t.Fatalf("refolded mid-summary, the request is %q %q, want the first summary's", again.Purpose, again.Messages)
	}
	st = r.refold(req + 2) // and its answer
	d := st.DecideAmong(r.as, st.LastSeq+1, int64(st.LastSeq+1))
	if mr, ok := d.Payload.(*messages.ModelRequested); !ok || mr.Purpose != "" {
		t.Fatalf("refolded after the summary's answer, decided %+v, want the loop's model call", d.Payload)
	}
}

// Without a summary model the summary strategy makes no call: the turns that left
// the window are cut to their first lines under a visible marker.
func TestCompressSummaryWithoutAModelTruncatesWithAMarker(t *testing.T) {
	for _, model := range []string{NoSummaryModel, llm.OfflineName} {
		a := compressAgent(Compression{Strategy: pctx.CompressSummary, Window: 4, Step: 2, Model: model})
		r := newCompressRun(t, a, scripted(t, "m", 10, func(int) string { return "noted" }), nil, noTools)
		for i := range 6 {
			r.task(fmt.Sprintf("fact %d", i))
		}
		if slices.ContainsFunc(r.purposes, func(p string) bool { return p != "" }) {
			t.Fatalf("model %q: purposes %q, want no compression call", model, r.purposes)
		}
		first := conversation(r.lastLoop())[0]
		if !strings.Contains(first, "6 earlier turns truncated: no summary model is configured") || !strings.Contains(first, "- user: fact 0") {
			t.Fatalf("model %q: the conversation begins %q, want the truncation marker and first lines", model, first)
		}
		r.verify()
	}
}

// scriptOf returns a scripted model of these steps.
func scriptOf(t testing.TB, name string, steps ...llm.ScriptStep) *llm.Scripted {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: name, Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func callStep(id, tool, args string) llm.ScriptStep {
	return llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: id, Name: tool, Arguments: args}}}
}

// bigPage is a tool result of about 1000 estimated tokens.
var bigPage = "The report says the launch code is 7421. " + strings.Repeat("Filler text of a long page. ", 140)

// Observation masking replaces a large tool result by a pointer once the model
// has answered it, and the recall_observation tool the agent is offered gives it
// back from the session's own record, answered by the session without an effect.
func TestCompressMaskReplacesAnsweredObservationsAndRecallsThem(t *testing.T) {
	fetched := 0
	model := scriptOf(t, "m", callStep("call_1", "fetch", `{"url":"r"}`), callStep("call_2", pctx.RecallObservationTool, `{"id":"call_1"}`),
		llm.ScriptStep{Content: "the code is 7421"})
	r := newCompressRun(t, compressAgent(Compression{Strategy: pctx.CompressMask}), model, nil, func(messages.ToolCallRequested) string {
		fetched++
		return bigPage
	})
	r.task("What is the launch code?")
	if fetched != 1 {
		t.Fatalf("the tool ran %d times, want once (the recall is the session's)", fetched)
	}
	if len(r.sent) != 3 {
		t.Fatalf("%d requests, want 3", len(r.sent))
	}
	if !slices.ContainsFunc(r.sent[0].Tools, func(s messages.ToolSpec) bool { return s.Name == pctx.RecallObservationTool }) {
		t.Fatalf("the agent is not offered %s: %v", pctx.RecallObservationTool, r.sent[0].Tools)
	}
	if got := conversation(r.sent[1]); got[len(got)-1] != "tool: "+bigPage {
		t.Fatalf("the second request ends %q, want the unanswered result whole", got[len(got)-1])
	}
	third := conversation(r.sent[2])
	masked := pctx.MaskedObservation("call_1", llm.EstimateTokens([]messages.ChatMessage{{Role: messages.RoleTool, Content: bigPage}}))
	if third[2] != "tool: "+masked || third[len(third)-1] != "tool: "+bigPage {
		t.Fatalf("the third request is %q, want the first result masked and the recalled one whole", third)
	}
	for _, e := range r.events {
		if e.Type == messages.TypeToolCallCompleted && strings.Contains(string(e.Payload), pctx.RecallObservationTool) && e.Actor != "session" {
			t.Fatalf("the recall was answered by %q, want the session itself", e.Actor)
		}
	}
	if !sameTools(r.sent[0].Tools, r.sent[2].Tools) {
		t.Fatal("the tool section changed between calls")
	}
	r.verify()
}

// Proactive compression summarises a large tool result as it arrives, with a
// digest call before the loop's next call; without a model it cuts it with a
// marker. Either way the full result stays in the recorded events.
func TestCompressProactiveDigestsALargeResultBeforeTheNextStep(t *testing.T) {
	for _, withModel := range []bool{true, false} {
		c := Compression{Strategy: pctx.CompressProactive}
		if !withModel {
			c.Model = NoSummaryModel
		}
		model := scriptOf(t, "m", callStep("call_1", "fetch", `{"url":"r"}`), llm.ScriptStep{Content: "7421"}, llm.ScriptStep{Content: "7421"})
		r := newCompressRun(t, compressAgent(c), model, scripted(t, "summariser", 10, func(int) string { return "The launch code is 7421." }),
			func(messages.ToolCallRequested) string { return bigPage })
		r.task("What is the launch code?")
		digests := r.ofPurpose(pctx.PurposeDigest)
		last := conversation(r.lastLoop())
		result := last[len(last)-1]
		switch {
		case withModel && (len(digests) != 1 || !strings.Contains(digests[0].Messages[1].Content, bigPage)):
			t.Fatalf("digest calls %d, want one of the whole result", len(digests))
		case withModel && !strings.Contains(result, "summarised") || withModel && !strings.HasSuffix(result, "The launch code is 7421."):
			t.Fatalf("the loop sent the result as %q, want the digest", result)
		case !withModel && (len(digests) != 0 || !strings.Contains(result, "tokens truncated; the full result is in the session's log]")):
			t.Fatalf("without a model: %d digests, result sent as %q; want none and a cut with a marker", len(digests), result)
		}
		if !slices.ContainsFunc(r.events, func(e messages.Envelope) bool {
			return strings.Contains(string(e.Payload), "Filler text of a long page. Filler") && e.Type == messages.TypeToolCallCompleted
		}) {
			t.Fatal("the full result is not in the log")
		}
		r.verify()
	}
}

func sameTools(a, b []messages.ToolSpec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// sentText returns everything a request sends, joined.
func sentText(req llm.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString(m.Content + "\n")
	}
	return b.String()
}

// Hierarchical summaries: the turns leaving the window are summarised a chunk at a
// time; past MiddleChunks chunk summaries, the oldest are condensed into the
// summary of the oldest turns (a summary of summaries); the loop sends the old
// summary, the middle ones and the latest turns verbatim.
func TestCompressHierarchicalSummarisesChunksThenCondenses(t *testing.T) {
	r := newCompressRun(t, compressAgent(Compression{Strategy: pctx.CompressHierarchical, Window: 4, Step: 2, MiddleChunks: 2}),
		scripted(t, "m", 10, func(int) string { return "noted" }),
		scripted(t, "summariser", 10, func(step int) string { return fmt.Sprintf("digest-%d", step) }), noTools)
	for i := range 12 {
		r.task(fmt.Sprintf("fact %d", i))
	}
	chunks, condensed := r.ofPurpose(pctx.PurposeSummarise), r.ofPurpose(pctx.PurposeCondense)
	if len(chunks) < 4 || len(condensed) < 1 {
		t.Fatalf("%d chunk summaries and %d condensations, want at least 4 and 1", len(chunks), len(condensed))
	}
	// Each chunk summary reads its own two turns only.
	if c := chunks[1].Messages[1].Content; strings.Contains(c, "fact 0") || strings.Count(c, "<turn role=\"user\">fact") != 1 || strings.Contains(c, "summary so far") {
		t.Fatalf("the second chunk's prompt is %q, want its own turns only", c)
	}
	if c := condensed[0].Messages[1].Content; !strings.Contains(c, "Summaries of the turns after them") || !strings.Contains(c, "- digest-") {
		t.Fatalf("the condensation's prompt is %q, want the chunk summaries", c)
	}
	sent := sentText(r.lastLoop())
	if !strings.Contains(sent, "Long ago: digest-") || !strings.Contains(sent, "Then (turns") || !strings.Contains(sent, "fact 11") {
		t.Fatalf("the loop sent %q, want the old summary, the middle ones and the latest turns", sent)
	}
	if strings.Contains(sent, "fact 2\n") {
		t.Fatalf("the loop sent an old turn verbatim: %q", sent)
	}
	st := r.st.comp()
	if len(st.chunks) > 2 || st.old == "" {
		t.Fatalf("folded %d chunk summaries and old summary %q, want at most 2 and one", len(st.chunks), st.old)
	}
	r.verify()
}

// Importance filtering keeps the latest turns and the task, then the others by
// their importance within HistoryTokens: chit-chat goes first, a tool's error and
// the user's requests stay.
func TestCompressImportanceDropsChitChatFirst(t *testing.T) {
	model := scriptOf(t, "m", callStep("call_1", "fetch", `{"url":"x"}`), llm.ScriptStep{Content: "noted"}, llm.ScriptStep{Content: "noted"})
	r := newCompressRun(t, compressAgent(Compression{Strategy: pctx.CompressImportance, Window: 2, HistoryTokens: 120}), model, nil,
		func(messages.ToolCallRequested) string { return "error: the page does not exist" })
	for _, in := range []string{"hello", "The budget is 300 euros and the deadline is Friday, do not exceed either.", "thanks!", "ok", "Book the cheapest train to Lyon."} {
		r.task(in)
	}
	sent := sentText(r.lastLoop())
	for _, want := range []string{"Book the cheapest train", "The budget is 300 euros", "error: the page does not exist", "less important earlier turns"} {
		if !strings.Contains(sent, want) {
			t.Fatalf("the loop sent %q, want %q in it", sent, want)
		}
	}
	for _, chit := range []string{"hello\n", "thanks!\n"} {
		if strings.Contains(sent, chit) {
			t.Fatalf("the loop sent chit-chat %q: %q", chit, sent)
		}
	}
	r.verify()
}

// Extraction: the turns leaving the window go to an extract call, whose facts
// fold into the session's state and are sent with every later call, without
// repeats.
func TestCompressExtractFoldsFactsAndDecisions(t *testing.T) {
	r := newCompressRun(t, compressAgent(Compression{Strategy: pctx.CompressExtract, Window: 4, Step: 2}),
		scripted(t, "m", 10, func(int) string { return "noted" }),
		scripted(t, "extractor", 10, func(int) string { return "- The user's name is Ada.\n- Decided: answer in French." }), noTools)
	for i := range 8 {
		r.task(fmt.Sprintf("fact %d", i))
	}
	calls := r.ofPurpose(pctx.PurposeExtract)
	if len(calls) < 2 || !strings.Contains(calls[1].Messages[1].Content, "Already known (do not repeat):\n- The user's name is Ada.") {
		t.Fatalf("%d extract calls; want at least 2, the second told what is known", len(calls))
	}
	if got := r.st.comp().facts; !slices.Equal(got, []string{"The user's name is Ada.", "Decided: answer in French."}) {
		t.Fatalf("folded facts %q", got)
	}
	sent := sentText(r.lastLoop())
	if !strings.Contains(sent, "- The user's name is Ada.\n- Decided: answer in French.") || strings.Contains(sent, "fact 0\n") {
		t.Fatalf("the loop sent %q, want the facts and not the old turns", sent)
	}
	r.verify()
}

// Compaction: once what the conversation would send passes CompactTokens, a
// compact call writes a high-fidelity summary of all of it, and the history sent
// restarts from it: the compaction, the task, then the new turns only.
func TestCompressCompactRestartsTheHistory(t *testing.T) {
	r := newCompressRun(t, compressAgent(Compression{Strategy: pctx.CompressCompact, CompactTokens: 150}),
		scripted(t, "m", 10, func(int) string { return "noted, and here is a longer acknowledgement of what you said" }),
		scripted(t, "compactor", 10, func(int) string { return "COMPACTION: the user listed facts 0 to n." }), noTools)
	for i := range 10 {
		r.task(fmt.Sprintf("fact %d: %s", i, strings.Repeat("detail ", 20)))
	}
	calls := r.ofPurpose(pctx.PurposeCompact)
	if len(calls) < 2 || !strings.Contains(calls[1].Messages[1].Content, "began with this compaction") {
		t.Fatalf("%d compactions; want at least 2, the second given the first", len(calls))
	}
	// The first loop call after each compaction sends the compaction and the task only.
	for i, q := range r.sent[:len(r.sent)-1] {
		if q.Purpose != pctx.PurposeCompact {
			continue
		}
		got := conversation(r.sent[i+1])
		if len(got) != 2 || !strings.Contains(got[0], "COMPACTION") || !strings.HasPrefix(got[1], "user: fact ") {
			t.Fatalf("after a compaction the loop sent %q, want the compaction and the task", got)
		}
	}
	r.verify()
}

// longPrompt is a system prompt past the provider's 1024-token cache minimum.
var longPrompt = "You are a careful assistant. " + strings.Repeat("Follow the house rules: be brief, cite your sources, never guess. ", 90)

// A 10,000-turn conversation (5,000 tasks of a question and an answer) with the
// summary strategy: every call stays within the context's budget, the stable
// prefix (system message and tools) is byte-identical from the first call to the
// last, and the prompt cache the scripted model simulates reports cached tokens.
// The recorded session verifies.
func TestCompressTenThousandTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10,000-turn session")
	}
	cache := llm.NewPromptCache(0)
	a := compressAgent(Compression{Strategy: pctx.CompressSummary, Window: 8, Step: 4})
	a.Context.Window, a.Context.ReservedOutput = 4000, 1000
	a.SystemPrompt = longPrompt
	r := newCompressRun(t, a,
		scripted(t, "m", 3, func(int) string { return "noted" }).WithPromptCache(cache),
		scripted(t, "summariser", 3, func(int) string { return "The user has stated numbered facts; nothing else happened." }).WithPromptCache(cache), noTools)
	r.keepRequests = false
	var prefix string
	var specs []messages.ToolSpec
	maxSent, loops, cachedCalls := 0, 0, 0
	r.onRequest = func(q llm.Request) {
		if q.Purpose != "" {
			return
		}
		loops++
		if prefix == "" {
			prefix, specs = q.Messages[0].Content, q.Tools
		}
		if q.Messages[0].Content != prefix || !sameTools(q.Tools, specs) {
			t.Fatalf("loop call %d: the stable prefix changed", loops)
		}
		maxSent = max(maxSent, llm.EstimateTokens(q.Messages))
	}
	for i := range 5000 {
		r.task(fmt.Sprintf("Fact %d: the value of item %d is %d.", i, i, i*7))
	}
	for i, u := range r.usage {
		if r.purposes[i] == "" && u.CachedTokens >= 1024 {
			cachedCalls++
		}
	}
	budget := llm.EstimateTokens([]messages.ChatMessage{{Content: longPrompt}}) + 600
	if maxSent > budget {
		t.Fatalf("a call sent %d estimated tokens, over the budget of %d", maxSent, budget)
	}
	if loops != 5000 || cachedCalls < loops-1 {
		t.Fatalf("%d loop calls, %d of them with cached tokens; want 5000, all but the first", loops, cachedCalls)
	}
	t.Logf("%d events, %d loop calls (at most %d estimated tokens each), %d summaries; %d calls hit the prompt cache",
		len(r.events), loops, maxSent, len(r.purposes)-loops, cachedCalls)
	// Every request's context report: within its budget, nothing over.
	reports := 0
	for _, e := range r.events {
		if e.Type != messages.TypeModelRequested {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		c := p.(*messages.ModelRequested).Context
		if c == nil || c.Used > c.Budget || c.Over != 0 || c.Window != 4000 {
			t.Fatalf("event %d: context report %+v, want one within the budget of the window of 4000", e.Seq, c)
		}
		reports++
	}
	if reports != len(r.purposes) {
		t.Fatalf("%d reports for %d model calls", reports, len(r.purposes))
	}
	r.verify()
}

// With a memory tool, the facts an extraction folds are appended to the agent's
// core block by a recorded memory tool call (purpose store_facts), once each.
func TestCompressExtractWritesFactsToCoreMemory(t *testing.T) {
	a := compressAgent(Compression{Strategy: pctx.CompressExtract, Window: 4, Step: 2, MemoryTool: "memory"})
	a.Tools = append(a.Tools, messages.ToolSpec{Name: "memory", Description: "long-term memory"})
	var writes []string
	r := newCompressRun(t, a, scripted(t, "m", 10, func(int) string { return "noted" }),
		scripted(t, "extractor", 10, func(step int) string { return fmt.Sprintf("- Fact learnt at step %d.", step) }),
		func(c messages.ToolCallRequested) string {
			if c.Purpose != PurposeStoreFacts || c.Tool != "memory" {
				t.Fatalf("unexpected tool call %+v", c)
			}
			writes = append(writes, c.Arguments)
			return `{"label":"facts"}`
		})
	for i := range 8 {
		r.task(fmt.Sprintf("fact %d", i))
	}
	if len(writes) == 0 || !strings.Contains(writes[0], `"op":"core_memory_append"`) || !strings.Contains(writes[0], `"label":"facts"`) {
		t.Fatalf("memory writes %q, want core_memory_append calls to block facts", writes)
	}
	if n := len(r.ofPurpose(pctx.PurposeExtract)); len(writes) > n {
		t.Fatalf("%d writes for %d extractions", len(writes), n)
	}
	r.verify()
}

// A compression call never takes a task's last step: with one step a task, the
// summary waits and the loop answers, the turns not summarised sent as they are.
func TestCompressCallLeavesTheLastStepToTheLoop(t *testing.T) {
	a := compressAgent(Compression{Strategy: pctx.CompressSummary, Window: 2, Step: 2})
	a.MaxSteps = 1
	r := newCompressRun(t, a, scripted(t, "m", 1, func(int) string { return "noted" }),
		scripted(t, "summariser", 1, func(int) string { return "summary" }), noTools)
	for i := range 5 {
		r.task(fmt.Sprintf("fact %d", i))
	}
	if slices.ContainsFunc(r.purposes, func(p string) bool { return p != "" }) {
		t.Fatalf("purposes %q, want the loop's calls only", r.purposes)
	}
	if status, out, _ := r.st.Status(); status != messages.StatusCompleted || out != "noted" {
		t.Fatalf("the last task: %s %q", status, out)
	}
	if got := conversation(r.lastLoop()); len(got) != 9 {
		t.Fatalf("the loop sent %q, want all 9 messages while nothing is summarised", got)
	}
	r.verify()
}

// Strategies combine: summary+mask summarises the turns leaving the window and
// masks the large results the model answered within it (the latest result, not
// answered yet, is sent whole), and offers the recall tool; a strategy that picks
// turns twice is refused.
func TestCompressStrategiesCombine(t *testing.T) {
	model := scriptOf(t, "m", callStep("call_1", "fetch", `{"url":"r"}`), llm.ScriptStep{Content: "noted"}, llm.ScriptStep{Content: "noted"})
	r := newCompressRun(t, compressAgent(Compression{Strategy: "summary+mask", Window: 4, Step: 2}), model,
		scripted(t, "summariser", 10, func(int) string { return "the summary" }),
		func(messages.ToolCallRequested) string { return bigPage })
	for i := range 4 {
		r.task(fmt.Sprintf("fetch page %d", i))
	}
	if len(r.ofPurpose(pctx.PurposeSummarise)) == 0 {
		t.Fatal("no summary call")
	}
	last := r.lastLoop()
	sent := sentText(last)
	if !strings.Contains(sent, pctx.SummaryHeader+"\nthe summary") || !strings.Contains(sent, "[observation call_1 masked: ") || strings.Count(sent, bigPage) != 1 {
		t.Fatalf("the loop sent %q, want the summary, the answered result masked and only the latest, unanswered one whole", sent)
	}
	if !slices.ContainsFunc(last.Tools, func(s messages.ToolSpec) bool { return s.Name == pctx.RecallObservationTool }) {
		t.Fatal("the recall tool is not offered")
	}
	r.verify()
	for _, bad := range []string{"summary+window", "mask+mask", "summary+zip"} {
		if err := (Compression{Strategy: bad}).Validate(); err == nil {
			t.Errorf("compression %q was accepted", bad)
		}
	}
}

// A Go caller's compression whose step is past its window is refused, as the
// configuration files refuse it: it would send more turns than the window keeps.
func TestCompressionStepAtMostWindow(t *testing.T) {
	for _, c := range []struct {
		cfg Compression
		ok  bool
	}{
		{Compression{Strategy: "summary", Window: 4, Step: 50}, false},
		{Compression{Strategy: "summary", Step: 9}, false}, // the default window is 8
		{Compression{Strategy: "summary", Window: 4, Step: 4}, true},
		{Compression{Strategy: "summary", Step: 8}, true},
		{Compression{Strategy: "summary", Window: 20}, true},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", c.cfg, err, c.ok)
		}
	}
}
