package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
	"github.com/troupe-run/troupe/tools/skills"
)

// writeFiles writes each file of files (path relative to dir: content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A session recorded by a node with skills, the catalog disclosure, the files and
// http_fetch built-ins, its own system prompt and max_steps verifies against the
// node's configuration file, and diverges without it. The recording node is built by
// hand, as node serve builds it from that file: replay rebuilds it from the file.
func TestVerifyRebuildsTheAgentOfTheConfigFile(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	dir := t.TempDir()
	data, skillsDir, work := filepath.Join(dir, "data"), filepath.Join(dir, "skills"), filepath.Join(dir, "work")
	writeFiles(t, dir, map[string]string{
		"skills/greet/SKILL.md": "---\nname: greet\ndescription: Greets people warmly.\n---\nSay hello by name.\n",
		"work/hello.txt":        "hi",
		"troupe.json": `{"model": "offline", "system_prompt": "You are a careful agent.", "max_steps": 6,
			"skills_dir": ` + quote(skillsDir) + `, "disclosure": "catalog",
			"tools": {"http_fetch": {"allow": ["127.0.0.1"]}, "files": {"root": ` + quote(work) + `}}}`,
	})
	cfgPath := filepath.Join(dir, "troupe.json")

	fetch, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{Allow: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	box, err := tools.NewFiles(tools.FilesConfig{Root: work})
	if err != nil {
		t.Fatal(err)
	}
	set, _, err := skills.Load(skills.Config{Dir: skillsDir})
	if err != nil {
		t.Fatal(err)
	}
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "load_skill", Arguments: `{"name":"greet"}`}}},
		{ToolCalls: []messages.ToolCall{{ID: "c2", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		{Content: "hello, 42"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	events := recordRun(context.Background(), t, node.Config{DataDir: data, Model: model,
		Tools:  []tools.Tool{tools.Calculator{}, tools.NewClock(nil), fetch, box},
		Skills: set, Disclosure: disclosure.Catalog, SystemPrompt: "You are a careful agent.", MaxSteps: 6},
		"configured", "greet Ada and multiply")
	var offered string
	for _, e := range events {
		if p, _ := e.Decode(); e.Type == messages.TypeModelRequested && offered == "" {
			offered = strings.Join(p.(*messages.ModelRequested).Tools, ",")
		}
	}
	for _, name := range []string{"files", "http_fetch", "load_skill", "load_tools"} {
		if !strings.Contains(offered, name) {
			t.Fatalf("the recorded request offered %s, without %s", offered, name)
		}
	}

	if code, out, errs := replay(t, "verify", "configured", "--data", data, "--config", cfgPath); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify --config: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := replay(t, "verify", "configured", "--data", data); code != 1 || !strings.Contains(out, "diverges") {
		t.Fatalf("verify without --config: exit %d %s", code, out)
	}
	// A fork continues with the same agent: its new requests verify against the file.
	var loaded uint64
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted && loaded == 0 {
			loaded = e.Seq
		}
	}
	writeFiles(t, dir, map[string]string{"rest.json": `{"name": "scripted", "steps": [
		{"tool_calls": [{"id": "c2", "name": "calculator", "arguments": "{\"expression\":\"6*7\"}"}]}, {"content": "hello, 42"}]}`})
	if code, out, errs := replay(t, "fork", "configured", "--at", strconv.FormatUint(loaded, 10), "--session", "configured-fork", "--data", data,
		"--config", cfgPath, "--model", "scripted:"+filepath.Join(dir, "rest.json")); code != 0 || !strings.Contains(out, "hello, 42") {
		t.Fatalf("fork --config: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := replay(t, "verify", "configured-fork", "--data", data, "--config", cfgPath); code != 0 {
		t.Fatalf("verify the fork: exit %d\n%s%s", code, out, errs)
	}
	// The environment replaces the file's strategy, as it does for node serve.
	t.Setenv("TROUPE_DISCLOSURE", "search")
	if code, out, _ := replay(t, "verify", "configured", "--data", data, "--config", cfgPath); code != 1 || !strings.Contains(out, "diverges") {
		t.Fatalf("verify with TROUPE_DISCLOSURE=search: exit %d %s", code, out)
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `\`, `\\`) + `"` }

// A configuration file that node serve refuses, replay verify and fork refuse too
// (exit 2), naming the field; one whose MCP server is down cannot be verified
// against, and says which server.
func TestVerifyRefusesABadConfigFile(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	dir := t.TempDir()
	// A port nothing listens on: one just closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	for _, c := range []struct {
		name, body string
		code       int
		want       []string
	}{
		{"bad disclosure", `{"disclosure": "lazy"}`, 2, []string{"disclosure", `"lazy"`}},
		{"unknown field", `{"disclosur": "catalog"}`, 2, []string{`unknown field "disclosur"`}},
		{"bad tool field", `{"tools": {"files": {"root": ""}}}`, 2, []string{"tools.files.root"}},
		{"missing skills dir", `{"skills_dir": ` + quote(filepath.Join(dir, "nope")) + `}`, 2, []string{filepath.Join(dir, "nope")}},
		{"chain of no tool", `{"chains": [{"name": "c", "description": "d", "steps": [{"name": "a", "tool": "nope", "args": "{}"}]}]}`, 2, []string{"chains", "nope"}},
		{"mcp server down", `{"mcp_servers": {"tickets": {"url": "` + down + `"}}}`, 1, []string{"mcp server tickets", "verify needs the tool schemas"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".json")
			if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errs := replay(t, "verify", "any", "--data", t.TempDir(), "--config", p)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, c.code, out, errs)
			}
			for _, w := range c.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q lacks %q", errs, w)
				}
			}
			if c.code == 2 {
				if code, _, errs := replay(t, "fork", "any", "--at", "1", "--data", t.TempDir(), "--config", p); code != 2 || !strings.Contains(errs, c.want[0]) {
					t.Errorf("fork: exit %d %s", code, errs)
				}
			}
		})
	}
}

