package actors

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// Conversation compression: how an agent keeps a long conversation within its
// context (ContextOptions.Compression). A strategy is a deterministic function of the
// folded session: what it sends is decided from the conversation and from what
// compression's own model calls made of it. Those calls (summaries, compactions,
// extractions, digests) are model calls with a purpose (pipelines/context
// PurposeSummarise, …), decided before the loop's next model call, recorded with
// their idempotency keys like any effect, answered once, and folded into the
// session's compression state, never into the conversation: a refold or a replay
// reads their recorded answers and calls nothing again.
//
// Each such call is a model call of its task: it counts as a step (MaxSteps) and
// its tokens count against the task's budget. It is not made when it would take
// the task's last step: the loop's call goes first, with what is not summarised
// yet sent as it is (within the context's budget), and the call waits for a
// later step or task.
//
// Without a model for summaries (Compression.Model NoSummaryModel, or an agent on
// the offline rule-based model), the strategies that need one make no call: what
// they would summarise is cut with a visible marker instead (pctx.TruncatedSummary,
// pctx.ClipText), and the full text stays in the session's log.
//
// Whatever the strategy (or none), when the loop's context is still over budget
// after selection — an item always sent too big, cut with a marker (the task's
// input, the answer to the model's latest move), or core memory dropped — and the
// agent has a model for summaries, a call of purpose pctx.PurposeCondenseSection
// summarises the item of lowest value (the report's Summarize) first, under the
// same rules; its answer stands for the item, in its section, as an item of kind
// summary that Replaces it (sectionPlan). Without a model the cut stays.
//
// A strategy decides which turns are the context's candidates: the builder's own
// cut to the latest ContextOptions.HistoryTurns applies only when that is set.
//
// The stable prefix — the system prompt and the tool section — is never touched:
// what compression sends goes after it, so a provider's prefix cache keeps
// hitting it (and the conversation's own prefix, for as many calls as the window
// stands still: it moves Step turns at a time).

// Compression is an agent's conversation compression (ContextOptions.Compression:
// an agents file's context: compression: and the settings beside it). The zero
// value compresses nothing.
type Compression struct {
	// Strategy is one of pctx.CompressStrategies, or several joined by "+": at most
	// one that picks the turns (window, summary, hierarchical, importance, extract,
	// compact), with mask and/or proactive, which change large tool results in the
	// turns sent ("summary+mask"); "" for none.
	Strategy string
	// Window is how many of the latest turns are sent verbatim (default 8): a
	// turn is a user message, or an assistant message with its tool results
	// (pctx.SplitTurns). The task's own input is sent whatever the window.
	Window int
	// Step is how many turns the window moves at a time (default Window/2, at
	// least 1): older turns leave it, and are summarised, Step at a time.
	Step int
	// Model names the model compression's calls go to: "" for the agent's own,
	// NoSummaryModel for none (truncation instead).
	Model string
	// SummaryWords bounds a summary's length in words, as its prompt asks (default
	// 200; a compaction may use twice as many); without a model, the truncated
	// stand-in of a summary gets about as many tokens.
	SummaryWords int
	// ObservationTokens is the size from which a tool result is masked (mask) or
	// digested as it arrives (proactive), in estimated tokens (default 500).
	ObservationTokens int
	// CompactTokens is the size, in estimated tokens, from which what the
	// conversation would send is compacted (default 8000).
	CompactTokens int
	// MiddleChunks is how many chunk summaries hierarchical keeps before it
	// condenses the oldest into the summary of the oldest turns (default 4).
	MiddleChunks int
	// HistoryTokens is the estimated tokens importance filtering lets the
	// conversation send (default 6000).
	HistoryTokens int
	// MemoryTool, when set, is the memory tool (package memory's Toolbox, by its
	// name, e.g. "memory"; Expanded when its actions are tools of their own) that
	// extract writes the facts it folds to, appended to the core block MemoryBlock
	// (default "facts") of the agent's namespace: a tool call with the purpose
	// PurposeStoreFacts, recorded and performed like any, once per extraction that
	// found new facts. The agent must have the tool. Without it the facts stay in
	// the session's State section only.
	MemoryTool  string
	Expanded    bool
	MemoryBlock string
}

// PurposeStoreFacts is the purpose of the memory tool call that writes extracted
// facts to core memory (messages.ToolCallRequested.Purpose).
const PurposeStoreFacts = "store_facts"

// NoSummaryModel is a Compression.Model that names no model: compression makes no
// model call, and cuts with a marker what it would have summarised.
const NoSummaryModel = "none"

// Defaults of Compression's settings (Validate refuses negative ones).
func (c Compression) window() int  { return cmp.Or(c.Window, 8) }
func (c Compression) step() int    { return cmp.Or(c.Step, max(c.window()/2, 1)) }
func (c Compression) words() int   { return cmp.Or(c.SummaryWords, 200) }
func (c Compression) observe() int { return cmp.Or(c.ObservationTokens, 500) }
func (c Compression) compact() int { return cmp.Or(c.CompactTokens, 8000) }
func (c Compression) middle() int  { return cmp.Or(c.MiddleChunks, 4) }
func (c Compression) history() int { return cmp.Or(c.HistoryTokens, 6000) }

