package disclosure

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Strategy is how an agent's tools reach the model.
type Strategy string

// The strategies.
const (
	All     Strategy = "all"
	Catalog Strategy = "catalog"
	Search  Strategy = "search"
)

// ParseStrategy reads a strategy's name; "" is All.
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case "", All:
		return All, nil
	case Catalog, Search:
		return Strategy(s), nil
	}
	return "", fmt.Errorf("disclosure %q: want all, catalog or search", s)
}

// ToolCallTool is the name of the tool that calls another by name (Search).
const ToolCallTool = actors.ToolCallTool

// DefaultSearchResults is how many tools search_tools loads by default.
const DefaultSearchResults = 5

// sourced is what a tool tells of where it comes from (tools.Sourced): "builtin",
// "mcp:<server>", "skill:<name>".
type sourced interface{ Source() string }

// SourceOf returns a tool's source, "builtin" when it does not say.
func SourceOf(t tools.Tool) string {
	if s, ok := t.(sourced); ok && s.Source() != "" {
		return s.Source()
	}
	return "builtin"
}

// entry is one tool the agent may be offered.
type entry struct {
	spec  messages.ToolSpec
	tool  tools.Tool
	group string // "" for an always-loaded tool
	// fromCatalog: the tool is the catalog's, looked up again at each call, as the
	// catalog may hold another tool of that name by then.
	fromCatalog bool
}

// group is the tools of one source.
type group struct {
	name  string
	tools []string // sorted
}

// Disclosure is an agent's tools disclosed by one strategy: the tools given to New,
// and the tools of its catalog (WithCatalog), whose set changes while the node runs.
// It is safe for concurrent use; it implements actors.ToolDisclosure.
type Disclosure struct {
	strategy Strategy
	static   []entry // the agent's tools and the strategy's, sorted by name
	meta     []tools.Tool
	catalog  actors.ToolCatalog
	embedder llm.Embedder // ranks search_tools' matches when set (WithEmbedder)
	scope    Scope        // the tools each agent's calls of the strategy's tools see (WithScope)
	// view is the disclosure over the catalog as it was last seen: it is made anew
	// only when the catalog changes.
	view atomic.Pointer[view]
}

// view is the disclosure over one state of the catalog: every tool (the static ones
// and the catalog's not named like one of them), the groups, the search index and
// the prompt section. It is immutable.
type view struct {
	catalog []messages.ToolSpec // the catalog's specs it was made from, in order
	sources []string            // and their tools' sources
	entries []entry             // sorted by name
	byName  map[string]int
	groups  []group  // sorted by name
	index   *BM25    // the tools of groups (Search)
	names   []string // the tools of groups, as index has them
	docs    []string // their indexed text
	vectors vectors  // their embeddings, with an embedder (WithEmbedder)
	section string
	bounded string              // section within MaxPromptSection (BoundedSection)
	first   []messages.ToolSpec // what a request offers before any load
}

var (
	_ actors.BoundedDisclosure = (*Disclosure)(nil)
	_ actors.FoldedDisclosure  = (*Disclosure)(nil)
)

// Option configures a Disclosure (New).
type Option func(*Disclosure)

// WithCatalog discloses the tools of c too, as they are at each use: a catalog tool
// named like one of the tools given to New is left out, and the others are grouped
// by their source ("mcp:<server>"; "catalog" for a tool that does not say). The
// strategy's tools read c when they are called: load_tools loads a group of the
// catalog as it is then, search_tools searches it, and call_tool calls its tools.
func WithCatalog(c actors.ToolCatalog) Option {
	return func(d *Disclosure) { d.catalog = c }
}

// Scope returns the tools the strategy's own (load_tools, search_tools, call_tool)
// see when the agent of a call (tools.Call.Agent) calls them: has reports whether
// it may see and call the tool of that name. A nil has is every tool: the agent
// whose tools are all of the node's (the default agent).
type Scope func(agent string) (has func(name string) bool)

