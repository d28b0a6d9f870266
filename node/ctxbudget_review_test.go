//go:build review

package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
	"github.com/troupe-run/troupe/tools/skills"
)

// budgetModel calls the tool "big" calls times, then answers; compression calls
// (a Purpose) are answered by summarise.
type budgetModel struct {
	calls     int
	loop      int
	hang      bool
	summarise func(req llm.Request) (llm.Response, error)
	mu        sync.Mutex
	reqs      []llm.Request
}

func (m *budgetModel) Name() string { return "budget" }

func (m *budgetModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	if req.Purpose != "" {
		if m.hang {
			<-ctx.Done()
			return llm.Response{}, ctx.Err()
		}
		if m.summarise != nil {
			return m.summarise(req)
		}
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "a short summary"}}, nil
	}
	m.mu.Lock()
	done := m.loop
	m.loop++
	m.mu.Unlock()
	if done < m.calls {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant,
			ToolCalls: []messages.ToolCall{{ID: fmt.Sprintf("c%d", done+1), Name: "big", Arguments: fmt.Sprintf(`{"i":%d}`, done+1)}}}}, nil
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done"}}, nil
}

var (
	tkOnce sync.Once
	tk     *tiktoken.Tiktoken
)

// promptTokens counts what a request sends with tiktoken-go's cl100k_base: each
// message's text and tool calls' arguments, and the tools' schemas as JSON.
func tkPromptTokens(t *testing.T, req llm.Request) (int, int) {
	t.Helper()
	tkOnce.Do(func() {
		tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
		var err error
		if tk, err = tiktoken.GetEncoding("cl100k_base"); err != nil {
			t.Fatal(err)
		}
	})
	n := 0
	for _, m := range req.Messages {
		n += len(tk.Encode(m.Content, nil, nil))
		for _, c := range m.ToolCalls {
			n += len(tk.Encode(c.Name+c.Arguments, nil, nil))
		}
	}
	specs, _ := json.Marshal(req.Tools)
	return n, len(tk.Encode(string(specs), nil, nil))
}

func runBudget(t *testing.T, cfg node.Config, m *budgetModel, input string) ([]messages.Envelope, []llm.Request) {
	t.Helper()
	cfg.Model = m
	n := nodetest.Start(t, cfg)
	events := nodetest.Run(t, n, "budget", input)
	m.mu.Lock()
	defer m.mu.Unlock()
	return events, append([]llm.Request(nil), m.reqs...)
}

func lastEnd(t *testing.T, events []messages.Envelope) string {
	for i := len(events) - 1; i >= 0; i-- {
		p, err := events[i].Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch x := p.(type) {
		case *messages.TaskCompleted:
			return "completed: " + x.Output
		case *messages.TaskFailed:
			return "failed " + string(x.Reason) + ": " + x.Error
		}
	}
	return "no end"
}

