package mcp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
)

// taskOnlyServer serves two tools, "plain" and "research"; what it writes passes
// through taskOnlyMarks, which marks "research" as a tool the server runs only as a
// task, as server-everything marks simulate-research-query (the SDK's Tool has no
// such field to set).
func taskOnlyServer() *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "tasks", Version: "1"}, nil)
	for _, name := range []string{"plain", "research"} {
		srv.AddTool(&sdk.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
			})
	}
	return srv
}

func taskOnlyMarks(p []byte) []byte {
	return bytes.ReplaceAll(p, []byte(`"name":"research"`), []byte(`"execution":{"taskSupport":"required"},"name":"research"`))
}

// taskOnlyStdio serves taskOnlyServer over stdio (TROUPE_MCP_TEST_SERVER=taskonly).
func taskOnlyStdio() {
	_ = taskOnlyServer().Run(context.Background(), &sdk.IOTransport{Reader: os.Stdin, Writer: markingWriter{os.Stdout}})
}

type markingWriter struct{ w io.WriteCloser }

func (m markingWriter) Write(p []byte) (int, error) {
	if _, err := m.w.Write(taskOnlyMarks(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (m markingWriter) Close() error { return m.w.Close() }

type markingResponse struct{ http.ResponseWriter }

func (m markingResponse) WriteHeader(code int) {
	m.Header().Del("Content-Length")
	m.ResponseWriter.WriteHeader(code)
}

func (m markingResponse) Write(p []byte) (int, error) {
	if _, err := m.ResponseWriter.Write(taskOnlyMarks(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (m markingResponse) Flush() { m.ResponseWriter.(http.Flusher).Flush() }

// A tool that its server runs only as a task ("execution": {"taskSupport":
// "required"}, MCP 2025-11-25) is left out of the catalog, saying why: the client
// calls tools with plain tools/call, which such a server refuses
// (server-everything's simulate-research-query answered every call "-32601 Tool
// simulate-research-query requires task augmentation"), so a model offered it
// could only fail with it. Over stdio and Streamable HTTP (events and JSON).
func TestTaskOnlyToolIsLeftOut(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	httpServer := func(json bool) mcp.ServerConfig {
		h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return taskOnlyServer() },
			&sdk.StreamableHTTPOptions{JSONResponse: json})
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(markingResponse{w}, r)
		}))
		t.Cleanup(ts.Close)
		return mcp.ServerConfig{URL: ts.URL}
	}
	for name, cfg := range map[string]func() mcp.ServerConfig{
		"stdio": func() mcp.ServerConfig {
			return mcp.ServerConfig{Command: exe, Env: map[string]string{"TROUPE_MCP_TEST_SERVER": "taskonly"}}
		},
		"http-events": func() mcp.ServerConfig { return httpServer(false) },
		"http-json":   func() mcp.ServerConfig { return httpServer(true) },
	} {
		t.Run(name, func(t *testing.T) {
			c := startClient(t, map[string]mcp.ServerConfig{"tasks": cfg()}, nil)
			if _, ok := c.Tool("tasks__plain"); !ok {
				t.Fatalf("no tasks__plain in the catalog: %v", names(c))
			}
			if _, ok := c.Tool("tasks__research"); ok {
				t.Errorf("tasks__research, which its server runs only as a task, is in the catalog: %v", names(c))
			}
			st := c.Status()
			if len(st) != 1 || !strings.Contains(strings.Join(st[0].Skipped, "\n"), `"research"`) {
				t.Errorf("status %+v does not say why research was left out", st)
			}
		})
	}
}

// A tool left out is logged once, not again at each listing of the server's
// offer: server-everything, which says its lists changed as it starts, had each
// of its left-out tools warned of twice at each connection, and again at each
// reconnection.
func TestLeftOutToolIsLoggedOnce(t *testing.T) {
	srv := taskOnlyServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(markingResponse{w}, r)
	}))
	t.Cleanup(ts.Close)
	var logs lockedBuffer
	c := startClient(t, map[string]mcp.ServerConfig{"tasks": {URL: ts.URL}}, func(cfg *mcp.ClientConfig) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	for i := range 3 {
		name := fmt.Sprintf("more_%d", i)
		srv.AddTool(&sdk.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{}, nil
			})
		waitFor(t, 10*time.Second, name+" in the catalog", func() bool { _, ok := c.Tool("tasks__" + name); return ok })
	}
	if n := strings.Count(logs.String(), "tool left out"); n != 1 {
		t.Errorf("the left-out tool was logged %d times, want once:\n%s", n, logs.String())
	}
}
