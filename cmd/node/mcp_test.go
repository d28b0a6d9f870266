package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// The "mcp_servers" section is checked like the rest of the file: each bad value
// stops the node (exit 2) naming the field, the value and what is wanted.
func TestMCPServersConfigIsValidated(t *testing.T) {
	clearLLMEnv(t)
	cases := []struct {
		name, body string
		want       []string
	}{
		{"neither command nor url", `{"mcp_servers": {"a": {}}}`, []string{"mcp_servers.a", `neither "command"`}},
		{"both", `{"mcp_servers": {"a": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}}`, []string{"mcp_servers.a", `both "command" and "url"`}},
		{"bad name", `{"mcp_servers": {"my__server": {"command": "x"}}}`, []string{`"my__server"`, "1 to 32 letters"}},
		{"name with a dot", `{"mcp_servers": {"a.b": {"command": "x"}}}`, []string{`"a.b"`, "1 to 32 letters"}},
		{"url scheme", `{"mcp_servers": {"r": {"url": "ftp://host/mcp"}}}`, []string{"mcp_servers.r.url", `"ftp://host/mcp"`, "http://"}},
		{"url without host", `{"mcp_servers": {"r": {"url": "http:///mcp"}}}`, []string{"mcp_servers.r.url", "no host"}},
		{"header name", `{"mcp_servers": {"r": {"url": "http://h/mcp", "headers": {"Bad Header": "x"}}}}`, []string{"mcp_servers.r.headers", `"Bad Header"`}},
		{"header value", `{"mcp_servers": {"r": {"url": "http://h/mcp", "headers": {"Authorization": "a\nb"}}}}`, []string{"mcp_servers.r.headers.Authorization", "line break"}},
		{"reserved header", `{"mcp_servers": {"r": {"url": "http://h/mcp", "headers": {"Mcp-Session-Id": "x"}}}}`, []string{"mcp_servers.r.headers", "MCP transport"}},
		{"headers on stdio", `{"mcp_servers": {"s": {"command": "x", "headers": {"A": "b"}}}}`, []string{"mcp_servers.s.headers", `"url" server`}},
		{"env on http", `{"mcp_servers": {"r": {"url": "http://h/mcp", "env": {"A": "b"}}}}`, []string{"mcp_servers.r.env", `"command" server`}},
		{"env name", `{"mcp_servers": {"s": {"command": "x", "env": {"A=B": "c"}}}}`, []string{"mcp_servers.s.env", `"A=B"`}},
		{"bad pattern", `{"mcp_servers": {"s": {"command": "x", "allow": ["get-["]}}}`, []string{"mcp_servers.s.allow[0]", `"get-["`, "glob"}},
		{"empty deny pattern", `{"mcp_servers": {"s": {"command": "x", "deny": [""]}}}`, []string{"mcp_servers.s.deny[0]", `""`}},
		{"blank command", `{"mcp_servers": {"s": {"command": " npx"}}}`, []string{"mcp_servers.s.command", `" npx"`}},
		{"unknown field", `{"mcp_servers": {"s": {"command": "x", "argv": ["y"]}}}`, []string{`unknown field "mcp_servers.s.argv"`, "command, args, env, pass_env, dir, url, headers, allow, deny"}},
		{"wrong type", `{"mcp_servers": {"s": {"command": "x", "args": "y"}}}`, []string{"args", "string"}},
		{"oauth without redirect", `{"mcp_servers": {"r": {"url": "http://h/mcp", "oauth": {"client_id": "n"}}}}`, []string{"mcp_servers.r.oauth.redirect_url", "required"}},
		{"oauth on stdio", `{"mcp_servers": {"s": {"command": "x", "oauth": {"redirect_url": "http://localhost/cb"}}}}`, []string{"mcp_servers.s.oauth", `"url" server`}},
		{"oauth secret unset", `{"mcp_servers": {"r": {"url": "http://h/mcp", "oauth": {"client_id": "n", "client_secret_env": "TROUPE_TEST_UNSET_SECRET", "redirect_url": "http://localhost/cb"}}}}`,
			[]string{"mcp_servers.r.oauth.client_secret_env", "TROUPE_TEST_UNSET_SECRET", "not set"}},
		{"oauth scope", `{"mcp_servers": {"r": {"url": "http://h/mcp", "oauth": {"redirect_url": "http://localhost/cb", "scopes": ["a b"]}}}}`, []string{"mcp_servers.r.oauth.scopes[0]", `"a b"`}},
		{"oauth unknown field", `{"mcp_servers": {"r": {"url": "http://h/mcp", "oauth": {"client_secret": "x"}}}}`, []string{`unknown field "mcp_servers.r.oauth.client_secret"`, "client_secret_env"}},
		{"elicitation", `{"mcp_servers": {"r": {"url": "http://h/mcp", "elicitation": "ask"}}}`, []string{"mcp_servers.r.elicitation", `"ask"`, `"defaults"`}},
		{"served resource uri", `{"mcp_server": {"resources": [{"uri": "today", "name": "t", "text": "x"}]}}`, []string{"mcp_server.resources[0].uri", `"today"`}},
		{"served interval", `{"mcp_server": {"progress_interval": "soon"}}`, []string{"mcp_server.progress_interval", `"soon"`}},
		{"served reconnect delay", `{"mcp_server": {"reconnect_delay": "1h"}}`, []string{"mcp_server.reconnect_delay", `"1h"`, "from 10ms to 5m"}},
		{"served session timeout", `{"mcp_server": {"session_timeout": "100ms"}}`, []string{"mcp_server.session_timeout", `"100ms"`, "from 1s to 24h"}},
		{"served unknown field", `{"mcp_server": {"prompts": [{"name": "p", "messages": [{"txt": "a"}]}]}}`,
			[]string{`unknown field "mcp_server.prompts[0].messages[0].txt"`, "role, text, image, mime_type, resource"}},
		{"served unknown top field", `{"mcp_server": {"resource": []}}`, []string{`unknown field "mcp_server.resource"`, "progress_interval, resources, resource_templates, prompts"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "troupe.json")
			if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"run", "--config", path, "--model", "offline", "--data", filepath.Join(dir, "data"), "1+1"}, &out, &errb, options{})
			if code != 2 {
				t.Fatalf("exit %d, want 2\n%s%s", code, out.String(), errb.String())
			}
			for _, want := range c.want {
				if !strings.Contains(errb.String(), want) {
					t.Errorf("the error does not say %q:\n%s", want, errb.String())
				}
			}
		})
	}
}