func bigTool(t *testing.T, out string, opts ...tools.Option) tools.Tool {
	big, err := tools.Func("big", "Returns a big output.", func(context.Context, struct {
		I int `json:"i"`
	}) (string, error) {
		return out, nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return big
}

// A tool result far larger than the window, in several shapes: each request the
// model gets fits the window less the reserved output, counted with tiktoken.
func TestReviewHugeToolResultFitsTheWindow(t *testing.T) {
	invalid := strings.Repeat("ab\xff\xfe\xc3", 200_000)
	shapes := map[string]string{
		"lines":    strings.Repeat("the quick brown fox jumps over the lazy dog\n", 250_000),
		"one-line": strings.Repeat("x", 10<<20),
		"binary": string(func() []byte {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = byte(i * 7)
			}
			return b
		}()),
		"invalid": invalid,
		"cjk":     strings.Repeat("漢字かな交じり文😀é̃", 100_000),
	}
	for name, out := range shapes {
		for _, strat := range []string{"", "mask", "proactive", "summary+mask", "compact"} {
			t.Run(name+"/"+strat, func(t *testing.T) {
				m := &budgetModel{calls: 2}
				cfg := node.Config{Tools: []tools.Tool{bigTool(t, out, tools.WithMaxOutput(12<<20))},
					Context: actors.ContextOptions{Window: 4000, ReservedOutput: 500, Compression: actors.Compression{Strategy: strat}}}
				events, reqs := runBudget(t, cfg, m, "Look at the big output.")
				t.Logf("%s", lastEnd(t, events))
				for i, r := range reqs {
					msgs, specs := tkPromptTokens(t, r)
					if msgs+specs > 4000-500 {
						t.Errorf("request %d (%s): %d tokens of messages + %d of schemas > %d", i+1, r.Purpose, msgs, specs, 3500)
					}
				}
			})
		}
	}
}

// Each compression strategy, its summariser failing, hanging or answering far
// more than it was given: every request fits the window, and the task ends.
func TestReviewSummariserMisbehavesWithinTheWindow(t *testing.T) {
	out := strings.Repeat("a line of a tool's output that is long enough to matter. ", 300) // ~3.6K tokens
	modes := map[string]func(llm.Request) (llm.Response, error){
		"fails": func(llm.Request) (llm.Response, error) { return llm.Response{}, errors.New("summariser down") },
		"huge": func(llm.Request) (llm.Response, error) {
			return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: strings.Repeat("a summary that goes on and on ", 20_000)}}, nil
		},
		"hangs": func(req llm.Request) (llm.Response, error) { return llm.Response{}, nil },
	}
	for mode, f := range modes {
		for _, strat := range []string{"summary", "hierarchical", "extract", "compact", "proactive", "window+proactive", "importance"} {
			t.Run(mode+"/"+strat, func(t *testing.T) {
				m := &budgetModel{calls: 8, summarise: f}
				var ctxs []context.Context
				if mode == "hangs" { // until the model timeout
					m.summarise = nil
					m.hang = true
				}
				_ = ctxs
				cfg := node.Config{Tools: []tools.Tool{bigTool(t, out)}, MaxSteps: 40, ModelTimeout: 500 * time.Millisecond, LoopRepeats: actors.LoopOff, LoopStaleSteps: actors.LoopOff,
					Context: actors.ContextOptions{Window: 8000, ReservedOutput: 500,
						Compression: actors.Compression{Strategy: strat, Window: 2, Step: 1, CompactTokens: 3000}}}
				events, reqs := runBudget(t, cfg, m, "Look at the big output.")
				end := lastEnd(t, events)
				purposes := map[string]int{}
				for i, r := range reqs {
					purposes[r.Purpose]++
					msgs, specs := tkPromptTokens(t, r)
					if msgs+specs > 8000-500 {
						t.Errorf("request %d (%q): %d tokens of messages + %d of schemas > %d", i+1, r.Purpose, msgs, specs, 7500)
					}
				}
				t.Logf("%s; %d requests %v", end, len(reqs), purposes)
				if !strings.HasPrefix(end, "completed") {
					t.Errorf("%s", end)
				}
			})
		}
	}
}

// manyTools is an MCP-like catalog of n tools of one server, whose set can grow
// while the node runs.
type manyTools struct {
	mu sync.Mutex
	ts []tools.Tool
}

