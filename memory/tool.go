package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/troupe-run/troupe/tools"
)

// ToolConfig configures the memory tool of one agent.
type ToolConfig struct {
	// Name is the tool's name (default "memory"); expanded, its actions are
	// <name>_add, <name>_search, ….
	Name string
	// Namespace is the namespace a call works in when it names none, such as
	// "agent:planner" (required).
	Namespace string
	// Namespaces lists the other namespaces a call may name (such as "user:alice"
	// for the user the agent serves); a call naming one not listed is refused.
	Namespaces []string
	// Expand offers the actions as tools of their own (memory_add, memory_search, …)
	// instead of the one tool taking {"op": ACTION, "args": {...}}.
	Expand bool
	// RecallAgent limits the recall action to the sessions of this agent; empty
	// searches every session of the log.
	RecallAgent string
	// WritesRefused, when set, is why the actions that write (add, update,
	// remove, forget, consolidate, clear_all, core_memory_*) change nothing: each
	// answers an error saying so, and the reads work. The tool's actions and
	// schemas are the same, so prompts are (a replay fork's memory).
	WritesRefused string
}

// ErrWritesRefused is the error of a memory tool's write while its writes are
// refused (ToolConfig.WritesRefused).
var ErrWritesRefused = errors.New("memory writes are refused here")

// writes returns fn, or, when the tool's writes are refused, a function that
// answers ErrWritesRefused with why and changes nothing.
func writes[A, R any](t *memoryTool, fn func(context.Context, A) (R, error)) func(context.Context, A) (R, error) {
	if t.cfg.WritesRefused == "" {
		return fn
	}
	return func(context.Context, A) (R, error) {
		var zero R
		return zero, fmt.Errorf("%w: %s", ErrWritesRefused, t.cfg.WritesRefused)
	}
}

// maxToolName bounds ToolConfig.Name so that its longest expanded tool name,
// <name>_core_memory_replace, stays within the 64 characters models accept.
const maxToolName = 64 - len("_core_memory_replace")