// WithScope bounds what the strategy's tools see, for each agent, to s's tools: a
// named agent's list of tools is what it may call, through call_tool too, so
// call_tool refuses any other tool, search_tools finds only its tools and
// load_tools loads only its tools of a group.
func WithScope(s Scope) Option {
	return func(d *Disclosure) { d.scope = s }
}

// scopeOf returns the tools agent sees (Scope): nil for all of them.
func (d *Disclosure) scopeOf(agent string) func(string) bool {
	if d.scope == nil {
		return nil
	}
	return d.scope(agent)
}

// CatalogGroup is the group of a catalog tool that does not say its source.
const CatalogGroup = "catalog"

// New discloses ts by strategy. A tool's group is its source (SourceOf); tools of
// source "builtin" are offered in every request. It fails on two tools of one name
// and on a tool named like one of the strategy's own.
func New(strategy Strategy, ts []tools.Tool, opts ...Option) (*Disclosure, error) {
	d := &Disclosure{strategy: strategy}
	switch strategy {
	case All:
	case Catalog:
		d.meta = []tools.Tool{loadTools{d}}
	case Search:
		d.meta = []tools.Tool{searchTools{d}, callTool{d}}
	default:
		return nil, fmt.Errorf("disclosure: unknown strategy %q: want all, catalog or search", strategy)
	}
	for _, o := range opts {
		o(d)
	}
	seen := map[string]bool{}
	for i, t := range append(slices.Clone(ts), d.meta...) {
		if t == nil {
			return nil, fmt.Errorf("disclosure: tool %d is nil", i)
		}
		spec := compact(t.Spec())
		if seen[spec.Name] {
			return nil, fmt.Errorf("disclosure: two tools are named %q", spec.Name)
		}
		seen[spec.Name] = true
		e := entry{spec: spec, tool: t}
		if src := SourceOf(t); src != "builtin" && i < len(ts) {
			e.group = src
		}
		d.static = append(d.static, e)
	}
	slices.SortFunc(d.static, func(a, b entry) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	return d, nil
}

// compact returns spec with its schema compacted, as tools.Registry offers it.
func compact(spec messages.ToolSpec) messages.ToolSpec {
	var b bytes.Buffer
	if len(spec.Parameters) > 0 && json.Compact(&b, spec.Parameters) == nil && b.Len() != len(spec.Parameters) {
		spec.Parameters = b.Bytes()
	}
	return spec
}

// current returns the view over the catalog as it is now.
func (d *Disclosure) current() *view {
	return d.viewOf(actors.CatalogTools(d.catalog))
}

// viewOf returns the view over the catalog tools cat: the last one made, when cat
// has the same specs and sources (specs compared by name, description and schema
// bytes, which a catalog shares from one reading to the next while it does not
// change), or a new one.
func (d *Disclosure) viewOf(cat []tools.Tool) *view {
	if v := d.view.Load(); v != nil && len(v.catalog) == len(cat) {
		same := true
		for i, t := range cat {
			if t == nil || !sameSpec(v.catalog[i], t.Spec()) || v.sources[i] != SourceOf(t) {
				same = false
				break
			}
		}
		if same {
			return v
		}
	}
	v := d.build(cat)
	d.view.Store(v)
	return v
}

func sameSpec(a, b messages.ToolSpec) bool {
	return a.Name == b.Name && a.Description == b.Description && bytes.Equal(a.Parameters, b.Parameters)
}

// build makes the view over the static tools and the catalog tools cat.
func (d *Disclosure) build(cat []tools.Tool) *view {
	v := &view{catalog: make([]messages.ToolSpec, len(cat)), sources: make([]string, len(cat)), byName: map[string]int{}}
	for i, t := range cat {
		if t != nil {
			v.catalog[i], v.sources[i] = t.Spec(), SourceOf(t)
		}
	}
	v.entries = slices.Clone(d.static)
	for _, e := range d.static {
		v.byName[e.spec.Name] = -1
	}
	for i, t := range cat {
		spec := compact(v.catalog[i])
		if _, dup := v.byName[spec.Name]; dup || t == nil {
			continue // named like a tool of the agent, or twice in the catalog
		}
		g := v.sources[i]
		if g == "builtin" {
			g = CatalogGroup
		}
		v.byName[spec.Name] = -1
		v.entries = append(v.entries, entry{spec: spec, tool: t, group: g, fromCatalog: true})
	}
	slices.SortFunc(v.entries, func(a, b entry) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	groups := map[string][]string{}
	var names, docs []string
	for i, e := range v.entries {
		v.byName[e.spec.Name] = i
		if e.group != "" {
			groups[e.group] = append(groups[e.group], e.spec.Name) // sorted, as entries are
			names = append(names, e.spec.Name)
			docs = append(docs, e.spec.Name+" "+e.spec.Name+" "+e.spec.Description+" "+e.group)
		}
		if d.strategy == All || e.group == "" {
			v.first = append(v.first, e.spec)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		v.groups = append(v.groups, group{name: name, tools: groups[name]})
	}
	v.names, v.docs, v.index = names, docs, NewBM25(names, docs)
	v.section = d.section(v)
	v.bounded = d.sectionWithin(v, MaxPromptSection)
	return v
}

// Strategy returns the strategy.
func (d *Disclosure) Strategy() Strategy { return d.strategy }

// Tools returns the agent's tools and the strategy's own (load_tools; search_tools
// and call_tool), for the agent's registry: every one of them may be called. The
// catalog's tools are not among them: its own performer calls them.
func (d *Disclosure) Tools() []tools.Tool {
	out := make([]tools.Tool, 0, len(d.static))
	for _, e := range d.static {
		out = append(out, e.tool)
	}
	return out
}

// Groups returns the groups' names now, sorted.
func (d *Disclosure) Groups() []string { return d.current().groupNames() }

func (v *view) groupNames() []string {
	out := make([]string, len(v.groups))
	for i, g := range v.groups {
		out[i] = g.name
	}
	return out
}

// PromptSection is what the strategy adds to the system prompt now (Disclose).
func (d *Disclosure) PromptSection() string { return d.current().section }

// section is what the strategy adds to the system prompt: one line per group
// (Catalog), a note on search_tools (Search), nothing (All, or no groups).
func (d *Disclosure) section(v *view) string {
	if d.strategy == All || len(v.groups) == 0 {
		return ""
	}
	var b strings.Builder
	switch d.strategy {
	case Catalog:
		b.WriteString("## Tool groups\n\nMore tools are available in groups. To use one, call load_tools with its group's name: its tools join your tool list for the rest of the session.\n\n")
		for _, g := range v.groups {
			fmt.Fprintf(&b, "- %s (%d tools): %s\n", g.name, len(g.tools), strings.Join(g.tools, ", "))
		}
	case Search:
		n := 0
		for _, g := range v.groups {
			n += len(g.tools)
		}
		fmt.Fprintf(&b, "## More tools\n\n%d more tools are available (from %s). Call search_tools with a description of what you need: the best matches join your tool list for the rest of the session. call_tool calls any of them by name.\n",
			n, strings.Join(v.groupNames(), ", "))
	}
	return b.String()
}

// MaxPromptSection bounds the section of BoundedSection, in bytes, however many
// tools and groups the catalog has (as skills.MaxPromptSection bounds the skills'):
// an MCP server that joins with thousands of tools must not grow every request's
// system prompt past the window.
const MaxPromptSection = 16 << 10

// BoundedSection implements actors.BoundedDisclosure: the section Disclose gives
// for catalog, within MaxPromptSection bytes. Catalog's lines name every group and
// its number of tools; when they do not fit whole, each group's list of tool
// names is cut to an equal share of what is left, with how many it leaves out
// (load_tools loads the whole group); past a few hundred groups the groups that do
// not fit are counted, not named. The same catalog gives the same bytes.
func (d *Disclosure) BoundedSection(catalog []tools.Tool) string { return d.viewOf(catalog).bounded }

// sectionWithin is section within max bytes (BoundedSection).
func (d *Disclosure) sectionWithin(v *view, max int) string {
	whole := v.section
	if len(whole) <= max || d.strategy != Catalog {
		return whole
	}
	const intro = "## Tool groups\n\nMore tools are available in groups. To use one, call load_tools with its group's name: its tools join your tool list for the rest of the session; only some of each group's tools are named here.\n\n"
	var b strings.Builder
	b.WriteString(intro)
	heads := make([]string, len(v.groups))
	room := max - len(intro)
	for i, g := range v.groups {
		heads[i] = fmt.Sprintf("- %s (%d tools): ", g.name, len(g.tools))
		room -= len(heads[i]) + 1
	}
	if room < 0 {
		// Too many groups to name each: as many as fit, then a count.
		for i, g := range v.groups {
			line := fmt.Sprintf("- %s (%d tools)\n", g.name, len(g.tools))
			if b.Len()+len(line)+64 > max {
				fmt.Fprintf(&b, "(and %d more groups, not shown)\n", len(v.groups)-i)
				break
			}
			b.WriteString(line)
		}
		return b.String()
	}
	share := room / len(v.groups)
	for i, g := range v.groups {
		b.WriteString(heads[i])
		b.WriteString(namesWithin(g.tools, share))
		b.WriteByte('\n')
	}
	return b.String()
}

// namesWithin joins names with ", " within max bytes: as many whole names as fit
// with the note of how many are left out.
func namesWithin(names []string, max int) string {
	whole := strings.Join(names, ", ")
	if len(whole) <= max {
		return whole
	}
	var b strings.Builder
	for i, n := range names {
		more := fmt.Sprintf("… and %d more", len(names)-i)
		sep := ""
		if i > 0 {
			sep = ", "
		}
		if b.Len()+len(sep)+len(n)+len(", ")+len(more) > max {
			b.WriteString(sep)
			b.WriteString(more)
			break
		}
		b.WriteString(sep)
		b.WriteString(n)
	}
	return b.String()
}

// loadResult is the JSON answer of load_tools and search_tools; a session folds
// its Loaded and Group (actors.ToolLoads, which reads it as an actors.ToolLoadResult).
type loadResult = actors.ToolLoadResult

// Disclose implements actors.ToolDisclosure: the specs a request offers — the
// always-loaded tools, the strategy's own, and the tools the session's loads name,
// sorted by name — and the section the system prompt gains, given the session's
// recorded loads and the catalog's tools now. It is a pure function of the two: the
// same loads and catalog give the same bytes, so the tool section of a prompt stays
// byte-identical from step to step until something is loaded or the catalog
// changes. A group loaded with load_tools stays loaded whole: a tool its server adds
// later is offered too. Loaded names that are not (any more) among the tools are
// passed over. It reads every load; a session's requests read them folded
// (DiscloseFolded).
func (d *Disclosure) Disclose(loads []actors.ToolLoad, catalog []tools.Tool) ([]messages.ToolSpec, string) {
	if len(loads) == 0 || d.strategy == All {
		return d.DiscloseFolded(nil, catalog)
	}
	return d.DiscloseFolded(actors.FoldToolLoads(loads), catalog)
}

// DiscloseFolded implements actors.FoldedDisclosure: Disclose for the loads folded
// in loads, at a cost that does not grow with their number.
func (d *Disclosure) DiscloseFolded(loads *actors.ToolLoads, catalog []tools.Tool) ([]messages.ToolSpec, string) {
	v := d.viewOf(catalog)
	if loads.Len() == 0 || d.strategy == All {
		return v.first, v.section
	}
	out := make([]messages.ToolSpec, 0, len(v.first))
	for _, e := range v.entries {
		if e.group == "" || loads.Loaded(e.spec.Name) || loads.GroupLoaded(e.group) {
			out = append(out, e.spec)
		}
	}
	return out, v.section
}

// Offer returns the specs a request offers given loads, over the catalog as it is
// now (Disclose).
func (d *Disclosure) Offer(loads []actors.ToolLoad) []messages.ToolSpec {
	specs, _ := d.Disclose(loads, actors.CatalogTools(d.catalog))
	return specs
}

// Search ranks the grouped tools (the catalog's among them) for query, best first (at
// most k): by their embeddings' similarity to the query's with an embedder
// (WithEmbedder), by BM25 otherwise. It reports the ranking used: "bm25",
// "embedding", or "bm25" with the embedder's error when it failed.
func (d *Disclosure) Search(ctx context.Context, query string, k int) (hits []Hit, ranking string) {
	return d.searchWithin(ctx, query, k, nil)
}

// searchWithin is Search among the tools has reports (all of them when nil).
func (d *Disclosure) searchWithin(ctx context.Context, query string, k int, has func(string) bool) (hits []Hit, ranking string) {
	v := d.current()
	n := k
	if has != nil {
		n = len(v.names) // rank them all, then keep the k best of has
	}
	within := func(hits []Hit) []Hit {
		if has == nil {
			return hits
		}
		hits = slices.DeleteFunc(hits, func(h Hit) bool { return !has(h.Name) })
		return hits[:min(len(hits), k)]
	}
	if d.embedder != nil {
		hits, err := v.searchEmbedded(ctx, d.embedder, query, n)
		if err == nil {
			return within(hits), "embedding"
		}
		return within(v.index.Search(query, n)), "bm25 (the embedder failed: " + err.Error() + ")"
	}
	return within(v.index.Search(query, n)), "bm25"
}

// loadTools is load_tools (Catalog).
type loadTools struct{ d *Disclosure }

// searchTools is search_tools (Search).
type searchTools struct{ d *Disclosure }

// callTool is call_tool (Search).
type callTool struct{ d *Disclosure }

func (loadTools) Source() string   { return "builtin" }
func (searchTools) Source() string { return "builtin" }
func (callTool) Source() string    { return "builtin" }

// Limits lets load_tools' result name every tool of a group whole: the node cuts a
// result at its tool's MaxOutput before it records it, and cut it would no longer
// parse, so the session would load none of the group (actors.ParseToolLoad). A group
// is at most an MCP server's tools: 1000 by default, of names of up to 64 bytes.
func (loadTools) Limits() tools.CallLimits { return tools.CallLimits{MaxOutput: 1 << 20} }

func (loadTools) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: actors.ToolLoadTools,
		Description: "Adds the tools of a group listed in the system prompt to your tool list, for the rest of the session.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"group":{"type":"string","description":"The group's name, e.g. mcp:github"}},"required":["group"],"additionalProperties":false}`)}
}

func (t loadTools) Call(ctx context.Context, c tools.Call) (string, error) {
	var a struct {
		Group string `json:"group"`
	}
	if err := tools.DecodeArguments(t.Spec(), c.Arguments, &a); err != nil {
		return "", err
	}
	v := t.d.current()
	groups := v.groups
	if has := t.d.scopeOf(c.Agent); has != nil {
		// The agent's tools of each group; a group of none of them is not its.
		groups = nil
		for _, g := range v.groups {
			if own := slices.DeleteFunc(slices.Clone(g.tools), func(n string) bool { return !has(n) }); len(own) > 0 {
				groups = append(groups, group{name: g.name, tools: own})
			}
		}
	}
	i := slices.IndexFunc(groups, func(g group) bool { return g.name == a.Group })
	if i < 0 {
		names := make([]string, len(groups))
		for j, g := range groups {
			names[j] = g.name
		}
		return "", &tools.ArgumentError{Tool: actors.ToolLoadTools, Reason: fmt.Sprintf("no group is named %q; the groups are %s", clip(a.Group), strings.Join(names, ", "))}
	}
	return result(loadResult{Group: a.Group, Loaded: groups[i].tools, Note: "these tools are in your tool list now"})
}

func (searchTools) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: actors.ToolSearchTools,
		Description: "Finds tools for a need described in words and adds the best matches to your tool list, for the rest of the session.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"What the tool should do, in words"},` +
			`"limit":{"type":"integer","minimum":1,"maximum":20,"description":"How many tools to load (default 5)"}},"required":["query"],"additionalProperties":false}`)}
}

