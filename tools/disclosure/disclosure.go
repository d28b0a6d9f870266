package disclosure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/actors"
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
const ToolCallTool = "call_tool"

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

// entry is one tool of the catalog.
type entry struct {
	spec  messages.ToolSpec
	tool  tools.Tool
	group string // "" for an always-loaded tool
}

// group is the tools of one source.
type group struct {
	name  string
	tools []string // sorted
}

// Disclosure is an agent's tools disclosed by one strategy. It is immutable and safe
// for concurrent use; it implements actors.ToolDisclosure.
type Disclosure struct {
	strategy Strategy
	entries  []entry // the agent's tools and the strategy's, sorted by name
	byName   map[string]int
	groups   []group // sorted by name
	index    *BM25   // the tools of groups (Search)
	meta     []tools.Tool
}

var _ actors.ToolDisclosure = (*Disclosure)(nil)

// New discloses ts by strategy. A tool's group is its source (SourceOf); tools of
// source "builtin" are offered in every request. It fails on two tools of one name
// and on a tool named like one of the strategy's own.
func New(strategy Strategy, ts []tools.Tool) (*Disclosure, error) {
	d := &Disclosure{strategy: strategy, byName: map[string]int{}}
	switch strategy {
	case All:
	case Catalog:
		d.meta = []tools.Tool{loadTools{d}}
	case Search:
		d.meta = []tools.Tool{searchTools{d}, callTool{d}}
	default:
		return nil, fmt.Errorf("disclosure: unknown strategy %q: want all, catalog or search", strategy)
	}
	groups := map[string][]string{}
	for i, t := range append(slices.Clone(ts), d.meta...) {
		if t == nil {
			return nil, fmt.Errorf("disclosure: tool %d is nil", i)
		}
		spec := t.Spec()
		if _, dup := d.byName[spec.Name]; dup {
			return nil, fmt.Errorf("disclosure: two tools are named %q", spec.Name)
		}
		var b bytes.Buffer
		if len(spec.Parameters) > 0 && json.Compact(&b, spec.Parameters) == nil {
			spec.Parameters = b.Bytes() // as tools.Registry offers it
		}
		e := entry{spec: spec, tool: t}
		if src := SourceOf(t); src != "builtin" && i < len(ts) {
			e.group = src
			groups[src] = append(groups[src], spec.Name)
		}
		d.byName[spec.Name] = -1
		d.entries = append(d.entries, e)
	}
	slices.SortFunc(d.entries, func(a, b entry) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	var names, docs []string
	for i, e := range d.entries {
		d.byName[e.spec.Name] = i
		if e.group != "" {
			names = append(names, e.spec.Name)
			docs = append(docs, e.spec.Name+" "+e.spec.Name+" "+e.spec.Description+" "+e.group)
		}
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for g := range groups {
			if !yield(g) {
				return
			}
		}
	}) {
		members := groups[name]
		slices.Sort(members)
		d.groups = append(d.groups, group{name: name, tools: members})
	}
	d.index = NewBM25(names, docs)
	return d, nil
}

// Strategy returns the strategy.
func (d *Disclosure) Strategy() Strategy { return d.strategy }

// Tools returns the agent's tools and the strategy's own (load_tools; search_tools
// and call_tool), for the agent's registry: every one of them may be called.
func (d *Disclosure) Tools() []tools.Tool {
	out := make([]tools.Tool, 0, len(d.entries))
	for _, e := range d.entries {
		out = append(out, e.tool)
	}
	return out
}

// Groups returns the groups' names, sorted.
func (d *Disclosure) Groups() []string {
	out := make([]string, len(d.groups))
	for i, g := range d.groups {
		out[i] = g.name
	}
	return out
}

// PromptSection is what the strategy adds to the system prompt: one line per group
// (Catalog), a note on search_tools (Search), nothing (All, or no groups).
func (d *Disclosure) PromptSection() string {
	if d.strategy == All || len(d.groups) == 0 {
		return ""
	}
	var b strings.Builder
	switch d.strategy {
	case Catalog:
		b.WriteString("## Tool groups\n\nMore tools are available in groups. To use one, call load_tools with its group's name: its tools join your tool list for the rest of the session.\n\n")
		for _, g := range d.groups {
			fmt.Fprintf(&b, "- %s (%d tools): %s\n", g.name, len(g.tools), strings.Join(g.tools, ", "))
		}
	case Search:
		n := 0
		for _, g := range d.groups {
			n += len(g.tools)
		}
		fmt.Fprintf(&b, "## More tools\n\n%d more tools are available (from %s). Call search_tools with a description of what you need: the best matches join your tool list for the rest of the session. call_tool calls any of them by name.\n",
			n, strings.Join(d.Groups(), ", "))
	}
	return b.String()
}

