package context

import (
	"math"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/pipelines/rag"
)

// Section is one of a context's fixed sections, in the order they are rendered.
type Section int

// The sections of a context, in their fixed order.
const (
	// SectionRole is Role & Policies: the system prompt and the tool section, the
	// stable prefix of every call. Its items are always sent and are not part of
	// the budget (Options: the budget is what is left after them).
	SectionRole Section = iota
	// SectionTask is the task: what the model is asked to do.
	SectionTask
	// SectionState is what the agent knows of its situation: core memory, notes,
	// a paradigm's state (a plan's progress, lessons).
	SectionState
	// SectionEvidence is retrieved material: document chunks, recalled memories.
	SectionEvidence
	// SectionContext is the conversation: its turns and summaries of turns.
	SectionContext
	// SectionOutput says what the answer should look like.
	SectionOutput
	numSections
)

var sectionNames = [numSections]string{"Role & Policies", "Task", "State", "Evidence", "Context", "Output"}

// sectionTags are the tags a section's items are wrapped in outside the
// conversation (Context.Messages' closing briefing, Context.Text).
var sectionTags = [numSections]string{"role", "task", "state", "evidence", "context", "output"}

// String returns the section's name ("Role & Policies", "Task", …).
func (s Section) String() string {
	if s < 0 || s >= numSections {
		return "section?"
	}
	return sectionNames[s]
}

// Item kinds. Kind is free text; these are the kinds this package and its callers
// agree on.
const (
	KindSystem   = "system"   // the system prompt and tool section ("system")
	KindTask     = "task"     // the task's input ("task")
	KindMemory   = "memory"   // core memory blocks ("memory/core")
	KindState    = "state"    // a paradigm's section of the prompt ("state/<name>")
	KindNote     = "note"     // one of the agent's notes ("note/<n>")
	KindEvidence = "evidence" // a retrieved chunk ("evidence/<chunk>")
	KindTurn     = "turn"     // one conversation message ("turn/<i>")
	KindSummary  = "summary"  // a summary replacing turns ("summary/<from>-<to>")
	KindMasked   = "masked"   // a turn whose observation is replaced by a pointer to it
	KindOutput   = "output"   // instructions on the answer's form
)

// Item is one candidate of a context.
type Item struct {
	// ID names the item stably from call to call; IDs are unique within a build.
	ID   string
	Kind string
	// Section is where the item goes.
	Section Section
	// Text is the item's text; Message, when set, is its chat message instead (a
	// turn, a summary, the task): Context.Messages sends it as it is, in Pos order.
	Text    string
	Message *messages.ChatMessage
	// Tokens is the item's token count; 0 has Build count it (CountText or
	// CountMessage). A caller that caches counts sets it.
	Tokens int
	// Relevance is how relevant the item is to the task, in [0, 1] (clamped).
	Relevance float64
	// Pos is the item's recency position: higher is newer. Items of a kind are
	// ranked by it for recency, and the conversation is rendered in its order.
	Pos int
	// Group ties items kept or dropped together ("" for none): a call and its
	// results. A group with a pinned member is pinned.
	Group string
	// Pinned items are never dropped (the task; the latest call and its results):
	// compression cuts their text instead.
	Pinned bool
	// Stable, for a State item, says its text is fixed for the whole task (core
	// memory as recorded with the task, a paradigm's lessons): Context.Messages
	// keeps it in the system message, after the stable prefix, and Build packs it
	// before the other unpinned items, so that the system message stays the same
	// from call to call while it fits at all. Other State items, and Evidence and
	// Output items, go after the conversation so that a change to them does not
	// invalidate the provider's cache of the conversation.
	Stable bool
	// Replaces names the items this one stands for (a summary of a range of turns,
	// a masked observation): Build drops them, with reason "replaced by <ID>".
	Replaces []string
}

// Options tune a build. The zero value takes every default.
type Options struct {
	// Window is the model's context window in tokens (default DefaultWindow).
	Window int
	// ReservedOutput is the tokens kept for the model's answer (default
	// DefaultReservedOutput).
	ReservedOutput int
	// HistoryTurns is how many of the latest turns (items of the Context section,
	// pinned ones aside) are candidates (default DefaultHistoryTurns; negative: all).
	// A group the cut would split is left out whole.
	HistoryTurns int
	// RelevanceWeight and RecencyWeight weigh an item's relevance and recency in
	// its score (both 0: DefaultRelevanceWeight and DefaultRecencyWeight).
	RelevanceWeight, RecencyWeight float64
	// RecencyHalfLife is how many newer items of its kind halve an item's recency
	// (default DefaultRecencyHalfLife).
	RecencyHalfLife float64
	// Summarize says the caller can summarise (it has a model, and records the
	// summary as an effect): the report then names the items a summary should
	// replace (messages.ContextReport.Summarize): those cut, and those of the
	// Context and Evidence sections, and Stable ones, dropped for the budget. The
	// build itself is the same.
	Summarize bool
	// HeadCut makes a cut keep the head of a text only, the marker at its end: the
	// rule before cuts kept the head and the tail (the session's context rules
	// version 1, kept so that sessions recorded under it replay as they ran). The
	// zero value is today's rule.
	HeadCut bool
	// AdditiveJoins counts a message of several items (the system message's
	// stable State items, the briefing) as the sum of its items' counts, JoinTokens
	// for each blank line between them and its sections' tags counted apart: the
	// rule before joins were counted (the session's context rules 1 to 8, kept so
	// that sessions recorded under them replay as they ran). cl100k_base is not
	// additive across joins (a text ending in " \r\r\n" merges with the "\n\n"
	// after it), so such a message could count more than the build budgeted. The
	// zero value is today's rule: with a Cl100k Tokenizer, the build counts such a
	// message as it is sent, and drops the lowest-value items until it fits (with
	// another Tokenizer, counts are taken as additive).
	AdditiveJoins bool
}

