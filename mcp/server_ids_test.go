package mcp_test

import (
	"bufio"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpAnswer reads the JSON-RPC answer of a POST: a JSON body, or the data of the
// SSE event that carries an id.
func httpAnswer(t *testing.T, raw []byte) rpcAnswer {
	t.Helper()
	var a rpcAnswer
	if s := strings.TrimSpace(string(raw)); strings.HasPrefix(s, "{") {
		if err := json.Unmarshal([]byte(s), &a); err != nil {
			t.Fatalf("answer %q: %v", raw, err)
		}
		return a
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &a) == nil && len(a.ID) > 0 {
			return a
		}
	}
	t.Fatalf("no answer in %q", raw)
	return a
}

// badIDs are JSON-RPC ids that are numbers but not integers the server can
// answer as sent (MCP's ids are strings or integers): the SDK read them as
// float64 and answered int64(id), an id its client never sent.
var badIDs = []string{"1.5", "-0.5", "1e300", "9007199254740993", "99999999999999999999999"}

// A request whose id is a number that is not an integer, or an integer past
// 2^53, is refused as an invalid request (-32600), over Streamable HTTP and
// stdio, and calls nothing: the SDK answered it with another id (1.5 with 1,
// 99999999999999999999999 with -9223372036854775808), which its client never
// matches to its request, after the tool ran.
func TestServerRefusesARequestIDItCannotAnswerAsSent(t *testing.T) {
	var calls atomic.Int32
	srv, ctx := toolServer(t, countTool{&calls})
	call := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"count","arguments":{}}}`
	}

	t.Run("http", func(t *testing.T) {
		url, cs := sdkSession(ctx, t, srv)
		for _, id := range badIDs {
			resp, raw := postRead(ctx, t, url, cs.ID(), call(id))
			a := httpAnswer(t, raw)
			if a.Error == nil || a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "id") {
				t.Errorf("id %s: %s answered id %s, error %+v, result %+v; want the invalid request -32600 naming the id", id, resp.Status, a.ID, a.Error, a.Result)
			}
		}
		if got := calls.Swap(0); got != 0 {
			t.Errorf("the tool was called %d times", got)
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "count", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Errorf("the session after them: %v %+v", err, res)
		}
		calls.Store(0)
	})

	t.Run("stdio", func(t *testing.T) {
		inW, outR := stdioServe(ctx, t, srv)
		answers := answersOf(outR, 16)
		lines := []string{
			`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		}
		for _, id := range badIDs {
			lines = append(lines, call(id))
		}
		lines = append(lines, call(`"last"`))
		writeLines(t, inW, lines...)
		var got []rpcAnswer
		for {
			select {
			case a, ok := <-answers:
				if !ok {
					t.Fatalf("the server's output ended; answers %+v", got)
				}
				got = append(got, a)
			case <-ctx.Done():
				t.Fatalf("no answer to the last call within 30 s: %+v", got)
			}
			if string(got[len(got)-1].ID) == `"last"` {
				break
			}
		}
		refused := 0
		for _, a := range got {
			switch {
			case a.Error != nil && a.Error.Code == -32600 && strings.Contains(a.Error.Message, "id"):
				refused++
			case string(a.ID) == `"init"` || string(a.ID) == `"last"`:
			default:
				t.Errorf("answered id %s: error %+v, result %+v; want the invalid request -32600 naming the id", a.ID, a.Error, a.Result)
			}
		}
		if refused != len(badIDs) {
			t.Errorf("%d of %d refused: %+v", refused, len(badIDs), got)
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("the tool was called %d times, want once (the last call)", got)
		}
	})
}
