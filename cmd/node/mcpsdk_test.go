package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// The node's MCP server driven by the official Python and TypeScript SDKs, as users
// drive it: with the SDKs' default settings unless a test says otherwise
// (testdata/mcp-py-client.py and testdata/mcp-ts-client.mjs; deploy/mcp-sdk.sh
// installs the SDKs).

// mcpPython is the python of a virtual environment with the MCP Python SDK:
// $TROUPE_MCP_PY, else the one deploy/mcp-sdk.sh makes in ~/.cache/troupe-deploy.
// The test is skipped without it (it fails when CI=true).
func mcpPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("TROUPE_MCP_PY")
	if py == "" {
		home, _ := os.UserHomeDir()
		py = filepath.Join(home, ".cache", "troupe-deploy", "mcp-py-2.3.0", "bin", "python")
	}
	if _, err := os.Stat(py); err != nil {
		sdkMissing(t, "the MCP Python SDK is missing (run deploy/mcp-sdk.sh py; TROUPE_MCP_PY names its python)")
	}
	return py
}

// mcpTS is the node and the folder whose node_modules holds the MCP TypeScript SDK:
// $TROUPE_MCP_TS, else the one deploy/mcp-sdk.sh makes in ~/.cache/troupe-deploy.
func mcpTS(t *testing.T) (nodeBin, dir string) {
	t.Helper()
	dir = os.Getenv("TROUPE_MCP_TS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "troupe-deploy", "mcp-ts")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		sdkMissing(t, "the MCP TypeScript SDK is missing (run deploy/mcp-sdk.sh ts; TROUPE_MCP_TS names its folder)")
	}
	nodeBin = os.Getenv("TROUPE_TEST_NODE")
	if nodeBin == "" {
		var err error
		if nodeBin, err = exec.LookPath("node"); err != nil {
			sdkMissing(t, "no node on PATH to run the MCP TypeScript SDK")
		}
	}
	return nodeBin, dir
}

