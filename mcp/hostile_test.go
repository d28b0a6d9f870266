package mcp_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

func testServer(t *testing.T, kind string) mcp.ServerConfig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcp.ServerConfig{Command: exe, Env: map[string]string{"TROUPE_MCP_TEST_SERVER": kind}}
}

func TestHostileServer(t *testing.T) {
	c := startClient(t, map[string]mcp.ServerConfig{"hostile": testServer(t, "hostile")}, func(cfg *mcp.ClientConfig) {
		cfg.MaxResultBytes = 1 << 10
	})
	st := c.Status()[0]
	if st.State != mcp.StateConnected || st.Server != "hostile 1" {
		t.Fatalf("status %+v", st)
	}
	// Schemas that are not objects leave their tools out, and say why.
	skipped := strings.Join(st.Skipped, "\n")
	for _, want := range []string{`tool "bad_schema": its input schema "not a schema" is not a JSON Schema object`, `tool "array_schema": its input schema has type "array"`} {
		if !strings.Contains(skipped, want) {
			t.Errorf("skipped:\n%s\nlacks %s", skipped, want)
		}
	}
	want := "hostile__die hostile__die_again hostile__fails hostile__grow hostile__hang hostile__huge hostile__meta hostile__ok hostile__weird_name_with_spaces"
	if got := strings.Join(names(c), " "); got != want {
		t.Fatalf("catalog %s, want %s", got, want)
	}
	ok, _ := c.Tool("hostile__ok")
	if got := string(ok.Spec().Parameters); got != `{"properties":{},"type":"object"}` {
		t.Errorf("ok's schema %s, want the canonical object schema", got)
	}

	// 10 MB: the model gets the head and a note.
	out := mustCall(t, c, "hostile__huge", "")
	if len(out) > 1<<10+100 || !strings.Contains(out, "[cut: the result is 10485760 bytes; the first 1024 are shown]") {
		t.Errorf("huge answered %d bytes ending %q", len(out), out[max(0, len(out)-80):])
	}
	// A tool that never answers ends with its context.
	hang, _ := c.Tool("hostile__hang")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := hang.Call(ctx, tools.Call{Key: "s/1"})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang: %v, want the deadline", err)
	}
	if out := mustCall(t, c, "hostile__ok", "{}"); out != "fine" {
		t.Errorf("ok after hang answered %q", out)
	}
	// isError is an error with the server's text; the key travels in _meta.
	if _, err := call(t, c, "hostile__fails", "{}"); !errors.Is(err, mcp.ErrToolError) || !strings.Contains(err.Error(), "it went wrong on purpose") {
		t.Errorf("fails: %v", err)
	}
	if out := mustCall(t, c, "hostile__meta", "{}"); out != `{"troupe/idempotency_key":"test-session/1"}` {
		t.Errorf("meta answered %s", out)
	}
	// A session's call sends its name outside the log (tools.Call.Outward), unique
	// across event logs, not its key, which another log's session of the same
	// name has too.
	meta, _ := c.Tool("hostile__meta")
	mctx, mcancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err = meta.Call(mctx, tools.Call{Key: "test-session/1", Outward: "troupe-0123456789abcdef0123456789abcdef", Arguments: "{}"})
	mcancel()
	if err != nil || out != `{"troupe/idempotency_key":"troupe-0123456789abcdef0123456789abcdef"}` {
		t.Errorf("meta with an outward name answered %s, %v", out, err)
	}
	// list_changed brings the new tool.
	changed := c.Changed()
	mustCall(t, c, "hostile__grow", "{}")
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no catalog change within 10 s of list_changed")
	}
	if _, ok := c.Tool("hostile__extra"); !ok {
		t.Fatalf("no hostile__extra after list_changed: %v", names(c))
	}
	// A server that exits mid-call: the call went out, so it may have been
	// performed, and it is not sent again (its tool is not marked idempotent); the
	// server comes back.
	if _, err := call(t, c, "hostile__die", "{}"); !errors.Is(err, mcp.ErrOutcomeUnknown) {
		t.Errorf("die: %v, want the outcome unknown", err)
	}
	waitFor(t, 10*time.Second, "reconnected", func() bool {
		st := c.Status()[0]
		return st.State == mcp.StateConnected && st.Connects >= 2
	})
	if out := mustCall(t, c, "hostile__ok", "{}"); out != "fine" {
		t.Errorf("ok after die answered %q", out)
	}
}

// A server that never answers initialize is down after ConnectTimeout, with the
// reason; it offers nothing, and is retried.
func TestMuteServer(t *testing.T) {
	c := startClient(t, map[string]mcp.ServerConfig{"mute": testServer(t, "mute")}, func(cfg *mcp.ClientConfig) {
		cfg.ConnectTimeout = 300 * time.Millisecond
	})
	// The first attempt's end is waited for: on a loaded machine (the race
	// detector's run) the client may still be starting it when startClient returns.
	waitFor(t, 30*time.Second, "down", func() bool { return c.Status()[0].State == mcp.StateDown })
	st := c.Status()[0]
	if !strings.Contains(st.Error, "did not connect and list its tools within 300ms") || len(c.Specs()) != 0 {
		t.Fatalf("status %+v, catalog %v", st, names(c))
	}
}