// Defaults of Options.
const (
	DefaultWindow          = 128000
	DefaultReservedOutput  = 4096
	DefaultHistoryTurns    = 30
	DefaultRelevanceWeight = 0.5
	DefaultRecencyWeight   = 0.5
	DefaultRecencyHalfLife = 8
)

// withDefaults returns o with its zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.ReservedOutput <= 0 {
		o.ReservedOutput = DefaultReservedOutput
	}
	if o.HistoryTurns == 0 {
		o.HistoryTurns = DefaultHistoryTurns
	}
	if o.RelevanceWeight <= 0 && o.RecencyWeight <= 0 {
		o.RelevanceWeight, o.RecencyWeight = DefaultRelevanceWeight, DefaultRecencyWeight
	}
	o.RelevanceWeight, o.RecencyWeight = max(o.RelevanceWeight, 0), max(o.RecencyWeight, 0)
	if o.RecencyHalfLife <= 0 {
		o.RecencyHalfLife = DefaultRecencyHalfLife
	}
	return o
}

// Score combines an item's relevance and recency into its value in [0, 1]:
//
//	recency = 0.5 ^ (newer / RecencyHalfLife)
//	score   = (RelevanceWeight·relevance + RecencyWeight·recency) / (RelevanceWeight + RecencyWeight)
//
// where newer is the number of candidates of the item's kind with a higher Pos
// (0 for the newest), and relevance is clamped to [0, 1]. Zero options take the
// defaults. The score is rounded to 6 decimals: a machine whose floating point
// fuses operations differently (or whose math.Pow differs in the last bit) scores
// the same, so a session builds the same context on every node and in replay.
func (o Options) Score(relevance float64, newer int) float64 {
	return o.withDefaults().score(relevance, newer)
}

// score is Score of options with their defaults set (withDefaults).
func (o Options) score(relevance float64, newer int) float64 {
	rel := min(max(relevance, 0), 1)
	if math.IsNaN(relevance) {
		rel = 0
	}
	rec := recency(o.RecencyHalfLife, newer)
	// The explicit conversions keep each product rounded on its own (no fused
	// multiply-add).
	sum := float64(o.RelevanceWeight*rel) + float64(o.RecencyWeight*rec)
	return math.Round(float64(sum/(o.RelevanceWeight+o.RecencyWeight))*1e6) / 1e6
}

// recency returns 0.5^(newer/halfLife), as Score weighs recency: under the
// default half-life, for the newest candidates of a kind, from a table of
// math.Pow's own results (the same bits, without computing a power per item per
// build).
func recency(halfLife float64, newer int) float64 {
	if halfLife == DefaultRecencyHalfLife && newer >= 0 && newer < len(defaultRecency) {
		return defaultRecency[newer]
	}
	return math.Pow(0.5, float64(newer)/halfLife)
}

// defaultRecency holds recency under the default half-life (a constant table,
// never written after).
var defaultRecency = func() (t [64]float64) {
	for i := range t {
		t[i] = math.Pow(0.5, float64(i)/float64(DefaultRecencyHalfLife))
	}
	return t
}()

// Builder builds contexts. It is a value: safe for concurrent use when its
// Tokenizer is.
type Builder struct {
	// Tokenizer counts the tokens of items whose Tokens is 0.
	Tokenizer rag.Tokenizer
	Options   Options
}

// Context is a built context: the kept items in their rendering order and the
// report of the build.
type Context struct {
	// Items are the kept items, sections in their order and, within a section,
	// by Pos then as given; a truncated item carries its cut text.
	Items  []Item
	Report messages.ContextReport
}

// Chat framing, in tokens, as Build counts it.
const (
	// MessageOverhead is the cost of one chat message beyond its content (its role
	// and delimiters).
	MessageOverhead = 4
	// CallOverhead is the cost of one tool call beyond its name and arguments.
	CallOverhead = 4
	// JoinTokens is the cost of the "\n\n" between two items rendered in one
	// message as the packing estimates it; a Cl100k build then counts the message
	// as it is sent (Options.AdditiveJoins: as older rules counted it, too).
	JoinTokens = 1
)

// CountMessage returns the tokens of a chat message as Build counts them: its
// content, its tool calls' names and arguments, and the framing overheads.
func CountMessage(t rag.Tokenizer, m messages.ChatMessage) int {
	n := MessageOverhead + t.Count(m.Content)
	for _, c := range m.ToolCalls {
		n += CallOverhead + t.Count(c.Name) + t.Count(c.Arguments)
	}
	return n
}

// CountText returns the tokens of an item's text.
func CountText(t rag.Tokenizer, text string) int { return t.Count(text) }