func newManyTools(t *testing.T, from, n int) []tools.Tool {
	var out []tools.Tool
	for i := from; i < from+n; i++ {
		tl, err := tools.Func(fmt.Sprintf("srv__tool_%04d", i), fmt.Sprintf("Does thing number %d of the server, with care and many words.", i),
			func(context.Context, struct {
				Q string `json:"q"`
			}) (string, error) {
				return "ok", nil
			}, tools.WithSource("mcp:srv"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tl)
	}
	return out
}

func (c *manyTools) Tools() []tools.Tool { c.mu.Lock(); defer c.mu.Unlock(); return slices.Clone(c.ts) }
func (c *manyTools) Specs() []messages.ToolSpec {
	var s []messages.ToolSpec
	for _, t := range c.Tools() {
		s = append(s, t.Spec())
	}
	return s
}
func (c *manyTools) Tool(name string) (tools.Tool, bool) {
	for _, t := range c.Tools() {
		if t.Spec().Name == name {
			return t, true
		}
	}
	return nil, false
}

// 2,000 MCP tools: under each disclosure, every request fits the window, the tool
// section is the same from request to request, and a node whose first request
// cannot fit says so (at start, or as the task's failure), never sending one over.
func TestReviewTwoThousandToolsWithinTheWindow(t *testing.T) {
	for _, strat := range []disclosure.Strategy{disclosure.All, disclosure.Catalog, disclosure.Search} {
		for _, window := range []int{4000, 32000, 400000} {
			t.Run(fmt.Sprintf("%s/%d", strat, window), func(t *testing.T) {
				cat := &manyTools{ts: newManyTools(t, 0, 2000)}
				m := &budgetModel{calls: 0}
				cfg := node.Config{ToolCatalog: cat, Disclosure: strat, Context: actors.ContextOptions{Window: window, ReservedOutput: 500}}
				cfg.Model = m
				cfg.DataDir = t.TempDir()
				n, err := node.New(context.Background(), cfg)
				if err != nil {
					t.Logf("node.New: %v", err)
					return
				}
				stop, err := n.Start(context.Background())
				if err != nil {
					n.Close()
					t.Logf("Start: %v", err)
					return
				}
				defer stop()
				events := runAgentTask(t, n, node.Task{Input: "Use the server's tool 1234.", SessionID: "many"})
				t.Logf("%s", lastEnd(t, events))
				m.mu.Lock()
				reqs := slices.Clone(m.reqs)
				m.mu.Unlock()
				for i, r := range reqs {
					msgs, specs := tkPromptTokens(t, r)
					t.Logf("request %d: %d tools, %d+%d tokens", i+1, len(r.Tools), msgs, specs)
					if msgs+specs > window-500 {
						t.Errorf("request %d: %d tokens of messages + %d of schemas > %d", i+1, msgs, specs, window-500)
					}
				}
			})
		}
	}
}

// An MCP server whose tools grow to 2,000 after the node started (list_changed):
// the next request is not sent over the window.
func TestReviewCatalogGrowsPastTheWindow(t *testing.T) {
	for _, strat := range []disclosure.Strategy{disclosure.All, disclosure.Catalog, disclosure.Search} {
		t.Run(string(strat), func(t *testing.T) {
			cat := &manyTools{ts: newManyTools(t, 0, 5)}
			m := &budgetModel{calls: 0}
			n := nodetest.Start(t, node.Config{Model: m, ToolCatalog: cat, Disclosure: strat, Context: actors.ContextOptions{Window: 4000, ReservedOutput: 500}})
			cat.mu.Lock()
			cat.ts = append(cat.ts, newManyTools(t, 5, 1995)...)
			cat.mu.Unlock()
			events := runAgentTask(t, n, node.Task{Input: "Use the server's tool 1234.", SessionID: "grow"})
			t.Logf("%s", lastEnd(t, events))
			m.mu.Lock()
			reqs := slices.Clone(m.reqs)
			m.mu.Unlock()
			for i, r := range reqs {
				msgs, specs := tkPromptTokens(t, r)
				t.Logf("request %d (%q): %d tools, %d+%d tokens", i+1, r.Purpose, len(r.Tools), msgs, specs)
				if r.Purpose != "" && strings.HasPrefix(lastEnd(t, events), "failed context_overflow") {
					// The stable prefix alone is over the window: no cut can make the
					// request fit, and under rules 10 the task's input was condensed
					// first, a model call whose tokens the task paid for nothing
					// (rules 11 makes none: TestNoCompressionCallWhenThePrefixIsOverTheWindow).
					t.Errorf("request %d: a %q call before a context_overflow that no cut could avoid", i+1, r.Purpose)
				}
				if msgs+specs > 3500 {
					t.Errorf("request %d: %d tokens of messages + %d of schemas > %d", i+1, msgs, specs, 3500)
				}
			}
		})
	}
}

// A session whose every task's input is near (or past) the whole budget, in
// several scripts: each request fits the window, counted with tiktoken.
func TestReviewInputsNearTheBudget(t *testing.T) {
	texts := map[string]string{
		"english":   strings.Repeat("the budget is near ", 740),
		"cjk":       strings.Repeat("日本語の文章と中文句子，한국어 문장", 200),
		"emoji-zwj": strings.Repeat("👩‍👩‍👧‍👦🏳️‍🌈👍🏽", 150),
		"combining": strings.Repeat("e\u0301\u0302\u0303\u0304a\u0308\u0330", 400),
		"huge":      strings.Repeat("漢😀x\u0301 ", 80_000),
		"invalid":   strings.Repeat("ok\xff\xc0\x80", 3000),
	}
	for name, text := range texts {
		for _, strat := range []string{"", "summary", "importance"} {
			t.Run(name+"/"+strat, func(t *testing.T) {
				m := &budgetModel{calls: 0}
				n := nodetest.Start(t, node.Config{Model: m, Context: actors.ContextOptions{Window: 4000, ReservedOutput: 500,
					Compression: actors.Compression{Strategy: strat}}})
				for i := range 4 {
					events := runAgentTask(t, n, node.Task{Input: fmt.Sprintf("%d: %s", i, text), SessionID: "near"})
					if end := lastEnd(t, events); !strings.HasPrefix(end, "completed") {
						t.Errorf("task %d: %s", i, end)
					}
				}
				m.mu.Lock()
				reqs := slices.Clone(m.reqs)
				m.mu.Unlock()
				for i, r := range reqs {
					msgs, specs := tkPromptTokens(t, r)
					if msgs+specs > 3500 {
						t.Errorf("request %d (%q): %d tokens of messages + %d of schemas > %d", i+1, r.Purpose, msgs, specs, 3500)
					}
				}
			})
		}
	}
}

// A system prompt, or a skills section, larger than the budget: the node refuses
// to start, naming it, rather than cutting every task's input.
func TestReviewPromptLargerThanTheBudget(t *testing.T) {
	dir := t.TempDir()
	for i := range 400 {
		name := fmt.Sprintf("skill-%03d", i)
		os.MkdirAll(filepath.Join(dir, name), 0o755)
		os.WriteFile(filepath.Join(dir, name, "SKILL.md"), []byte("---\nname: "+name+"\ndescription: "+strings.Repeat("描述技能的用途 ", 20)+"\n---\nBody.\n"), 0o644)
	}
	set, _, err := skills.Load(skills.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]node.Config{
		"prompt":      {SystemPrompt: strings.Repeat("規則 ", 5000), Context: actors.ContextOptions{Window: 4000, ReservedOutput: 500}},
		"skills":      {Skills: set, Context: actors.ContextOptions{Window: 4000, ReservedOutput: 500}},
		"named agent": {Agents: []node.NamedAgent{{Name: "a", SystemPrompt: strings.Repeat("規則 ", 5000)}}, Context: actors.ContextOptions{Window: 4000, ReservedOutput: 500}},
	} {
		cfg.Model = &budgetModel{}
		cfg.DataDir = t.TempDir()
		n, err := node.New(context.Background(), cfg)
		if err == nil {
			n.Close()
			m := &budgetModel{}
			cfg.Model = m
			cfg.DataDir = ""
			n := nodetest.Start(t, cfg)
			events := runAgentTask(t, n, node.Task{Input: "Which skill reads PDFs?", SessionID: "skills"})
			m.mu.Lock()
			reqs := slices.Clone(m.reqs)
			m.mu.Unlock()
			for i, r := range reqs {
				msgs, specs := tkPromptTokens(t, r)
				t.Logf("request %d (%q): %d tokens of messages (system %d bytes) + %d of schemas", i+1, r.Purpose, msgs, len(r.Messages[0].Content), specs)
				if msgs+specs > 3500 {
					t.Errorf("%s: the node was made and its request %d is over the window", name, i+1)
				}
			}
			t.Logf("%s: the node was made; the task: %s", name, lastEnd(t, events))
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

// 2,000 MCP tools under catalog and search: the system prompt and the tool list
// are byte-identical between requests that loaded nothing new, and sorted.
func TestReviewTwoThousandToolsStablePrefix(t *testing.T) {
	for strat, first := range map[disclosure.Strategy]messages.ToolCall{
		disclosure.Catalog: {ID: "l1", Name: "load_tools", Arguments: `{"group":"mcp:srv"}`},
		disclosure.Search:  {ID: "l1", Name: "search_tools", Arguments: `{"query":"thing number 1234"}`},
	} {
		t.Run(string(strat), func(t *testing.T) {
			script, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{
				{ToolCalls: []messages.ToolCall{first}},
				{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"1+1"}`}}},
				{ToolCalls: []messages.ToolCall{{ID: "c2", Name: "calculator", Arguments: `{"expression":"2+2"}`}}},
				{Content: "done"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			rec := &agentRequests{Model: script}
			cat := &manyTools{ts: newManyTools(t, 0, 2000)}
			n := nodetest.Start(t, node.Config{Model: rec, ToolCatalog: cat, Disclosure: strat, Context: actors.ContextOptions{Window: 400000}})
			events := runAgentTask(t, n, node.Task{Input: "Use the server's tool 1234.", SessionID: "stable"})
			t.Logf("%s", lastEnd(t, events))
			reqs := rec.take()
			if len(reqs) < 4 {
				t.Fatalf("%d requests", len(reqs))
			}
			for i, r := range reqs {
				specs, _ := json.Marshal(r.Tools)
				t.Logf("request %d: %d tools, %d bytes of schemas, system %d bytes", i+1, len(r.Tools), len(specs), len(r.Messages[0].Content))
				if !slices.IsSortedFunc(r.Tools, func(a, b messages.ToolSpec) int { return strings.Compare(a.Name, b.Name) }) {
					t.Errorf("request %d: tools not sorted", i+1)
				}
			}
			for i := 2; i < len(reqs); i++ {
				a, _ := json.Marshal(reqs[i-1].Tools)
				b, _ := json.Marshal(reqs[i].Tools)
				if string(a) != string(b) || reqs[i-1].Messages[0].Content != reqs[i].Messages[0].Content {
					t.Errorf("requests %d and %d differ in their prefix", i, i+1)
				}
			}
		})
	}
}