func (t searchTools) Call(ctx context.Context, c tools.Call) (string, error) {
	var a struct {
		Query string `json:"query"`
		Limit int    `json:"limit"`
	}
	if err := tools.DecodeArguments(t.Spec(), c.Arguments, &a); err != nil {
		return "", err
	}
	if strings.TrimSpace(a.Query) == "" {
		return "", &tools.ArgumentError{Tool: actors.ToolSearchTools, Reason: `"query" is empty: describe what the tool should do`}
	}
	if a.Limit == 0 {
		a.Limit = DefaultSearchResults
	}
	if a.Limit < 1 || a.Limit > 20 {
		return "", &tools.ArgumentError{Tool: actors.ToolSearchTools, Reason: fmt.Sprintf(`"limit" is %d: want 1 to 20`, a.Limit)}
	}
	// The query is quoted cut: the result is cut at the tool's output bound before
	// it is recorded, and a long query quoted whole cut off the tools loaded.
	r := loadResult{Query: clip(a.Query), Loaded: []string{}, Note: "no tool matches; try other words"}
	hits, ranking := t.d.searchWithin(ctx, a.Query, a.Limit, t.d.scopeOf(c.Agent))
	for _, h := range hits {
		r.Loaded = append(r.Loaded, h.Name)
	}
	if len(r.Loaded) > 0 {
		r.Note = "best match first; these tools are in your tool list now (call_tool calls them too)"
	}
	if ranking != "bm25" && ranking != "embedding" {
		r.Note += "; ranked by " + ranking
	}
	return result(r)
}