func sdkMissing(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// sdkCommand is the command that runs an SDK client script (lang "py" or "ts")
// against the node's /mcp at url in mode, with args, until ctx ends.
func sdkCommand(ctx context.Context, t *testing.T, lang, url, mode string, args ...string) *exec.Cmd {
	t.Helper()
	if lang == "py" {
		return exec.CommandContext(ctx, mcpPython(t), append([]string{filepath.Join("testdata", "mcp-py-client.py"), url, mode}, args...)...)
	}
	// The script runs from a folder of its own beside the SDK's node_modules (ES
	// modules are found from the importing file's folder).
	nodeBin, dir := mcpTS(t)
	stage := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "mcp-ts-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, "client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(stage, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return exec.CommandContext(ctx, nodeBin, append([]string{filepath.Join(stage, "client.mjs"), url, mode}, args...)...)
}

// sdkClient runs an SDK client script against the node's /mcp at url in mode (with
// args; env adds to its environment), decodes what it prints into out, and returns
// what it logged (its stderr).
func sdkClient(t *testing.T, lang, url, mode string, env []string, out any, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := sdkCommand(ctx, t, lang, url, mode, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s client (%s): %v\n%s", lang, mode, err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("%s client (%s) printed %q: %v\n%s", lang, mode, stdout, err, stderr.String())
	}
	return stderr.String()
}

// sdkModel answers by the task's input: "fast: X" at once with "done: X"; "slow: X"
// after hold; "block: X" when its call is cancelled (it sends the cause on
// cancelled).
type sdkModel struct {
	hold      time.Duration
	asked     chan struct{}
	cancelled chan error
}

func newSDKModel(hold time.Duration) *sdkModel {
	return &sdkModel{hold: hold, asked: make(chan struct{}, 16), cancelled: make(chan error, 16)}
}

func (*sdkModel) Name() string { return "sdk-test" }

func (m *sdkModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	input := ""
	for _, msg := range req.Messages {
		if msg.Role == messages.RoleUser {
			input = msg.Content
		}
	}
	answer := func(s string) (llm.Response, error) {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: s}}, nil
	}
	kind, rest, _ := strings.Cut(input, ": ")
	switch kind {
	case "slow":
		select {
		case m.asked <- struct{}{}:
		default:
		}
		select {
		case <-time.After(m.hold):
			return answer("slowly done: " + rest)
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	case "block":
		m.asked <- struct{}{}
		<-ctx.Done()
		m.cancelled <- context.Cause(ctx)
		return llm.Response{}, ctx.Err()
	}
	return answer("done: " + rest)
}

// sdkOutcome is what a client script prints of one tools/call.
type sdkOutcome struct {
	Text    string
	IsError bool `json:"is_error"`
	Session string
	Error   *struct {
		Type, Message string
		Code          int
	}
}

func (o sdkOutcome) String() string {
	b, _ := json.Marshal(o)
	if len(b) > 400 {
		b = append(b[:400], "..."...)
	}
	return string(b)
}

// serveForSDK runs node serve with m as its model, and the configuration file body
// (none when empty), and returns /mcp's URL.
func serveForSDK(t *testing.T, m llm.Model, config string) string {
	t.Helper()
	clearLLMEnv(t)
	var extra []string
	if config != "" {
		path := filepath.Join(t.TempDir(), "troupe.json")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		extra = append(extra, "--config", path)
	}
	base := serveNode(t, options{wrapModel: func(llm.Model) llm.Model { return m }}, extra...)
	return base + "/mcp"
}

var sdkLangs = []string{"py", "ts"}

// Each SDK lists the node's tools, resources and prompts, and runs a task.
func TestMCPSDKBasics(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			url := serveForSDK(t, newSDKModel(0), `{"mcp_server": {"resources": [{"uri": "file:///readme.txt", "name": "readme", "text": "hello"}], `+
				`"prompts": [{"name": "greet", "messages": [{"role": "user", "text": "Say hello."}]}]}}`)
			var out struct {
				Protocol                  string
				Tools, Resources, Prompts []string
				Run                       sdkOutcome
				Fatal                     any
			}
			logged := sdkClient(t, lang, url, "basic", nil, &out)
			t.Logf("%s client: protocol %s", lang, out.Protocol)
			// The Python SDK offers 2026-07-28 first (server/discover), which the node
			// refuses with the versions it speaks (SEP-2575): it falls back.
			if out.Protocol != "2025-11-25" {
				t.Errorf("%s client: protocol %q, want 2025-11-25", lang, out.Protocol)
			}
			// The client has nothing to warn of (the Python SDK logs an SSE event of
			// a name it does not know).
			if strings.TrimSpace(logged) != "" {
				t.Errorf("the %s client logged:\n%s", lang, logged)
			}
			if out.Fatal != nil {
				t.Fatalf("%s client failed: %v", lang, out.Fatal)
			}
			if got := strings.Join(out.Tools, " "); got != "calculator clock run_task task_result" {
				t.Errorf("tools %s", got)
			}
			if got := strings.Join(out.Resources, " "); got != "file:///readme.txt" {
				t.Errorf("resources %s", got)
			}
			if got := strings.Join(out.Prompts, " "); got != "greet" {
				t.Errorf("prompts %s", got)
			}
			if out.Run.Text != "done: hello from "+map[string]string{"py": "python", "ts": "typescript"}[lang] || out.Run.IsError || out.Run.Session == "" {
				t.Errorf("run_task: %v", out.Run)
			}
		})
	}
}

// A task that runs past the node's HTTP read and write timeouts (scaled down here
// to 1 s) still answers each SDK's run_task, with their defaults.
func TestMCPSDKSlowTask(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			m := newSDKModel(4 * time.Second)
			url := serveForSDK(t, m, `{"http_limits": {"read_timeout": "1s", "write_timeout": "1s", "idle_timeout": "1s"}}`)
			var out struct {
				Protocol string
				Run      sdkOutcome
				Fatal    any
			}
			sdkClient(t, lang, url, "slow", nil, &out)
			if out.Fatal != nil || out.Run.Text != "slowly done: take your time" || out.Run.IsError {
				t.Fatalf("%s client: run_task %v (%v)", lang, out.Run, out.Fatal)
			}
		})
	}
}

