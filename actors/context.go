package actors

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/react"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// ContextOptions bound the context of an agent's model calls (package
// pipelines/context): every request is built within the model's window less the
// tokens reserved for its answer, and its report rides on the ModelRequested
// (messages.ContextReport). The zero value takes the defaults, under which a
// conversation of up to DefaultHistoryTurns messages that fits the window is sent
// whole, as it always was.
type ContextOptions struct {
	// Window is the model's context window in tokens (0: pctx.DefaultWindow).
	Window int
	// ReservedOutput is the tokens kept for the model's answer (0:
	// pctx.DefaultReservedOutput).
	ReservedOutput int
	// HistoryTurns is how many of the latest conversation messages are candidates
	// (0: pctx.DefaultHistoryTurns; negative: all). The task's input and the
	// answer to the model's latest move are always sent.
	HistoryTurns int
	// Compression keeps a long conversation within the window (compress.go).
	Compression Compression
	// Evidence, Recall and Notes are how many document chunks, memories and notes
	// each task gathers before its first model call from the agent's sources
	// (Agent.Sources; gather.go): at most MaxEvidence, MaxRecall and MaxNotes; 0
	// or negative: none (package node resolves its defaults into them).
	Evidence, Recall, Notes int
	// rules is the version of the decision rules the options build under (0:
	// ContextRules; rules.go, Agent.underRules).
	rules int
}

// Bounds of ContextOptions.
const (
	MinContextWindow = 256
	MaxContextWindow = 10_000_000
	MaxHistoryTurns  = 100_000
)

// Validate reports options an agent cannot run with: a field out of range
// (ValidateFields), or reserved output that leaves no room in the window, with
// the defaults of the fields that are 0.
func (o ContextOptions) Validate() error {
	if err := o.ValidateFields(); err != nil {
		return err
	}
	window := cmp.Or(o.Window, pctx.DefaultWindow)
	if reserved := cmp.Or(o.ReservedOutput, pctx.DefaultReservedOutput); reserved >= window {
		return fmt.Errorf("context reserved output %d leaves no room in the window of %d tokens: reserve less, or widen the window", reserved, window)
	}
	return nil
}

// ValidateFields reports the fields that are set and out of range: a window
// outside MinContextWindow to MaxContextWindow, a negative reserved output or one
// not less than a window that is set, history turns beyond MaxHistoryTurns. It
// judges options whose 0 fields come from elsewhere (a named agent's, which take
// the node's); Validate judges them once complete.
func (o ContextOptions) ValidateFields() error {
	if o.Window != 0 && (o.Window < MinContextWindow || o.Window > MaxContextWindow) {
		return fmt.Errorf("context window %d is out of range: want %d to %d tokens (0: %d)", o.Window, MinContextWindow, MaxContextWindow, pctx.DefaultWindow)
	}
	if o.ReservedOutput < 0 || o.Window != 0 && o.ReservedOutput >= o.Window {
		return fmt.Errorf("context reserved output %d is out of range: want 1 to less than the window (0: %d)", o.ReservedOutput, pctx.DefaultReservedOutput)
	}
	if o.HistoryTurns > MaxHistoryTurns {
		return fmt.Errorf("context history turns %d is out of range: want 1 to %d, or negative for all (0: %d)", o.HistoryTurns, MaxHistoryTurns, pctx.DefaultHistoryTurns)
	}
	if err := o.validateGather(); err != nil {
		return err
	}
	return o.Compression.Validate()
}

// CheckPromptFits reports a stable prefix that leaves no room in the agent's
// context window for a task: the system prompt (with its tool section, when a
// ToolDisclosure adds one) and the schemas of the tools its first request offers
// (name, description and parameters, as a request sends them), counted as the
// context counts them (cl100k_base, with the system message's framing), reach the
// window less the tokens reserved for the answer. Such an agent would cut every
// task's own input to fit, and answer a question it never read. The error is a
// *PromptFitError.
func (a Agent) CheckPromptFits() error {
	window := cmp.Or(a.Context.Window, pctx.DefaultWindow)
	room := window - cmp.Or(a.Context.ReservedOutput, pctx.DefaultReservedOutput)
	specs, section := a.offer(nil)
	prefix := stablePrefix(a.SystemPrompt, section)
	prompt := pctx.CountText(contextTokens, prefix)
	toolTokens := 0
	switch {
	case len(specs) > 0 && a.writesTools():
		toolTokens = pctx.CountText(contextTokens, "\n\n"+react.ToolSection(specs))
	case len(specs) > 0:
		// Counted as prefixCounts.tools counts them, without remembering the slice
		// (which may be this call's own).
		b, _ := json.Marshal(specs) // fixed struct types: it cannot fail
		toolTokens = pctx.CountText(contextTokens, string(b))
	}
	if n := pctx.MessageOverhead + prompt + toolTokens; n >= room {
		return &PromptFitError{Prompt: prompt, Tools: len(specs), ToolTokens: toolTokens, Total: n, Window: window, Reserved: window - room}
	}
	return nil
}

