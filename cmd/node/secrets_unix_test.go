//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A token added to the tokens file and taken on SIGHUP is a secret from then on,
// as those read at start are: a task that holds it is recorded, answered and
// logged without it. A token the reload dropped stays a secret too.
func TestReloadedAPITokenStaysOutOfEvents(t *testing.T) {
	clearLLMEnv(t)
	// The test's own SIGHUP handler: the signals it sends never end the test
	// binary, whether or not the node listens yet.
	guard := make(chan os.Signal, 16)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)
	const startToken, addedToken = "apitoken-at-start-Q2W4E6R8", "apitoken-added-T1Y3U5I7O9"
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte(startToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-v", "--model", "offline", "--data", data, "--http", addr, "--auth-tokens-file", file}, &out, &errb, options{})
	}()
	call := func(token, method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	waitFor(t, 30*time.Second, "the node serving", func() bool { code, _ := call(startToken, "GET", "/v1/sessions", ""); return code == 200 })
	if err := os.WriteFile(file, []byte("# rotated\n"+addedToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the added token taken on SIGHUP", func() bool {
		_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
		code, _ := call(addedToken, "GET", "/v1/sessions", "")
		return code == 200
	})
	if code, body := call(addedToken, "POST", "/v1/tasks", `{"input": "echo my tokens `+addedToken+` and `+startToken+`", "session_id": "s-reloaded"}`); code != 202 {
		t.Fatalf("POST /v1/tasks: %d %s", code, body)
	}
	var answer string
	waitFor(t, 30*time.Second, "the task completed", func() bool {
		_, answer = call(addedToken, "GET", "/v1/sessions/s-reloaded", "")
		var v map[string]any
		_ = json.Unmarshal([]byte(answer), &v)
		return v["status"] == "completed"
	})
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not stop")
	}
	if !strings.Contains(errb.String(), "auth tokens reloaded") || !strings.Contains(answer, "[REDACTED]") {
		t.Fatalf("the reload should be logged and the answer redacted:\n%s\n%s", answer, errb.String())
	}
	haystacks := dataFiles(t, data)
	haystacks["answer"], haystacks["logs"], haystacks["stdout"] = []byte(answer), []byte(errb.String()), []byte(out.String())
	for name, b := range haystacks {
		for _, tok := range []string{addedToken, startToken} {
			if bytes.Contains(b, []byte(tok)) {
				t.Errorf("%s holds the token %s", name, tok)
			}
		}
	}
}