// Validate reports a configuration the tool cannot work with.
func (c ToolConfig) Validate() error {
	if c.Name != "" {
		ok := len(c.Name) <= maxToolName
		for _, r := range c.Name {
			ok = ok && (r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9'))
		}
		if !ok {
			return fmt.Errorf("memory tool: name %q: use 1 to %d letters, digits, '_' or '-'", c.Name, maxToolName)
		}
	}
	if err := CheckNamespace(c.Namespace); err != nil {
		return fmt.Errorf("memory tool: default namespace: %w", err)
	}
	for _, ns := range c.Namespaces {
		if err := CheckNamespace(ns); err != nil {
			return fmt.Errorf("memory tool: allowed namespace: %w", err)
		}
	}
	return nil
}

// The arguments of the tool's actions; their JSON Schemas are derived from these
// types (tools.SchemaFor). Every action takes an optional namespace.
type (
	addArgs struct {
		Namespace    string         `json:"namespace,omitempty" jsonschema:"The namespace to write to (default: the agent's own)"`
		Content      string         `json:"content" jsonschema:"What to remember: one self-contained statement" tool:"minLength=1"`
		Tier         string         `json:"tier,omitempty" jsonschema:"working (the task at hand), episodic (something that happened), semantic (a lasting fact, preference or rule: the default) or perceptual (a description of an image, audio or text)" tool:"enum=working|episodic|semantic|perceptual"`
		Importance   *float64       `json:"importance,omitempty" jsonschema:"How much it matters, from 0 to 1 (default 0.5)" tool:"minimum=0,maximum=1"`
		Timestamp    string         `json:"timestamp,omitempty" jsonschema:"When it happened, RFC 3339 (default now)"`
		Metadata     map[string]any `json:"metadata,omitempty" jsonschema:"A JSON object kept with the memory"`
		Participants []string       `json:"participants,omitempty" jsonschema:"Who took part (episodic)"`
		Outcome      string         `json:"outcome,omitempty" jsonschema:"How it ended (episodic)"`
		Modality     string         `json:"modality,omitempty" jsonschema:"text (default), image or audio: image and audio only in the perceptual tier" tool:"enum=text|image|audio"`
		URI          string         `json:"uri,omitempty" jsonschema:"Where the image or audio is (perceptual)"`
	}
	searchArgs struct {
		Namespace      string   `json:"namespace,omitempty" jsonschema:"The namespace to search (default: the agent's own)"`
		Query          string   `json:"query" jsonschema:"What to look for" tool:"minLength=1"`
		Tiers          []string `json:"tiers,omitempty" jsonschema:"Only these tiers (default all)" tool:"enum=working|episodic|semantic|perceptual"`
		Limit          int      `json:"limit,omitempty" jsonschema:"At most this many memories (default 10)" tool:"minimum=1,maximum=100"`
		Mode           string   `json:"mode,omitempty" jsonschema:"hybrid (default), vector or keyword" tool:"enum=hybrid|vector|keyword"`
		Modality       string   `json:"modality,omitempty" jsonschema:"Only perceptual memories of this modality" tool:"enum=text|image|audio"`
		Since          string   `json:"since,omitempty" jsonschema:"Only memories of this time or later, RFC 3339"`
		Until          string   `json:"until,omitempty" jsonschema:"Only memories of this time or earlier, RFC 3339"`
		MinImportance  float64  `json:"min_importance,omitempty" jsonschema:"Only memories at least this important" tool:"minimum=0,maximum=1"`
		Participants   []string `json:"participants,omitempty" jsonschema:"Only episodes in which all of these took part"`
		IncludeInvalid bool     `json:"include_invalid,omitempty" jsonschema:"Also memories that newer ones contradicted"`
	}
	summaryArgs struct {
		Namespace string `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
		Limit     int    `json:"limit,omitempty" jsonschema:"The most important memories shown per tier (default 5)" tool:"minimum=1,maximum=20"`
	}
	statsArgs struct {
		Namespace string `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
	}
	updateArgs struct {
		Namespace  string         `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
		ID         string         `json:"id" jsonschema:"The memory's id, as add or search gave it" tool:"minLength=1"`
		Content    *string        `json:"content,omitempty" jsonschema:"The memory's new text, replacing it"`
		Importance *float64       `json:"importance,omitempty" jsonschema:"The memory's new importance, from 0 to 1" tool:"minimum=0,maximum=1"`
		Metadata   map[string]any `json:"metadata,omitempty" jsonschema:"Keys to set in the memory's metadata (null removes a key)"`
		Reason     string         `json:"reason,omitempty" jsonschema:"Why, for the memory's history"`
	}
	removeArgs struct {
		Namespace string `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
		ID        string `json:"id" jsonschema:"The memory's id" tool:"minLength=1"`
		Reason    string `json:"reason,omitempty" jsonschema:"Why, for the memory's history"`
	}
	forgetArgs struct {
		Namespace     string   `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
		IDs           []string `json:"ids,omitempty" jsonschema:"These memories" tool:"maxItems=100"`
		Tier          string   `json:"tier,omitempty" jsonschema:"Only memories of this tier" tool:"enum=working|episodic|semantic|perceptual"`
		Before        string   `json:"before,omitempty" jsonschema:"Memories of an earlier time than this, RFC 3339"`
		MaxImportance *float64 `json:"max_importance,omitempty" jsonschema:"Memories at most this important" tool:"minimum=0,maximum=1"`
		Reason        string   `json:"reason" jsonschema:"Why they are forgotten, for their history" tool:"minLength=1"`
	}
	consolidateArgs struct {
		Namespace string `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
	}
	clearArgs struct {
		Namespace string `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
		Tier      string `json:"tier,omitempty" jsonschema:"Only this tier (default every tier)" tool:"enum=working|episodic|semantic|perceptual"`
		Confirm   bool   `json:"confirm" jsonschema:"Must be true: clearing forgets every memory of the tier or namespace"`
		Reason    string `json:"reason,omitempty" jsonschema:"Why, for the history"`
	}
	appendArgs struct {
		Namespace string `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
		Label     string `json:"label" jsonschema:"The block: persona (who you are), human (who you talk with) or another block's label" tool:"minLength=1,maxLength=64"`
		Content   string `json:"content" jsonschema:"The text to add at the end of the block, on a new line" tool:"minLength=1"`
	}
	replaceArgs struct {
		Namespace  string `json:"namespace,omitempty" jsonschema:"The namespace (default: the agent's own)"`
		Label      string `json:"label" jsonschema:"The block: persona, human or another block's label" tool:"minLength=1,maxLength=64"`
		OldContent string `json:"old_content" jsonschema:"The exact text to replace, as it is in the block" tool:"minLength=1"`
		NewContent string `json:"new_content" jsonschema:"The text to put in its place (empty deletes it)"`
	}
	recallArgs struct {
		Query string `json:"query,omitempty" jsonschema:"Words to look for in past conversations (empty: the latest messages)"`
		Since string `json:"since,omitempty" jsonschema:"Only messages of this time or later, RFC 3339"`
		Until string `json:"until,omitempty" jsonschema:"Only messages of this time or earlier, RFC 3339"`
		Limit int    `json:"limit,omitempty" jsonschema:"At most this many messages (default 10)" tool:"minimum=1,maximum=100"`
	}
)

// The results of the actions, as the model reads them (compact JSON).
type (
	addResult struct {
		ID    string `json:"id"`
		Event string `json:"event"`
	}
	foundMemory struct {
		ID         string          `json:"id"`
		Tier       Tier            `json:"tier"`
		Content    string          `json:"content"`
		Score      float64         `json:"score"`
		Importance float64         `json:"importance"`
		Timestamp  time.Time       `json:"timestamp"`
		Metadata   json.RawMessage `json:"metadata,omitempty"`
		Invalid    bool            `json:"invalid,omitempty"`
	}
	searchResult struct {
		Namespace string        `json:"namespace"`
		Results   []foundMemory `json:"results"`
		// Note says what the search did without the vector store (SearchNoted).
		Note string `json:"note,omitempty"`
	}
	shortMemory struct {
		ID         string  `json:"id"`
		Content    string  `json:"content"`
		Importance float64 `json:"importance"`
	}
	tierSummary struct {
		Count int           `json:"count"`
		Top   []shortMemory `json:"top,omitempty"`
	}
	summaryResult struct {
		Namespace string               `json:"namespace"`
		Blocks    string               `json:"blocks"`
		Tiers     map[Tier]tierSummary `json:"tiers"`
	}
	updateResult struct {
		ID         string  `json:"id"`
		Content    string  `json:"content"`
		Importance float64 `json:"importance"`
	}
	removeResult struct {
		Removed string `json:"removed"`
	}
	forgetResult struct {
		Forgotten []string `json:"forgotten"`
	}
	consolidateResult struct {
		Result string `json:"result"`
	}
	clearResult struct {
		Cleared int `json:"cleared"`
	}
	blockResult struct {
		Label string `json:"label"`
		Value string `json:"value"`
		Chars int    `json:"chars"`
		Limit int    `json:"limit"`
	}
	recallResult struct {
		Hits []RecallHit `json:"hits"`
	}
)

// ErrNoConsolidation is the consolidate action's error when no consolidator is
// configured (Config.Consolidate is nil).
var ErrNoConsolidation = errors.New("memory: consolidation is not available here: no consolidator is configured")

// memoryTool is the tool's actions over a Memories, for one agent.
type memoryTool struct {
	m       *Memories
	cfg     ToolConfig
	allowed map[string]bool
}

// Toolbox returns the memory tool of an agent (cfg): one tool whose actions are
// add, search, summary, stats, update, remove, forget, consolidate, clear_all,
// core_memory_append and core_memory_replace (Letta's edits of the core blocks) and
// recall (the past conversations, see Recall), each a Go method with its own
// argument type and JSON Schema.
//
// Invalid arguments (empty content, an importance outside [0, 1], an unknown tier,
// action or modality, image or audio outside the perceptual tier, a limit out of
// range, a bad time, a namespace the agent may not use, an unknown memory ID) are
// an error wrapping tools.ErrInvalidArguments with the reason, and change nothing.
// Each write is made under the call's idempotency key (tools.CallKey), so that a
// call performed twice writes once.
func (m *Memories) Toolbox(cfg ToolConfig) (*tools.Toolbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &memoryTool{m: m, cfg: cfg, allowed: map[string]bool{cfg.Namespace: true}}
	for _, ns := range cfg.Namespaces {
		t.allowed[ns] = true
	}
	name := cmp.Or(cfg.Name, "memory")
	readOnly := tools.WithSideEffects(false)
	args := tools.WithMaxArguments(m.cfg.MaxContentBytes*2 + 64<<10) // a content, escaped, and the rest
	nsEnum := tools.WithSchemaFunc(t.namespaceEnum)
	// A \u escape of half a surrogate pair in the model's arguments would be
	// stored (or searched for) as U+FFFD: refused, the model told where.
	whole := tools.WithWholeCharacters()
	tiers := strings.Join(func() []string {
		out := make([]string, len(Tiers))
		for i, t := range Tiers {
			out[i] = string(t)
		}
		return out
	}(), ", ")
	return tools.NewToolbox(name,
		"Your long-term memory, kept across tasks and sessions, in namespaces (yours is "+cfg.Namespace+") and tiers ("+tiers+"). "+
			"Search it before asking the user again; add what will matter later; keep the core blocks (always in your context) up to date; "+
			"recall searches past conversations word for word.",
		tools.Sub("add", fmt.Sprintf("Adds a memory and returns its id (event ADD), or the id of the memory that already says the same (event NONE). Content of at most %d bytes.", m.cfg.MaxContentBytes), writes(t, t.add), args, nsEnum, whole),
		tools.Sub("search", "Finds the memories most relevant to a query, best first, with their scores.", t.search, readOnly, nsEnum, whole),
		tools.Sub("summary", "Shows the core blocks and, per tier, the number of memories and the most important ones.", t.summary, readOnly, nsEnum, whole),
		tools.Sub("stats", "Counts the memories per tier, the keywords, entities, relations and blocks.", t.stats, readOnly, nsEnum, whole),
		tools.Sub("update", "Changes a memory's content, importance or metadata (the fields given) and returns it.", writes(t, t.update), args, nsEnum, whole),
		tools.Sub("remove", "Removes one memory.", writes(t, t.remove), nsEnum, whole),
		tools.Sub("forget", "Forgets memories, with the reason: those given by id, or those (of a tier) older than a time and/or at most so important. Returns their ids.", writes(t, t.forget), nsEnum, whole),
		tools.Sub("consolidate", "Runs the memory's maintenance now: forgetting, deduplication, promotion and distillation.", writes(t, t.consolidate), nsEnum, whole),
		tools.Sub("clear_all", "Forgets every memory of a tier, or of the namespace (confirm must be true).", writes(t, t.clearAll), nsEnum, whole),
		tools.Sub("core_memory_append", "Adds text at the end of a core block (persona, human, …), which is always in your context.", writes(t, t.coreAppend), nsEnum, whole),
		tools.Sub("core_memory_replace", "Replaces text in a core block with new text (every occurrence); empty new text deletes it.", writes(t, t.coreReplace), nsEnum, whole),
		tools.Sub("recall", "Searches past conversations (what the user asked, what was answered, what tools returned) by words and time.", t.recall, readOnly, whole),
	)
}

// Tools returns the memory tool: the one tool of Toolbox, or its actions as tools of
// their own (memory_add, …) when cfg.Expand is set.
func (m *Memories) Tools(cfg ToolConfig) ([]tools.Tool, error) {
	box, err := m.Toolbox(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Expand {
		return box.Expand(), nil
	}
	return []tools.Tool{box}, nil
}

// namespaceEnum lists the namespaces the agent may name in the schema.
func (t *memoryTool) namespaceEnum(s *jsonschema.Schema) {
	p := s.Properties["namespace"]
	if p == nil {
		return
	}
	names := append([]string{t.cfg.Namespace}, t.cfg.Namespaces...)
	slices.Sort(names)
	names = slices.Compact(names)
	p.Enum = make([]any, len(names))
	for i, n := range names {
		p.Enum[i] = n
	}
}

// invalid is the error of arguments at fault.
func invalid(field, format string, a ...any) error {
	return &tools.ArgumentError{Tool: "memory", Field: field, Reason: fmt.Sprintf(format, a...)}
}

// fault turns the errors of the namespace that the arguments caused (ErrInvalid,
// ErrNotFound) into argument errors, which go back to the model; the others stay.
func fault(err error) error {
	if err == nil || !(errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound)) {
		return err
	}
	reason := err.Error()
	for _, prefix := range []string{ErrInvalid.Error() + ": ", ErrNotFound.Error() + ": "} {
		reason = strings.Replace(reason, prefix, "", 1)
	}
	if errors.Is(err, ErrNotFound) {
		reason = "no such memory: " + reason
	}
	return &tools.ArgumentError{Tool: "memory", Reason: reason}
}

// namespace returns the namespace a call names, or the default.
func (t *memoryTool) namespace(ctx context.Context, name string) (*Namespace, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		name = t.cfg.Namespace
	}
	if !t.allowed[name] {
		allowed := make([]string, 0, len(t.allowed))
		for n := range t.allowed {
			allowed = append(allowed, n)
		}
		slices.Sort(allowed)
		return nil, invalid("namespace", "namespace %q is not one this agent may use: use %s", name, strings.Join(allowed, ", "))
	}
	ns, err := t.m.Namespace(ctx, name)
	return ns, fault(err)
}

