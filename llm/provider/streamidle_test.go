package provider_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/messages"
)

// stallsMidAnswer is an OpenAI-compatible server whose streams send the start
// of an answer and then nothing, the connection open.
func stallsMidAnswer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("data: " + openaitest.RoleChunk() + "\n\ndata: " + openaitest.ContentChunk("Hel") + "\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The idle bound of a stream is llm.stream_idle_timeout in the config file, or
// LLM_STREAM_IDLE_TIMEOUT (which wins): the model built from it fails a stream
// that stalls mid-answer at that bound, not at the minute of the default.
func TestStreamIdleTimeoutFromFileAndEnvironment(t *testing.T) {
	srv := stallsMidAnswer(t)
	for _, c := range []struct {
		name, file string
		env        func(string) string
	}{
		{"llm.stream_idle_timeout", `"stream_idle_timeout": "1s"`, envOf()},
		{"LLM_STREAM_IDLE_TIMEOUT", `"stream_idle_timeout": "30m"`, envOf("LLM_STREAM_IDLE_TIMEOUT", "1s")},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := provider.Load(writeFile(t, `{"llm": {"provider": "openai-compatible", "base_url": "`+srv.URL+`",
				"model": "m", `+c.file+`}}`), c.env)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.StreamIdleTimeout != time.Second {
				t.Fatalf("StreamIdleTimeout %s, want 1s", cfg.StreamIdleTimeout)
			}
			r, err := provider.Detect(deadline(t), cfg, c.env, nil)
			if err != nil {
				t.Fatal(err)
			}
			m, err := r.NewModel()
			if err != nil {
				t.Fatal(err)
			}
			ctx := deadline(t)
			_, err = m.(llm.Streamer).Stream(ctx, llm.Request{Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}}, nil)
			if !errors.Is(err, openai.ErrStalledStream) || ctx.Err() != nil {
				t.Fatalf("err = %v, want ErrStalledStream at the configured bound", err)
			}
		})
	}
}

// 0 turns the bound off; a bad value is refused, naming the setting.
func TestStreamIdleTimeoutValues(t *testing.T) {
	for _, v := range []string{"0", "0s"} {
		cfg, err := provider.Load(writeFile(t, `{"llm": {"stream_idle_timeout": "`+v+`"}}`), envOf())
		if err != nil || cfg.StreamIdleTimeout != openai.StreamIdleOff {
			t.Errorf("llm.stream_idle_timeout %q: %s %v, want off", v, cfg.StreamIdleTimeout, err)
		}
		cfg, err = provider.Load("", envOf("LLM_STREAM_IDLE_TIMEOUT", v))
		if err != nil || cfg.StreamIdleTimeout != openai.StreamIdleOff {
			t.Errorf("LLM_STREAM_IDLE_TIMEOUT=%q: %s %v, want off", v, cfg.StreamIdleTimeout, err)
		}
		cfg.Provider, cfg.BaseURL, cfg.Model = "openai-compatible", "http://127.0.0.1:1/v1", "m"
		r, err := provider.Detect(deadline(t), cfg, envOf(), func(context.Context, string) bool { return false })
		if err != nil || r.StreamIdleTimeout != openai.StreamIdleOff {
			t.Errorf("resolved %q: %s %v, want off", v, r.StreamIdleTimeout, err)
		}
	}
	for _, v := range []string{"-1s", "soon", "10ms", "2h", "1"} {
		_, err := provider.Load(writeFile(t, `{"llm": {"stream_idle_timeout": "`+v+`"}}`), envOf())
		if err == nil || !strings.Contains(err.Error(), "llm.stream_idle_timeout") || !strings.Contains(err.Error(), v) {
			t.Errorf("llm.stream_idle_timeout %q: %v, want an error naming the setting and the value", v, err)
		}
		_, err = provider.Load("", envOf("LLM_STREAM_IDLE_TIMEOUT", v))
		if err == nil || !strings.Contains(err.Error(), "LLM_STREAM_IDLE_TIMEOUT") || !strings.Contains(err.Error(), v) {
			t.Errorf("LLM_STREAM_IDLE_TIMEOUT=%q: %v, want an error naming the variable and the value", v, err)
		}
	}
	if _, err := provider.Load(writeFile(t, `{"llm": {"stream_idle_timeout": 60}}`), envOf()); err == nil {
		t.Error("a number of llm.stream_idle_timeout was taken")
	}
}

// A fallback (or an agent's model) takes the primary's idle bound through
// Config.TimeoutEnv, off included.
func TestFallbackTakesThePrimaryStreamIdleTimeout(t *testing.T) {
	env := envOf("OPENAI_API_KEY", "sk-openai-0123456789abcdefOPENAI")
	for _, c := range []struct {
		file string
		want time.Duration
	}{
		{`"stream_idle_timeout": "5m"`, 5 * time.Minute},
		{`"stream_idle_timeout": "0"`, openai.StreamIdleOff},
		{`"timeout": "45s"`, 0},
	} {
		cfg, err := provider.Load(writeFile(t, `{"llm": {`+c.file+`}}`), env)
		if err != nil {
			t.Fatal(err)
		}
		r, err := provider.ResolveFallback(deadline(t), "openai", cfg.TimeoutEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		if r.StreamIdleTimeout != c.want {
			t.Errorf("%s: the fallback's StreamIdleTimeout %s, want %s", c.file, r.StreamIdleTimeout, c.want)
		}
	}
}
