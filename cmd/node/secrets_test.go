package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/mcp/mcptest"
	"github.com/troupe-run/troupe/messages"
)

// A real `node run` against an OpenAI-compatible server: the API key and a bearer
// token the user pasted into the task must appear in no event, no database file and
// no log line, even when the model echoes them.
func TestNoSecretInEventsOrLogs(t *testing.T) {
	const key = "sk-troupe-test-0123456789abcdefSECRET"
	const token = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu.AbCdEfGhIjKlMnOp"
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Completion(messages.ChatMessage{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}}, messages.Usage{PromptTokens: 50, CompletionTokens: 10}),
		openaitest.Completion(messages.ChatMessage{Content: "42 (and your key " + key + " works)"}, messages.Usage{PromptTokens: 70, CompletionTokens: 12}),
	))
	for _, v := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "DASHSCOPE_API_KEY", "ZHIPU_API_KEY", "MOONSHOT_API_KEY", "SILICONFLOW_API_KEY", "MODELSCOPE_API_KEY", "TROUPE_LLM_PROVIDER"} {
		t.Setenv(v, "")
	}
	t.Setenv("LLM_API_KEY", key)
	t.Setenv("LLM_BASE_URL", srv.URL+"/v1")
	t.Setenv("LLM_MODEL", "fake-model")
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "-v", "--data", dir, "What is 6*7? My token: " + token}, &out, &errb, options{})
	if code != 0 || !strings.Contains(out.String(), "answer: 42") {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || !strings.Contains(reqs[0].Header.Get("Authorization"), key) {
		t.Fatalf("the server must have been called with the key: %d requests", len(reqs))
	}
	if strings.Contains(string(reqs[0].Body), "eyJhbGciOiJIUzI1NiJ9") {
		t.Fatal("the user's token reached the model")
	}
	haystacks := map[string][]byte{"stdout": out.Bytes(), "logs": errb.Bytes()}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			haystacks[f] = b
		}
	}
	for name, b := range haystacks {
		for _, secret := range []string{key, "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s contains a secret", name)
			}
		}
	}
	if !strings.Contains(out.String(), "[REDACTED]") {
		t.Fatalf("the echoed key should show as [REDACTED]:\n%s", out.String())
	}
}

