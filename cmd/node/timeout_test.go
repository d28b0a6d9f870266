package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// holdingProvider points the node's model (LLM_* variables) at a fake
// OpenAI-compatible server that holds every chat completion: a request whose prompt
// says "released" is answered once release is closed; any other is held until its
// client goes away. seen receives each request's prompt as it arrives, gone the
// prompt of each request whose client went away (cancelled it or closed the
// connection) before it was answered.
func holdingProvider(t *testing.T) (seen, gone chan string, release chan struct{}) {
	t.Helper()
	seen, gone, release = make(chan string, 16), make(chan string, 16), make(chan struct{})
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		prompt := "held"
		if strings.Contains(string(body), "released") {
			prompt = "released"
		}
		seen <- prompt
		var answer <-chan struct{} // nil: never
		if prompt == "released" {
			answer = release
		}
		select {
		case <-answer:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, openaitest.CompletionJSON(messages.ChatMessage{Content: "the slow answer"}, messages.Usage{PromptTokens: 3, CompletionTokens: 3}))
		case <-r.Context().Done():
			gone <- prompt
		case <-stop:
		}
	}))
	useHeldServer(t, srv, stop, "sk-troupe-test-0123456789abcdefHOLD")
	return seen, gone, release
}

// receive receives from c, failing the test if nothing comes within a minute.
func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// runHeld runs node run on a prompt the holding provider never answers, with args
// before it, and checks that the model call failed on its timeout, want (as the
// error says it), and that the provider saw its request abandoned.
func runHeld(t *testing.T, gone <-chan string, want string, args ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append(append([]string{"run", "--data", t.TempDir(), "--stream", "off"}, args...), "held question"), &out, &errb, options{})
	if code == 0 {
		t.Fatalf("run %v: exit 0, want a failed task\n%s%s", args, out.String(), errb.String())
	}
	if text := out.String() + errb.String(); !strings.Contains(text, "model call timed out after "+want) {
		t.Fatalf("run %v: exit %d, the output does not say the model call timed out after %s:\n%s", args, code, want, text)
	}
	if p := receive(t, gone, "the held request to be abandoned"); p != "held" {
		t.Fatalf("the provider saw the %s request abandoned, want the held one", p)
	}
}

// --model-timeout bounds each model call: a call the provider holds fails after it,
// saying so, and its HTTP request is cancelled. With the default (2 minutes) a call
// held longer than that is still waiting: its task, started first, gets the answer
// once the provider gives it, after the first task's call was abandoned.
func TestModelTimeoutFlag(t *testing.T) {
	seen, gone, release := holdingProvider(t)
	slow := make(chan int, 1)
	var slowOut, slowErr bytes.Buffer
	go func() {
		slow <- run(context.Background(), []string{"run", "--data", t.TempDir(), "--stream", "off", "released question"}, &slowOut, &slowErr, options{})
	}()
	if p := receive(t, seen, "the default task's model call"); p != "released" {
		t.Fatalf("the provider saw a %s request first", p)
	}

	runHeld(t, gone, "300ms", "--model-timeout", "300ms")
	select {
	case p := <-gone:
		t.Fatalf("with the default model timeout, the %s request was abandoned", p)
	case code := <-slow:
		t.Fatalf("with the default model timeout, the task ended (exit %d) before its call was answered\n%s%s", code, slowOut.String(), slowErr.String())
	default:
	}
	close(release)
	if code := receive(t, slow, "the default task"); code != 0 || !strings.Contains(slowOut.String(), "answer: the slow answer") {
		t.Fatalf("the default task: exit %d\n%s%s", code, slowOut.String(), slowErr.String())
	}
}

// The flag beats TROUPE_MODEL_TIMEOUT, which beats the file's model_timeout: the
// error names the timeout that applied.
func TestModelTimeoutPrecedence(t *testing.T) {
	_, gone, _ := holdingProvider(t)
	file := func(body string) string {
		path := filepath.Join(t.TempDir(), "troupe.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Run("file", func(t *testing.T) {
		runHeld(t, gone, "300ms", "--config", file(`{"model_timeout": "300ms"}`))
	})
	t.Run("env over file", func(t *testing.T) {
		t.Setenv("TROUPE_MODEL_TIMEOUT", "350ms")
		runHeld(t, gone, "350ms", "--config", file(`{"model_timeout": "250ms"}`))
	})
	t.Run("flag over env", func(t *testing.T) {
		t.Setenv("TROUPE_MODEL_TIMEOUT", "250ms")
		runHeld(t, gone, "400ms", "--model-timeout", "400ms")
	})
}