// A client that cancels its run_task cancels the task's model call.
func TestMCPSDKCancel(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			m := newSDKModel(0)
			url := serveForSDK(t, m, "")
			var out struct {
				Protocol  string
				Run       *sdkOutcome
				Cancelled bool
				After     sdkOutcome
				Fatal     any
			}
			sdkClient(t, lang, url, "cancel", nil, &out)
			if out.Fatal != nil || !out.Cancelled {
				t.Fatalf("%s client: %+v", lang, out)
			}
			select {
			case cause := <-m.cancelled:
				t.Logf("the model call ended with %v", cause)
			case <-time.After(30 * time.Second):
				t.Fatalf("the model call was not cancelled within 30 s of the client's cancel (protocol %s)", out.Protocol)
			}
			if out.After.Text != "done: after the cancel" {
				t.Errorf("run_task after the cancel: %v", out.After)
			}
		})
	}
}

// A task that runs longer than the Python SDK's read timeout of a response stream
// (300 s by default; 2 s here) answers: the node keeps the stream alive.
func TestMCPSDKPythonStreamReadTimeout(t *testing.T) {
	m := newSDKModel(5 * time.Second)
	url := serveForSDK(t, m, `{"mcp_server": {"progress_interval": "500ms"}}`)
	var out struct {
		Protocol string
		Run      sdkOutcome
		Fatal    any
	}
	sdkClient(t, "py", url, "slow", []string{"MCP_SSE_READ_TIMEOUT=2"}, &out)
	if out.Fatal != nil || out.Run.Text != "slowly done: take your time" || out.Run.IsError {
		t.Fatalf("run_task %v (%v)", out.Run, out.Fatal)
	}
}

// A TypeScript client whose request timeout fires (60 s by default, without
// progress resetting it; 1.5 s here) gets the SDK's timeout error, and the node
// cancels the task's model call (the SDK sends notifications/cancelled).
func TestMCPSDKTypeScriptTimeoutCancels(t *testing.T) {
	m := newSDKModel(0)
	url := serveForSDK(t, m, "")
	var out struct {
		Run, After sdkOutcome
		Fatal      any
	}
	sdkClient(t, "ts", url, "timeout", nil, &out, "1500")
	if out.Fatal != nil || out.Run.Error == nil || out.Run.Error.Code != -32001 {
		t.Fatalf("run_task: %v (%v), want the SDK's request timeout (-32001)", out.Run, out.Fatal)
	}
	select {
	case cause := <-m.cancelled:
		t.Logf("the model call ended with %v", cause)
	case <-time.After(30 * time.Second):
		t.Fatal("the model call was not cancelled within 30 s of the client's timeout")
	}
	if out.After.Text != "done: after the timeout" {
		t.Errorf("run_task after the timeout: %v", out.After)
	}
}