// PromptFitError is the error of an agent whose stable prefix leaves no room for a
// task in its context window (Agent.CheckPromptFits), with its counts in tokens.
type PromptFitError struct {
	// Prompt is the system prompt's tokens (with its tool section, if any).
	Prompt int
	// Tools is how many tools the agent's first request offers, ToolTokens their
	// schemas' tokens.
	Tools, ToolTokens int
	// Total is the prefix's tokens: the prompt, the schemas and the system
	// message's framing.
	Total int
	// Window is the context window, Reserved the tokens kept for the answer.
	Window, Reserved int
}

func (e *PromptFitError) Error() string {
	what, fix := fmt.Sprintf("its system prompt is %d tokens", e.Prompt), "shorten the prompt"
	if e.Tools > 0 {
		fix += ", offer fewer tools"
		tools := fmt.Sprintf("the schemas of the %d tools it offers are", e.Tools)
		if e.Tools == 1 {
			tools = "the schema of the tool it offers is"
		}
		what += fmt.Sprintf(" and %s %d tokens: %d in all, with the message's framing", tools, e.ToolTokens, e.Total)
	}
	return fmt.Sprintf("%s, which leaves no room for a task in the context window of %d tokens less the %d reserved for the answer: "+
		"%s, or widen the window (context.window)", what, e.Window, e.Reserved, fix)
}

// pairing is how a context ties an earlier task's input to its answer (answerOf).
type pairing uint8

const (
	noPairs     pairing = iota // not at all (rules before rulesAnswerPairs)
	directPairs                // to the answer that follows it directly (rulesAnswerPairs)
	// exchangePairs ties it to the answer that ends its exchange, after the tool
	// calls and results between them (rulesExchangeAnswers).
	exchangePairs
)

// pairing returns how o's contexts keep an earlier task's input and its answer
// together.
func (o ContextOptions) pairing() pairing {
	switch {
	case o.rules == 0 || o.rules >= rulesExchangeAnswers:
		return exchangePairs
	case o.rules >= rulesAnswerPairs:
		return directPairs
	}
	return noPairs
}

// options returns the builder's options of o.
func (o ContextOptions) options() pctx.Options {
	return pctx.Options{Window: o.Window, ReservedOutput: o.ReservedOutput, HistoryTurns: o.Compression.historyTurns(o.HistoryTurns),
		HeadCut: o.rules == 1, AdditiveJoins: o.rules != 0 && o.rules < rulesExactJoins}
}

// contextTokens counts tokens for every session's context: cl100k_base, exactly as
// rag.TiktokenCounter counts it (rag.Cl100k, which allocates nothing per count).
// Its ranks are compiled into the binary, loaded once on first use and never
// changed after: a table like a compiled regular expression, shared so that each
// session does not load its own. Every node and every replay counts with it, so a
// context built in replay is the one built live.
var contextTokens = &pctx.Cl100k{}

// prefixCounts remembers the counts of the texts every session of an agent shares:
// its stable prefixes and its tools' schemas (by the identity of the agent's
// slice of specs, which nothing modifies). A count is a pure function of its text,
// so what it remembers changes no decision; it only spares each new session
// counting its agent's prompt again. It holds at most maxPrefixCounts texts.
var prefixCounts = &countMemo{texts: map[string]int{}, specs: map[specsID]int{}}

const maxPrefixCounts = 512

type specsID struct {
	first *messages.ToolSpec
	n     int
}

