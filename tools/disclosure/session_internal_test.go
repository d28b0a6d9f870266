package disclosure

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// reparse is what a request offered before a session folded its loads: every load
// the session recorded read again, at each request (Disclose as it was, kept as the
// reference of DiscloseFolded).
func reparse(d *Disclosure, loads []actors.ToolLoad, catalog []tools.Tool) ([]messages.ToolSpec, string) {
	v := d.viewOf(catalog)
	if len(loads) == 0 || d.strategy == All {
		return v.first, v.section
	}
	type oldResult struct {
		Group  string   `json:"group,omitempty"`
		Query  string   `json:"query,omitempty"`
		Loaded []string `json:"loaded"`
		Note   string   `json:"note"`
	}
	loaded, groups := map[string]bool{}, map[string]bool{}
	for _, l := range loads {
		var r oldResult
		if json.Unmarshal([]byte(l.Result), &r) != nil {
			continue
		}
		for _, n := range r.Loaded {
			loaded[n] = true
		}
		if l.Tool == actors.ToolLoadTools && r.Group != "" {
			groups[r.Group] = true
		}
	}
	out := make([]messages.ToolSpec, 0, len(v.first)+len(loaded))
	for _, e := range v.entries {
		if e.group == "" || loaded[e.spec.Name] || groups[e.group] {
			out = append(out, e.spec)
		}
	}
	return out, v.section
}

// testCatalog is an actors.ToolCatalog whose tools a test changes.
type testCatalog struct {
	mu    sync.Mutex
	specs []messages.ToolSpec
	tools map[string]tools.Tool
}

func (c *testCatalog) set(ts ...tools.Tool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.specs, c.tools = nil, map[string]tools.Tool{}
	for _, t := range ts {
		c.specs = append(c.specs, t.Spec())
		c.tools[t.Spec().Name] = t
	}
	slices.SortFunc(c.specs, func(a, b messages.ToolSpec) int { return strings.Compare(a.Name, b.Name) })
}

func (c *testCatalog) Specs() []messages.ToolSpec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.specs
}

func (c *testCatalog) Tool(name string) (tools.Tool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tools[name]
	return t, ok
}

type srcTool struct{ name, source, desc string }

func (s srcTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: s.name, Description: s.desc, Parameters: json.RawMessage(`{"type": "object"}`)}
}
func (s srcTool) Source() string                                 { return s.source }
func (srcTool) Call(context.Context, tools.Call) (string, error) { return "ok", nil }

// servers returns the tools of n servers of k tools each, and more.
func servers(n, k int, more ...tools.Tool) []tools.Tool {
	var ts []tools.Tool
	for s := range n {
		for i := range k {
			ts = append(ts, srcTool{fmt.Sprintf("srv%d__tool_%02d", s, i), fmt.Sprintf("mcp:srv%d", s), fmt.Sprintf("Does thing %d of server %d", i, s)})
		}
	}
	return append(ts, more...)
}

// sessionStep is one move of a session under test: a change of the catalog to
// catalog, or a model call of tool whose recorded answer is result (the
// disclosure's tool's answer to args when empty; an error when fail; recorded
// twice when twice, the second answer not being folded).
type sessionStep struct {
	change      bool
	catalog     []tools.Tool
	tool, args  string
	result      string
	fail, twice bool
}

// driver runs a session of one task through its events, as a node would record
// them, and checks what its requests offer after every event.
type driver struct {
	t      *testing.T
	d      *Disclosure
	cat    *testCatalog
	agent  actors.Agent
	st     *actors.SessionState
	events []messages.Envelope
	loads  []actors.ToolLoad // the loads the session recorded, as the test knows them
	checks int
	quiet  bool // no check after each event
}

func newDriver(t *testing.T, strategy Strategy, catalog []tools.Tool) *driver {
	cat := &testCatalog{}
	cat.set(catalog...)
	d, err := New(strategy, []tools.Tool{tools.Calculator{}, srcTool{"own_tool", "builtin", "The agent's own"}}, WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	a := actors.Agent{Model: "m", Disclosure: d, Catalog: cat, MaxSteps: 1 << 20, LoopRepeats: actors.LoopOff, LoopStaleSteps: actors.LoopOff}
	for _, tl := range d.Tools() {
		a.Tools = append(a.Tools, tl.Spec())
	}
	return &driver{t: t, d: d, cat: cat, agent: a, st: actors.NewSessionState("s")}
}

func (r *driver) apply(p messages.Payload) {
	r.t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		r.t.Fatal(err)
	}
	seq := uint64(len(r.events) + 1)
	e.ID, e.SessionID, e.Seq, e.CorrelationID, e.Actor = fmt.Sprintf("s/%d", seq), "s", seq, "task-1", "test"
	if p.MessageType() == messages.TypeTaskSubmitted {
		e.ID = "task-1"
	}
	if err := r.st.Apply(e); err != nil {
		r.t.Fatal(err)
	}
	r.events = append(r.events, e)
	if !r.quiet {
		r.check()
	}
}