// Hostile arguments get a clear JSON-RPC or tool error each, and the server goes on.
func TestMCPSDKHostileArguments(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			url := serveForSDK(t, newSDKModel(0), "")
			var out map[string]sdkOutcome
			sdkClient(t, lang, url, "hostile", nil, &out)
			// Each case: a tool error whose text says, or (rpc) a JSON-RPC error whose
			// message says.
			want := []struct {
				label, says string
				rpc         bool
			}{
				{"unknown tool", `unknown tool "no_such_tool"`, true},
				{"input is a number", `field "input" must be a string, not a JSON number`, false},
				{"input is an object", `field "input" must be a string, not a JSON object`, false},
				{"input missing", "input is required", false},
				{"extra field", `unknown field "extra"`, false},
				{"session_id with control characters", "session_id must be 1-128 characters", false},
				{"1 MiB input", "input is 1048592 bytes, the limit is 1 MiB", false},
				{"3 MiB input", "the request is larger than 2097152 bytes", true},
				{"calculator with a wrong type", `"expression" must be a string, not an array`, false},
				{"max_tokens is a string", `field "max_tokens" must be an integer, not a JSON string`, false},
			}
			for _, w := range want {
				o, ok := out[w.label]
				switch {
				case !ok:
					t.Errorf("%s: no outcome", w.label)
				case w.rpc && (o.Error == nil || !strings.Contains(o.Error.Message, w.says)):
					t.Errorf("%s: %v, want a JSON-RPC error saying %q", w.label, o, w.says)
				case !w.rpc && (!o.IsError || !strings.Contains(o.Text, w.says)):
					t.Errorf("%s: %v, want a tool error saying %q", w.label, o, w.says)
				}
			}
			if o := out["unknown tool"]; o.Error == nil || o.Error.Code != -32602 {
				t.Errorf("unknown tool: %v, want error -32602 (invalid params)", o)
			}
			// Control characters and escapes reach the model as they were sent.
			if o := out["control characters and escapes"]; o.IsError || o.Text != "done: \x00\x01\x1b[31m\\\"\ud7ff\u2028 end" {
				t.Errorf("control characters and escapes: %v", o)
			}
			if o := out["after"]; o.IsError || o.Text != "done: still up" {
				t.Errorf("the server does not serve after the hostile calls: %v", o)
			}
		})
	}
}

// serveAt runs node serve at addr on the data folder data with m as its model
// until stop, which waits for it to end.
func serveAt(t *testing.T, addr, data string, m llm.Model) (stop func()) {
	stop, _ = serveAtLog(t, addr, data, m)
	return stop
}

// serveAtLog is serveAt, and node serve's log.
func serveAtLog(t *testing.T, addr, data string, m llm.Model) (stop func(), log *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errb := &syncBuffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--http", addr, "--model", "offline", "--data", data}, io.Discard, errb,
			options{wrapModel: func(llm.Model) llm.Model { return m }})
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("node serve did not stop within 30 s\n%s", errb.String())
		}
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, errb
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

// acrossRestart runs an SDK client script (lang, mode) against node serve (with
// m as its model, on a data folder of its own) and restarts the node under it once
// the client says "ready" on stderr. The client makes its next calls when it reads
// a line on stdin, which it gets once the node serves again. It returns what the
// client printed, and the first node's log.
func acrossRestart(t *testing.T, lang, mode string, m *sdkModel) (stdout string, nodeLog *syncBuffer) {
	t.Helper()
	clearLLMEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	data := t.TempDir()
	stop, nodeLog := serveAtLog(t, addr, data, m)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := sdkCommand(ctx, t, lang, "http://"+addr+"/mcp", mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrR, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	lines := bufio.NewScanner(stderrR)
	for lines.Scan() && lines.Text() != "ready" {
		stderr.WriteString(lines.Text() + "\n")
	}
	stop()
	serveAt(t, addr, data, m)
	fmt.Fprintln(stdin, "go")
	go func() {
		for lines.Scan() {
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("client: %v\n%s", err, stderr.String())
	}
	return out.String(), nodeLog
}

// A client whose node restarts under it: the same client's next calls (in the
// session it had), and a new client's.
func TestMCPSDKServerRestart(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			stdout, log := acrossRestart(t, lang, "reconnect", newSDKModel(0))
			// The client's stream of notifications (its GET) ended when the node
			// shut down: the node did not wait out its shutdown timeout.
			if strings.Contains(log.String(), "http shutdown") {
				t.Errorf("node serve did not stop in time with an MCP client connected:\n%s", log.String())
			}
			var out struct {
				Before         sdkOutcome
				SameClient     sdkOutcome `json:"same_client"`
				SameClientTool sdkOutcome `json:"same_client_tool"`
				NewClient      sdkOutcome `json:"new_client"`
				Fatal          any
			}
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("client printed %q: %v", stdout, err)
			}
			if out.Fatal != nil || out.Before.Text != "done: before the restart" {
				t.Fatalf("before the restart: %v (%v)", out.Before, out.Fatal)
			}
			// The node does not know the client's session after its restart: it
			// resumes it (neither SDK starts a new session on a 404), and the same
			// client goes on with its calls.
			if out.SameClient.Text != "done: after the restart" || out.SameClient.IsError {
				t.Errorf("the same client's run_task after the restart: %v", out.SameClient)
			}
			if out.SameClientTool.Text != "42" || out.SameClientTool.IsError {
				t.Errorf("the same client's calculator after the restart: %v", out.SameClientTool)
			}
			if out.NewClient.Text != "done: a new client" {
				t.Errorf("a new client after the restart: %v", out.NewClient)
			}
		})
	}
}