// Validate reports a strategy this package does not have, or a negative setting.
func (c Compression) Validate() error {
	if c.Strategy != "" {
		picks := 0
		for i, s := range c.strategies() {
			switch {
			case !slices.Contains(pctx.CompressStrategies, s):
				return fmt.Errorf("unknown compression %q in %q: want one of %s, or one with mask and/or proactive (summary+mask)", s, c.Strategy, strings.Join(pctx.CompressStrategies, ", "))
			case slices.Contains(c.strategies()[:i], s):
				return fmt.Errorf("compression %q names %s twice", c.Strategy, s)
			case s != pctx.CompressMask && s != pctx.CompressProactive:
				picks++
			}
		}
		if picks > 1 {
			return fmt.Errorf("compression %q: at most one of window, summary, hierarchical, importance, extract and compact, with mask and/or proactive", c.Strategy)
		}
	}
	for _, v := range []int{c.Window, c.Step, c.SummaryWords, c.ObservationTokens, c.CompactTokens, c.MiddleChunks, c.HistoryTokens} {
		if v < 0 {
			return fmt.Errorf("compression settings must not be negative")
		}
	}
	// A step past the window sends more turns verbatim than the window keeps (window
	// 4, step 50: 54 messages), as the configuration files refuse it.
	if window := cmp.Or(c.Window, 8); c.Step > window {
		return fmt.Errorf("compression step %d is more than its window of %d turns: the window moves at most its own length at a time", c.Step, window)
	}
	return nil
}

// strategies returns the strategies Strategy joins.
func (c Compression) strategies() []string {
	if c.Strategy == "" {
		return nil
	}
	return strings.Split(c.Strategy, "+")
}

// has reports whether the compression uses strategy s.
func (c Compression) has(s string) bool { return slices.Contains(c.strategies(), s) }

// picker returns the strategy that picks the turns sent ("" for none: all of
// them, large tool results changed by mask or proactive).
func (c Compression) picker() string {
	for _, s := range c.strategies() {
		if s != pctx.CompressMask && s != pctx.CompressProactive {
			return s
		}
	}
	return ""
}

// historyTurns returns the builder's HistoryTurns under compression: set, as set;
// unset, all (negative) when a strategy picks the turns, else the default (0).
func (c Compression) historyTurns(set int) int {
	if set == 0 && c.Strategy != "" {
		return -1
	}
	return set
}

// summaryModel returns the model compression's calls go to, and false when there
// is none: NoSummaryModel, or the offline rule-based model, which cannot summarise.
func (a *Agent) summaryModel() (string, bool) {
	m := a.Context.Compression.Model
	if m == "" {
		m = a.Model
	}
	return m, m != NoSummaryModel && m != llm.OfflineName && m != ""
}

// compressState is what a session's compression has folded: the answers of its
// model calls, by the part of the conversation (history indexes) they cover. A
// session has one once its compression folds something (comp): a session without
// compression, the most, has none, and its SessionState fits a smaller size class.
type compressState struct {
	// turns memoises pctx.SplitTurns of the history of length turnsOf.
	turns   []pctx.TurnSpan
	turnsOf int
	// summary covers history[:summaryEnd] (summary).
	summary    string
	summaryEnd int
	// chunks cover the middle turns, oldest first; old covers history[:oldEnd]
	// (hierarchical).
	chunks []chunkSummary
	old    string
	oldEnd int
	// compaction covers history[:compactEnd] (compact).
	compaction string
	compactEnd int
	// facts were extracted from history[:extractEnd] (extract).
	facts      []string
	extractEnd int
	// stored facts were written to core memory (or their write requested);
	// storeKey is the key of the write in flight.
	stored    int
	storeKey  string
	storeTask string
	// digests stand for large tool results, by history index
	// (SessionState.digestScan is where the next one is looked for: proactive).
	digests map[int]string
	// noteTokens memoises the tokens of noteText, the latest message of
	// compression's own sent (a summary changes once every Step turns at most).
	noteText   string
	noteTokens int
	// sections are the summaries of items always sent that did not fit the
	// context (PurposeCondenseSection), by the item's ID; each stands for the item
	// while its text is the one summarised.
	sections map[string]*sectionSummary
	// importance memoises importance filtering's weights and ranks of the turns
	// (nil until it first filters: a pointer keeps SessionState in its size class).
	importance *importanceRank
	// pending is the compression call in flight, and its key.
	pending    *compressCall
	pendingKey string
}

// comp returns the session's compression state, made on first use. What only
// reads the state reads s.compress, nil while compression folded nothing, as the
// zero compressState.
func (s *SessionState) comp() *compressState {
	if s.compress == nil {
		s.compress = &compressState{}
	}
	return s.compress
}

// sectionSummaries returns the summaries of items always sent, by the item's ID
// (compressState.sections): nil for none.
func (s *SessionState) sectionSummaries() map[string]*sectionSummary {
	if s.compress == nil {
		return nil
	}
	return s.compress.sections
}

// sectionSummary is the summary of one context item (PurposeCondenseSection): of
// is the item's text it summarises, text what stands for it. The item built from
// it is made once.
type sectionSummary struct {
	of, text string
	built    bool
	msg      *messages.ChatMessage
	replaces []string
	tokens   int
}

// chunkSummary is the summary of history[from:to].
type chunkSummary struct {
	from, to int
	text     string
}

// compressCall is a model call compression decides: its purpose and what it covers.
type compressCall struct {
	purpose  string
	from, to int  // the history it summarises, compacts or extracts from
	index    int  // the tool result a digest is of
	chunks   int  // how many chunk summaries a condensation folds
	chunk    bool // a summary of one chunk of middle turns (hierarchical)
	// The item a section's condensation summarises: its ID, its text, what it is
	// (as its summary says), its tokens, and the words its summary may take.
	item, of, what string
	tokens, words  int
	// rules is the rules version of the task that made the call, recorded
	// with its request: what decides its answer (answerLonger).
	rules int
}