// loadResult is the JSON answer of load_tools and search_tools; Offer reads Loaded.
type loadResult struct {
	Group  string   `json:"group,omitempty"`
	Query  string   `json:"query,omitempty"`
	Loaded []string `json:"loaded"`
	Note   string   `json:"note"`
}

// Offer implements actors.ToolDisclosure: the always-loaded tools, the strategy's
// own, and the tools the session's loads name, sorted by name. Names that are not in
// the catalog (any more) are passed over.
func (d *Disclosure) Offer(loads []actors.ToolLoad) []messages.ToolSpec {
	loaded := map[string]bool{}
	for _, l := range loads {
		var r loadResult
		if json.Unmarshal([]byte(l.Result), &r) != nil {
			continue
		}
		for _, n := range r.Loaded {
			loaded[n] = true
		}
	}
	out := make([]messages.ToolSpec, 0, len(d.entries))
	for _, e := range d.entries {
		if d.strategy == All || e.group == "" || loaded[e.spec.Name] {
			out = append(out, e.spec)
		}
	}
	return out
}

// Search ranks the catalog's grouped tools for query, best first (at most k).
func (d *Disclosure) Search(query string, k int) []Hit {
	return d.index.Search(query, k)
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

func (loadTools) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: actors.ToolLoadTools,
		Description: "Adds the tools of a group listed in the system prompt to your tool list, for the rest of the session.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"group":{"type":"string","description":"The group's name, e.g. mcp:github"}},"required":["group"],"additionalProperties":false}`)}
}

func (t loadTools) Call(ctx context.Context, c tools.Call) (string, error) {
	var a struct {
		Group string `json:"group"`
	}
	if err := decode(actors.ToolLoadTools, c.Arguments, `{"group": "mcp:github"}`, &a); err != nil {
		return "", err
	}
	i := slices.IndexFunc(t.d.groups, func(g group) bool { return g.name == a.Group })
	if i < 0 {
		return "", &tools.ArgumentError{Tool: actors.ToolLoadTools, Reason: fmt.Sprintf("no group is named %q; the groups are %s", a.Group, strings.Join(t.d.Groups(), ", "))}
	}
	return result(loadResult{Group: a.Group, Loaded: t.d.groups[i].tools, Note: "these tools are in your tool list now"})
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
	if err := decode(actors.ToolSearchTools, c.Arguments, `{"query": "create an issue in a repository"}`, &a); err != nil {
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
	r := loadResult{Query: a.Query, Loaded: []string{}, Note: "no tool matches; try other words"}
	for _, h := range t.d.Search(a.Query, a.Limit) {
		r.Loaded = append(r.Loaded, h.Name)
	}
	if len(r.Loaded) > 0 {
		r.Note = "best match first; these tools are in your tool list now (call_tool calls them too)"
	}
	return result(r)
}

func (callTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: ToolCallTool,
		Description: "Calls a tool by name with its arguments (find tools with search_tools).",
		Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The tool's name"},` +
			`"arguments":{"type":"object","description":"The tool's arguments, as its schema says"}},"required":["name"],"additionalProperties":false}`)}
}

// Call calls the named tool of the catalog with the call's idempotency key, under the
// call's context. The disclosure tools cannot be called through it: their answers
// are recorded, and folded, only as calls of their own.
func (t callTool) Call(ctx context.Context, c tools.Call) (string, error) {
	var a struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := decode(ToolCallTool, c.Arguments, `{"name": "github_create_issue", "arguments": {"title": "..."}}`, &a); err != nil {
		return "", err
	}
	i, ok := t.d.byName[a.Name]
	if !ok || slices.ContainsFunc(t.d.meta, func(m tools.Tool) bool { return m.Spec().Name == a.Name }) {
		return "", &tools.ArgumentError{Tool: ToolCallTool, Reason: fmt.Sprintf("%q is not a tool of this agent; find one with search_tools", a.Name)}
	}
	args := strings.TrimSpace(string(a.Arguments))
	if args == "null" {
		args = ""
	}
	if strings.HasPrefix(args, `"`) { // arguments given as JSON text
		var s string
		if json.Unmarshal(a.Arguments, &s) == nil {
			args = s
		}
	}
	return t.d.entries[i].tool.Call(ctx, tools.Call{Key: c.Key, Arguments: args})
}

func result(r loadResult) (string, error) {
	b, err := json.Marshal(r)
	return string(b), err
}

// decode reads a model's arguments into v: one JSON object without unknown fields.
func decode(tool, raw, example string, v any) error {
	if strings.TrimSpace(raw) == "" {
		raw = "{}"
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, e := dec.Token(); !errors.Is(e, io.EOF) {
			err = errors.New("unexpected text after the JSON object")
		}
	}
	if err != nil {
		return &tools.ArgumentError{Tool: tool, Reason: strings.TrimPrefix(err.Error(), "json: ") + "; expected a JSON object such as " + example}
	}
	return nil
}
