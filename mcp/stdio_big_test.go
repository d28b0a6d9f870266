package mcp_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/mcp"
)

// bigServer is a stdio server whose tool "big" answers 20 MB of text, more than the
// node reads of one message (16 MiB), writing the result before the id as the
// TypeScript SDK does; each call of it adds a line to the file TROUPE_MCP_TEST_CALLS.
func bigServer() {
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || req.ID == nil {
			continue
		}
		var result any
		switch req.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "big", "version": "1"}}
		case "tools/list":
			obj := map[string]any{"type": "object"}
			result = map[string]any{"tools": []any{map[string]any{"name": "big", "inputSchema": obj}, map[string]any{"name": "ok", "inputSchema": obj}}}
		case "tools/call":
			text := "fine"
			if req.Params.Name == "big" {
				f, _ := os.OpenFile(os.Getenv("TROUPE_MCP_TEST_CALLS"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				f.WriteString("called\n")
				f.Close()
				text = strings.Repeat("a", 20<<20)
			}
			result = map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}}
		default:
			result = map[string]any{}
		}
		b, _ := json.Marshal(map[string]any{"result": result})
		out.Write(b[:len(b)-1])
		out.WriteString(`,"jsonrpc":"2.0","id":` + string(req.ID) + "}\n")
		out.Flush()
	}
}

// A stdio server whose answer is larger than the node reads of one message fails
// that call alone, with an error that says so: the tool is performed once, and the
// connection stays. The SDK's reader failed on it and closed the connection, the
// call was sent again to the server started anew, which performed it again, and
// the call failed with "inbound JSON-RPC frame exceeded the configured maximum
// line length" after two restarts of the server.
func TestStdioAnswerLargerThanTheNodeReads(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	cfg := mcp.ServerConfig{Command: exe, Env: map[string]string{"TROUPE_MCP_TEST_SERVER": "big", "TROUPE_MCP_TEST_CALLS": calls}}
	c := startClient(t, map[string]mcp.ServerConfig{"big": cfg}, nil)
	_, err = call(t, c, "big__big", "{}")
	if err == nil || !strings.Contains(err.Error(), "larger than 16776192, the most the node reads of one message") {
		t.Errorf("big: %v, want the answer's size refused", err)
	}
	if b, _ := os.ReadFile(calls); strings.Count(string(b), "called") != 1 {
		t.Errorf("the tool was performed %d times, want once", strings.Count(string(b), "called"))
	}
	if out := mustCall(t, c, "big__ok", "{}"); out != "fine" {
		t.Errorf("ok answered %q", out)
	}
	if st := c.Status()[0]; st.Connects != 1 {
		t.Errorf("status %+v, want the first connection kept", st)
	}
}