type countMemo struct {
	mu    sync.Mutex
	texts map[string]int
	specs map[specsID]int
	// last is the text counted or found last, with its count: the prompt of an
	// agent whose sessions start one after another, compared without hashing it
	// (a string compares equal to itself without reading its bytes).
	last atomic.Pointer[textCount]
}

type textCount struct {
	s string
	n int
}

// text returns the tokens of s.
func (m *countMemo) text(s string) int {
	if l := m.last.Load(); l != nil && l.s == s {
		return l.n
	}
	m.mu.Lock()
	n, ok := m.texts[s]
	m.mu.Unlock()
	if ok {
		m.last.Store(&textCount{s, n})
		return n
	}
	n = contextTokens.Count(s)
	m.last.Store(&textCount{s, n})
	m.mu.Lock()
	if len(m.texts) >= maxPrefixCounts {
		clear(m.texts)
	}
	m.texts[s] = n
	m.mu.Unlock()
	return n
}

// tools returns the tokens of the specs' JSON encoding, as a request sends them.
func (m *countMemo) tools(specs []messages.ToolSpec) int {
	if len(specs) == 0 {
		return 0
	}
	id := specsID{&specs[0], len(specs)}
	m.mu.Lock()
	n, ok := m.specs[id]
	m.mu.Unlock()
	if ok {
		return n
	}
	b, _ := json.Marshal(specs) // fixed struct types: it cannot fail
	n = m.text(string(b))
	m.mu.Lock()
	if len(m.specs) >= maxPrefixCounts {
		clear(m.specs)
	}
	m.specs[id] = n
	m.mu.Unlock()
	return n
}

// contextCache keeps the token counts a session's contexts reuse from call to
// call: each conversation message is counted once, the stable prefix and the
// tools' schemas while they do not change. The counts are a pure function of the
// texts, so the cache changes no decision.
type contextCache struct {
	turns      []int32   // tokens of history[i] (int32: SessionState fits a smaller size class)
	turnsBuf   [12]int32 // turns' first array: a task's few turns need no allocation
	ids        []string  // the item IDs of history[i], from len(smallTurnIDs) on
	sys        string
	sysTokens  int
	tools      []messages.ToolSpec // the specs toolTokens is of (compared by identity)
	toolTokens int
	written    bool // toolTokens counts the specs as the ReAct protocol writes them (writesTools)
	// items holds the candidates of the latest build when its report names items
	// to summarise (loopItem), else is nil: the candidates' buffers are shared by
	// the sessions (takeItems, keepItems).
	items *[]pctx.Item
	// last is the latest built request, reused while nothing it was built from
	// changed (Decide builds it, then the session's effect builds it again).
	last struct {
		ok     bool
		key    contextKey
		msgs   []messages.ChatMessage
		report *messages.ContextReport
	}
}

// contextKey is what a loop request is built from, besides the conversation (which
// only grows, so its length says it).
type contextKey struct {
	task     string // the active task's ID
	agent    string
	history  int
	prompt   string
	section  string
	paradigm string
	opts     ContextOptions
	specs    *messages.ToolSpec
	nspecs   int
	gathered int // the task's gathered items and notes (gather.go)
}

// turnTokens returns the tokens of history message i, counted once.
func (s *SessionState) turnTokens(i int) int {
	c := &s.ctx
	if c.turns == nil {
		c.turns = c.turnsBuf[:0] // SessionState is only ever used by pointer
	}
	if n := len(s.history); len(c.turns) < n {
		c.turns = append(slices.Grow(c.turns, n+8-len(c.turns)), make([]int32, n-len(c.turns))...)
	}
	if c.turns[i] == 0 {
		n := pctx.CountMessage(contextTokens, s.history[i])
		if n > math.MaxInt32 {
			return n // not kept: no message is that long
		}
		c.turns[i] = int32(n)
	}
	return int(c.turns[i])
}

// turnID returns the ID of history message i as a context item ("turn/<i>"),
// made once.
func (s *SessionState) turnID(i int) string {
	if i < len(smallTurnIDs) {
		return smallTurnIDs[i]
	}
	c := &s.ctx
	for len(c.ids) <= i-len(smallTurnIDs) {
		c.ids = append(c.ids, "turn/"+strconv.Itoa(len(smallTurnIDs)+len(c.ids)))
	}
	return c.ids[i-len(smallTurnIDs)]
}

