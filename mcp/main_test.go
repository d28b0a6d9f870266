package mcp_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as MCP servers the tests start over stdio:
// TROUPE_MCP_TEST_SERVER=hostile serves hostileServer, =forker serves it after starting
// a child (=orphan) that holds its stdout and stderr and outlives it, =mute reads and
// never answers, =taskonly serves taskOnlyServer.
func TestMain(m *testing.M) {
	switch os.Getenv("TROUPE_MCP_TEST_SERVER") {
	case "hostile":
		hostileServer()
		os.Exit(0)
	case "rude":
		rudeServer()
		os.Exit(0)
	case "big":
		bigServer()
		os.Exit(0)
	case "env":
		envServer()
		os.Exit(0)
	case "forker":
		// A server that starts a child holding its stdout and stderr, which
		// ignores them and outlives it unless killed.
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "TROUPE_MCP_TEST_SERVER=orphan")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			os.Exit(4)
		}
		hostileServer()
		os.Exit(0)
	case "orphan":
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
		time.Sleep(2 * time.Minute) // a bound, should a test fail and leave it
		os.Exit(0)
	case "taskonly":
		taskOnlyStdio()
		os.Exit(0)
	case "mute":
		_, _ = bufio.NewReader(os.Stdin).WriteTo(discard{})
		os.Exit(0)
	}
	if os.Getenv("TROUPE_MCP_CONFORMANCE_CLIENT") != "" {
		os.Exit(conformanceClient())
	}
	os.Exit(m.Run())
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// hostileServer is an MCP server over stdio, written by hand (the SDK refuses to serve
// what it serves): tools whose schemas are not objects, a tool that answers 10 MB, one
// that never answers, one that exits the process, one that adds a tool and sends
// notifications/tools/list_changed, and one that answers with the _meta it got.
func hostileServer() {
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	send := func(v any) {
		b, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
	}
	grown := false
	toolList := func() []any {
		obj := map[string]any{"type": "object"}
		list := []any{
			map[string]any{"name": "bad_schema", "description": "schema is a string", "inputSchema": "not a schema"},
			map[string]any{"name": "array_schema", "description": "schema of an array", "inputSchema": map[string]any{"type": "array"}},
			map[string]any{"name": "huge", "description": "answers 10 MB", "inputSchema": obj},
			map[string]any{"name": "hang", "description": "never answers", "inputSchema": obj},
			map[string]any{"name": "die", "description": "exits", "inputSchema": obj},
			map[string]any{"name": "die_again", "description": "exits, and says a second call does no more", "inputSchema": obj,
				"annotations": map[string]any{"idempotentHint": true}},
			map[string]any{"name": "grow", "description": "adds a tool", "inputSchema": obj},
			map[string]any{"name": "meta", "description": "answers its _meta", "inputSchema": obj},
			map[string]any{"name": "ok", "description": "answers fine", "inputSchema": map[string]any{"properties": map[string]any{}}},
			map[string]any{"name": "fails", "description": "answers isError", "inputSchema": obj},
			map[string]any{"name": "weird.name/with spaces", "description": "a name models refuse", "inputSchema": obj},
		}
		mu.Lock()
		defer mu.Unlock()
		if grown {
			list = append(list, map[string]any{"name": "extra", "description": "added by grow", "inputSchema": obj})
		}
		return list
	}
	text := func(s string) map[string]any {
		return map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}}
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string          `json:"protocolVersion"`
				Name            string          `json:"name"`
				Meta            json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || req.ID == nil {
			continue // a notification
		}
		reply := func(result any) { send(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result}) }
		switch req.Method {
		case "initialize":
			reply(map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{"listChanged": true}},
				"serverInfo": map[string]any{"name": "hostile", "version": "1"}})
		case "ping":
			reply(map[string]any{})
		case "tools/list":
			if path := os.Getenv("TROUPE_MCP_TEST_LISTS"); path != "" { // the listings answered
				f, _ := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				fmt.Fprintln(f, "tools/list")
				f.Close()
			}
			reply(map[string]any{"tools": toolList()})
		case "tools/call":
			switch req.Params.Name {
			case "huge":
				reply(text(strings.Repeat("x", 10<<20)))
			case "hang":
			case "die", "die_again":
				if path := os.Getenv("TROUPE_MCP_TEST_CALLS"); path != "" { // the calls performed, across restarts
					f, _ := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
					fmt.Fprintln(f, req.Params.Name)
					f.Close()
				}
				os.Exit(3)
			case "grow":
				mu.Lock()
				grown = true
				mu.Unlock()
				send(map[string]any{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
				reply(text("grown"))
			case "meta":
				reply(text(string(req.Params.Meta)))
			case "fails":
				r := text("it went wrong on purpose")
				r["isError"] = true
				reply(r)
			default:
				reply(text("fine"))
			}
		default:
			send(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": fmt.Sprintf("no method %s", req.Method)}})
		}
	}
}
