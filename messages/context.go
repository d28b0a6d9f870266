package messages

// ContextReport says what reached the model on one call and why: the token budget
// of the call, and every candidate item of its context kept, dropped or truncated,
// with its score and tokens (package pipelines/context builds it). It rides on the
// ModelRequested it describes, decided with it, so replay shows it and verify
// compares it.
//
// Token counts are cl100k_base tokens of each part counted alone, plus a fixed
// cost per message and per join (pipelines/context documents them): the provider's
// count of the same request differs by its own message framing.
type ContextReport struct {
	// Window is the model's context window in tokens; Reserved the tokens kept for
	// its answer.
	Window   int `json:"window"`
	Reserved int `json:"reserved"`
	// System is the tokens of the stable prefix (the system prompt, the tool
	// section and the tools' schemas), which is always sent.
	System int `json:"system"`
	// Budget is Window − Reserved − System: what the rest of the context may use.
	Budget int `json:"budget"`
	// Used is what the rest of the context uses; it exceeds Budget only when the
	// items that are never dropped do so even truncated (Over then says by how much).
	Used int `json:"used"`
	Over int `json:"over,omitempty"`
	// Kept are the items sent, in the order of their sections (Role & Policies,
	// Task, State, Evidence, Context, Output), then of their positions; Dropped the
	// candidates left out, in the order they were gathered; Truncated the items
	// sent cut short (they are among Kept too, with the tokens they have after the
	// cut).
	Kept      []ContextItem `json:"kept"`
	Dropped   []ContextItem `json:"dropped,omitempty"`
	Truncated []ContextItem `json:"truncated,omitempty"`
	// Older is the number of conversation turns older than the history window
	// (not candidates, not listed).
	Older int `json:"older,omitempty"`
	// Summarize names the items a summariser should fold into a summary to keep
	// more of the context, lowest value first (pipelines/context Options.Summarize):
	// what the builder would summarise, had it a model. Empty otherwise.
	Summarize []string `json:"summarize,omitempty"`
	// Notes are what the caller says of the candidates it gathered: a retrieval
	// that failed, and that the context goes without its items.
	Notes []string `json:"notes,omitempty"`
}

// ContextItem is one candidate of a context in a ContextReport.
type ContextItem struct {
	// ID is the item's stable ID: "system", "task", "memory/core", "turn/<i>",
	// "summary/<from>-<to>", "evidence/<chunk>", "note/<n>", ….
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Tokens are the item's tokens (after a cut, for a truncated item); From, for a
	// truncated item, those it had before.
	Tokens int `json:"tokens"`
	From   int `json:"from,omitempty"`
	// Score is the item's value, relevance and recency combined, in [0, 1] rounded
	// to 3 decimals; a pinned item (never dropped) scores 1.
	Score float64 `json:"score"`
	// Reason says why a dropped item was dropped: "budget", "replaced by <id>",
	// "group" (a member of its group could not be kept).
	Reason string `json:"reason,omitempty"`
}