// Bad call timeouts are refused before anything starts (exit 2, no data directory),
// naming the flag, variable or field and quoting the value: a newline is escaped and
// a huge value cut.
func TestCallTimeoutsAreValidated(t *testing.T) {
	clearLLMEnv(t)
	for _, v := range []string{"TROUPE_MODEL_TIMEOUT", "TROUPE_TOOL_TIMEOUT", "TROUPE_EFFECT_REISSUE"} {
		t.Setenv(v, "")
	}
	huge := strings.Repeat("9", 5000) + "s"
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want []string
	}{
		{"model not a duration", []string{"--model-timeout", "abc"}, nil, "", []string{"--model-timeout", `"abc"`, "not a duration", "100ms to 1h"}},
		{"model negative", []string{"--model-timeout", "-1s"}, nil, "", []string{"--model-timeout", `"-1s"`, "not positive"}},
		{"model zero", []string{"--model-timeout", "0"}, nil, "", []string{"--model-timeout", `"0"`, "not positive"}},
		{"model too long", []string{"--model-timeout", "2h"}, nil, "", []string{"--model-timeout", `"2h"`, "out of range", "100ms to 1h"}},
		{"model newline", []string{"--model-timeout", "1s\nerror: forged"}, nil, "", []string{"--model-timeout", `"1s\nerror: forged"`, "not a duration"}},
		{"model huge", []string{"--model-timeout", huge}, nil, "", []string{"--model-timeout", "(5001 bytes)", "not a duration"}},
		{"tool not a duration", []string{"--tool-timeout", "abc"}, nil, "", []string{"--tool-timeout", `"abc"`, "not a duration"}},
		{"tool too long", []string{"--tool-timeout", "2h"}, nil, "", []string{"--tool-timeout", `"2h"`, "100ms to 1h"}},
		{"tool zero", []string{"--tool-timeout", "0"}, nil, "", []string{"--tool-timeout", `"0"`, "not positive"}},
		{"reissue not a duration", []string{"--effect-reissue", "abc"}, nil, "", []string{"--effect-reissue", `"abc"`, "not a duration", "100ms to 2h"}},
		{"reissue below the default model timeout", []string{"--effect-reissue", "90s"}, nil, "", []string{"--effect-reissue", `"90s"`, "shorter than the model timeout, 2m", "costs a message", "at least 2m"}},
		{"reissue below the tool timeout", []string{"--tool-timeout", "10m", "--effect-reissue", "5m"}, nil, "", []string{"--effect-reissue", `"5m"`, "shorter than the tool timeout, 10m"}},
		{"env", nil, map[string]string{"TROUPE_TOOL_TIMEOUT": "-5s"}, "", []string{"TROUPE_TOOL_TIMEOUT", `"-5s"`, "not positive"}},
		{"env reissue", []string{"--model-timeout", "5m"}, map[string]string{"TROUPE_EFFECT_REISSUE": "3m"}, "", []string{"TROUPE_EFFECT_REISSUE", `"3m"`, "shorter than the model timeout, 5m"}},
		{"file", nil, nil, `{"model_timeout": "2h"}`, []string{"model_timeout", `"2h"`, "100ms to 1h"}},
		{"file newline", nil, nil, `{"tool_timeout": "1s\nx"}`, []string{"tool_timeout", `"1s\nx"`, "not a duration"}},
		{"file reissue", nil, nil, `{"effect_reissue": "1m"}`, []string{"effect_reissue", `"1m"`, "shorter than the model timeout, 2m"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			args := append([]string{"run", "--model", "offline", "--data", data}, c.args...)
			if c.file != "" {
				path := filepath.Join(dir, "troupe.json")
				if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", path)
				c.want = append(c.want, path)
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), append(args, "1+1"), &out, &errb, options{})
			if code != 2 {
				t.Fatalf("exit %d, want 2\n%s%s", code, out.String(), errb.String())
			}
			msg := errb.String()
			for _, want := range c.want {
				if !strings.Contains(msg, want) {
					t.Errorf("the error does not say %q:\n%s", want, msg)
				}
			}
			if strings.Count(msg, "\n") != 1 || len(msg) > 600 {
				t.Errorf("the error is not one short line:\n%s", msg)
			}
			if out.Len() != 0 {
				t.Errorf("run printed %q", out.String())
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the data directory was made: %v", err)
			}
		})
	}
	// Good values, and a reissue interval at the longer timeout, are accepted.
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--model", "offline", "--data", t.TempDir(),
		"--model-timeout", "5m", "--tool-timeout", "45s", "--effect-reissue", "5m", "1+1"}, &out, &errb, options{}); code != 0 {
		t.Fatalf("good timeouts: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// A model timeout longer than the provider client's default per-request timeout
// (llm.timeout, LLM_TIMEOUT: 2m), with that left unset, raises it to the model
// timeout, saying so (at Info: with -v): a slow model is not cut at 2 minutes and
// retried. One set on purpose, shorter, is kept (retried within the model timeout)
// and nothing is said; nor is anything with a model timeout below the default.
func TestModelTimeoutRaisesTheProviderTimeout(t *testing.T) {
	for _, c := range []struct {
		llmTimeout, modelTimeout string
		follows                  bool
	}{
		{"", "3m", true},
		{"", "90s", false},
		{"45s", "3m", false},
	} {
		streamingProvider(t, "sk-troupe-test-0123456789abcdefWARN", "fine")
		t.Setenv("LLM_TIMEOUT", c.llmTimeout)
		t.Setenv("TROUPE_MODEL_TIMEOUT", "")
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"run", "-v", "--data", t.TempDir(), "--stream", "off", "--model-timeout", c.modelTimeout, "hi"}, &out, &errb, options{})
		if code != 0 {
			t.Fatalf("%+v: exit %d\n%s%s", c, code, out.String(), errb.String())
		}
		said := strings.Contains(errb.String(), "level=INFO") && strings.Contains(errb.String(), "it follows the model timeout (--model-timeout), 3m0s, instead of its default 2m0s")
		if said != c.follows {
			t.Errorf("%+v: said the provider timeout follows the model timeout: %v, want %v:\n%s", c, said, c.follows, errb.String())
		}
		if strings.Contains(errb.String(), "level=WARN") {
			t.Errorf("%+v: a warning:\n%s", c, errb.String())
		}
	}
}