// check compares what the session's next request offers with the reference's
// reading of every load, byte for byte, and with a session refolded from its
// events (recovery, replay).
func (r *driver) check() {
	r.t.Helper()
	cat := actors.CatalogTools(r.cat)
	want, wantSection := reparse(r.d, r.loads, cat)
	got, section := r.d.DiscloseFolded(actors.FoldToolLoads(r.loads), cat)
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if !bytes.Equal(wb, gb) || section != wantSection {
		r.t.Fatalf("after seq %d: DiscloseFolded offers\n%s\nthe loads read again\n%s", len(r.events), gb, wb)
	}
	req, _ := json.Marshal(r.st.Request(r.agent).Tools)
	if !bytes.Equal(req, wb) {
		r.t.Fatalf("after seq %d: the session's request offers\n%s\nthe loads read again\n%s", len(r.events), req, wb)
	}
	again := actors.NewSessionState("s")
	for _, e := range r.events {
		if err := again.Apply(e); err != nil {
			r.t.Fatal(err)
		}
	}
	refolded, _ := json.Marshal(again.Request(r.agent).Tools)
	if !bytes.Equal(refolded, wb) {
		r.t.Fatalf("after seq %d: the refolded session offers\n%s\nnot\n%s", len(r.events), refolded, wb)
	}
	r.checks++
}

func (r *driver) run(steps []sessionStep) {
	r.t.Helper()
	r.apply(&messages.TaskSubmitted{Input: "go"})
	for _, s := range steps {
		r.step(s)
	}
}

// step makes the move s.
func (r *driver) step(s sessionStep) {
	r.t.Helper()
	if s.change {
		r.cat.set(s.catalog...)
		r.check()
		return
	}
	if s.result == "" && (s.tool == actors.ToolLoadTools || s.tool == actors.ToolSearchTools) {
		s.result = r.call(s.tool, s.args) // over the catalog as it is now
	}
	mr := r.st.Decide(r.agent, uint64(len(r.events)+1), 0).Payload.(*messages.ModelRequested)
	r.apply(mr)
	r.apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: fmt.Sprintf("c%d", len(r.events)), Name: s.tool, Arguments: s.args}}}})
	req := r.st.Decide(r.agent, uint64(len(r.events)+1), 0).Payload.(*messages.ToolCallRequested)
	r.apply(req)
	done := &messages.ToolCallCompleted{Key: req.Key, CallID: req.CallID, Tool: req.Tool, Result: s.result}
	if s.fail {
		done.Error = "failed"
	} else if s.tool == actors.ToolLoadTools || s.tool == actors.ToolSearchTools {
		r.loads = append(r.loads, actors.ToolLoad{Tool: s.tool, Result: s.result})
	}
	r.apply(done)
	if s.twice {
		r.apply(&messages.ToolCallCompleted{Key: req.Key, CallID: req.CallID, Tool: req.Tool, Result: `{"loaded":["srv0__tool_00","srv1__tool_01"]}`})
	}
}

// call returns what the disclosure's tool answers args now.
func (r *driver) call(tool, args string) string {
	r.t.Helper()
	for _, tl := range r.d.Tools() {
		if tl.Spec().Name == tool {
			res, err := tl.Call(context.Background(), tools.Call{Key: "k", Arguments: args})
			if err != nil {
				r.t.Fatal(err)
			}
			return res
		}
	}
	r.t.Fatalf("no tool %s", tool)
	return ""
}