// `ZHIPU_API_KEY=… node run --model offline "echo $ZHIPU_API_KEY"`: the key of a
// provider that is not even in use must appear in no output and no byte of the data
// directory — nor must any other key variable's value, shaped like a key or not.
func TestEveryKeyVariableIsRedactedWhateverTheModel(t *testing.T) {
	clearLLMEnv(t)
	keys := map[string]string{
		"ZHIPU_API_KEY":    "3f9a0c2e8b7d41f6a5c3e2d1b0a98765.Zk4PqR7sT2uV9wXy",
		"MOONSHOT_API_KEY": "moonshot-plain-value-6c1f", // shaped like nothing: redacted by value
		"LLM_API_KEY":      "generic-plain-value-77aa",
		"HOUSE_KEY":        "house-plain-value-91bd", // named by llm.api_key_env
	}
	var input strings.Builder
	input.WriteString("echo")
	for k, v := range keys {
		t.Setenv(k, v)
		input.WriteString(" " + v)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "troupe.json")
	if err := os.WriteFile(config, []byte(`{"llm": {"api_key_env": "HOUSE_KEY"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "-v", "--config", config, "--model", "offline", "--data", data, input.String()}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	haystacks := map[string][]byte{"stdout": out.Bytes(), "logs": errb.Bytes()}
	err := filepath.WalkDir(data, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		haystacks[path] = b
		return err
	})
	if err != nil || len(haystacks) < 3 {
		t.Fatalf("data directory: %v (%d files)", err, len(haystacks)-2)
	}
	for name, b := range haystacks {
		for k, v := range keys {
			if n := bytes.Count(b, []byte(v)); n > 0 {
				t.Errorf("%s holds %s %d times", name, k, n)
			}
		}
	}
	if !strings.Contains(out.String(), "[REDACTED]") {
		t.Fatalf("the echoed keys should show as [REDACTED]:\n%s", out.String())
	}
}

// dataFiles reads every file under dir, for a test that greps them for secrets.
func dataFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files[path] = b
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("data directory %s: %v (%d files)", dir, err, len(files))
	}
	return files
}

// The MCP servers' secrets stay out of the node's log lines, at debug level too: a
// stdio server that prints its token and its database URL on stderr (which the node
// logs), and a URL server whose ?api_key= and password a connection error names.
func TestMCPServerSecretsStayOutOfTheLogs(t *testing.T) {
	clearLLMEnv(t)
	secrets := map[string]string{
		"the stdio server's token":             "stdio-token-P9O8I7U6Y5T4",
		"the stdio server's database password": "dbpass-L1K2J3H4",
		"the URL's api_key":                    "urlkey-Z1X2C3V4B5N6",
		"the URL's password":                   "urlpass-Q2W3E4R5",
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "troupe.json")
	body := `{"mcp_servers": {
		"local": {"command": "sh", "args": ["-c", "echo \"starting with $MY_SERVICE_TOKEN on $DATABASE_URL\" >&2; exit 3"],
			"env": {"MY_SERVICE_TOKEN": "stdio-token-P9O8I7U6Y5T4", "DATABASE_URL": "postgres://app:dbpass-L1K2J3H4@db.internal/app"}},
		"remote": {"url": "http://me:urlpass-Q2W3E4R5@127.0.0.1:1/mcp?api_key=urlkey-Z1X2C3V4B5N6"}}}`
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "-v", "--config", config, "--model", "offline", "--data", filepath.Join(dir, "data"), "What is 2+3?"}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	logs := errb.String()
	if !strings.Contains(logs, "mcp server stderr") || !strings.Contains(logs, `mcp_server=remote`) {
		t.Fatalf("the servers' lines should be logged:\n%s", logs)
	}
	for what, v := range secrets {
		if strings.Contains(logs, v) {
			t.Errorf("the log holds %s:\n%s", what, logs)
		}
	}
	if !strings.Contains(logs, "starting with [REDACTED] on postgres://app:[REDACTED]@db.internal/app") {
		t.Errorf("the stderr line should show with its secrets redacted:\n%s", logs)
	}
}

// A gateway's key given in llm.extra_headers is as secret as the API key: a provider
// (or the gateway) that echoes the request's headers in its error must not put it in
// the task's failure, its events or the log. An X-Title is no secret and stays.
func TestExtraHeaderKeyStaysOutOfEvents(t *testing.T) {
	clearLLMEnv(t)
	const gatewayKey = "gwkey-H8J6K4L2M0N9"
	srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		return openaitest.Error(400, "bad request with X-Gateway-Key: "+r.Header.Get("X-Gateway-Key")+", X-Title: "+r.Header.Get("X-Title"))
	})
	dir := t.TempDir()
	config := filepath.Join(dir, "troupe.json")
	body := `{"llm": {"base_url": "` + srv.URL + `", "api_key_env": "HOUSE_KEY", "model": "fake-model",
		"extra_headers": {"X-Gateway-Key": "` + gatewayKey + `", "X-Title": "Troupe Secrets Test"}}}`
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOUSE_KEY", "house-key-0123456789")
	data := filepath.Join(dir, "data")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "-v", "--config", config, "--data", data, "hello"}, &out, &errb, options{})
	if code != 1 || len(srv.Requests()) == 0 || srv.Requests()[0].Header.Get("X-Gateway-Key") != gatewayKey {
		t.Fatalf("run: %d, %d requests\n%s\n%s", code, len(srv.Requests()), out.String(), errb.String())
	}
	haystacks := dataFiles(t, data)
	haystacks["stdout"], haystacks["logs"] = out.Bytes(), errb.Bytes()
	for name, b := range haystacks {
		if bytes.Contains(b, []byte(gatewayKey)) {
			t.Errorf("%s holds the gateway's key", name)
		}
	}
	if !strings.Contains(out.String(), "X-Gateway-Key: [REDACTED], X-Title: Troupe Secrets Test") {
		t.Fatalf("the failure should show the key redacted and the title as it is:\n%s", out.String())
	}
}

// The node's API tokens are secrets it knows: a task that holds one (pasted by its
// user, or echoed by a tool) is recorded without it.
func TestAPITokenStaysOutOfEvents(t *testing.T) {
	clearLLMEnv(t)
	const token = "apitoken-W2E4R6T8Y0U1I3O5"
	t.Setenv("TROUPE_AUTH_TOKENS", token)
	dir := t.TempDir()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--model", "offline", "--data", dir, "--http", addr}, &out, &errb, options{})
	}()
	call := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	waitFor(t, 30*time.Second, "the node serving", func() bool { code, _ := call("GET", "/healthz", ""); return code == 200 })
	if code, v := call("POST", "/v1/tasks", `{"input": "echo my token `+token+`", "session_id": "s-token"}`); code != 202 {
		t.Fatalf("POST /v1/tasks: %d %v", code, v)
	}
	waitFor(t, 30*time.Second, "the task completed", func() bool {
		_, v := call("GET", "/v1/sessions/s-token", "")
		return v["status"] == "completed"
	})
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not stop")
	}
	for name, b := range dataFiles(t, dir) {
		if bytes.Contains(b, []byte(token)) {
			t.Errorf("%s holds the API token", name)
		}
	}
}

// An MCP server's OAuth tokens, obtained while the node runs, are secrets like
// the configured ones: a server that echoes its caller's token (in a tool's
// result, in a tool's error, in the error that refused a connection) puts it in
// no event, no answer and no log line of node serve.
func TestMCPOAuthTokensStayOutOfEventsAndLogs(t *testing.T) {
	clearLLMEnv(t)
	srv := mcptest.EchoingOAuthServer(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "troupe.json")
	body := `{"mcp_servers": {"echoing": {"url": "` + srv.URL + `/mcp", "oauth": {"redirect_url": "` + mcptest.RedirectURL + `"}}}}`
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "echoing__whoami", Arguments: "{}"}}},
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c2", Name: "echoing__admin", Arguments: "{}"}}},
		llm.ScriptStep{Content: "done"})
	data := filepath.Join(dir, "data")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-v", "--config", config, "--model", "scripted:" + script, "--data", data, "--http", addr}, &out, &errb, options{})
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	// The server refuses the first connection, naming the token; the node connects again.
	waitFor(t, 30*time.Second, "the MCP server connected", func() bool { return strings.Contains(errb.String(), `msg="mcp server connected"`) })
	resp, err := http.Post("http://"+addr+"/v1/tasks", "application/json", strings.NewReader(`{"input": "who am I?", "session_id": "s-oauth"}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("POST /v1/tasks: %v %v", resp, err)
	}
	resp.Body.Close()
	var answer, events string
	waitFor(t, 30*time.Second, "the task completed", func() bool {
		_, answer = get("/v1/sessions/s-oauth")
		return strings.Contains(answer, `"status":"completed"`)
	})
	_, events = get("/v1/sessions/s-oauth/events")
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not stop")
	}
	logs := errb.String()
	if !strings.Contains(events, "you are [REDACTED]") || !strings.Contains(events, "the token [REDACTED] lacks the scope admin") ||
		!strings.Contains(logs, "no session yet for [REDACTED]") {
		t.Fatalf("the server's echoes should be recorded and logged redacted:\n%s\n%s", events, logs)
	}
	haystacks := dataFiles(t, data)
	haystacks["answer"], haystacks["events"], haystacks["logs"], haystacks["stdout"] = []byte(answer), []byte(events), []byte(logs), []byte(out.String())
	for name, b := range haystacks {
		for _, tok := range []string{mcptest.FirstAccessToken, mcptest.FirstRefreshToken, mcptest.AccessToken, mcptest.RefreshToken, mcptest.DynamicClientSecret} {
			if bytes.Contains(b, []byte(tok)) {
				t.Errorf("%s holds %s", name, tok)
			}
		}
	}
}