// parseTime reads an optional RFC 3339 time.
func parseTime(field, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid(field, "%s %q is not an RFC 3339 time like 2026-05-01T09:30:00Z", field, s)
	}
	return ts, nil
}

// parseFilter reads an optional RFC 3339 time that filters memories or
// conversations (since, until, before), refusing the zero time
// ("0001-01-01T00:00:00Z"): clients send it for a time not set (.NET's
// DateTime.MinValue), as add's timestamp refuses it, and read as not given it
// would widen the filter unsaid (a forget by max_importance and before the zero
// time forgot the matching memories of every age). The year 1's later instants
// are kept.
func parseFilter(field, s string) (time.Time, error) {
	ts, err := parseTime(field, s)
	if err == nil && strings.TrimSpace(s) != "" && ts.IsZero() {
		return time.Time{}, invalid(field, "%s %s is the zero time, which clients send for a time not set: leave %s out, or give a time", field, strings.TrimSpace(s), field)
	}
	return ts, err
}

func metadataJSON(m map[string]any) (json.RawMessage, error) {
	if m == nil {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, invalid("metadata", "metadata: %v", err)
	}
	return b, nil
}

func (t *memoryTool) add(ctx context.Context, a addArgs) (addResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return addResult{}, err
	}
	if strings.TrimSpace(a.Content) == "" {
		return addResult{}, invalid("content", "empty content: say what to remember")
	}
	tier := Tier(cmp.Or(a.Tier, string(Semantic)))
	mod, err := ParseModality(a.Modality)
	if err != nil {
		return addResult{}, fault(err)
	}
	if mod != Text && tier != Perceptual {
		return addResult{}, invalid("modality", "modality %s is for the perceptual tier only, not %s", mod, tier)
	}
	ts, err := parseTime("timestamp", a.Timestamp)
	if err != nil {
		return addResult{}, err
	}
	if err := checkGivenTimestamp(a.Timestamp, ts); err != nil {
		return addResult{}, fault(err)
	}
	meta, err := metadataJSON(a.Metadata)
	if err != nil {
		return addResult{}, err
	}
	res, err := ns.Add(ctx, tools.CallKey(ctx), []AddRequest{{
		Tier: tier, Content: a.Content, Importance: a.Importance, Timestamp: ts, Metadata: meta,
		Participants: a.Participants, Outcome: a.Outcome, Modality: mod, URI: a.URI, Reason: "added by the agent",
	}})
	if err != nil {
		return addResult{}, fault(err)
	}
	if len(res) != 1 {
		return addResult{}, fmt.Errorf("memory: add returned %d results for one memory", len(res))
	}
	return addResult{ID: res[0].ID, Event: res[0].Event}, nil
}