// A fallback ends each request at the node's per-request timeout, the config file's
// llm.timeout (1s here), not at the client's default (2m): the provider sees the
// fallback's held request abandoned and retried well within the model timeout. The
// primary (a script) runs out at its second step, so the gateway falls back; the
// fallback ("auto") reaches the fake server of the LLM_* variables.
func TestFallbackTakesTheConfiguredProviderTimeout(t *testing.T) {
	seen, gone := make(chan int, 16), make(chan int, 16)
	stop := make(chan struct{})
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		i := int(n.Add(1))
		seen <- i
		select {
		case <-r.Context().Done():
			gone <- i
		case <-stop:
		}
	}))
	useHeldServer(t, srv, stop, "sk-troupe-test-0123456789abcdefFALL")
	dir := t.TempDir()
	path, script := filepath.Join(dir, "troupe.json"), filepath.Join(dir, "script.json")
	if err := os.WriteFile(path, []byte(`{"llm": {"timeout": "1s"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(`{"name": "short-script", "steps": [{"tool_calls": [{"id": "a", "name": "clock", "arguments": "{}"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--data", t.TempDir(), "--stream", "off", "--model", "scripted:" + script,
			"--model-timeout", "20s", "--fallback", "auto", "held question"}, &out, &errb, options{})
	}()
	select {
	case <-seen:
	case code := <-done:
		t.Fatalf("run ended (exit %d) before the fallback was called\n%s%s", code, out.String(), errb.String())
	}
	select {
	case <-gone:
	case code := <-done:
		t.Fatalf("run ended (exit %d) before the fallback's request was abandoned\n%s%s", code, out.String(), errb.String())
	}
	select {
	case <-seen: // the retry: the request ended at llm.timeout, within the model timeout
	case code := <-done:
		t.Fatalf("run ended (exit %d) without retrying the fallback's request: it was cut at the model timeout, not at llm.timeout\n%s%s", code, out.String(), errb.String())
	}
	cancel()
	receive(t, done, "run to return")
}

// useHeldServer points the node's model (LLM_* variables, with key) at srv, a fake
// server whose held requests end when stop is closed (at the test's end, with its
// connections), and clears the variables of the node's timeouts.
func useHeldServer(t *testing.T, srv *httptest.Server, stop chan struct{}, key string) {
	t.Helper()
	t.Cleanup(func() {
		close(stop)
		srv.CloseClientConnections()
		srv.Close()
	})
	clearLLMEnv(t)
	for _, v := range []string{"LLM_TIMEOUT", "TROUPE_STREAM", "TROUPE_MODEL_TIMEOUT", "TROUPE_TOOL_TIMEOUT", "TROUPE_EFFECT_REISSUE"} {
		t.Setenv(v, "")
	}
	t.Setenv("LLM_API_KEY", key)
	t.Setenv("LLM_BASE_URL", srv.URL+"/v1")
	t.Setenv("LLM_MODEL", "slow-model")
}