// mcpNode runs `node mcp` in this process with args, and returns an MCP client
// session on its stdin and stdout; the node stops (exit 0) when the session closes.
func mcpNode(t *testing.T, args ...string) *sdk.ClientSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"mcp", "--model", "offline", "--data", t.TempDir()}, args...), outW, &errb, options{stdin: inR})
		outW.Close()
		exited <- code
	}()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(cctx, &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		cancel()
		t.Fatalf("connect to node mcp: %v\n%s", err, errb.String())
	}
	t.Cleanup(func() {
		cs.Close()
		inW.Close()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("node mcp exited %d after its client left\n%s", code, errb.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("node mcp did not stop within 30 s of its client leaving\n%s", errb.String())
		}
		cancel()
	})
	return cs
}

func listToolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// waitToolNames waits until the node lists the tools want (space-separated, sorted)
// and fails the test if it does not within a minute. A node waits a while at start
// for the MCP servers behind it (mcpStartWait); one that connects later joins the
// catalog, and the node tells its clients (notifications/tools/list_changed): a
// loaded machine can start server-everything after that wait.
func waitToolNames(t *testing.T, cs *sdk.ClientSession, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := strings.Join(listToolNames(t, cs), " ")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools %s, want %s", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func resultText(r *sdk.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// `node mcp` serves the agent's tools and run_task over stdio.
func TestNodeMCPOverStdio(t *testing.T) {
	clearLLMEnv(t)
	cs := mcpNode(t)
	if got := strings.Join(listToolNames(t, cs), " "); got != "calculator clock run_task task_result" {
		t.Fatalf("tools %s", got)
	}
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calculator", Arguments: map[string]any{"expression": "2^10"}})
	if err != nil || res.IsError || resultText(res) != "1024" {
		t.Fatalf("calculator: %v %q", err, resultText(res))
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "What is 2+3?"}})
	if err != nil || res.IsError || !strings.Contains(resultText(res), "5") {
		t.Fatalf("run_task: %v %+v %q", err, res, resultText(res))
	}
}