// compressedItems is the room for candidates a build under conversation
// compression starts with: its summaries and the turns of its window, which do not
// grow with the conversation as the conversation's messages do (appending more
// grows the buffer).
const compressedItems = 64

// itemsHeadroom is the room for more candidates a buffer of them is made with: a
// tool call and its result, twice.
const itemsHeadroom = 4

// maxPooledCandidates bounds the candidates' buffers itemsPool keeps.
const maxPooledCandidates = 1024

// itemsPool holds the candidates' buffers of the sessions' builds (loopContext):
// a session holds one only while loopItem may look in it, so that an idle session
// holds none and a new session's first build makes none.
var itemsPool = sync.Pool{New: func() any { return new([]pctx.Item) }}

// takeItems returns an empty buffer of candidates with room for need of them: the
// one the latest build kept, else a shared one.
func (c *contextCache) takeItems(need int) []pctx.Item {
	if c.items == nil {
		c.items = itemsPool.Get().(*[]pctx.Item)
	}
	items := *c.items
	clear(items[:cap(items)])
	if cap(items) < need {
		// With room for the turns of a step or two.
		items = make([]pctx.Item, 0, need+itemsHeadroom)
	}
	return items[:0]
}

// keepItems keeps items, the candidates of the latest build, for loopItem when
// keep, else gives their buffer back to the sessions, emptied: it keeps no text
// or message.
func (c *contextCache) keepItems(items []pctx.Item, keep bool) {
	if keep {
		*c.items = items
		return
	}
	clear(items[:cap(items)])
	*c.items = nil
	if cap(items) <= maxPooledCandidates {
		*c.items = items[:0]
	}
	itemsPool.Put(c.items)
	c.items = nil
}

// smallTurnIDs are the IDs of the first conversation messages, made once (a
// constant table, never written after).
var smallTurnIDs = func() (ids [64]string) {
	for i := range ids {
		ids[i] = "turn/" + strconv.Itoa(i)
	}
	return ids
}()

// prefixTokens returns the tokens of the stable prefix: the system message's text
// and the tools' schemas, with the message's framing; when written (writesTools),
// the tools as the ReAct text protocol writes them after the system message
// instead of their schemas.
func (s *SessionState) prefixTokens(text string, specs []messages.ToolSpec, written bool) int {
	c := &s.ctx
	if text != c.sys || c.sysTokens == 0 {
		c.sys, c.sysTokens = text, prefixCounts.text(text)
	}
	switch {
	case c.written != written:
		c.tools, c.toolTokens, c.written = specs, specsTokens(specs, written), written
	case sameSpecs(c.tools, specs) && c.tools != nil:
	case c.tools != nil && equalSpecs(c.tools, specs):
		c.tools = specs // the same tools in a new slice (a catalog's merge)
	default:
		c.tools, c.toolTokens = specs, specsTokens(specs, written)
	}
	return pctx.MessageOverhead + c.sysTokens + c.toolTokens
}

// specsTokens returns the tokens of the tools specs offer: their schemas as a
// request sends them, or, written, the section the ReAct text protocol writes
// after the system message in their place (react.ToolSection, with its join; none
// for no tools, which the protocol does not write).
func specsTokens(specs []messages.ToolSpec, written bool) int {
	if !written {
		return prefixCounts.tools(specs)
	}
	if len(specs) == 0 {
		return 0
	}
	return prefixCounts.text("\n\n" + react.ToolSection(specs))
}

// writesTools reports whether the agent's requests have their tools written into
// the system message by the ReAct text protocol (llm.ProtocolReAct), and counted
// so from rules 11 (rulesReActTools): older rules counted their schemas.
func (a *Agent) writesTools() bool {
	return a.Protocol == llm.ProtocolReAct && (a.Context.rules == 0 || a.Context.rules >= rulesReActTools)
}

// stablePrefix is the system message's stable part: the system prompt, then the
// tools' section (Disclosure), as it always was.
func stablePrefix(prompt, toolSection string) string {
	if toolSection == "" {
		return prompt
	}
	return strings.TrimSuffix(prompt+"\n\n"+toolSection, "\n")
}