// startChildAt starts a node process (startChildWith's) at addr whose model calls
// take 3 s each (extra: more flags of node serve); it is stopped (SIGTERM) at the test's end unless it was killed.
func startChildAt(t *testing.T, addr, dir, script, records, modelLog string, extra ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--data", filepath.Join(dir, "data"), "--http", addr, "--model", "scripted:" + script}, extra...)...)
	cmd.Env = append(os.Environ(), "TROUPE_CRASH_CHILD=1", "TROUPE_RECORD_FILE="+records, "TROUPE_MODEL_LOG="+modelLog, "TROUPE_MODEL_DELAY=3s")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("node process did not stop within 30 s\n%s", stderr.String())
		}
	})
	c := &child{cmd: cmd, addr: addr, stderr: stderr}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			if err = startingAnswer(resp); err == nil {
				return c
			}
		}
		select {
		case <-exited:
			t.Fatalf("node process exited:\n%s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node did not come up: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A task whose node is killed (SIGKILL) while a client's run_task waits for it
// goes on when the node serves again (the node's log keeps it), and the client gets
// its result with task_result, by the session that run_task's progress named.
func TestMCPSDKTaskResultAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			dir := t.TempDir()
			script := filepath.Join(dir, "script.json")
			if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[{"content":"done through the crash"}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
			// Each model call takes 3 s: the node is killed during the first.
			addr := freeAddr(t)
			first := startChildAt(t, addr, dir, script, records, modelLog)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := sdkCommand(ctx, t, lang, "http://"+first.addr+"/mcp", "follow")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderrR, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr strings.Builder
			cmd.Stdout = &stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(stderrR)
			for lines.Scan() && !strings.HasPrefix(lines.Text(), "session ") {
				stderr.WriteString(lines.Text() + "\n")
			}
			for len(countLines(t, modelLog, "")) == 0 {
				select {
				case <-ctx.Done():
					t.Fatalf("the model was never asked:\n%s", first.stderr.String())
				case <-time.After(10 * time.Millisecond):
				}
			}
			if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			for lines.Scan() && lines.Text() != "ready" {
				stderr.WriteString(lines.Text() + "\n")
			}
			startChildAt(t, addr, dir, script, records, modelLog)
			fmt.Fprintln(stdin, "go")
			go func() {
				for lines.Scan() {
				}
			}()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("client: %v\n%s", err, stderr.String())
			}
			var out struct {
				Run     sdkOutcome
				Session string
				Result  sdkOutcome
				Fatal   any
			}
			if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
				t.Fatalf("client printed %q: %v", stdout.String(), err)
			}
			t.Logf("%s client: run_task cut off by the kill: %v", lang, out.Run)
			if out.Fatal != nil || out.Session == "" {
				t.Fatalf("no session named before the kill: %s", stdout.String())
			}
			if out.Result.Text != "done through the crash" || out.Result.IsError || out.Result.Session != out.Session {
				t.Errorf("task_result after the restart: %v", out.Result)
			}
		})
	}
}

// A client that idles past the node's HTTP timeouts (read, write and idle, 1 s
// here) goes on with its session.
func TestMCPSDKIdleClient(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			url := serveForSDK(t, newSDKModel(0), `{"http_limits": {"read_timeout": "1s", "write_timeout": "1s", "idle_timeout": "1s"}}`)
			var out struct {
				Before, After sdkOutcome
				Fatal         any
			}
			sdkClient(t, lang, url, "idle", nil, &out, "3")
			if out.Fatal != nil || out.Before.Text != "done: before idling" || out.After.Text != "done: after idling" {
				t.Fatalf("%+v", out)
			}
		})
	}
}