// A node whose configuration declares server-everything offers its tools to its own
// MCP clients: an MCP client calls server-everything's echo through `node mcp`.
func TestNodeMCPWithAnMCPServerBehind(t *testing.T) {
	script := os.Getenv("TROUPE_TEST_MCP_EVERYTHING")
	if script == "" {
		t.Skip("TROUPE_TEST_MCP_EVERYTHING is not set (server-everything's dist/index.js; .ci/run installs it)")
	}
	nodeBin := os.Getenv("TROUPE_TEST_NODE")
	if nodeBin == "" {
		var err error
		if nodeBin, err = exec.LookPath("node"); err != nil {
			t.Skip("no node on PATH to run server-everything")
		}
	}
	clearLLMEnv(t)
	cfg, _ := json.Marshal(map[string]any{"mcp_servers": map[string]any{"everything": map[string]any{
		"command": nodeBin, "args": []string{script, "stdio"}, "allow": []string{"echo", "get-sum", "read_resource"}}}})
	path := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	cs := mcpNode(t, "--config", path)
	waitToolNames(t, cs, "calculator clock everything__echo everything__get-sum everything__read_resource run_task task_result")
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "through troupe"}})
	if err != nil || res.IsError || !strings.Contains(resultText(res), "through troupe") {
		t.Fatalf("echo: %v %q", err, resultText(res))
	}
}

// A node's MCP clients see the resources and prompts of the MCP servers behind it:
// server-everything's template reads through `node mcp` with its URI, and its
// prompts are offered as everything__<prompt>.
func TestNodeMCPProxiesResourcesAndPrompts(t *testing.T) {
	nodeBin, script := everythingScript(t)
	clearLLMEnv(t)
	cfg, _ := json.Marshal(map[string]any{"mcp_servers": map[string]any{"everything": map[string]any{
		"command": nodeBin, "args": []string{script, "stdio"}, "allow": []string{"echo", "read_resource", "get_prompt"}}}})
	path := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	cs := mcpNode(t, "--config", path)
	waitToolNames(t, cs, "calculator clock everything__echo everything__get_prompt everything__read_resource run_task task_result") // server-everything is connected
	ctx := context.Background()
	var templates []string
	for tm, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, tm.URITemplate)
	}
	if !slices.Contains(templates, "demo://resource/dynamic/text/{resourceId}") {
		t.Fatalf("templates %v", templates)
	}
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "demo://resource/dynamic/text/7"})
	if err != nil || len(res.Contents) == 0 || !strings.Contains(res.Contents[0].Text, "7") {
		t.Fatalf("read: %v %+v", err, res)
	}
	got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "everything__args-prompt", Arguments: map[string]string{"city": "Lyon"}})
	if err != nil || len(got.Messages) == 0 || !strings.Contains(fmt.Sprint(got.Messages[0].Content), "Lyon") {
		t.Fatalf("prompt: %v %+v", err, got)
	}
}

// `node mcp --skills DIR` offers each skill's instructions as a prompt and its files
// as skill:// resources.
func TestNodeMCPOffersSkills(t *testing.T) {
	clearLLMEnv(t)
	dir := t.TempDir()
	for rel, body := range map[string]string{
		"pdf/SKILL.md":             "---\nname: pdf\ndescription: Fill in PDF forms.\n---\nRead references/fields.md.\n",
		"pdf/references/fields.md": "Field names are case-sensitive.\n",
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cs := mcpNode(t, "--skills", dir)
	ctx := context.Background()
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "skill://pdf/references/fields.md"})
	if err != nil || res.Contents[0].Text != "Field names are case-sensitive.\n" {
		t.Fatalf("read: %v %+v", err, res)
	}
	got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "pdf", Arguments: map[string]string{"task": "form 1040"}})
	if err != nil || len(got.Messages) != 1 || got.Messages[0].Content.(*sdk.TextContent).Text != "Read references/fields.md.\n\nTask: form 1040" {
		t.Fatalf("prompt: %v %+v", err, got)
	}
}

// The fixtures of the conformance suite's server scenarios that a tool whose result
// is text can serve.
type fixtureTool struct {
	name, text string
	fail       bool
	takes      time.Duration // how long a call runs
}