// loopContext builds the context of the loop's next model call: the tools it
// offers, its messages and the report of the build.
//
// The candidates are the stable prefix (the system prompt and the tool section:
// Role & Policies), the task's core memory and the paradigm's section (State,
// stable for the task: they follow the prefix in the system message), the task's
// input (pinned) and the conversation's other messages, each a turn: an assistant
// message with tool calls and the results answering it are one group, and the
// latest group after the task's input is pinned (the model sees the answer to its
// latest move). Turns of the running task are fully relevant, earlier tasks' half;
// recency ranks them all. With nothing to drop, the messages are the system
// message and the whole conversation, in order.
func (s *SessionState) loopContext(a *Agent) ([]messages.ChatMessage, []messages.ToolSpec, *messages.ContextReport) {
	return s.buildLoopContext(a, true)
}

// buildLoopContext is loopContext; with older, it leaves out of the candidates the
// conversation's messages that the history window cuts whatever the others are
// (olderTurns), and counts them in the report's Older as the builder would have:
// the context and its report are those of the build with every message, at a cost
// that does not grow with the session's history.
func (s *SessionState) buildLoopContext(a *Agent, older bool) ([]messages.ChatMessage, []messages.ToolSpec, *messages.ContextReport) {
	specs, section := a.offer(s.loads)
	t := s.active
	paradigm := ""
	if t != nil && t.run != nil {
		if ps, ok := t.run.(promptSectioner); ok {
			paradigm = ps.section()
		}
	}
	key := contextKey{agent: a.Name, history: len(s.history), prompt: a.SystemPrompt, section: section, paradigm: paradigm, opts: a.Context, nspecs: len(specs)}
	if len(specs) > 0 {
		key.specs = &specs[0]
	}
	if t != nil {
		key.task, key.gathered = t.ID, t.gather.size()
	}
	if l := &s.ctx.last; l.ok && l.key == key {
		return l.msgs, specs, l.report
	}

	prefix := stablePrefix(a.SystemPrompt, section)
	start := len(s.history) // the task's input; past the end when no task runs
	if t != nil {
		start = t.start
	}
	from := 0 // the first message of the conversation that is a candidate
	need := compressedItems
	if a.Context.Compression.Strategy == "" {
		if older {
			from = s.olderTurns(a, start)
		}
		need = len(s.history) - from + 4
	}
	items := s.ctx.takeItems(need) // the build copies what it keeps
	items = append(items, pctx.Item{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: prefix,
		Tokens: s.prefixTokens(prefix, specs, a.writesTools())})
	if t != nil {
		if t.Spec.Memory != "" {
			items = append(items, pctx.Item{ID: "memory/core", Kind: pctx.KindMemory, Section: pctx.SectionState, Stable: true,
				Text: coreMemorySection(t.Spec.Memory), Relevance: 1})
		}
		if paradigm != "" {
			items = append(items, pctx.Item{ID: "state/" + a.Paradigm.Name(), Kind: pctx.KindState, Section: pctx.SectionState, Stable: true,
				Text: paradigm, Relevance: 1})
		}
	}
	if from > 0 {
		items = s.appendTurns(items, start, from, a.Context.pairing())
	} else {
		items = s.appendConversation(a, items, start)
	}
	var notes []string
	if t != nil {
		items, notes = t.gather.appendItems(items, a.Context.rules)
	}
	items = s.appendSectionSummaries(items)
	b := pctx.Builder{Tokenizer: contextTokens, Options: a.Context.options()}
	// With a model for summaries, the report names what to summarise, and the
	// session summarises what is still cut (compress.go, sectionPlan).
	_, b.Options.Summarize = a.summaryModel()
	msgs, report, err := b.BuildMessages(items)
	s.ctx.keepItems(items, err != nil || len(report.Summarize) > 0) // else loopItem looks up none of them
	if err != nil {
		// The items are made here with unique IDs and counts: it cannot fail.
		panic("actors: building a context: " + err.Error())
	}
	report.Notes = notes
	if from > 0 {
		report.Older += from
		if start < from {
			report.Older-- // the task's input, pinned, is a candidate
		}
	}
	s.ctx.last.ok, s.ctx.last.key, s.ctx.last.msgs, s.ctx.last.report = true, key, msgs, report
	return msgs, specs, report
}