func (t *memoryTool) search(ctx context.Context, a searchArgs) (searchResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return searchResult{}, err
	}
	since, err := parseFilter("since", a.Since)
	if err != nil {
		return searchResult{}, err
	}
	until, err := parseFilter("until", a.Until)
	if err != nil {
		return searchResult{}, err
	}
	q := Query{Text: a.Query, Limit: a.Limit, Mode: a.Mode, Modality: Modality(a.Modality), Since: since, Until: until,
		MinImportance: a.MinImportance, Participants: a.Participants, IncludeInvalid: a.IncludeInvalid}
	for _, tier := range a.Tiers {
		q.Tiers = append(q.Tiers, Tier(tier))
	}
	results, note, err := ns.SearchNoted(ctx, q)
	if err != nil {
		return searchResult{}, fault(err)
	}
	out := searchResult{Namespace: ns.Name(), Results: make([]foundMemory, len(results)), Note: note}
	for i, r := range results {
		out.Results[i] = found(r.Memory, r.Score)
	}
	return out, nil
}

func found(m Memory, score float64) foundMemory {
	return foundMemory{ID: m.ID, Tier: m.Tier, Content: m.Content, Score: score, Importance: m.Importance,
		Timestamp: m.Timestamp, Metadata: m.Metadata, Invalid: m.InvalidAt != nil}
}

