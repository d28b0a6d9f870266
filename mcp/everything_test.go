package mcp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// The reference server @modelcontextprotocol/server-everything, installed by .ci/run:
// TROUPE_TEST_MCP_EVERYTHING is its dist/index.js, run with TROUPE_TEST_NODE (default
// the node on PATH).
func everything(t *testing.T) (nodeBin, script string) {
	t.Helper()
	script = os.Getenv("TROUPE_TEST_MCP_EVERYTHING")
	if script == "" {
		t.Skip("TROUPE_TEST_MCP_EVERYTHING is not set (the path of @modelcontextprotocol/server-everything's dist/index.js; .ci/run installs it)")
	}
	nodeBin = os.Getenv("TROUPE_TEST_NODE")
	if nodeBin == "" {
		var err error
		if nodeBin, err = exec.LookPath("node"); err != nil {
			t.Skip("no node on PATH to run server-everything (set TROUPE_TEST_NODE)")
		}
	}
	return nodeBin, script
}

// startClient runs a client of servers until the test ends, and waits for each
// server's first attempt.
func startClient(t *testing.T, servers map[string]mcp.ServerConfig, tweak func(*mcp.ClientConfig)) *mcp.Client {
	t.Helper()
	cfg := mcp.ClientConfig{Servers: servers, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, ConnectTimeout: 20 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := mcp.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Client.Run did not return within 30 s of its context's end")
		}
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatalf("servers not tried within 30 s: %v", err)
	}
	return c
}