// historyTurns returns the turns of the session's conversation.
func (s *SessionState) historyTurns() []pctx.TurnSpan {
	c := s.comp()
	if c.turnsOf > len(s.history) { // the history only grows; were it cut, what was derived from it goes
		c.turns, c.turnsOf, c.importance = nil, 0, nil
	}
	if c.turnsOf == len(s.history) {
		return c.turns
	}
	from := 0
	if n := len(c.turns); n > 0 {
		from = c.turns[n-1].Start // the last turn may have grown
		c.turns = c.turns[:n-1]
	}
	for _, t := range pctx.SplitTurns(s.history[from:]) {
		c.turns = append(c.turns, pctx.TurnSpan{Start: t.Start + from, End: t.End + from})
	}
	c.turnsOf = len(s.history)
	return c.turns
}

// windowStart returns the history index where the window of the latest turns
// begins, and the turn index of it.
func (s *SessionState) windowStart(c Compression) (msg, turn int) {
	turns := s.historyTurns()
	k := pctx.SteppedStart(len(turns), c.window(), c.step())
	if k >= len(turns) {
		return len(s.history), k
	}
	return turns[k].Start, k
}

// turnAt returns the index of the turn that starts at history index msg (the
// number of turns before it).
func (s *SessionState) turnAt(msg int) int {
	turns := s.historyTurns()
	return sort.Search(len(turns), func(i int) bool { return turns[i].Start >= msg })
}

func estimate(m messages.ChatMessage) int { return llm.EstimateTokens([]messages.ChatMessage{m}) }

// compressPlan returns the compression call the session needs before the loop's
// next model call, or nil: the strategy's (strategyPlan), then the condensation
// of an item always sent that the context still cuts (sectionPlan). It is a pure
// function of the folded state and the agent.
func (s *SessionState) compressPlan(a *Agent) *compressCall {
	if _, ok := a.summaryModel(); !ok {
		return nil
	}
	if call := s.strategyPlan(a); call != nil {
		return call
	}
	return s.sectionPlan(a)
}

// strategyPlan returns the call the agent's compression strategy needs, or nil.
func (s *SessionState) strategyPlan(a *Agent) *compressCall {
	c := a.Context.Compression
	if c.Strategy == "" {
		return nil
	}
	st := s.comp()
	if c.has(pctx.CompressProactive) {
		for i := s.digestScan; i < len(s.history); i++ {
			m := s.history[i]
			if _, done := st.digests[i]; !done && m.Role == messages.RoleTool && estimate(m) > c.observe() {
				return &compressCall{purpose: pctx.PurposeDigest, index: i}
			}
		}
	}
	switch c.picker() {
	case pctx.CompressSummary:
		if ws, _ := s.windowStart(c); ws > st.summaryEnd {
			return &compressCall{purpose: pctx.PurposeSummarise, from: st.summaryEnd, to: ws}
		}
	case pctx.CompressExtract:
		if ws, _ := s.windowStart(c); ws > st.extractEnd {
			return &compressCall{purpose: pctx.PurposeExtract, from: st.extractEnd, to: ws}
		}
	case pctx.CompressHierarchical:
		if n := len(st.chunks); n > c.middle() {
			return &compressCall{purpose: pctx.PurposeCondense, chunks: n - c.middle()}
		}
		from := st.oldEnd
		if n := len(st.chunks); n > 0 {
			from = st.chunks[n-1].to
		}
		_, wt := s.windowStart(c)
		if ft := s.turnAt(from); ft+c.step() <= wt {
			turns := s.historyTurns()
			to := len(s.history)
			if ft+c.step() < len(turns) {
				to = turns[ft+c.step()].Start
			}
			return &compressCall{purpose: pctx.PurposeSummarise, from: from, to: to, chunk: true}
		}
	case pctx.CompressCompact:
		turns := s.historyTurns()
		if s.turnAt(st.compactEnd)+2 > len(turns) {
			return nil // fewer than two turns since the last compaction
		}
		size := 0
		if st.compaction != "" {
			size = estimate(messages.ChatMessage{Content: st.compaction})
		}
		size += llm.EstimateTokens(s.history[st.compactEnd:])
		if size > c.compact() {
			return &compressCall{purpose: pctx.PurposeCompact, from: st.compactEnd, to: len(s.history)}
		}
	}
	return nil
}

// sectionPlan returns the call that summarises the item of lowest value that the
// loop's next context still cuts to fit its budget (the report's Summarize, of its
// Truncated items: the task's input, the answer to the model's latest move), or
// drops though it is stable for the task (core memory, a paradigm's section), or
// nil. A summary is never
// summarised again (it is cut, with its marker), and an item is summarised once
// while its text stays the same. A paradigm's calls are not condensed.
func (s *SessionState) sectionPlan(a *Agent) *compressCall {
	if s.active == nil || a.Paradigm != nil {
		return nil
	}
	_, _, report := s.loopContext(a)
	if len(report.Summarize) == 0 {
		return nil
	}
	for _, id := range report.Summarize {
		it, ok := s.loopItem(id)
		text := itemText(it)
		if !ok || it.Kind == pctx.KindSummary || text == "" {
			continue
		}
		if sum, done := s.sectionSummaries()[id]; done && sum.of == text {
			continue // summarised already, and still too big: it is cut or dropped
		}
		// The summary gets about the room the cut left the item, or what the
		// budget has left (less its header), three words to four tokens, within
		// twice the strategy's summary words.
		room, tokens := 0, 0
		if k := slices.IndexFunc(report.Truncated, func(ci messages.ContextItem) bool { return ci.ID == id }); k >= 0 {
			room, tokens = report.Truncated[k].Tokens, report.Truncated[k].From
		} else if k := slices.IndexFunc(report.Dropped, func(ci messages.ContextItem) bool { return ci.ID == id }); k >= 0 && it.Stable {
			room, tokens = report.Budget-report.Used, report.Dropped[k].Tokens
		} else {
			continue // a turn or evidence dropped: the conversation's compression is for those
		}
		words := min(max((room-40)*3/4, 20), 2*a.Context.Compression.words())
		return &compressCall{purpose: pctx.PurposeCondenseSection, item: id, of: text, what: itemWhat(it), tokens: tokens, words: words}
	}
	return nil
}

