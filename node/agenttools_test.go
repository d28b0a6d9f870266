package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/skills"
)

// pingServer is an MCP server of one tool, served in this process.
func pingServer() *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "other", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "ping", Description: "Answer pong"},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil, nil
		})
	return srv
}

// connectAll returns an MCP client of servers, by name, connected and listed.
func connectAll(t *testing.T, servers map[string]*sdk.Server) *mcp.Client {
	t.Helper()
	cfgs := map[string]mcp.ServerConfig{}
	for name, srv := range servers {
		cfgs[name] = mcp.ServerConfig{Transport: mcp.InProcess(srv)}
	}
	c, err := mcp.NewClient(mcp.ClientConfig{Servers: cfgs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		c.Close()
		<-done
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// An agent given an MCP server (mcp:SERVER in an agents file) is offered that
// server's tools with its own, as the server's tool list changes, and not another
// server's: a call to one is answered as unknown.
func TestAgentGetsTheToolsOfItsMCPServer(t *testing.T) {
	wx := weatherServer()
	client := connectAll(t, map[string]*sdk.Server{"wx": wx, "other": pingServer()})
	rec := &requestLog{}
	scripted := rec.model(t,
		call("f1", "wx__forecast", `{"city":"Oslo"}`),
		call("p1", "other__ping", `{}`),
		call("r1", "wx__radar", `{"city":"Bergen"}`),
		llm.ScriptStep{Content: "done"})
	step := 0
	model := recordingModel{Model: scripted, fn: func(llm.Request) {
		if step++; step != 2 {
			return
		}
		// The server gains a tool while the session runs.
		changed := client.Changed()
		sdk.AddTool(wx, &sdk.Tool{Name: "radar", Description: "Show the rain radar of a city"},
			func(_ context.Context, _ *sdk.CallToolRequest, p struct {
				City string `json:"city"`
			}) (*sdk.CallToolResult, any, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "rain over " + p.City}}}, nil, nil
			})
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Error("the catalog did not change within 10 s of the server's new tool")
		}
	}}
	cfg := node.Config{Tools: []tools.Tool{tools.Calculator{}, &tools.Clock{}}, ToolCatalog: client, Model: model,
		Agents: []node.NamedAgent{{Name: "forecaster", Tools: []string{"calculator"}, MCPServers: []string{"wx"}}}}
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "weather?", SessionID: "mcp-agent", Agent: "forecaster"})
	_, names, _ := rec.get()
	if len(names) != 4 || names[0] != "calculator,wx__alerts,wx__forecast" || names[1] != names[0] ||
		names[2] != "calculator,wx__alerts,wx__forecast,wx__radar" || names[3] != names[2] {
		t.Fatalf("requests offered %v", names)
	}
	res := toolResults(t, events)
	if r := res["f1"]; r.Error != "" || r.Result != "sunny in Oslo" {
		t.Errorf("wx__forecast = %+v", r)
	}
	if r := res["p1"]; !strings.Contains(r.Error, `unknown tool "other__ping"`) {
		t.Errorf("other__ping, of a server the agent does not have = %+v", r)
	}
	if r := res["r1"]; r.Error != "" || r.Result != "rain over Bergen" {
		t.Errorf("wx__radar, the server's new tool = %+v", r)
	}
	// The agent as replay verify builds it is offered the server's tools now.
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	var offered []string
	for _, s := range all.Named["forecaster"].ToolSpecs() {
		offered = append(offered, s.Name)
	}
	if strings.Join(offered, ",") != "calculator,wx__alerts,wx__forecast,wx__radar" {
		t.Errorf("the forecaster's tools now: %v", offered)
	}
}

// An agent given a skill (skill:NAME) has the skill tools for that skill only: its
// system prompt lists it alone, and load_skill serves it that skill and refuses it
// another, which the node's agent loads.
func TestAgentGetsItsSkillsOnly(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"pdf": "Read PDFs page by page.", "docx": "Open DOCX files."} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		md := "---\nname: " + name + "\ndescription: The " + name + " skill.\n---\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(dir, name, skills.FileName), []byte(md), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	set, _, err := skills.Load(skills.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	rec := &requestLog{}
	model := rec.model(t,
		call("l1", "load_skill", `{"name":"pdf"}`),
		call("l2", "load_skill", `{"name":"docx"}`),
		llm.ScriptStep{Content: "done"})
	cfg := node.Config{Tools: []tools.Tool{tools.Calculator{}}, Skills: set, Model: model,
		Agents: []node.NamedAgent{{Name: "reader", Tools: []string{"calculator"}, Skills: []string{"pdf"}}}}
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "read it", SessionID: "skill-agent", Agent: "reader"})
	_, names, system := rec.get()
	if len(names) != 3 || names[0] != "calculator,load_skill,read_skill_file,run_skill_script" {
		t.Fatalf("requests offered %v", names)
	}
	if !strings.Contains(system[0], "- pdf: The pdf skill.") || strings.Contains(system[0], "docx") {
		t.Errorf("the reader's system prompt:\n%s", system[0])
	}
	res := toolResults(t, events)
	if r := res["l1"]; r.Error != "" || !strings.Contains(r.Result, "Read PDFs page by page.") {
		t.Errorf("load_skill pdf = %+v", r)
	}
	if r := res["l2"]; !strings.Contains(r.Error, `no skill is named "docx"; the skills are pdf`) {
		t.Errorf("load_skill docx, a skill the reader does not have = %+v", r)
	}
	// The node's agent has every skill.
	events = runAgentTask(t, n, node.Task{Input: "read it", SessionID: "skill-default"})
	if r := toolResults(t, events)["l2"]; r.Error != "" || !strings.Contains(r.Result, "Open DOCX files.") {
		t.Errorf("load_skill docx by the node's agent = %+v", r)
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"skill-agent", "skill-default"} {
		events, _ := n.Log().Read(context.Background(), id, 1)
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %v %v", id, div, err)
		}
	}
}