func call(t *testing.T, c *mcp.Client, name, args string) (string, error) {
	t.Helper()
	tool, ok := c.Tool(name)
	if !ok {
		t.Fatalf("no tool %q in the catalog; it has %v", name, names(c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return tool.Call(ctx, tools.Call{Key: "test-session/1", Arguments: args})
}

func mustCall(t *testing.T, c *mcp.Client, name, args string) string {
	t.Helper()
	out, err := call(t, c, name, args)
	if err != nil {
		t.Fatalf("%s(%s): %v", name, args, err)
	}
	return out
}

func names(c *mcp.Client) []string {
	var n []string
	for _, s := range c.Specs() {
		n = append(n, s.Name)
	}
	return n
}

// waitFor polls cond every 20 ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkEverything lists and calls tools, reads a resource and gets a prompt of the
// server named "everything".
func checkEverything(t *testing.T, c *mcp.Client) {
	t.Helper()
	st := c.Status()
	if len(st) != 1 || st[0].State != mcp.StateConnected {
		t.Fatalf("status %+v, want everything connected", st)
	}
	for _, want := range []string{"everything__echo", "everything__get-sum", "everything__read_resource", "everything__list_resources", "everything__get_prompt"} {
		if _, ok := c.Tool(want); !ok {
			t.Fatalf("no %s in the catalog: %v", want, names(c))
		}
	}
	tool, _ := c.Tool("everything__echo")
	if src := tool.(interface{ Source() string }).Source(); src != "mcp:everything" {
		t.Errorf("Source() = %q, want mcp:everything", src)
	}
	if spec := tool.Spec(); !strings.Contains(string(spec.Parameters), `"message"`) || !strings.HasPrefix(string(spec.Parameters), "{") {
		t.Errorf("echo's schema %s lacks its message parameter", spec.Parameters)
	}
	if out := mustCall(t, c, "everything__echo", `{"message":"hello troupe"}`); !strings.Contains(out, "hello troupe") {
		t.Errorf("echo answered %q", out)
	}
	if out := mustCall(t, c, "everything__get-sum", `{"a":2,"b":40}`); !strings.Contains(out, "42") {
		t.Errorf("get-sum answered %q", out)
	}
	list := mustCall(t, c, "everything__list_resources", `{}`)
	if !strings.Contains(list, "demo://resource/static/document/features.md") {
		t.Fatalf("list_resources lacks features.md: %.500s", list)
	}
	if out := mustCall(t, c, "everything__read_resource", `{"uri":"demo://resource/static/document/features.md"}`); !strings.Contains(out, "## Tools") {
		t.Errorf("read_resource of features.md: %.300s", out)
	}
	if out := mustCall(t, c, "everything__get_prompt", `{"name":"args-prompt","arguments":{"city":"Lisbon"}}`); !strings.Contains(out, "Lisbon") {
		t.Errorf("get_prompt args-prompt answered %q", out)
	}
	if out := mustCall(t, c, "everything__get_prompt", `{"name":"simple-prompt"}`); !strings.HasPrefix(out, "user: ") {
		t.Errorf("get_prompt simple-prompt answered %q", out)
	}
	// The model's mistakes come back as readable errors.
	if _, err := call(t, c, "everything__get-sum", `[1,2]`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("arguments [1,2]: %v, want ErrInvalidArguments", err)
	}
	if _, err := call(t, c, "everything__get-sum", `{"a":"two"}`); err == nil || !strings.Contains(err.Error(), "everything") {
		t.Errorf(`get-sum {"a":"two"}: %v, want the server's error naming it`, err)
	}
	if _, err := call(t, c, "everything__read_resource", `{"url":"x"}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("read_resource with an unknown field: %v, want ErrInvalidArguments", err)
	}
}

func TestEverythingStdio(t *testing.T) {
	nodeBin, script := everything(t)
	c := startClient(t, map[string]mcp.ServerConfig{"everything": {Command: nodeBin, Args: []string{script, "stdio"}}}, nil)
	checkEverything(t, c)
}

// TestEverythingStdioRestart kills the server's process: the client starts it again,
// and a call made at once, while the process is gone, is answered once it is back.
func TestEverythingStdioRestart(t *testing.T) {
	nodeBin, script := everything(t)
	marker := "troupe-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	c := startClient(t, map[string]mcp.ServerConfig{"everything": {Command: nodeBin, Args: []string{script, "stdio"}, Env: map[string]string{"TROUPE_TEST_MARKER": marker}}}, nil)
	checkEverything(t, c)
	specs := c.Specs()
	pid := findProcess(t, marker)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The catalog keeps the server's tools while it comes back.
	if out := mustCall(t, c, "everything__echo", `{"message":"after kill"}`); !strings.Contains(out, "after kill") {
		t.Errorf("echo after the kill answered %q", out)
	}
	waitFor(t, 60*time.Second, "reconnected", func() bool {
		st := c.Status()[0]
		return st.State == mcp.StateConnected && st.Connects >= 2
	})
	if again := findProcess(t, marker); again == pid {
		t.Errorf("the server's process is still %d", pid)
	}
	if len(c.Specs()) != len(specs) {
		t.Errorf("the catalog has %d tools after the restart, %d before", len(c.Specs()), len(specs))
	}
	checkEverything(t, c)
}

// findProcess returns the one live child process whose environment holds marker.
func findProcess(t *testing.T, marker string) int {
	t.Helper()
	var found int
	waitFor(t, 10*time.Second, "the server's process", func() bool {
		if pids := processesWith(marker); len(pids) > 0 {
			found = pids[0]
			return true
		}
		return false
	})
	return found
}

// startHTTPEverything runs server-everything over Streamable HTTP on port until the
// returned stop is called (or the test ends).
func startHTTPEverything(t *testing.T, nodeBin, script string, port int) (stop func()) {
	t.Helper()
	cmd := exec.Command(nodeBin, script, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Cleanup(stop)
	waitFor(t, 20*time.Second, "server-everything listening on "+strconv.Itoa(port), func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/mcp", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return stop
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestEverythingHTTP talks to server-everything over Streamable HTTP, restarts it
// (the new process knows nothing of the old session), and calls it again.
func TestEverythingHTTP(t *testing.T) {
	nodeBin, script := everything(t)
	port := freePort(t)
	stop := startHTTPEverything(t, nodeBin, script, port)
	c := startClient(t, map[string]mcp.ServerConfig{"everything": {URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port),
		Headers: map[string]string{"X-Troupe-Test": "1"}}}, nil)
	checkEverything(t, c)
	if st := c.Status()[0]; st.Transport != "http" || st.Connects != 1 {
		t.Errorf("status %+v, want one http connection", st)
	}

	stop()
	startHTTPEverything(t, nodeBin, script, port)
	if out := mustCall(t, c, "everything__echo", `{"message":"after restart"}`); !strings.Contains(out, "after restart") {
		t.Errorf("echo after the restart answered %q", out)
	}
	waitFor(t, 60*time.Second, "reconnected", func() bool {
		st := c.Status()[0]
		return st.State == mcp.StateConnected && st.Connects >= 2
	})
	checkEverything(t, c)
}

// TestServerDownAtStart: a server that is not there at start is reported down and
// retried; once it is up, its tools join the catalog and the Changed channel says so.
func TestServerDownAtStart(t *testing.T) {
	nodeBin, script := everything(t)
	port := freePort(t)
	c := startClient(t, map[string]mcp.ServerConfig{"everything": {URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}}, nil)
	// The first attempt's end is waited for: on a loaded machine (the race
	// detector's run) the client may still be making it when startClient returns.
	waitFor(t, 30*time.Second, "down", func() bool { return c.Status()[0].State == mcp.StateDown })
	st := c.Status()[0]
	if st.State != mcp.StateDown || st.Error == "" || len(st.Tools) != 0 {
		t.Fatalf("status %+v, want down with an error and no tools", st)
	}
	if len(c.Specs()) != 0 {
		t.Fatalf("catalog %v, want empty", names(c))
	}
	changed := c.Changed()
	startHTTPEverything(t, nodeBin, script, port)
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("the catalog did not change within 30 s of the server's start")
	}
	waitFor(t, 10*time.Second, "connected", func() bool { return c.Status()[0].State == mcp.StateConnected })
	checkEverything(t, c)
}