func (t *memoryTool) summary(ctx context.Context, a summaryArgs) (summaryResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return summaryResult{}, err
	}
	if err := ns.Refresh(ctx); err != nil {
		return summaryResult{}, err
	}
	limit := cmp.Or(a.Limit, 5)
	out := summaryResult{Namespace: ns.Name(), Blocks: RenderBlocks(ns.Blocks()), Tiers: map[Tier]tierSummary{}}
	byTier := map[Tier][]Memory{}
	for _, m := range ns.Snapshot() {
		if m.InvalidAt == nil {
			byTier[m.Tier] = append(byTier[m.Tier], m)
		}
	}
	for _, tier := range Tiers {
		ms := byTier[tier]
		slices.SortStableFunc(ms, func(a, b Memory) int {
			return cmp.Or(cmp.Compare(b.Importance, a.Importance), b.Timestamp.Compare(a.Timestamp))
		})
		s := tierSummary{Count: len(ms)}
		for _, m := range ms[:min(limit, len(ms))] {
			s.Top = append(s.Top, shortMemory{ID: m.ID, Content: clipText(m.Content, 300), Importance: m.Importance})
		}
		out.Tiers[tier] = s
	}
	return out, nil
}

func (t *memoryTool) stats(ctx context.Context, a statsArgs) (Stats, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return Stats{}, err
	}
	if err := ns.Refresh(ctx); err != nil {
		return Stats{}, err
	}
	return ns.Stats(), nil
}

