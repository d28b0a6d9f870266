// Command disclosure measures progressive tool disclosure: the tokens of tool schemas
// each model request carries under the strategies all, catalog and search, on the
// same scripted tasks, run through a real embedded node.
//
// It generates 200 tools — 7 MCP servers of 25 tools (go-sdk servers in this process,
// joined to the node's tool catalog through package mcp over in-memory transports;
// their tools' source is mcp:<server>) and 5 skills of 5 tools (source skill:<name>)
// — and 57 tasks, each a sentence that paraphrases the description of the tool it
// needs. For each strategy it starts a node with those tools and a scripted model
// that plays the agent: under all it calls the tool at once; under catalog it loads
// the tool's group with load_tools, then calls the tool; under search it calls
// search_tools with the task's text, then calls the tool if the search put it in the
// tool list (found) and gives up otherwise; "called" counts the tasks whose tool
// answered (through its MCP server, for a server's tool). Tokens are counted with
// cl100k_base (llm/gateway's tiktoken, offline): "schemas" is the JSON of the
// request's tools, "prompt" the section the strategy adds to the system prompt (the
// catalog's group lines, the search note).
//
//	go run ./bench/disclosure [-limit 5]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools/disclosure"
)

func main() {
	limit := flag.Int("limit", disclosure.DefaultSearchResults, "tools search_tools loads per search")
	hashing := flag.Bool("hashing", false, "also run search ranked by the offline hashing embedder (llm.HashingEmbedder) instead of BM25")
	flag.Parse()
	results, err := measure(*limit, *hashing)
	if err != nil {
		fmt.Fprintln(os.Stderr, "disclosure:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, results)
}

// result is one strategy's measurements.
type result struct {
	strategy                 disclosure.Strategy
	label                    string
	tasks, requests, found   int
	called                   int // tasks whose tool answered (through its MCP server, or the skill)
	schemaTokens, promptToks int // summed over requests
	firstSchema, maxSchema   int
}

func (r result) perRequest() float64 {
	return float64(r.schemaTokens+r.promptToks) / float64(r.requests)
}

// measure runs every task under each strategy, and under search with the hashing
// embedder too when hashing is set.
func measure(limit int, hashing bool) ([]result, error) {
	tk, err := gateway.NewTiktoken("cl100k_base")
	if err != nil {
		return nil, err
	}
	g := generate()
	tasks := g.tasks
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := g.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	type run struct {
		s     disclosure.Strategy
		label string
		emb   llm.Embedder
	}
	runs := []run{{disclosure.All, "all", nil}, {disclosure.Catalog, "catalog", nil}, {disclosure.Search, "search", nil}}
	if hashing {
		runs = append(runs, run{disclosure.Search, "search+hashing", llm.HashingEmbedder{}})
	}
	var out []result
	for _, r := range runs {
		s := r.s
		m := &agentModel{strategy: s, limit: limit, tk: tk, tasks: map[string]task{}, res: result{strategy: s, label: r.label, tasks: len(tasks), firstSchema: -1}}
		for _, t := range tasks {
			m.tasks[t.text] = t
		}
		dir, err := os.MkdirTemp("", "disclosure-bench-")
		if err != nil {
			return nil, err
		}
		err = runAll(node.Config{DataDir: dir, Model: m, Tools: g.skills, ToolCatalog: client, Disclosure: s, ToolEmbedder: r.emb, MaxSteps: 5,
			Logger: slog.New(slog.DiscardHandler)}, tasks)
		os.RemoveAll(dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.label, err)
		}
		out = append(out, m.res)
	}
	return out, nil
}

// runAll runs the tasks one after the other on a node built from cfg.
func runAll(cfg node.Config, tasks []task) error {
	ctx := context.Background()
	n, err := node.New(ctx, cfg)
	if err != nil {
		return err
	}
	stop, err := n.Start(ctx)
	if err != nil {
		return err
	}
	defer stop()
	for i, t := range tasks {
		id := fmt.Sprintf("task-%02d", i)
		live, unwatch := n.Watch(id)
		if _, err := n.Submit(ctx, node.Task{Input: t.text, SessionID: id}); err != nil {
			unwatch()
			return err
		}
		err := wait(live, 30*time.Second)
		unwatch()
		if err != nil {
			return fmt.Errorf("task %q: %w", t.text, err)
		}
	}
	return nil
}

func wait(live <-chan messages.Envelope, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case e, ok := <-live:
			if !ok {
				return fmt.Errorf("the live feed closed")
			}
			if e.Type == messages.TypeTaskFailed {
				p, _ := e.Decode()
				return fmt.Errorf("failed: %s", p.(*messages.TaskFailed).Error)
			}
			if e.Type == messages.TypeTaskCompleted {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("not done in %s", timeout)
		}
	}
}