func (callTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: ToolCallTool,
		Description: "Calls a tool by name with its arguments (find tools with search_tools).",
		Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The tool's name"},` +
			`"arguments":{"type":"object","description":"The tool's arguments, as its schema says"}},"required":["name"],"additionalProperties":false}`)}
}

// Call calls the named tool of the catalog with the call's idempotency key and
// agent, under the call's context and the tool's own limits (tools.CallLimited). The disclosure tools cannot be called through it: their answers
// are recorded, and folded, only as calls of their own. Nor can a tool outside the
// scope of the call's agent (WithScope): it is refused, not run.
func (t callTool) Call(ctx context.Context, c tools.Call) (string, error) {
	a, err := tools.ParseNamedCall(ToolCallTool, c.Arguments)
	if err != nil {
		return "", err
	}
	v := t.d.current()
	i, ok := v.byName[a.Name]
	has := t.d.scopeOf(c.Agent)
	if !ok || slices.ContainsFunc(t.d.meta, func(m tools.Tool) bool { return m.Spec().Name == a.Name }) || has != nil && !has(a.Name) {
		return "", &tools.ArgumentError{Tool: ToolCallTool, Reason: fmt.Sprintf("%q is not a tool of this agent; find one with search_tools", a.Name)}
	}
	tl := v.entries[i].tool
	if v.entries[i].fromCatalog {
		if tl, ok = t.d.catalog.Tool(a.Name); !ok {
			return "", fmt.Errorf("%w: %q (it left the catalog)", actors.ErrNoSuchTool, a.Name)
		}
	}
	// As the performer would call it: for the same agent (its own memory namespace,
	// its skills) and under the tool's own limits.
	return tools.CallLimited(ctx, tl, a.Name, tools.Call{Key: c.Key, Arguments: a.Arguments, Agent: c.Agent, Outward: c.Outward})
}

func result(r loadResult) (string, error) {
	b, err := json.Marshal(r)
	return string(b), err
}

// clip is s cut to at most maxQuoted runes, with "…" when cut: a name or a query
// the model wrote, quoted back to it.
func clip(s string) string {
	const maxQuoted = 100
	if utf8.RuneCountInString(s) <= maxQuoted {
		return s
	}
	return string([]rune(s)[:maxQuoted]) + "…"
}