// itemText returns the text of a context item: its message's content, or its text.
func itemText(it pctx.Item) string {
	if it.Message != nil {
		return it.Message.Content
	}
	return it.Text
}

// itemWhat says what a context item is, as its summary names it.
func itemWhat(it pctx.Item) string {
	switch {
	case it.Kind == pctx.KindTask:
		return "the task's input"
	case it.ID == "memory/core":
		return "the agent's core memory"
	case it.Message != nil && it.Message.Role == messages.RoleTool:
		return fmt.Sprintf("the result of %s (%s)", it.Message.Name, it.Message.ToolCallID)
	case it.Message != nil:
		return fmt.Sprintf("the %s's message %s", it.Message.Role, it.ID)
	}
	return it.Kind + " " + it.ID
}

// appendSectionSummaries is the hook of the loop's context (loopContext): after
// each item a folded section summary stands for, it appends the summary, an item
// of kind summary in the item's section, group and place that Replaces it.
func (s *SessionState) appendSectionSummaries(items []pctx.Item) []pctx.Item {
	st := s.compress
	if st == nil || len(st.sections) == 0 {
		return items
	}
	for i, n := 0, len(items); i < n; i++ {
		sum, ok := st.sections[items[i].ID]
		if !ok || itemText(items[i]) != sum.of {
			continue
		}
		it := items[i]
		if !sum.built {
			sum.built, sum.replaces = true, []string{it.ID}
			if it.Message != nil {
				m := *it.Message
				m.Content = sum.text
				sum.msg, sum.tokens = &m, pctx.CountMessage(contextTokens, m)
			} else {
				sum.tokens = pctx.CountText(contextTokens, sum.text)
			}
		}
		it.ID, it.Kind, it.Replaces, it.Tokens = "summary/"+it.ID, pctx.KindSummary, sum.replaces, sum.tokens
		if it.Message != nil {
			it.Message = sum.msg
		} else {
			it.Text = sum.text
		}
		items = append(items, it)
	}
	return items
}

// compressPrompt returns the messages of a compression call. Under the running
// task's rules from rulesQuotedTurns, the turns a summary, a compaction or an
// extraction reads are quoted data (pctx.RenderQuotedTurns): under older rules
// they were "role: text" lines, and a user's message holding "\nassistant: …"
// read as the agent's words.
func (s *SessionState) compressPrompt(a Agent, call *compressCall) []messages.ChatMessage {
	c, st := a.Context.Compression, s.comp()
	const resultTokens = 1000 // each tool result as a summariser reads it
	summarise, compact, extract := pctx.SummariseRequest, pctx.CompactRequest, pctx.ExtractRequest
	if s.activeRules() >= rulesQuotedTurns {
		summarise, compact, extract = pctx.SummariseQuotedRequest, pctx.CompactQuotedRequest, pctx.ExtractQuotedRequest
	}
	switch call.purpose {
	case pctx.PurposeSummarise:
		if call.chunk {
			return summarise("", s.history[call.from:call.to], c.words()/2, resultTokens)
		}
		return summarise(st.summary, s.history[call.from:call.to], c.words(), resultTokens)
	case pctx.PurposeCondense:
		texts := make([]string, 0, call.chunks)
		for _, ch := range st.chunks[:min(call.chunks, len(st.chunks))] {
			texts = append(texts, ch.text)
		}
		return pctx.CondenseRequest(st.old, texts, c.words())
	case pctx.PurposeCompact:
		return compact(st.compaction, s.history[call.from:call.to], 2*c.words(), resultTokens)
	case pctx.PurposeExtract:
		return extract(st.facts, s.history[call.from:call.to], resultTokens)
	case pctx.PurposeDigest:
		task := ""
		if s.active != nil {
			task = s.active.Spec.Input
		}
		return pctx.DigestRequest(task, s.history[call.index], c.words())
	case pctx.PurposeCondenseSection:
		return pctx.CondenseSectionRequest(call.what, call.of, call.words)
	}
	return nil
}

// compressRequest returns the request of a compression call, fitted to the
// agent's window as a paradigm's prompt is (paradigmContext), and the report of
// its context.
func (s *SessionState) compressRequest(a Agent, call *compressCall) (llm.Request, *messages.ContextReport) {
	req, report := s.paradigmContext(a, nil, llm.Request{Messages: s.compressPrompt(a, call), Purpose: call.purpose})
	if m := a.Context.Compression.Model; m != "" {
		req.Models = []string{m}
	}
	return req, report
}

// decideCompression is the hook of the loop's decision before its model call: the
// compression call to make first, or wait true while one is in flight.
func (s *SessionState) decideCompression(a *Agent, t *taskState, nextSeq uint64) (d *Decision, wait bool) {
	if t.pending != nil || s.compress != nil && s.compress.storeKey != "" && s.compress.storeTask == t.ID {
		return nil, true
	}
	if d := s.decideStoreFacts(a, t, nextSeq); d != nil {
		return d, false
	}
	if t.Steps+1 >= a.maxSteps(t) {
		return nil, false // no step would be left for the loop: the call waits for a later task
	}
	call := s.compressPlan(a)
	if call == nil {
		return nil, false
	}
	if t.rules >= rulesNoVainCompression && s.prefixOverWindow(a) {
		return nil, false // no call could make the request fit: the loop fails the task (overWindow)
	}
	req, report := s.compressRequest(*a, call)
	req.Step = t.Steps + 1
	model, _ := a.summaryModel()
	return &Decision{Payload: &messages.ModelRequested{
		Key: s.keyAt(nextSeq), Model: model, Step: t.Steps + 1, Messages: len(req.Messages),
		PromptHash: llm.PromptHash(req), Purpose: call.purpose, Context: report,
	}, CausationID: t.ID, TaskID: t.ID}, false
}