func (t *memoryTool) update(ctx context.Context, a updateArgs) (updateResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return updateResult{}, err
	}
	if a.Content != nil && strings.TrimSpace(*a.Content) == "" {
		return updateResult{}, invalid("content", "empty content: give the memory's new text, or remove it")
	}
	meta, err := metadataJSON(a.Metadata)
	if err != nil {
		return updateResult{}, err
	}
	m, err := ns.Update(ctx, tools.CallKey(ctx), a.ID, UpdateRequest{Content: a.Content, Importance: a.Importance,
		Metadata: meta, Reason: cmp.Or(strings.TrimSpace(a.Reason), "updated by the agent")})
	if err != nil {
		return updateResult{}, fault(err)
	}
	return updateResult{ID: m.ID, Content: m.Content, Importance: m.Importance}, nil
}

func (t *memoryTool) remove(ctx context.Context, a removeArgs) (removeResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return removeResult{}, err
	}
	err = ns.Forget(ctx, tools.CallKey(ctx), []string{a.ID}, cmp.Or(strings.TrimSpace(a.Reason), "removed by the agent"))
	if err != nil {
		return removeResult{}, fault(err)
	}
	return removeResult{Removed: a.ID}, nil
}

func (t *memoryTool) forget(ctx context.Context, a forgetArgs) (forgetResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return forgetResult{}, err
	}
	before, err := parseFilter("before", a.Before)
	if err != nil {
		return forgetResult{}, err
	}
	byCriteria := !before.IsZero() || a.MaxImportance != nil
	switch {
	case len(a.IDs) == 0 && !byCriteria:
		return forgetResult{}, invalid("", "say which memories to forget: ids, or before and/or max_importance (clear_all forgets a whole tier)")
	case len(a.IDs) > 0 && byCriteria:
		return forgetResult{}, invalid("ids", "give ids, or before and/or max_importance, not both")
	}
	if len(a.IDs) == 0 {
		return t.forgetMatching(ctx, ns, a, before)
	}
	for _, id := range a.IDs {
		m, ok := ns.Get(id)
		if !ok {
			return forgetResult{}, invalid("ids", "no memory %q in namespace %s", id, ns.Name())
		}
		if a.Tier != "" && m.Tier != Tier(a.Tier) {
			return forgetResult{}, invalid("ids", "memory %q is %s, not %s", id, m.Tier, a.Tier)
		}
	}
	if err := ns.Forget(ctx, tools.CallKey(ctx), a.IDs, strings.TrimSpace(a.Reason)); err != nil {
		return forgetResult{}, fault(err)
	}
	return forgetResult{Forgotten: a.IDs}, nil
}