// agentModel plays the agent of a scripted task under one strategy and counts the
// tokens of every request it gets.
type agentModel struct {
	strategy disclosure.Strategy
	limit    int
	tk       *gateway.Tiktoken
	tasks    map[string]task
	mu       sync.Mutex
	res      result
}

func (m *agentModel) Name() string { return "scripted-agent" }

func (m *agentModel) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	var input, system string
	tools := 0
	for _, msg := range req.Messages {
		switch {
		case msg.Role == messages.RoleSystem:
			system = msg.Content
		case msg.Role == messages.RoleUser && input == "":
			input = msg.Content
		case msg.Role == messages.RoleTool:
			tools++
		}
	}
	t, ok := m.tasks[input]
	if !ok {
		return llm.Response{}, fmt.Errorf("unknown task %q", input)
	}
	schemas, _ := json.Marshal(req.Tools)
	section := strings.TrimPrefix(system, node.DefaultSystemPrompt)
	offered := slices.ContainsFunc(req.Tools, func(s messages.ToolSpec) bool { return s.Name == t.tool })

	m.mu.Lock()
	n := m.tk.Count(string(schemas))
	m.res.requests++
	m.res.schemaTokens += n
	m.res.promptToks += m.tk.Count(section)
	if m.res.firstSchema < 0 {
		m.res.firstSchema = n
	}
	m.res.maxSchema = max(m.res.maxSchema, n)
	m.mu.Unlock()

	answer := func(text string) (llm.Response, error) {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: text}}, nil
	}
	callTool := func(name, args string) (llm.Response, error) {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant,
			ToolCalls: []messages.ToolCall{{ID: fmt.Sprintf("c%d", tools+1), Name: name, Arguments: args}}}}, nil
	}
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	// The task's own tool: called once it is offered.
	useTool := func() (llm.Response, error) {
		if !offered {
			return answer("no tool for this")
		}
		m.mu.Lock()
		m.res.found++
		m.mu.Unlock()
		args := t.args
		if args == "" {
			args = `{"id":"1"}`
		}
		return callTool(t.tool, args)
	}
	switch {
	case tools == 0 && m.strategy == disclosure.All:
		return useTool()
	case tools == 0 && m.strategy == disclosure.Catalog:
		return callTool("load_tools", `{"group":`+quote(t.group)+`}`)
	case tools == 0 && m.strategy == disclosure.Search:
		return callTool("search_tools", fmt.Sprintf(`{"query":%s,"limit":%d}`, quote(t.text), m.limit))
	case tools == 1 && m.strategy != disclosure.All:
		return useTool()
	}
	if last := req.Messages[len(req.Messages)-1]; last.Role == messages.RoleTool && last.Content == "ok" {
		m.mu.Lock()
		m.res.called++
		m.mu.Unlock()
	}
	return answer("done")
}

func printTable(w io.Writer, results []result) {
	base := results[0].perRequest()
	fmt.Fprintf(w, "%d tools (7 in-process MCP servers x 25, 5 skills x 5), %d scripted tasks, tokens: cl100k_base\n\n", 200, results[0].tasks)
	fmt.Fprintf(w, "%-14s %8s %14s %14s %12s %12s %14s %8s %8s %8s\n", "strategy", "requests", "schemas/req", "first request", "max request", "prompt/req", "total/req", "vs all", "found", "called")
	for _, r := range results {
		fmt.Fprintf(w, "%-14s %8d %14.0f %14d %12d %12.0f %14.0f %7.1f%% %5d/%d %5d/%d\n", r.label, r.requests,
			float64(r.schemaTokens)/float64(r.requests), r.firstSchema, r.maxSchema,
			float64(r.promptToks)/float64(r.requests), r.perRequest(), 100*r.perRequest()/base, r.found, r.tasks, r.called, r.tasks)
	}
}