// A client that idles longer than the node's session timeout (30 minutes by
// default; 2 s here) keeps its session: it answers the node's pings.
func TestMCPSDKIdlePastSessionTimeout(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			url := serveForSDK(t, newSDKModel(0), `{"mcp_server": {"session_timeout": "2s"}}`)
			var out struct {
				Before, After sdkOutcome
				Fatal         any
			}
			sdkClient(t, lang, url, "idle", nil, &out, "5")
			if out.Fatal != nil || out.Before.Text != "done: before idling" || out.After.Text != "done: after idling" {
				t.Fatalf("%+v", out)
			}
		})
	}
}

// A Python client that idles longer than its read timeout of the server's stream
// of notifications (300 s by default; 2 s here) goes on with its session.
func TestMCPSDKPythonIdlePastStreamReadTimeout(t *testing.T) {
	url := serveForSDK(t, newSDKModel(0), `{"mcp_server": {"progress_interval": "500ms"}}`)
	var out struct {
		Before, After sdkOutcome
		Fatal         any
	}
	sdkClient(t, "py", url, "idle", []string{"MCP_SSE_READ_TIMEOUT=2"}, &out, "5")
	if out.Fatal != nil || out.Before.Text != "done: before idling" || out.After.Text != "done: after idling" {
		t.Fatalf("%+v", out)
	}
}

// cutProxy passes TCP connections to target until cut, which closes those open.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	// ids has a value once an SSE event with an ID (a line "id: …") went from the
	// server to a client: one the client can resume its stream from.
	ids chan struct{}
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, ids: make(chan struct{}, 1)}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { p.relay(c, u); c.Close() }()
		}
	}()
	return p
}

// relay copies what the server u sends to the client c, telling ids of each event
// ID it passes on.
func (p *cutProxy) relay(c, u net.Conn) {
	buf := make([]byte, 32<<10)
	var tail []byte // the end of the last read, for a line split across two
	for {
		n, err := u.Read(buf)
		if n > 0 {
			seen := append(tail, buf[:n]...)
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			if bytes.Contains(seen, []byte("\nid:")) {
				select {
				case p.ids <- struct{}{}:
				default:
				}
			}
			tail = append(tail[:0], seen[max(0, len(seen)-3):]...)
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A client whose connection drops while its run_task runs gets the answer: it
// resumes the call's stream (Last-Event-ID) on a new connection. The cut comes
// as an event with an ID reaches the client after the model was asked (the
// server's ping on the call's stream, every progress_interval), when the client
// reads: a cut at a fixed delay could fall while the client POSTs its answer to
// such a ping, and the Python SDK (mcp 2.3.0) ends its whole session with
// "Connection closed" when a POST fails (2 runs in 8 on a loaded machine).
func TestMCPSDKResumeAfterDrop(t *testing.T) {
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			m := newSDKModel(3 * time.Second)
			url := serveForSDK(t, m, `{"mcp_server": {"progress_interval": "500ms"}}`)
			base := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
			p := newCutProxy(t, base)
			done := make(chan struct{})
			cutter := make(chan struct{})
			defer func() { close(done); <-cutter }()
			go func() {
				defer close(cutter)
				select {
				case <-m.asked:
				case <-done:
					return
				}
				select {
				case <-p.ids: // an ID from before the model was asked
				default:
				}
				select {
				case <-p.ids:
					p.cut()
				case <-done:
					t.Errorf("no event with an ID reached the client while the task ran: the connection was not cut")
				}
			}()
			var out struct {
				Run   sdkOutcome
				Fatal any
			}
			sdkClient(t, lang, "http://"+p.ln.Addr().String()+"/mcp", "slow", nil, &out)
			if out.Fatal != nil || out.Run.Text != "slowly done: take your time" {
				t.Fatalf("run_task %v (%v)", out.Run, out.Fatal)
			}
		})
	}
}