// loopItem returns the candidate with this ID of the loop's latest context
// (loopContext) when its report names items to summarise: the items it was built
// from then stay until the next build (when it names none, sectionPlan looks up
// none, and they are not kept).
func (s *SessionState) loopItem(id string) (pctx.Item, bool) {
	if s.ctx.items == nil {
		return pctx.Item{}, false
	}
	for _, it := range *s.ctx.items {
		if it.ID == id {
			return it, true
		}
	}
	return pctx.Item{}, false
}

// appendTurns appends the conversation's messages as items: the one at start (the
// task's input) pinned, the others turns, grouped and the latest group after start
// pinned. An earlier task's input and its answer are a group too, as pairs says
// (answerOf).
//
// Only the messages from from on are appended (and the task's input when it comes
// before them): from is 0, or the start of a message that begins no group's results
// (olderTurns).
func (s *SessionState) appendTurns(items []pctx.Item, start, from int, pairs pairing) []pctx.Item {
	first := len(items)
	if start < from && start < len(s.history) {
		items = append(items, pctx.Item{ID: "task", Kind: pctx.KindTask, Section: pctx.SectionTask, Pinned: true, Pos: start,
			Message: &s.history[start], Tokens: s.turnTokens(start), Relevance: 1})
	}
	group, calls := "", []messages.ToolCall(nil) // the group going on, and the calls its results answer
	question, answer := "", -1                   // the group of an earlier task's input, and its answer to come
	for i := from; i < len(s.history); i++ {
		m := s.history[i]
		it := pctx.Item{ID: s.turnID(i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: i,
			Message: &s.history[i], Tokens: s.turnTokens(i), Relevance: 0.5}
		switch {
		case i == start:
			it.ID, it.Kind, it.Section, it.Pinned, it.Relevance = "task", pctx.KindTask, pctx.SectionTask, true, 1
			group = ""
		case i == answer:
			it.Group, question, answer, group = question, "", -1, ""
		case pairs != noPairs && s.answerOf(i, start, pairs) > i:
			it.Group, question, answer, group = it.ID, it.ID, s.answerOf(i, start, pairs), ""
		case len(m.ToolCalls) > 0:
			group, calls = it.ID, m.ToolCalls
			it.Group = group
		case m.Role == messages.RoleTool && group != "" && slices.ContainsFunc(calls, func(c messages.ToolCall) bool { return c.ID == m.ToolCallID }):
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
	return items
}

// answerOf returns the index of the answer of the message at i when it is an
// earlier task's input (a user message before the running task's, start), else
// -1. Its answer is an assistant message without tool calls, also before start:
// with directPairs the message that follows it directly (rulesAnswerPairs); with
// exchangePairs the last of the messages that follow it up to the next user
// message (rulesExchangeAnswers), after the tool calls and results of its
// exchange, which stay groups of their own. The two go or stay together, so that
// no prompt sends an answer without the question it answers: a run of answers
// after the system message tells the model nothing of what they answer, and a
// chat template that wants the roles to alternate refuses it.
func (s *SessionState) answerOf(i, start int, pairs pairing) int {
	if i+1 >= start || i+1 >= len(s.history) || s.history[i].Role != messages.RoleUser {
		return -1
	}
	j := i + 1
	if pairs == exchangePairs {
		for j+1 < start && j+1 < len(s.history) && s.history[j+1].Role != messages.RoleUser {
			j++
		}
	}
	if a := s.history[j]; a.Role != messages.RoleAssistant || len(a.ToolCalls) > 0 {
		return -1
	}
	return j
}

// olderTurns returns how many of the conversation's first messages the history
// window of agent a cuts from its next context whatever its other candidates are,
// start being the running task's input: 0 when it may cut none of them. They are
// not made candidates (buildLoopContext), so that a step's cost does not grow with
// the session's history.
//
// The builder (pipelines/context) cuts the turns (items of the Context section
// outside a pinned group) after the latest HistoryTurns by position, and any group
// one of them is in, whole. A message before the returned index has more than
// HistoryTurns such turns after it: the messages after it but for the task's input
// and the latest group (pinned), whose section summaries (appendSectionSummaries)
// stand for them with their positions. It is none of the task's input, which is
// pinned, nor of a group with a message at or after the index, which begins no
// group's results; nor does it have a section summary, which would replace it
// (listed as dropped) rather than leave it to the window. Other candidates of the
// Context section only narrow the window.
func (s *SessionState) olderTurns(a *Agent, start int) int {
	h := a.Context.options().HistoryTurns
	if h == 0 {
		h = pctx.DefaultHistoryTurns
	}
	n := len(s.history)
	if h < 0 || n <= 2*h+8 {
		return 0 // cutting few saves little
	}
	latest := n - 1 // the first message of the latest group, at most
	for latest > 0 && s.history[latest].Role == messages.RoleTool {
		latest--
	}
	from := latest - h - 2 // h+1 turns between, the task's input aside
	for id := range s.sectionSummaries() {
		if i, ok := turnIndex(id); ok && i < from {
			from = i
		}
	}
	for from > 0 && s.history[from].Role == messages.RoleTool {
		from--
	}
	if pairs := a.Context.pairing(); from > 0 && pairs != noPairs {
		// An answer goes with its question: from steps back to the input of the
		// earlier task whose answer is at or after it.
		q := from - 1
		for q > 0 && pairs == exchangePairs && s.history[q].Role != messages.RoleUser {
			q--
		}
		if s.answerOf(q, start, pairs) >= from {
			from = q
		}
	}
	return max(from, 0)
}

// turnIndex returns i of a turn's item ID, "turn/<i>".
func turnIndex(id string) (int, bool) {
	n, ok := strings.CutPrefix(id, "turn/")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil
}

// paradigmContext fits a paradigm's prompt to the agent's window: its system
// message is the stable prefix, its first message after it the task (pinned),
// the others turns, every one of them pinned: nothing is dropped, and compression
// cuts the middle out of the lowest-value text (the later turns first, then the
// task) only when the prompt is over budget.
//
// With a task (a paradigm's own call: a plan, a critique, a lesson), what the task
// gathered before its first model call (evidence from the agent's knowledge base,
// recalled memories, notes) is offered as for the loop's calls, unpinned: it goes
// first when the budget is short. A summary of the conversation (t nil) gets none.
func (s *SessionState) paradigmContext(a Agent, t *taskState, req llm.Request) (llm.Request, *messages.ContextReport) {
	items := make([]pctx.Item, 0, len(req.Messages)+1)
	msgs := req.Messages
	sys := ""
	if len(msgs) > 0 && msgs[0].Role == messages.RoleSystem {
		sys, msgs = msgs[0].Content, msgs[1:]
	}
	items = append(items, pctx.Item{ID: "system", Kind: pctx.KindSystem, Section: pctx.SectionRole, Text: sys,
		Tokens: pctx.MessageOverhead + prefixCounts.text(sys) + s.toolsTokens(req.Tools)})
	for i := range msgs {
		it := pctx.Item{ID: "turn/" + strconv.Itoa(i), Kind: pctx.KindTurn, Section: pctx.SectionContext, Pos: i + 1,
			Message: &msgs[i], Pinned: true, Relevance: 0.5}
		if i == 0 {
			it.ID, it.Kind, it.Section, it.Relevance = "task", pctx.KindTask, pctx.SectionTask, 1
		}
		items = append(items, it)
	}
	var notes []string
	if t != nil {
		items, notes = t.gather.appendItems(items, a.Context.rules)
	}
	out, report, err := pctx.Builder{Tokenizer: contextTokens, Options: a.Context.options()}.BuildMessages(items)
	if err != nil {
		panic("actors: building a context: " + err.Error())
	}
	report.Notes = notes
	if sys == "" && len(out) > 0 && out[0].Role == messages.RoleSystem {
		out = out[1:] // cannot happen: an empty prefix renders no system message
	}
	req.Messages = out
	return req, report
}

// toolsTokens returns the tokens of a paradigm request's tools' schemas.
func (s *SessionState) toolsTokens(specs []messages.ToolSpec) int { return prefixCounts.tools(specs) }

// equalSpecs reports whether a and b offer the same tools, byte for byte.
func equalSpecs(a, b []messages.ToolSpec) bool {
	return slices.EqualFunc(a, b, func(x, y messages.ToolSpec) bool {
		return x.Name == y.Name && x.Description == y.Description && bytes.Equal(x.Parameters, y.Parameters)
	})
}

// sameSpecs reports whether a and b are the same slice.
func sameSpecs(a, b []messages.ToolSpec) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