// forgetMatching forgets the memories of ns that match a's criteria (tier, before,
// max_importance) when the forget is written: it expects each at the version it
// was read at (Expect), and reads them again when another writer changed one
// since, up to MaxAttempts times, so that a memory another process made important
// meanwhile is not forgotten for what it was.
func (t *memoryTool) forgetMatching(ctx context.Context, ns *Namespace, a forgetArgs, before time.Time) (forgetResult, error) {
	var err error
	for range MaxAttempts {
		if err = ns.Refresh(ctx); err != nil {
			return forgetResult{}, err
		}
		ids := []string{}
		read := map[string]uint64{}
		for _, m := range ns.Snapshot() {
			if (a.Tier == "" || m.Tier == Tier(a.Tier)) && (before.IsZero() || m.Timestamp.Before(before)) &&
				(a.MaxImportance == nil || m.Importance <= *a.MaxImportance) {
				ids = append(ids, m.ID)
				read[m.ID] = m.Version
			}
		}
		if len(ids) == 0 {
			return forgetResult{Forgotten: ids}, nil
		}
		err = ns.Forget(ctx, tools.CallKey(ctx), ids, strings.TrimSpace(a.Reason), Expect(read))
		if err == nil {
			return forgetResult{Forgotten: ids}, nil
		}
		if !errors.Is(err, ErrChanged) && !errors.Is(err, ErrNotFound) {
			break
		}
	}
	return forgetResult{}, fault(err)
}

func (t *memoryTool) consolidate(ctx context.Context, a consolidateArgs) (consolidateResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return consolidateResult{}, err
	}
	if t.m.cfg.Consolidate == nil {
		return consolidateResult{}, ErrNoConsolidation
	}
	out, err := t.m.cfg.Consolidate(ctx, ns, tools.CallKey(ctx))
	if err != nil {
		return consolidateResult{}, fault(err)
	}
	return consolidateResult{Result: out}, nil
}