// Many clients at once, each with a session of its own and a run_task.
func TestMCPSDKConcurrentClients(t *testing.T) {
	const clients = 24
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			url := serveForSDK(t, newSDKModel(0), "")
			var out struct {
				Results []sdkOutcome
				Fatal   any
			}
			sdkClient(t, lang, url, "concurrent", nil, &out, fmt.Sprint(clients))
			if out.Fatal != nil || len(out.Results) != clients {
				t.Fatalf("%+v", out)
			}
			sessions := map[string]bool{}
			for i, r := range out.Results {
				if r.Text != fmt.Sprintf("done: client %d", i) || r.IsError {
					t.Errorf("client %d: %v", i, r)
				}
				sessions[r.Session] = true
			}
			if len(sessions) != clients {
				t.Errorf("%d sessions for %d tasks", len(sessions), clients)
			}
		})
	}
}

// `node mcp`, started by each SDK's stdio client as an IDE starts it: the tools,
// and a task (the offline model's arithmetic).
func TestMCPSDKStdio(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			clearLLMEnv(t)
			dir := t.TempDir()
			// The test binary is the node (TestMain, TROUPE_CRASH_CHILD).
			spec, _ := json.Marshal(map[string]any{"command": exe,
				"args": []string{"mcp", "--model", "offline", "--data", filepath.Join(dir, "data")},
				"env":  map[string]string{"TROUPE_CRASH_CHILD": "1", "TROUPE_MODEL_LOG": filepath.Join(dir, "model.log")}})
			var out struct {
				Tools []string
				Run   sdkOutcome
				Fatal any
			}
			sdkClient(t, lang, "stdio:"+string(spec), "basic", nil, &out, "What is 2+3?")
			if out.Fatal != nil {
				t.Fatalf("%s client: %v", lang, out.Fatal)
			}
			// record is the test binary's own tool.
			if got := strings.Join(out.Tools, " "); got != "calculator clock record run_task task_result" {
				t.Errorf("tools %s", got)
			}
			if out.Run.IsError || !strings.Contains(out.Run.Text, "5") || out.Run.Session == "" {
				t.Errorf("run_task: %v", out.Run)
			}
		})
	}
}

// A TypeScript client whose request timeout (60 s by default; 2 s here) progress
// resets (onprogress, resetTimeoutOnProgress) waits for a task that runs longer:
// the node sends progress every progress_interval while it runs.
func TestMCPSDKTypeScriptProgressResetsTimeout(t *testing.T) {
	url := serveForSDK(t, newSDKModel(5*time.Second), `{"mcp_server": {"progress_interval": "500ms"}}`)
	var out struct {
		Run      sdkOutcome
		Progress int
		Fatal    any
	}
	sdkClient(t, "ts", url, "progress", nil, &out, "2000")
	if out.Fatal != nil || out.Run.Text != "slowly done: take your time" || out.Run.IsError {
		t.Fatalf("run_task %v (%v)", out.Run, out.Fatal)
	}
	if out.Progress < 3 {
		t.Errorf("%d progress notifications, want one at the start, one each interval, one at the end", out.Progress)
	}
}