// prefixOverWindow reports whether the stable prefix of the loop's next request
// (the system prompt, its tool section and the tools' schemas), which no
// compression shortens, is alone larger than the model's context window: the
// request cannot fit whatever a compression call would make of the rest, and the
// task fails with context_overflow (overWindow). From rules 11
// (rulesNoVainCompression) no compression call is made first; older rules made
// one (a condensation of the task's input), spending its tokens for nothing.
func (s *SessionState) prefixOverWindow(a *Agent) bool {
	_, _, r := s.loopContext(a)
	return r != nil && r.Window > 0 && r.System > r.Window
}

// decideStoreFacts returns the memory tool call that appends the facts extracted
// since the last one to the agent's core block, or nil.
func (s *SessionState) decideStoreFacts(a *Agent, t *taskState, nextSeq uint64) *Decision {
	c, st := a.Context.Compression, s.compress
	if c.picker() != pctx.CompressExtract || c.MemoryTool == "" || st == nil || st.stored >= len(st.facts) {
		return nil
	}
	op := struct {
		Label   string `json:"label"`
		Content string `json:"content"`
	}{cmp.Or(c.MemoryBlock, "facts"), "- " + strings.Join(st.facts[st.stored:], "\n- ")}
	tool, args := Reflexion{MemoryTool: c.MemoryTool, Expanded: c.Expanded}.tool("core_memory_append", op)
	if !a.hasTool(tool) {
		return nil
	}
	return &Decision{Payload: &messages.ToolCallRequested{Key: s.keyAt(nextSeq), CallID: fmt.Sprintf("facts/%d", len(st.facts)),
		Tool: tool, Arguments: args, Step: t.Steps, Purpose: PurposeStoreFacts}, CausationID: t.ID, TaskID: t.ID}
}

// compressionRequest is the hook of Request: the request of the compression call
// in flight, if one is.
func (s *SessionState) compressionRequest(a *Agent) (llm.Request, bool) {
	t := s.active
	if t == nil || t.pending == nil || !pctx.IsCompressPurpose(t.pending.req.Purpose) || s.compress == nil || s.compress.pending == nil {
		return llm.Request{}, false
	}
	req, _ := s.compressRequest(*a, s.compress.pending)
	req.Step, req.Key = t.Steps, t.pending.req.Key
	return req, true
}

// foldCompression folds an event into the session's compression state: the
// request of a compression call (what it covers, planned again from the state it
// was decided on), its answer, and the loop's model calls (the tool results before
// one are no longer new).
func (s *SessionState) foldCompression(e messages.Envelope, p messages.Payload) {
	t := s.active
	st := s.compress // nil: compression folded nothing yet
	switch p := p.(type) {
	case *messages.ToolCallRequested:
		if p.Purpose == PurposeStoreFacts && t != nil && e.CorrelationID == t.ID {
			st = s.comp()
			if _, err := fmt.Sscanf(p.CallID, "facts/%d", &st.stored); err == nil {
				st.storeKey, st.storeTask = p.Key, t.ID
			}
		}
	case *messages.ToolCallCompleted:
		if st != nil && st.storeKey != "" && p.Key == st.storeKey {
			st.storeKey = "" // written, or not: the facts stay in the State section either way
		}
	case *messages.ModelRequested:
		if t == nil || e.CorrelationID != t.ID {
			return
		}
		if p.Purpose == "" {
			s.digestScan = len(s.history)
			return
		}
		if !pctx.IsCompressPurpose(p.Purpose) {
			return
		}
		a, ok := s.agents.For(t.Spec.Agent)
		if !ok {
			return
		}
		a = t.runs(a)
		st = s.comp()
		st.pending, st.pendingKey = nil, p.Key
		if call := s.compressPlan(&a); call != nil && call.purpose == p.Purpose {
			call.rules = t.rules
			st.pending = call
		}
	case *messages.ModelResponded:
		if st == nil || st.pendingKey == "" || p.Key != st.pendingKey {
			return
		}
		call := st.pending
		st.pending, st.pendingKey = nil, ""
		if call == nil {
			return
		}
		a, _ := s.agents.For(s.ActiveAgent())
		a = s.runAgent(a)
		text := strings.TrimSpace(p.Message.Content)
		if p.Error != "" || text == "" {
			text = s.compressFallback(a, call, p.Error)
		} else if why := s.answerLonger(call, text); why != "" {
			text = "[the summary call answered, but " + why + ": truncated instead]\n" + s.compressFallback(a, call, "")
		}
		s.foldAnswer(call, text)
	}
}

// foldAnswer folds the answer of a compression call.
func (s *SessionState) foldAnswer(call *compressCall, text string) {
	st := s.comp()
	s.ctx.last.ok = false // the context built last did not have it
	switch call.purpose {
	case pctx.PurposeSummarise:
		if call.chunk {
			st.chunks = append(st.chunks, chunkSummary{from: call.from, to: call.to, text: text})
			return
		}
		st.summary, st.summaryEnd = text, call.to
	case pctx.PurposeCondense:
		n := min(call.chunks, len(st.chunks))
		if n > 0 {
			st.old, st.oldEnd = text, st.chunks[n-1].to
			st.chunks = slices.Delete(st.chunks, 0, n)
		}
	case pctx.PurposeCompact:
		st.compaction, st.compactEnd = text, call.to
	case pctx.PurposeExtract:
		st.facts = append(st.facts, pctx.ParseFacts(text, st.facts)...)
		st.extractEnd = call.to
	case pctx.PurposeDigest:
		if st.digests == nil {
			st.digests = map[int]string{}
		}
		st.digests[call.index] = text
	case pctx.PurposeCondenseSection:
		if st.sections == nil {
			st.sections = map[string]*sectionSummary{}
		}
		st.sections[call.item] = &sectionSummary{of: call.of, text: pctx.CondensedSection(call.what, call.tokens, text)}
	}
}