func (t *memoryTool) clearAll(ctx context.Context, a clearArgs) (clearResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return clearResult{}, err
	}
	if !a.Confirm {
		what := "every memory of " + ns.Name()
		if a.Tier != "" {
			what = "the " + a.Tier + " memories of " + ns.Name()
		}
		return clearResult{}, invalid("confirm", "confirm must be true to clear %s", what)
	}
	n, err := ns.Clear(ctx, tools.CallKey(ctx), Tier(a.Tier), cmp.Or(strings.TrimSpace(a.Reason), "cleared by the agent"))
	if err != nil {
		return clearResult{}, fault(err)
	}
	return clearResult{Cleared: n}, nil
}

// block returns the core block label of ns (persona and human exist, empty, until
// set), and whether it exists.
func block(ns *Namespace, label string) (Block, bool) {
	l := strings.ToLower(strings.TrimSpace(label))
	for _, b := range ns.Blocks() {
		if b.Label == l {
			return b, true
		}
	}
	return Block{Label: l}, false
}

func (t *memoryTool) coreAppend(ctx context.Context, a appendArgs) (blockResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return blockResult{}, err
	}
	if strings.TrimSpace(a.Content) == "" {
		return blockResult{}, invalid("content", "empty content: say what to add to block %s", a.Label)
	}
	if err := ns.Refresh(ctx); err != nil {
		return blockResult{}, err
	}
	b, _ := block(ns, a.Label)
	value := strings.TrimSpace(a.Content)
	if b.Value != "" {
		value = b.Value + "\n" + value
	}
	return t.setBlock(ctx, ns, b, value, "core_memory_append by the agent")
}

func (t *memoryTool) coreReplace(ctx context.Context, a replaceArgs) (blockResult, error) {
	ns, err := t.namespace(ctx, a.Namespace)
	if err != nil {
		return blockResult{}, err
	}
	if err := ns.Refresh(ctx); err != nil {
		return blockResult{}, err
	}
	b, ok := block(ns, a.Label)
	if !ok {
		return blockResult{}, invalid("label", "no core block %q: the blocks are %s", a.Label, blockLabels(ns))
	}
	if !strings.Contains(b.Value, a.OldContent) {
		return blockResult{}, invalid("old_content", "block %s does not contain %q: copy the text exactly as the block holds it", b.Label, clipText(a.OldContent, 80))
	}
	value := strings.ReplaceAll(b.Value, a.OldContent, a.NewContent)
	return t.setBlock(ctx, ns, b, value, "core_memory_replace by the agent")
}

func blockLabels(ns *Namespace) string {
	var labels []string
	for _, b := range ns.Blocks() {
		labels = append(labels, b.Label)
	}
	return strings.Join(labels, ", ")
}

func (t *memoryTool) setBlock(ctx context.Context, ns *Namespace, b Block, value, reason string) (blockResult, error) {
	if err := ns.SetBlock(ctx, tools.CallKey(ctx), Block{Label: b.Label, Value: value}, reason); err != nil {
		return blockResult{}, fault(err)
	}
	nb, _ := block(ns, b.Label)
	return blockResult{Label: nb.Label, Value: nb.Value, Chars: len([]rune(nb.Value)), Limit: nb.Limit}, nil
}

func (t *memoryTool) recall(ctx context.Context, a recallArgs) (recallResult, error) {
	since, err := parseFilter("since", a.Since)
	if err != nil {
		return recallResult{}, err
	}
	until, err := parseFilter("until", a.Until)
	if err != nil {
		return recallResult{}, err
	}
	hits, err := Recall(ctx, t.m.cfg.Log, RecallQuery{Text: a.Query, Since: since, Until: until, Agent: t.cfg.RecallAgent, Limit: a.Limit})
	if err != nil {
		return recallResult{}, fault(err)
	}
	if hits == nil {
		hits = []RecallHit{}
	}
	return recallResult{Hits: hits}, nil
}