// A node whose agent calls a hostile server's tools: a 10 MB result reaches the model
// cut, a tool that hangs times out, and the task goes on to its answer.
func TestNodeWithHostileServer(t *testing.T) {
	c := startClient(t, map[string]mcp.ServerConfig{"hostile": testServer(t, "hostile")}, func(cfg *mcp.ClientConfig) {
		cfg.MaxResultBytes = 4 << 10
	})
	m, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "hostile__huge", Arguments: "{}"}, {ID: "c2", Name: "hostile__hang", Arguments: "{}"}}},
		{ToolCalls: []messages.ToolCall{{ID: "c3", Name: "hostile__ok", Arguments: "{}"}}},
		{Content: "done despite the server"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The timeout lets 10 MB cross a pipe on a loaded machine under the race
	// detector (5 s did not, once, in a CI run beside other builds), and ends the
	// hang.
	n := nodetest.Start(t, node.Config{Model: m, ToolCatalog: c, ToolTimeout: 20 * time.Second})
	// The agent offers the catalog's tools beside its own, sorted.
	var offered []string
	for _, s := range n.ToolSpecs() {
		offered = append(offered, s.Name)
	}
	if got := strings.Join(offered, " "); !strings.HasPrefix(got, "calculator clock hostile__die") {
		t.Errorf("the node offers %s", got)
	}
	events := nodetest.Run(t, n, "hostile-1", "use the hostile tools")
	results := map[string]*messages.ToolCallCompleted{}
	var final string
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *messages.ToolCallCompleted:
			results[p.Tool] = p
		case *messages.TaskCompleted:
			final = p.Output
		}
	}
	if final != "done despite the server" {
		t.Fatalf("the task ended with %q; events %v", final, events)
	}
	if r := results["hostile__huge"]; r == nil || len(r.Result) > 5<<10 || !strings.Contains(r.Result, "[cut: the result is 10485760 bytes") {
		t.Errorf("huge's recorded result: %+v", r)
	}
	if r := results["hostile__hang"]; r == nil || !strings.Contains(r.Error, "tool timed out") {
		t.Errorf("hang's recorded result: %+v", r)
	}
	if r := results["hostile__ok"]; r == nil || r.Result != "fine" {
		t.Errorf("ok's recorded result: %+v", r)
	}
}