// answerLonger says why text, the answer of the compression call call, is not
// taken when it is longer than what it condenses (a digest longer than its tool
// result, a summary longer than its turns), both counted by llm.EstimateTokens
// (four bytes a token) from their recorded texts: from rules 11
// (rulesShorterDigest, the rules of the task that made the call), its fallback
// stands for it (compressFallback). It is "" when the answer is taken: it is no
// longer, the call extracts facts (their list is bounded otherwise), or the task
// ran under older rules, which took it.
func (s *SessionState) answerLonger(call *compressCall, text string) string {
	if call.rules < rulesShorterDigest {
		return ""
	}
	of := 0
	switch call.purpose {
	case pctx.PurposeSummarise, pctx.PurposeCompact:
		if call.from < 0 || call.to > len(s.history) || call.from > call.to {
			return ""
		}
		of = llm.EstimateTokens(s.history[call.from:call.to])
	case pctx.PurposeCondense:
		st := s.comp()
		of = estimate(messages.ChatMessage{Content: st.old})
		for _, ch := range st.chunks[:min(call.chunks, len(st.chunks))] {
			of += estimate(messages.ChatMessage{Content: ch.text})
		}
	case pctx.PurposeDigest:
		if call.index < 0 || call.index >= len(s.history) {
			return ""
		}
		of = estimate(s.history[call.index])
	case pctx.PurposeCondenseSection:
		of = estimate(messages.ChatMessage{Content: call.of}) // call.tokens is the context's cl100k count
	default:
		return ""
	}
	if n := estimate(messages.ChatMessage{Content: text}); n > of {
		return fmt.Sprintf("its answer of %d tokens is longer than the %d it condenses", n, of)
	}
	return ""
}

// compressFallback is what stands for a compression call's answer when the call
// failed or answered nothing: the truncation it would have made without a model.
func (s *SessionState) compressFallback(a Agent, call *compressCall, why string) string {
	c := a.Context.Compression
	var text string
	switch call.purpose {
	case pctx.PurposeSummarise, pctx.PurposeCompact:
		text = pctx.TruncatedSummary(s.history[call.from:call.to], s.turnAt(call.to)-s.turnAt(call.from), c.words())
	case pctx.PurposeCondense:
		var b strings.Builder
		st := s.comp()
		b.WriteString(st.old)
		for _, ch := range st.chunks[:min(call.chunks, len(st.chunks))] {
			b.WriteString("\n" + ch.text)
		}
		text = pctx.ClipText(b.String(), len(b.String())/4, c.words(), "")
	case pctx.PurposeExtract:
		return "none"
	case pctx.PurposeDigest:
		m := s.history[call.index]
		text = pctx.ClipText(m.Content, estimate(m), c.observe(), "the full result is in the session's log")
	case pctx.PurposeCondenseSection:
		text = pctx.ClipText(call.of, call.tokens, call.words*4/3, "")
	}
	if why != "" {
		text = "[the summary call failed (" + why + "): truncated instead]\n" + text
	}
	return text
}

// sentPart is one message compression sends: history[index] as sentMessage
// makes it, or, index −1, a message of its own (a summary, a marker of what is
// not shown) with its item ID (a summary's names the history it stands for, so
// that it is stable while that does not change).
type sentPart struct {
	index int
	msg   messages.ChatMessage
	id    string
}

// compressedParts returns what the conversation sends under the agent's
// compression, in order — its own messages first, then the task's input when the
// history sent begins after it, then the history sent — and the facts extract
// keeps, for the context's State section ("" for none).
func (s *SessionState) compressedParts(a *Agent) (parts []sentPart, state string) {
	c := a.Context.Compression
	st := s.comp()
	_, model := a.summaryModel()
	from := 0
	note := func(id, text string) {
		parts = append(parts, sentPart{index: -1, id: id, msg: messages.ChatMessage{Role: messages.RoleUser, Content: text}})
	}
	notShown := func(end int) {
		if end > 0 {
			note(fmt.Sprintf("summary/0-%d", end), fmt.Sprintf("[%d earlier turns of this conversation are not shown]", s.turnAt(end)))
		}
	}
	truncated := func(end int) {
		if end > 0 {
			note(fmt.Sprintf("summary/0-%d", end), pctx.SummaryHeader+"\n"+pctx.TruncatedSummary(s.history[:end], s.turnAt(end), c.words()))
		}
	}
	switch c.picker() {
	case pctx.CompressWindow:
		from, _ = s.windowStart(c)
		notShown(from)
	case pctx.CompressSummary:
		from, _ = s.windowStart(c)
		if !model {
			truncated(from)
			break
		}
		// What the summary does not cover yet is sent as it is (a summary call that
		// would have taken the task's last step waits).
		from = st.summaryEnd
		if st.summary != "" {
			note(fmt.Sprintf("summary/0-%d", from), pctx.SummaryHeader+"\n"+st.summary)
		}
	case pctx.CompressExtract:
		from, _ = s.windowStart(c)
		if !model {
			truncated(from)
			break
		}
		from = st.extractEnd // the turns not extracted from yet are sent as they are
		notShown(from)
		state = s.compressionState(a)
	case pctx.CompressHierarchical:
		from, _ = s.windowStart(c)
		if !model {
			truncated(from)
			break
		}
		var b strings.Builder
		if st.old != "" {
			b.WriteString("Long ago: " + st.old)
		}
		for _, ch := range st.chunks {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			fmt.Fprintf(&b, "Then (turns %d–%d): %s", s.turnAt(ch.from)+1, s.turnAt(ch.to), ch.text)
		}
		from = st.oldEnd
		if n := len(st.chunks); n > 0 {
			from = st.chunks[n-1].to
		}
		if b.Len() > 0 {
			note(fmt.Sprintf("summary/0-%d", from), pctx.SummaryHeader+"\n"+b.String())
		}
	case pctx.CompressCompact:
		if !model {
			from, _ = s.windowStart(c)
			truncated(from)
			break
		}
		from = st.compactEnd
		if st.compaction != "" {
			note(fmt.Sprintf("summary/0-%d", from), pctx.SummaryHeader+"\n"+st.compaction)
		}
	case pctx.CompressImportance:
		return s.importantParts(c), ""
	}
	if t := s.active; t != nil && t.start < from {
		parts = append(parts, sentPart{index: t.start, msg: s.history[t.start]}) // the task is always sent
	}
	answered := len(s.history) // the results before the latest assistant message were answered
	for i := len(s.history) - 1; i >= from; i-- {
		if s.history[i].Role == messages.RoleAssistant {
			answered = i
			break
		}
	}
	for i := from; i < len(s.history); i++ {
		parts = append(parts, sentPart{index: i, msg: s.sentMessage(c, i, i < answered)})
	}
	return parts, state
}