// A session's requests offer, after every event, the tools the reading of every
// load it recorded gives (what they offered before the loads were folded), byte
// for byte, and so does the session refolded from its events: for loads and
// searches interleaved, loads of tools that then leave the catalog (and come
// back), the same tool and group loaded again and again, answers that load
// nothing (failed, not JSON, of another shape, recorded twice), and catalogs that
// change between steps.
func TestFoldedLoadsOfferWhatTheLoadsReadAgainOffer(t *testing.T) {
	load := func(group string) sessionStep {
		return sessionStep{tool: actors.ToolLoadTools, args: `{"group":"` + group + `"}`}
	}
	search := func(query string) sessionStep {
		return sessionStep{tool: actors.ToolSearchTools, args: `{"query":"` + query + `","limit":3}`}
	}
	raw := func(tool, result string) sessionStep {
		return sessionStep{tool: tool, args: `{}`, result: result}
	}
	catalog := func(ts ...tools.Tool) sessionStep { return sessionStep{change: true, catalog: ts} }
	shapes := []struct {
		name     string
		strategy Strategy
		steps    []sessionStep
	}{
		{"search-and-load-interleaved", Search, []sessionStep{
			search("thing 1 of server 0"), raw(actors.ToolLoadTools, `{"group":"mcp:srv2","loaded":["srv2__tool_00"]}`),
			search("server 1"), {tool: "calculator", args: `{"expression":"1+1"}`, result: "2"}, search("thing 3"),
			raw(actors.ToolSearchTools, `{"group":"mcp:srv3","loaded":["srv3__tool_02"]}`), // a search's group loads no group
			search("thing 2 of server 2"),
		}},
		{"loaded-tools-leave-the-catalog", Catalog, []sessionStep{
			load("mcp:srv0"), raw(actors.ToolSearchTools, `{"loaded":["srv1__tool_01","srv9__gone"]}`),
			catalog(servers(1, 3)...), load("mcp:srv0"),
			catalog(servers(3, 3, srcTool{"srv0__tool_new", "mcp:srv0", "Joined later"}, srcTool{"calculator", "mcp:srv0", "Named like the agent's"})...),
			load("mcp:srv2"), catalog(), catalog(servers(2, 4)...),
		}},
		{"the-same-again", Catalog, []sessionStep{
			load("mcp:srv1"), load("mcp:srv1"), raw(actors.ToolSearchTools, `{"loaded":["srv0__tool_00"]}`),
			raw(actors.ToolSearchTools, `{"loaded":["srv0__tool_00","srv0__tool_00"]}`), load("mcp:srv1"),
			raw(actors.ToolLoadTools, `{"group":"mcp:srv2","loaded":[]}`), raw(actors.ToolLoadTools, `{"group":"mcp:srv2","loaded":[]}`),
		}},
		{"answers-that-load-nothing", Search, []sessionStep{
			{tool: actors.ToolSearchTools, args: `{}`, result: `{"loaded":["srv0__tool_01"]}`, fail: true},
			raw(actors.ToolSearchTools, "not json"), raw(actors.ToolSearchTools, `{"loaded":5}`),
			raw(actors.ToolSearchTools, `{"loaded":["srv1__tool_01"],"note":7}`), raw(actors.ToolLoadTools, `{"group":["mcp:srv0"]}`),
			raw(actors.ToolSearchTools, `null`), raw(actors.ToolSearchTools, `{"LOADED":["srv2__tool_02"]}`),
			{tool: actors.ToolSearchTools, args: `{}`, result: `{"loaded":["srv0__tool_03"]}`, twice: true},
			raw(actors.ToolLoadTools, " "),
		}},
		{"all", All, []sessionStep{raw(actors.ToolSearchTools, `{"loaded":["srv0__tool_00"]}`), catalog(servers(1, 1)...)}},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			r := newDriver(t, sh.strategy, servers(4, 4))
			r.run(sh.steps)
			if r.checks < 2*len(sh.steps) {
				t.Fatalf("%d checks", r.checks)
			}
		})
	}
}

// What a request of a session costs does not grow with the loads it recorded: each
// load is read once, as it is folded, not again at each request. A session that
// searched 400 times builds its request with the allocations of one that searched
// 50 times (each reading of a load allocates), over a history window that keeps
// the conversation it sends the same.
func TestARequestDoesNotReadTheLoadsAgain(t *testing.T) {
	r := newDriver(t, Search, servers(7, 25))
	r.agent.Context.HistoryTurns = 4
	r.quiet = true
	searches := func(from, to int) []sessionStep {
		var steps []sessionStep
		for k := from; k < to; k++ {
			steps = append(steps, sessionStep{tool: actors.ToolSearchTools, args: fmt.Sprintf(`{"query":"q%d"}`, k),
				result: fmt.Sprintf(`{"query":"q%d","loaded":["srv%d__tool_%02d","srv%d__tool_%02d"],"note":"best match first"}`, k, k%7, k%25, (k+3)%7, (k+3)%25)})
		}
		return steps
	}
	allocs := func() float64 {
		r.st.Request(r.agent) // the view over the catalog is made
		return testing.AllocsPerRun(20, func() { r.st.Request(r.agent) })
	}
	r.run(searches(0, 50))
	few := allocs()
	r.quiet = false
	r.check() // the same tools as the loads read again
	r.quiet = true
	for _, e := range searches(50, 400) {
		r.step(e)
	}
	many := allocs()
	r.quiet = false
	r.check()
	t.Logf("a request allocates %.0f times after 50 loads, %.0f after 400", few, many)
	if many > few+20 {
		t.Fatalf("a request allocates %.0f times after 50 loads, %.0f after 400: it reads the loads again", few, many)
	}
}