func (f fixtureTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: f.name, Description: "conformance fixture", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (f fixtureTool) Call(ctx context.Context, _ tools.Call) (string, error) {
	if f.takes > 0 {
		select {
		case <-time.After(f.takes):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if f.fail {
		return "", errors.New(f.text)
	}
	return f.text, nil
}

// serveNode runs `node serve` in this process on a free port until the test ends,
// with the extra arguments, and returns its base URL.
func serveNode(t *testing.T, opt options, extra ...string) string {
	t.Helper()
	base, _ := serveNodeLog(t, opt, extra...)
	return base
}

// serveNodeLog is serveNode, and node serve's log (its stderr).
func serveNodeLog(t *testing.T, opt options, extra ...string) (string, *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errb := &syncBuffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, append([]string{"serve", "--http", addr, "--model", "offline", "--data", t.TempDir()}, extra...), io.Discard, errb, opt)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Error("node serve did not stop within 30 s")
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, errb
			}
		}
		select {
		case code := <-exited:
			t.Fatalf("node serve exited %d\n%s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node serve not healthy within 30 s\n%s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// `node serve` serves MCP over Streamable HTTP at /mcp.
func TestServeMCPOverHTTP(t *testing.T) {
	clearLLMEnv(t)
	base := serveNode(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: base + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := strings.Join(listToolNames(t, cs), " "); got != "calculator clock run_task task_result" {
		t.Fatalf("tools %s", got)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "What is 6*7?"}})
	if err != nil || res.IsError || !strings.Contains(resultText(res), "42") {
		t.Fatalf("run_task: %v %q", err, resultText(res))
	}
	// A browser page of another origin may not drive the node's tools.
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site POST to /mcp got %d, want 403", resp.StatusCode)
	}
}

// The retry of the streams of /mcp (what a client whose stream was cut waits
// before it resumes it) is the configuration's "mcp_server" "reconnect_delay":
// here on the stream of notifications (GET), which names it first.
func TestServeMCPReconnectDelay(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{``, "retry: 2000\n"},
		{`{"mcp_server": {"reconnect_delay": "750ms"}}`, "retry: 750\n"},
	} {
		url := serveForSDK(t, newSDKModel(0), c.config)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
			&sdk.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("MCP-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		start := make([]byte, 64)
		n, _ := io.ReadAtLeast(resp.Body, start, len(": ok\n")+len(c.want))
		resp.Body.Close()
		if got := string(start[:n]); !strings.Contains(got, c.want) {
			t.Errorf("config %s: the stream of notifications starts %q, want %q", c.config, got, c.want)
		}
	}
}

// TestConformanceServer runs the official server suite against /mcp of `node serve`.
// The suite's fixtures come through the ways a user has: tools of the agent
// (test_simple_text, test_error_handling, and two that run a while, whose calls the
// server follows with log and progress notifications), and the resources, template
// and prompts of the configuration's "mcp_server" section. The scenarios it fails
// on purpose are in the baseline.
func TestConformanceServer(t *testing.T) {
	suite, node22 := os.Getenv("TROUPE_TEST_MCP_CONFORMANCE"), os.Getenv("TROUPE_TEST_NODE22")
	if suite == "" || node22 == "" {
		t.Skip("TROUPE_TEST_MCP_CONFORMANCE (the conformance package's dist/index.js) and TROUPE_TEST_NODE22 (a Node 22 binary) are not both set; .ci/run installs them")
	}
	clearLLMEnv(t)
	dir := t.TempDir()
	png := filepath.Join(dir, "pixel.png")
	if err := os.WriteFile(png, []byte(onePixelPNG), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(map[string]any{"mcp_server": map[string]any{
		"progress_interval": "100ms",
		"resources": []any{
			map[string]any{"uri": "test://static-text", "name": "static-text", "mime_type": "text/plain", "text": "This is the content of the static text resource."},
			map[string]any{"uri": "test://static-binary", "name": "static-binary", "mime_type": "image/png", "file": png},
			map[string]any{"uri": "test://watched-resource", "name": "watched-resource", "text": "A resource to watch."},
			map[string]any{"uri": "test://example-resource", "name": "example-resource", "text": "Embedded resource content for testing."},
		},
		"resource_templates": []any{
			map[string]any{"uri_template": "test://template/{id}/data", "name": "template-data", "mime_type": "application/json",
				"text": `{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}`},
		},
		"prompts": []any{
			map[string]any{"name": "test_simple_prompt", "description": "A simple prompt",
				"messages": []any{map[string]any{"text": "This is a simple prompt for testing."}}},
			map[string]any{"name": "test_prompt_with_arguments", "description": "A prompt with arguments",
				"arguments": []any{
					map[string]any{"name": "arg1", "description": "First test argument", "required": true, "values": []string{"testValue1", "test-other", "hello"}},
					map[string]any{"name": "arg2", "description": "Second test argument", "required": true},
				},
				"messages": []any{map[string]any{"text": "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"}}},
			map[string]any{"name": "test_prompt_with_embedded_resource", "description": "A prompt that embeds a resource",
				"arguments": []any{map[string]any{"name": "resourceUri", "description": "URI of the resource to embed", "required": true}},
				"messages":  []any{map[string]any{"resource": "{resourceUri}"}, map[string]any{"text": "Please process the embedded resource above."}}},
			map[string]any{"name": "test_prompt_with_image", "description": "A prompt with an image",
				"messages": []any{map[string]any{"image": png, "mime_type": "image/png"}, map[string]any{"text": "Please analyze the image above."}}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "troupe.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	base := serveNode(t, options{extraTools: []tools.Tool{
		fixtureTool{name: "test_simple_text", text: "This is a simple text response for testing."},
		fixtureTool{name: "test_error_handling", text: "This tool intentionally returns an error for testing", fail: true},
		fixtureTool{name: "test_tool_with_logging", text: "Logging tool done.", takes: 500 * time.Millisecond},
		fixtureTool{name: "test_tool_with_progress", text: "Progress tool done.", takes: 500 * time.Millisecond},
	}}, "--config", cfgPath)
	baseline, err := filepath.Abs("../../mcp/testdata/conformance-baseline.yml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node22, suite, "server", "--url", base+"/mcp", "--expected-failures", baseline)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	for _, line := range regexp.MustCompile(`(?m)^\s*([✓✗~] .*|Total: .*|.*[Bb]aseline.*)$`).FindAllString(string(out), -1) {
		t.Log(strings.TrimSpace(line))
	}
	if err != nil {
		t.Fatalf("conformance server: %v\n%s", err, tailOf(string(out), 6000))
	}
}

// onePixelPNG is a 1×1 red PNG.
const onePixelPNG = "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS" +
	"\xde\x00\x00\x00\x0cIDAT\x08\xd7c\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00\x18\xdd\x8d\xb0\x00\x00\x00\x00IEND\xaeB`\x82"

func tailOf(s string, n int) string {
	if len(s) > n {
		return fmt.Sprint("…", s[len(s)-n:])
	}
	return s
}

// A node whose MCP server is down at start runs without it: the task completes, and
// the log says the server is down and retried.
func TestNodeRunsWithItsMCPServerDown(t *testing.T) {
	clearLLMEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/mcp"
	ln.Close() // nothing listens there now
	dir := t.TempDir()
	path := filepath.Join(dir, "troupe.json")
	if err := os.WriteFile(path, []byte(`{"mcp_servers": {"remote": {"url": "`+url+`", "headers": {"Authorization": "Bearer s3cr3t-t0ken-value"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", path, "--model", "offline", "--data", filepath.Join(dir, "data"), "What is 2+3?"}, &out, &errb, options{})
	if code != 0 || !strings.Contains(out.String(), "answer:") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "mcp server is down; retrying") || !strings.Contains(errb.String(), "mcp_server=remote") {
		t.Errorf("the log does not report the server down:\n%s", errb.String())
	}
	if strings.Contains(out.String()+errb.String(), "s3cr3t-t0ken-value") {
		t.Error("the server's token reached the output")
	}
}

// everythingScript returns server-everything's dist/index.js and a node to run it, or
// skips.
func everythingScript(t *testing.T) (nodeBin, script string) {
	t.Helper()
	script = os.Getenv("TROUPE_TEST_MCP_EVERYTHING")
	if script == "" {
		t.Skip("TROUPE_TEST_MCP_EVERYTHING is not set (server-everything's dist/index.js; .ci/run installs it)")
	}
	nodeBin = os.Getenv("TROUPE_TEST_NODE")
	if nodeBin == "" {
		var err error
		if nodeBin, err = exec.LookPath("node"); err != nil {
			t.Skip("no node on PATH to run server-everything")
		}
	}
	return nodeBin, script
}

// An MCP tool's result is recorded like any tool's, without the secrets of the
// server's configuration: server-everything's get-env answers its whole environment,
// which holds the API_TOKEN the configuration gave it; NODE_ENV is no secret.
func TestMCPToolResultIsRecordedWithoutSecrets(t *testing.T) {
	nodeBin, script := everythingScript(t)
	clearLLMEnv(t)
	dir := t.TempDir()
	const token = "tok-4f9a2c7e1b8d6053"
	cfg, _ := json.Marshal(map[string]any{"mcp_servers": map[string]any{"everything": map[string]any{
		"command": nodeBin, "args": []string{script, "stdio"}, "env": map[string]string{"API_TOKEN": token, "NODE_ENV": "troupe-test-env"}}}})
	script2, _ := json.Marshal(map[string]any{"steps": []any{
		map[string]any{"tool_calls": []any{map[string]any{"id": "c1", "name": "everything__get-env", "arguments": "{}"}}},
		map[string]any{"content": "I read the environment."},
	}})
	cfgPath, scriptPath := filepath.Join(dir, "troupe.json"), filepath.Join(dir, "script.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scriptPath, script2, 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--config", cfgPath, "--model", "scripted:" + scriptPath, "--data", data, "read the env"}, &out, &errb, options{}); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	var result string
	for _, e := range readSession(t, data, sessionOf(t, out.String())) {
		if strings.Contains(string(e.Payload), token) {
			t.Errorf("event %d (%s) holds the token", e.Seq, e.Type)
		}
		if p, err := e.Decode(); err == nil {
			if c, ok := p.(*messages.ToolCallCompleted); ok {
				result = c.Result + c.Error
			}
		}
	}
	if !strings.Contains(result, "troupe-test-env") || !strings.Contains(result, "[REDACTED]") {
		t.Errorf("get-env's recorded result %.400q lacks NODE_ENV or the redaction", result)
	}
	if strings.Contains(out.String()+errb.String(), token) {
		t.Error("the token reached the output")
	}
}

// node tools list shows the MCP servers' tools with their source, and says which
// server is down; node tools call reaches a server's tool through the node's performer.
func TestToolsListAndCallSeeMCPServers(t *testing.T) {
	clearLLMEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "troupe.json")
	if err := os.WriteFile(path, []byte(`{"mcp_servers": {"remote": {"url": "`+down+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"tools", "list", "--config", path}, &out, &errb, options{}); code != 0 {
		t.Fatalf("tools list: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "mcp server remote (http) is down") || !strings.Contains(out.String(), "calculator") {
		t.Fatalf("tools list with a server down:\n%s\n%s", out.String(), errb.String())
	}

	nodeBin, script := everythingScript(t)
	cfg, _ := json.Marshal(map[string]any{"mcp_servers": map[string]any{"everything": map[string]any{
		"command": nodeBin, "args": []string{script, "stdio"}, "allow": []string{"echo"}}}})
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"tools", "list", "--json", "--config", path}, &out, &errb, options{}); code != 0 {
		t.Fatalf("tools list: exit %d\n%s", code, errb.String())
	}
	var entries []struct{ Name, Source string }
	if err := json.Unmarshal(out.Bytes(), &entries); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+"="+e.Source)
	}
	if want := "calculator=builtin clock=builtin everything__echo=mcp:everything"; strings.Join(got, " ") != want {
		t.Fatalf("tools %s, want %s", strings.Join(got, " "), want)
	}
	out.Reset()
	if code := run(context.Background(), []string{"tools", "call", "--config", path, "everything__echo", `{"message":"via tools call"}`}, &out, &errb, options{}); code != 0 || !strings.Contains(out.String(), "via tools call") {
		t.Fatalf("tools call: exit %d %q\n%s", code, out.String(), errb.String())
	}
}

// A request to /mcp refused before its body is read (no token; a Content-Length
// above the route's bound) is answered at once, while the body is still on its
// way, and the connection closes: node serve does not wait for a body it refuses.
func TestServeMCPRefusesBeforeTheBody(t *testing.T) {
	clearLLMEnv(t)
	const token = "0123456789abcdef0123456789abcdef"
	base := serveNode(t, options{}, "--auth-token", token)
	for _, c := range []struct {
		name, head string
		code       int
	}{
		{"no token", "Content-Length: 200000\r\n", http.StatusUnauthorized}, // under 256 KiB, which net/http would wait for
		{"too large", "Authorization: Bearer " + token + "\r\nContent-Length: 3145728\r\n", http.StatusRequestEntityTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(conn, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
				c.head+"\r\n{\"jsonrpc\":\"2.0\""); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer while the body is unsent: %v; want %d at once", err, c.code)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code || !resp.Close {
				t.Fatalf("%s (connection close %v): %q; want %d, closing the connection", resp.Status, resp.Close, raw, c.code)
			}
		})
	}
}