// appendConversation is the hook of the loop's context (loopContext): it appends
// the conversation's items, as compression sends it (compressedParts) under the
// agent's compression, or all of it (appendTurns) without one. Compression's own
// messages (a summary, a marker of what is not shown) are pinned summary items
// ahead of the turns; the task's input is pinned; a turn that compression changed
// (a masked or digested result) is counted again, a masked one of kind masked;
// the turns are grouped and the latest group pinned as appendTurns does; the
// facts extract keeps are a State item, after the conversation.
func (s *SessionState) appendConversation(a *Agent, items []pctx.Item, start int) []pctx.Item {
	if a.Context.Compression.Strategy == "" {
		return s.appendTurns(items, start, 0, a.Context.pairing())
	}
	parts, state := s.compressedParts(a)
	first := len(items)
	group, answering := "", map[string]bool{}
	question, answer := "", -1 // the group of an earlier task's input, and the index of its answer to come
	for k := range parts {
		p := &parts[k]
		if p.index < 0 {
			c := s.comp()
			if c.noteText != p.msg.Content {
				c.noteText, c.noteTokens = p.msg.Content, pctx.CountMessage(contextTokens, p.msg)
			}
			items = append(items, pctx.Item{ID: p.id, Kind: pctx.KindSummary, Section: pctx.SectionContext, Pos: k - len(parts),
				Message: &p.msg, Tokens: c.noteTokens, Pinned: true, Relevance: 1})
			continue
		}
		i, m := p.index, p.msg
		it := pctx.Item{ID: "turn/" + strconv.Itoa(i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: i,
			Message: &p.msg, Tokens: s.turnTokens(i), Relevance: 0.5}
		if m.Content != s.history[i].Content {
			it.Tokens = pctx.CountMessage(contextTokens, m)
			if strings.HasPrefix(m.Content, "[observation ") {
				it.Kind = pctx.KindMasked
			}
		}
		switch {
		case i == start:
			it.ID, it.Kind, it.Section, it.Pinned, it.Relevance = "task", pctx.KindTask, pctx.SectionTask, true, 1
			group = ""
		case i == answer:
			it.Group, question, answer, group = question, "", -1, ""
		case a.Context.pairing() != noPairs && answerPart(parts[k+1:], s.answerOf(i, start, a.Context.pairing())):
			it.Group, question, answer, group = it.ID, it.ID, s.answerOf(i, start, a.Context.pairing()), ""
		case len(m.ToolCalls) > 0:
			group = it.ID
			clear(answering)
			for _, c := range m.ToolCalls {
				answering[c.ID] = true
			}
			it.Group = group
		case m.Role == messages.RoleTool && group != "" && answering[m.ToolCallID]:
			it.Group = group
		default:
			group = ""
		}
		if i > start {
			it.Relevance = 1
		}
		items = append(items, it)
	}
	// Pin the latest group (or message) after the task's input.
	if n := len(items); n > first && items[n-1].Pos > start {
		g := items[n-1].Group
		for i := n - 1; i >= first && items[i].Pos > start && (i == n-1 || g != "" && items[i].Group == g); i-- {
			items[i].Pinned = true
		}
	}
	if state != "" {
		items = append(items, pctx.Item{ID: "state/facts", Kind: pctx.KindState, Section: pctx.SectionState, Text: state, Relevance: 1})
	}
	return items
}

// answerPart reports whether the answer at index j of the history (answerOf) is
// among parts, the parts after its question: the question's group then holds it.
func answerPart(parts []sentPart, j int) bool {
	for _, p := range parts {
		if p.index == j {
			return true
		}
		if p.index > j {
			break
		}
	}
	return false
}

// sentMessage returns history[i] as compression sends it: a large tool result the
// model has answered (an assistant message follows it) masked (mask), or
// digested (proactive).
func (s *SessionState) sentMessage(c Compression, i int, answered bool) messages.ChatMessage {
	m := s.history[i]
	if m.Role != messages.RoleTool {
		return m
	}
	n := estimate(m)
	switch {
	case n <= c.observe():
	case c.has(pctx.CompressMask) && answered:
		m.Content = pctx.MaskedObservation(m.ToolCallID, n)
	case c.has(pctx.CompressProactive):
		if d, ok := s.comp().digests[i]; ok {
			m.Content = fmt.Sprintf("[result of %s summarised: %d tokens; the full result is in the session's log]\n%s", m.ToolCallID, n, d)
		} else {
			m.Content = pctx.ClipText(m.Content, n, c.observe(), "the full result is in the session's log")
		}
	}
	return m
}

// importantParts returns the conversation importance filtering sends: the
// latest Window turns and the task always, then the other turns by importance
// (pctx.TurnImportance), the newer first among equals, while they fit
// HistoryTokens; kept turns in their order, after a marker of how many were left
// out. The turns' weights and ranks are kept from step to step (importanceRank),
// and the walk jumps over the turns that cannot fit, so a step costs what it
// sends, not the history.
func (s *SessionState) importantParts(c Compression) []sentPart {
	turns := s.historyTurns()
	st := s.comp()
	if st.importance == nil {
		st.importance = &importanceRank{}
	}
	r := st.importance
	budget := c.history()
	task := -1
	if s.active != nil {
		task = s.turnAt(s.active.start)
	}
	recent := max(len(turns)-c.window(), 0)
	r.weigh(s.history, turns, recent)
	weight := func(i int) turnWeight {
		if i < len(r.turns) {
			return r.turns[i]
		}
		return weighTurn(s.history[turns[i].Start:turns[i].End]) // the latest turn, which may grow
	}
	kept := r.kept[:0]
	for i := recent; i < len(turns); i++ {
		budget -= weight(i).tokens
	}
	if task >= 0 && task < recent {
		kept = append(kept, task)
		budget -= weight(task).tokens
	}
	// The turns before the window, as importance ranks them: each level's newest
	// first, jumping over those that do not fit. (The window keeps one turn at
	// least, so the latest, which may still grow, is never among them.)
	for _, l := range r.levels {
		for k := l.tokens.lastAtMost(len(l.turns)-1, budget); k >= 0; k = l.tokens.lastAtMost(k-1, budget) {
			if i := l.turns[k]; i < recent && i != task {
				kept, budget = append(kept, i), budget-r.turns[i].tokens
			}
		}
	}
	slices.Sort(kept)
	r.kept = kept
	size := 1
	for _, i := range kept {
		size += turns[i].End - turns[i].Start
	}
	if recent < len(turns) {
		size += len(s.history) - turns[recent].Start
	}
	out := make([]sentPart, 0, size)
	if dropped := recent - len(kept); dropped > 0 {
		out = append(out, sentPart{index: -1, id: fmt.Sprintf("summary/dropped-%d", dropped), msg: messages.ChatMessage{Role: messages.RoleUser,
			Content: fmt.Sprintf("[%d less important earlier turns of this conversation are not shown]", dropped)}})
	}
	answered := len(s.history) // the results before the latest assistant message were answered
	for i := len(s.history) - 1; i >= 0; i-- {
		if s.history[i].Role == messages.RoleAssistant {
			answered = i
			break
		}
	}
	send := func(tr pctx.TurnSpan) {
		for j := tr.Start; j < tr.End; j++ {
			out = append(out, sentPart{index: j, msg: s.sentMessage(c, j, j < answered)})
		}
	}
	for _, i := range kept {
		send(turns[i])
	}
	for _, tr := range turns[recent:] {
		send(tr)
	}
	return out
}

// compressionState returns the facts and decisions compression extracted, as a
// section of the context ("" for none).
func (s *SessionState) compressionState(a *Agent) string {
	if a.Context.Compression.picker() != pctx.CompressExtract || s.compress == nil || len(s.compress.facts) == 0 {
		return ""
	}
	return "Facts and decisions from earlier in this conversation:\n- " + strings.Join(s.compress.facts, "\n- ")
}

// compressionTools returns specs with the tools compression gives the agent (the
// recall of masked observations): specs itself when it gives none.
func (a *Agent) compressionTools(specs []messages.ToolSpec) []messages.ToolSpec {
	if !a.Context.Compression.has(pctx.CompressMask) || slices.ContainsFunc(specs, func(s messages.ToolSpec) bool { return s.Name == pctx.RecallObservationTool }) {
		return specs
	}
	return append(slices.Clip(specs), pctx.RecallObservationSpec)
}

// decideRecall is the hook of the loop's tool calls: a call of recall_observation
// is answered here, from the session's own recorded conversation, without an
// effect: the masked result's full text, or why there is none.
func (s *SessionState) decideRecall(a *Agent, t *taskState) *Decision {
	if !a.Context.Compression.has(pctx.CompressMask) {
		return nil
	}
	for _, c := range t.calls {
		if c.done || c.req.Tool != pctx.RecallObservationTool {
			continue
		}
		res := &messages.ToolCallCompleted{Key: c.req.Key, CallID: c.req.CallID, Tool: c.req.Tool}
		var args struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(c.req.Arguments), &args); err != nil || args.ID == "" {
			res.Error = `recall_observation takes {"id": "<the masked call's id>"}`
		} else if m, ok := s.observation(args.ID); ok {
			res.Result = m.Content
		} else {
			res.Error = fmt.Sprintf("no tool result with id %q in this session", args.ID)
		}
		return &Decision{Payload: res, CausationID: c.eventID, TaskID: t.ID}
	}
	return nil
}

// observation returns the tool result of the call with this ID, the latest one.
func (s *SessionState) observation(callID string) (messages.ChatMessage, bool) {
	for i := len(s.history) - 1; i >= 0; i-- {
		if m := s.history[i]; m.Role == messages.RoleTool && m.ToolCallID == callID {
			return m, true
		}
	}
	return messages.ChatMessage{}, false
}