// A stdio server that starts a child which holds its stdout and stderr and ignores
// SIGTERM: when the client closes, the child ends with the server; it does not stay
// behind as a process of nobody's.
func TestServersChildrenEndWithIt(t *testing.T) {
	marker := "troupe-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg := testServer(t, "forker")
	cfg.Env["TROUPE_TEST_MARKER"] = marker
	c := startClient(t, map[string]mcp.ServerConfig{"forker": cfg}, nil)
	if st := c.Status()[0]; st.State != mcp.StateConnected {
		t.Fatalf("status %+v", st)
	}
	if out := mustCall(t, c, "forker__ok", "{}"); out != "fine" {
		t.Errorf("ok answered %q", out)
	}
	// Two processes carry the marker: the server and its child.
	waitFor(t, 10*time.Second, "the server and its child", func() bool { return len(processesWith(marker)) == 2 })
	t.Cleanup(func() {
		for _, pid := range processesWith(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the server and its child ended", func() bool { return len(processesWith(marker)) == 0 })
}

// processesWith returns the live processes whose environment holds marker.
func processesWith(marker string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !strings.Contains(string(env), "TROUPE_TEST_MARKER="+marker) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			continue // a zombie
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		pids = append(pids, pid)
	}
	return pids
}

// A stdio server that stops reading its stdin (hung, but alive): a call whose
// arguments fill the pipe ends with its context instead of blocking in the write
// for ever, with every write after it (the keepalive's pings, the next calls); the
// client takes the connection for broken and starts the server again, and its
// Close does not wait on the stuck write.
func TestServerThatStopsReading(t *testing.T) {
	c := startClient(t, map[string]mcp.ServerConfig{"rude": testServer(t, "rude")}, nil)
	if out := mustCall(t, c, "rude__deafen", "{}"); out != "I stop reading" {
		t.Fatalf("deafen answered %q", out)
	}
	// 512 KiB of arguments: more than a pipe holds (64 KiB), within what a tool
	// takes (1 MiB: its arguments are read before they are sent).
	big := `{"pad":"` + strings.Repeat("p", 1<<19) + `"}`
	tool, _ := c.Tool("rude__ok")
	// The context must end while the write is blocked, not before it began: under
	// load (the race detector, a busy CI machine) the 1 MiB call took more than
	// half a second to reach its write, ended unsent, and left the connection
	// up, as it should be.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := tool.Call(ctx, tools.Call{Key: "s/2", Arguments: big})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the call to a server that reads nothing answered %v, want its deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call was still writing to a server that reads nothing 30 s after its context ended")
	}
	waitFor(t, 60*time.Second, "reconnected", func() bool {
		st := c.Status()[0]
		return st.State == mcp.StateConnected && st.Connects >= 2
	})
	if out := mustCall(t, c, "rude__ok", "{}"); out != "fine" {
		t.Errorf("ok after the restart answered %q", out)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30 s")
	}
}

// What a rude server tries does not reach past the client: sampling it was never
// offered is refused, a flood of elicitations is declined (or answered with the
// defaults), a resource link to the node's /etc/passwd stays a line of text, 64 MiB
// on stderr blocks nothing, a line that is not JSON on stdout fails the call and the
// server is started again, and a tool it removes leaves the catalog.
func TestRudeServer(t *testing.T) {
	for _, mode := range []string{mcp.ElicitDecline, mcp.ElicitDefaults} {
		cfg := testServer(t, "rude")
		cfg.Elicitation = mode
		c := startClient(t, map[string]mcp.ServerConfig{"rude": cfg}, nil)
		if out := mustCall(t, c, "rude__sample", "{}"); !strings.Contains(out, "does not support CreateMessage") {
			t.Errorf("%s: sampling answered %q, want a refusal", mode, out)
		}
		want := "client does not support elicitation"
		if mode == mcp.ElicitDefaults {
			want = `{"action":"decline"} … {"action":"decline"}`
		}
		if out := mustCall(t, c, "rude__elicit_flood", "{}"); !strings.Contains(out, want) {
			t.Errorf("%s: the elicitations were answered %q, want %s", mode, out, want)
		}
		if out := mustCall(t, c, "rude__links", "{}"); out != "[resource file:///etc/passwd (passwd)]\nroot:*:embedded by the server" {
			t.Errorf("%s: links answered %q", mode, out)
		}
		if out := mustCall(t, c, "rude__stderr_flood", "{}"); out != "after the flood" {
			t.Errorf("%s: stderr_flood answered %q", mode, out)
		}
		// Lines that are not JSON-RPC on stdout are skipped, as the SDKs' Python
		// and TypeScript clients skip them: the call is answered, on the same
		// connection.
		if out := mustCall(t, c, "rude__garbage", "{}"); out != "after garbage" {
			t.Errorf("%s: garbage answered %q", mode, out)
		}
		if st := c.Status()[0]; st.State != mcp.StateConnected || st.Connects != 1 {
			t.Errorf("%s: after garbage, status %+v, want the first connection", mode, st)
		}
		changed := c.Changed()
		mustCall(t, c, "rude__remove_victim", "{}")
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no catalog change within 10 s of list_changed", mode)
		}
		if _, ok := c.Tool("rude__victim"); ok {
			t.Errorf("%s: rude__victim is still in the catalog: %v", mode, names(c))
		}
		if out := mustCall(t, c, "rude__ok", "{}"); out != "fine" {
			t.Errorf("%s: ok answered %q", mode, out)
		}
	}
}

// A stdio server that dies mid-call performs the call once: the call went out
// whole, so it is not sent again to the server started anew (which performed it
// again: a second side effect), and fails with ErrOutcomeUnknown, unless its tool
// says a second call does no more than the first (idempotentHint), when it is sent
// again with the same key. A server that died while idle is called anew.
func TestServerDyingMidCallPerformsItOnce(t *testing.T) {
	calls := filepath.Join(t.TempDir(), "calls")
	cfg := testServer(t, "hostile")
	cfg.Env["TROUPE_MCP_TEST_CALLS"] = calls
	c := startClient(t, map[string]mcp.ServerConfig{"hostile": cfg}, nil)
	performed := func() string {
		b, _ := os.ReadFile(calls)
		return strings.Join(strings.Fields(string(b)), " ")
	}
	if _, err := call(t, c, "hostile__die", "{}"); !errors.Is(err, mcp.ErrOutcomeUnknown) {
		t.Errorf("die: %v, want the outcome unknown", err)
	}
	if got := performed(); got != "die" {
		t.Fatalf("performed %q, want die once", got)
	}
	waitFor(t, 10*time.Second, "reconnected", func() bool { return c.Status()[0].State == mcp.StateConnected })
	if _, err := call(t, c, "hostile__die_again", "{}"); err == nil || errors.Is(err, mcp.ErrOutcomeUnknown) {
		t.Errorf("die_again: %v, want it sent again (and failed again)", err)
	}
	if got := performed(); got != "die die_again die_again" {
		t.Fatalf("performed %q, want die_again twice: an idempotent tool is sent again", got)
	}
}