// A session recorded by a node with an MCP server and the search disclosure verifies
// against a file naming that server: verify connects to it for its tool schemas (a
// recorded request holds only their hash) and calls none of its tools.
func TestVerifyConnectsToTheMCPServersOfTheConfigFile(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	srv := sdk.NewServer(&sdk.Implementation{Name: "loud", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	var calls atomic.Int32
	sdk.AddTool(srv, &sdk.Tool{Name: "shout", Description: "Shouts the text"},
		func(_ context.Context, _ *sdk.CallToolRequest, a in) (*sdk.CallToolResult, any, error) {
			calls.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.ToUpper(a.Text)}}}, nil, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	dir := t.TempDir()
	data, cfgPath := filepath.Join(dir, "data"), filepath.Join(dir, "troupe.json")
	writeFiles(t, dir, map[string]string{"troupe.json": `{"disclosure": "search", "mcp_servers": {"loud": {"url": "` + hs.URL + `"}}}`})

	client, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{"loud": {URL: hs.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- client.Run(ctx) }()
	if err := client.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "search_tools", Arguments: `{"query":"shout"}`}}},
		{ToolCalls: []messages.ToolCall{{ID: "c2", Name: "loud__shout", Arguments: `{"text":"hi"}`}}},
		{Content: "HI"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	events := recordRun(ctx, t, node.Config{DataDir: data, Model: model, ToolCatalog: client, Disclosure: disclosure.Search}, "mcp", "shout hi")
	client.Close()
	<-done
	var shouted bool
	for _, e := range events {
		if p, _ := e.Decode(); e.Type == messages.TypeToolCallCompleted && p.(*messages.ToolCallCompleted).Result == "HI" {
			shouted = true
		}
	}
	if !shouted || calls.Load() != 1 {
		t.Fatalf("the MCP tool was called %d times, answered HI: %v", calls.Load(), shouted)
	}

	if code, out, errs := replay(t, "verify", "mcp", "--data", data, "--config", cfgPath); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify --config: exit %d\n%s%s", code, out, errs)
	}
	if calls.Load() != 1 {
		t.Errorf("verify called the MCP tool: %d calls", calls.Load())
	}
	writeFiles(t, dir, map[string]string{"search.json": `{"disclosure": "search"}`})
	if code, out, _ := replay(t, "verify", "mcp", "--data", data, "--config", filepath.Join(dir, "search.json")); code != 1 || !strings.Contains(out, "diverges") {
		t.Fatalf("verify without the MCP server: exit %d %s", code, out)
	}
}