// A run_task whose node restarts under it (killed, or stopped by SIGTERM) answers
// each SDK's client, with the SDK's defaults, with the task's result: the client
// resumes the call's stream (Last-Event-ID) once the node serves again, and the
// node answers with the result of the task it resumed, which runs once.
// A call of a tool other than run_task and task_result that a crash (SIGKILL) of
// the node cuts off answers, on each SDK's client with its defaults, the JSON-RPC
// error -32000 that says so: the node that serves next answers the resumed
// stream. A stop (SIGTERM) drains the call, or answers that error if it cuts it. The tool is a2a__self,
// the node's own agent over A2A, whose task takes a model call of 3 s.
func TestMCPSDKToolCallCutByRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	for _, lang := range sdkLangs {
		t.Run(lang, func(t *testing.T) {
			dir := t.TempDir()
			script := filepath.Join(dir, "script.json")
			if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[{"content":"answered"}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			addr := freeAddr(t)
			config := filepath.Join(dir, "troupe.json")
			if err := os.WriteFile(config, []byte(`{"a2a_agents": {"self": "http://`+addr+`/.well-known/agent-card.json"}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
			first := startChildAt(t, addr, dir, script, records, modelLog, "--config", config)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := sdkCommand(ctx, t, lang, "http://"+addr+"/mcp", "tool", "a2a__self", `{"message":"slow: cut"}`)
			var stdout strings.Builder
			stderr := &syncBuffer{}
			cmd.Stdout, cmd.Stderr = &stdout, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for len(countLines(t, modelLog, "")) == 0 { // the tool's task runs
				select {
				case <-ctx.Done():
					t.Fatalf("the model was never asked:\n%s\nclient:\n%s", first.stderr.String(), stderr.String())
				case <-time.After(10 * time.Millisecond):
				}
			}
			if err := first.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_, _ = first.cmd.Process.Wait()
			second := startChildAt(t, addr, dir, script, records, modelLog, "--config", config)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("client: %v\n%s", err, stderr.String())
			}
			var out struct {
				Run   sdkOutcome
				Fatal any
			}
			if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
				t.Fatalf("client printed %q: %v\n%s", stdout.String(), err, stderr.String())
			}
			if out.Fatal != nil || out.Run.Error == nil || out.Run.Error.Code != -32000 || !strings.Contains(out.Run.Error.Message, "cut off") {
				t.Fatalf("a2a__self cut by a crash: %s, want the JSON-RPC error -32000 saying it was cut off\nclient:\n%s\nfirst node:\n%s\nsecond node:\n%s",
					stdout.String(), stderr.String(), first.stderr.String(), second.stderr.String())
			}
		})
	}
}

func TestMCPSDKRunTaskThroughRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	for _, lang := range sdkLangs {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
			t.Run(lang+"/"+sig.String(), func(t *testing.T) {
				dir := t.TempDir()
				script := filepath.Join(dir, "script.json")
				if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[{"content":"done through the restart"}]}`), 0o644); err != nil {
					t.Fatal(err)
				}
				records, modelLog := filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt")
				// Each model call takes 3 s: the node stops during the first.
				addr := freeAddr(t)
				first := startChildAt(t, addr, dir, script, records, modelLog)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				cmd := sdkCommand(ctx, t, lang, "http://"+addr+"/mcp", "survive")
				var stdout strings.Builder
				stderr := &syncBuffer{}
				cmd.Stdout, cmd.Stderr = &stdout, stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				for len(countLines(t, modelLog, "")) == 0 {
					select {
					case <-ctx.Done():
						t.Fatalf("the model was never asked:\n%s", first.stderr.String())
					case <-time.After(10 * time.Millisecond):
					}
				}
				if err := first.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				for sig == syscall.SIGTERM && !strings.Contains(first.stderr.String(), "msg=stopped") {
					// The next node starts once this one has stopped.
					select {
					case <-ctx.Done():
						t.Fatalf("the node did not stop:\n%s", first.stderr.String())
					case <-time.After(10 * time.Millisecond):
					}
				}
				second := startChildAt(t, addr, dir, script, records, modelLog)
				if err := cmd.Wait(); err != nil {
					t.Fatalf("client: %v\n%s", err, stderr.String())
				}
				var out struct {
					Run   sdkOutcome
					Fatal any
				}
				if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
					t.Fatalf("client printed %q: %v\n%s", stdout.String(), err, stderr.String())
				}
				if out.Fatal != nil || out.Run.Text != "done through the restart" || out.Run.IsError {
					t.Fatalf("run_task through the restart: %v (%v)\nclient:\n%s\nfirst node:\n%s\nsecond node:\n%s",
						out.Run, out.Fatal, stderr.String(), first.stderr.String(), second.stderr.String())
				}
				// The model's calls are those of one task: the one the first node
				// asked, asked again by the node that resumed it (same key).
				if keys := countLines(t, modelLog, ""); len(keys) != 1 {
					t.Errorf("model calls %v: want those of one task", keys)
				}
			})
		}
	}
}
