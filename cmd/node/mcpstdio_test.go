package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// `node mcp` answers a line that is no JSON-RPC message with a JSON-RPC error and
// goes on: the run_task call before it and the ping after it are answered, though
// the client closed stdin after its last line, and then the node exits 0. A request
// before initialize gets a valid error code.
func TestNodeMCPStdioSurvivesMalformedLines(t *testing.T) {
	clearLLMEnv(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"mcp", "--model", "offline", "--data", t.TempDir()}, outW, &errb, options{stdin: inR})
		outW.Close()
		exited <- code
	}()
	lines := []string{
		`{"jsonrpc":"2.0","id":0,"method":"nope/nope"}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_task","arguments":{"input":"What is 2+3?"}}}`,
		`{oops`,
		`[]`,
		`"x"`,
		`42`,
		`{"id":7,"method":"ping"}`,
		`{"jsonrpc":"1.0","id":8,"method":"ping"}`,
		`[{"jsonrpc":"2.0","id":9,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":3,"method":"ping"}`,
	}
	go func() {
		defer inW.Close()
		for _, l := range lines {
			if _, err := io.WriteString(inW, l+"\n"); err != nil {
				return
			}
		}
	}()
	type answer struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
		Result json.RawMessage `json:"result"`
	}
	got := make(chan answer)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var a answer
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				t.Errorf("a line of the node is not JSON-RPC: %q", sc.Text())
				continue
			}
			got <- a
		}
		close(got)
	}()
	var errs []int
	var nullErrs int
	answered := map[string]answer{}
	deadline := time.After(60 * time.Second)
	for answered["2"].Result == nil || answered["3"].Result == nil {
		select {
		case a, ok := <-got:
			if !ok {
				t.Fatalf("the node's stdout ended; answers %v, errors %v\n%s", answered, errs, errb.String())
			}
			if a.Error != nil {
				errs = append(errs, a.Error.Code)
			}
			if string(a.ID) == "null" {
				nullErrs++
			} else {
				answered[string(a.ID)] = a
			}
		case <-deadline:
			t.Fatalf("no answer to run_task and the last ping; answers %v, errors %v\n%s", answered, errs, errb.String())
		}
	}
	if a := answered["0"]; a.Error == nil || a.Error.Code != -32600 {
		t.Errorf("nope/nope before initialize: %+v, want error -32600", a.Error)
	}
	if !strings.Contains(string(answered["2"].Result), "5") {
		t.Errorf("run_task: %s", answered["2"].Result)
	}
	// -32600 for the request before initialize, -32700 for {oops, -32600 for [], "x",
	// 42, the two messages of no version 2.0 and the batch (version 2025-06-18 has none).
	want := map[int]int{-32700: 1, -32600: 7}
	counts := map[int]int{}
	for _, c := range errs {
		counts[c]++
	}
	if counts[-32700] != want[-32700] || counts[-32600] != want[-32600] || len(errs) != 8 || nullErrs != 7 {
		t.Errorf("error codes %v (%d with id null), want one -32700 and seven -32600 (six with id null)", errs, nullErrs)
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("node mcp exited %d\n%s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("node mcp did not stop after its stdin closed\n%s", errb.String())
	}
}
