package provider_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/messages"
)

func deadline(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// envOf is a fake environment.
func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// probes records which base URLs were probed and answers true for those in up.
type probes struct {
	mu     sync.Mutex
	asked  []string
	answer map[string]bool
}

func (p *probes) probe(_ context.Context, base string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, base)
	return p.answer[base]
}

func noLocal() provider.Probe { return (&probes{}).probe }

func detect(t *testing.T, env func(string) string) provider.Resolved {
	t.Helper()
	r, err := provider.Detect(deadline(t), provider.DefaultConfig(), env, noLocal())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDetectEveryProviderFromItsKey(t *testing.T) {
	cases := []struct {
		env, provider, baseURL, model string
	}{
		{"OPENAI_API_KEY", "openai", "https://api.openai.com/v1", "gpt-4o-mini"},
		{"DEEPSEEK_API_KEY", "deepseek", "https://api.deepseek.com/v1", "deepseek-chat"},
		{"DASHSCOPE_API_KEY", "qwen", "https://dashscope.aliyuncs.com/compatible-mode/v1", "qwen-plus"},
		{"ZHIPU_API_KEY", "zhipu", "https://open.bigmodel.cn/api/paas/v4", "glm-4-flash"},
		{"MOONSHOT_API_KEY", "moonshot", "https://api.moonshot.cn/v1", "moonshot-v1-8k"},
		{"SILICONFLOW_API_KEY", "siliconflow", "https://api.siliconflow.cn/v1", "Qwen/Qwen2.5-7B-Instruct"},
		{"MODELSCOPE_API_KEY", "modelscope", "https://api-inference.modelscope.cn/v1", "Qwen/Qwen2.5-7B-Instruct"},
	}
	if n := len(provider.Providers()); n != len(cases)+2 {
		t.Fatalf("%d providers: every keyed provider needs a case here", n)
	}
	for _, c := range cases {
		t.Run(c.provider, func(t *testing.T) {
			r := detect(t, envOf(c.env, "key-"+c.provider))
			if r.Provider != c.provider || r.BaseURL != c.baseURL || r.Model != c.model || r.APIKey != "key-"+c.provider {
				t.Fatalf("got %+v (key %q)", r, r.APIKey)
			}
			if !strings.Contains(r.Reason, c.env) {
				t.Fatalf("reason %q does not name %s", r.Reason, c.env)
			}
			// The model and embedding model can be overridden.
			r = detect(t, envOf(c.env, "k", "LLM_MODEL", "custom", "LLM_EMBEDDING_MODEL", "emb"))
			if r.Provider != c.provider || r.Model != "custom" || r.EmbeddingModel != "emb" {
				t.Fatalf("override: %+v", r)
			}
			// Explicitly naming the provider finds the same key.
			r, err := provider.Detect(deadline(t), provider.DefaultConfig(), envOf("TROUPE_LLM_PROVIDER", c.provider, c.env, "k2"), noLocal())
			if err != nil || r.Provider != c.provider || r.APIKey != "k2" {
				t.Fatalf("explicit: %+v %v", r, err)
			}
		})
	}
}

func TestDetectKeyOrder(t *testing.T) {
	// Keys are consulted in table order: OpenAI before DeepSeek before Moonshot.
	r := detect(t, envOf("MOONSHOT_API_KEY", "m", "DEEPSEEK_API_KEY", "d"))
	if r.Provider != provider.DeepSeek {
		t.Fatalf("%v", r)
	}
	// An explicit provider beats key order.
	r = detect(t, envOf("OPENAI_API_KEY", "o", "MOONSHOT_API_KEY", "m", "TROUPE_LLM_PROVIDER", "kimi"))
	if r.Provider != provider.Moonshot || r.APIKey != "m" {
		t.Fatalf("%v", r)
	}
}

func TestDetectGenericVariables(t *testing.T) {
	cases := []struct {
		name     string
		env      []string
		provider string
		baseURL  string
		model    string
		key      string
	}{
		{"known host", []string{"LLM_API_KEY", "g", "LLM_BASE_URL", "https://api.deepseek.com/v1"}, "deepseek", "https://api.deepseek.com/v1", "deepseek-chat", "g"},
		{"known host, other region", []string{"LLM_API_KEY", "g", "LLM_BASE_URL", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", "LLM_MODEL", "qwen-max"}, "qwen", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", "qwen-max", "g"},
		{"unknown host", []string{"LLM_API_KEY", "g", "LLM_BASE_URL", "https://llm.internal.example/v1", "LLM_MODEL", "house-model"}, "openai-compatible", "https://llm.internal.example/v1", "house-model", "g"},
		{"key alone means OpenAI", []string{"LLM_API_KEY", "g"}, "openai", "https://api.openai.com/v1", "gpt-4o-mini", "g"},
		// A provider key is never sent to another provider's host: OPENAI_API_KEY is
		// ignored when the base URL is DeepSeek's.
		{"provider key for another host", []string{"OPENAI_API_KEY", "o", "LLM_API_KEY", "g", "LLM_BASE_URL", "https://api.deepseek.com/v1"}, "deepseek", "https://api.deepseek.com/v1", "deepseek-chat", "g"},
		{"provider key for its own host", []string{"DEEPSEEK_API_KEY", "d", "LLM_BASE_URL", "https://api.deepseek.com/v1"}, "deepseek", "https://api.deepseek.com/v1", "deepseek-chat", "d"},
		// Host inference with no key at all: local servers by port.
		{"ollama by port", []string{"LLM_BASE_URL", "http://localhost:11434/v1"}, "ollama", "http://localhost:11434/v1", "llama3.2", ""},
		{"vllm by port", []string{"LLM_BASE_URL", "http://127.0.0.1:8000/v1", "LLM_MODEL", "Qwen/Qwen2.5-0.5B-Instruct"}, "vllm", "http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-0.5B-Instruct", ""},
		{"keyless unknown host", []string{"LLM_BASE_URL", "http://10.0.0.5:9000/v1", "LLM_MODEL", "m"}, "openai-compatible", "http://10.0.0.5:9000/v1", "m", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := detect(t, envOf(c.env...))
			if r.Provider != c.provider || r.BaseURL != c.baseURL || r.Model != c.model || r.APIKey != c.key {
				t.Fatalf("got %+v key %q", r, r.APIKey)
			}
		})
	}
}

func TestDetectRefusesUnusableSettings(t *testing.T) {
	for name, env := range map[string][]string{
		"provider without key":        {"TROUPE_LLM_PROVIDER", "deepseek"},
		"unknown provider":            {"TROUPE_LLM_PROVIDER", "acme"},
		"unknown host without model":  {"LLM_API_KEY", "g", "LLM_BASE_URL", "https://llm.internal.example/v1"},
		"compatible without base url": {"TROUPE_LLM_PROVIDER", "openai-compatible", "LLM_MODEL", "m"},
		"known host without key":      {"LLM_BASE_URL", "https://api.moonshot.cn/v1"},
		"provider and host disagree":  {"TROUPE_LLM_PROVIDER", "openai", "OPENAI_API_KEY", "o", "LLM_BASE_URL", "https://api.deepseek.com/v1"},
		"bad base url":                {"LLM_BASE_URL", "api.openai.com"},
		"bad timeout":                 {"OPENAI_API_KEY", "o", "LLM_TIMEOUT", "soon"},
		"vllm without model":          {"TROUPE_LLM_PROVIDER", "vllm"},
	} {
		if r, err := provider.Detect(deadline(t), provider.DefaultConfig(), envOf(env...), noLocal()); err == nil {
			t.Errorf("%s: resolved %v", name, r)
		}
	}
}

func TestDetectLocalServer(t *testing.T) {
	// A fake server stands in for Ollama: the probe for Ollama's address asks it.
	srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		if r.Method == "GET" && r.Is("/models") {
			return openaitest.Models("llama3.2")
		}
		return openaitest.Error(404, "not found")
	})
	ollama, _ := provider.Lookup(provider.Ollama)
	vllm, _ := provider.Lookup(provider.VLLM)
	real := provider.HTTPProbe(nil, 0)
	var asked []string
	probe := func(ctx context.Context, base string) bool {
		asked = append(asked, base)
		if base == ollama.BaseURL {
			return real(ctx, srv.URL)
		}
		return false
	}
	r, err := provider.Detect(deadline(t), provider.DefaultConfig(), envOf(), probe)
	if err != nil {
		t.Fatal(err)
	}
	if r.Provider != provider.Ollama || r.BaseURL != ollama.BaseURL || r.Model != "llama3.2" || r.APIKey != "" ||
		!strings.Contains(r.Reason, "local ollama answered") {
		t.Fatalf("%+v", r)
	}
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Path != "/v1/models" {
		t.Fatalf("probe requests %+v", reqs)
	}

	// vLLM is probed after Ollama; it serves one model, which must be named.
	p := &probes{answer: map[string]bool{vllm.BaseURL: true}}
	_, err = provider.Detect(deadline(t), provider.DefaultConfig(), envOf(), p.probe)
	if err == nil || !strings.Contains(err.Error(), "LLM_MODEL") {
		t.Fatalf("vLLM without a model: %v", err)
	}
	if len(p.asked) != 2 || p.asked[0] != ollama.BaseURL || p.asked[1] != vllm.BaseURL {
		t.Fatalf("probe order %v", p.asked)
	}
	r, err = provider.Detect(deadline(t), provider.DefaultConfig(), envOf("LLM_MODEL", "Qwen/Qwen2.5-7B-Instruct"), p.probe)
	if err != nil || r.Provider != provider.VLLM || r.Model != "Qwen/Qwen2.5-7B-Instruct" {
		t.Fatalf("%+v %v", r, err)
	}

	// A key means no probing at all.
	p = &probes{answer: map[string]bool{ollama.BaseURL: true}}
	if r, _ := provider.Detect(deadline(t), provider.DefaultConfig(), envOf("OPENAI_API_KEY", "o"), p.probe); r.Provider != provider.OpenAI || len(p.asked) != 0 {
		t.Fatalf("%+v, probed %v", r, p.asked)
	}
}

func TestHTTPProbe(t *testing.T) {
	up := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply { return openaitest.Models("m") })
	broken := openaitest.NewServer(t, openaitest.Sequence(openaitest.Error(500, "down")))
	hung := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Delay: time.Minute}))
	probe := provider.HTTPProbe(nil, 100*time.Millisecond)
	ctx := deadline(t)
	if !probe(ctx, up.URL) || !probe(ctx, up.URL+"/") {
		t.Fatal("a server that lists models must count")
	}
	if probe(ctx, broken.URL) || probe(ctx, hung.URL) || probe(ctx, "http://127.0.0.1:1/v1") || probe(ctx, "::bad") {
		t.Fatal("a failing, hung, absent or malformed server must not count")
	}
	if ctx.Err() != nil {
		t.Fatal("probing outlived the test deadline")
	}
}

func TestDetectOfflineFallback(t *testing.T) {
	p := &probes{}
	r, err := provider.Detect(deadline(t), provider.DefaultConfig(), envOf(), p.probe)
	if err != nil {
		t.Fatal(err)
	}
	if r.Provider != provider.Offline || r.Model != llm.OfflineName || r.APIKey != "" || r.BaseURL != "" {
		t.Fatalf("%+v", r)
	}
	for _, want := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "DASHSCOPE_API_KEY", "ZHIPU_API_KEY", "MOONSHOT_API_KEY",
		"SILICONFLOW_API_KEY", "MODELSCOPE_API_KEY", "LLM_API_KEY", "ollama (http://127.0.0.1:11434/v1)", "vllm (http://127.0.0.1:8000/v1)",
		"offline rule-based model"} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("reason %q lacks %q", r.Reason, want)
		}
	}
	m, err := r.NewModel()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(llm.Offline); !ok {
		t.Fatalf("%T", m)
	}
	if e, err := r.NewEmbedder(); err != nil || !reflect.DeepEqual(e, llm.HashingEmbedder{}) {
		t.Fatalf("offline embedder: %T %v", e, err)
	}
	// DeepSeek has no embeddings API: no silent substitute.
	if _, err := detect(t, envOf("DEEPSEEK_API_KEY", "d")).NewEmbedder(); !errors.Is(err, provider.ErrNoEmbedder) {
		t.Fatal(err)
	}

	// Probing can be switched off; the reason says so.
	cfg := provider.DefaultConfig()
	cfg.DisableProbe = true
	p = &probes{answer: map[string]bool{"http://127.0.0.1:11434/v1": true}}
	r, _ = provider.Detect(deadline(t), cfg, envOf(), p.probe)
	if r.Provider != provider.Offline || len(p.asked) != 0 || !strings.Contains(r.Reason, "disabled") {
		t.Fatalf("%+v probed %v", r, p.asked)
	}
	// So can the whole thing.
	r, _ = provider.Detect(deadline(t), cfg, envOf("OPENAI_API_KEY", "o", "TROUPE_LLM_PROVIDER", "offline"), p.probe)
	if r.Provider != provider.Offline {
		t.Fatalf("%+v", r)
	}
}

// End to end: the environment points at a fake server, Detect resolves it, and the
// model and embedder it builds talk to it.
func TestResolvedModelTalksToTheServer(t *testing.T) {
	srv := openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		if r.Is("/embeddings") {
			return openaitest.Reply{Body: openaitest.EmbeddingsJSON([][]float64{{0.25, 0.5}}, []int{0})}
		}
		return openaitest.Completion(messages.ChatMessage{Content: "pong"}, messages.Usage{PromptTokens: 3, CompletionTokens: 1})
	})
	r := detect(t, envOf("LLM_API_KEY", "sk-e2e", "LLM_BASE_URL", srv.URL, "LLM_MODEL", "house", "LLM_EMBEDDING_MODEL", "house-embed",
		"LLM_TIMEOUT", "3s"))
	if r.Provider != provider.OpenAICompatible || r.Timeout != 3*time.Second {
		t.Fatalf("%+v", r)
	}
	m, err := r.NewModel()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(openai.Streamer); !ok {
		t.Fatalf("%T does not stream", m)
	}
	resp, err := m.Generate(deadline(t), llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "ping"}}})
	if err != nil || resp.Message.Content != "pong" || m.Name() != "house" {
		t.Fatalf("%+v %v", resp, err)
	}
	e, err := r.NewEmbedder()
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.Embed(deadline(t), []string{"x"})
	if err != nil || len(v) != 1 || v[0][1] != 0.5 {
		t.Fatalf("%v %v", v, err)
	}
	for _, req := range srv.Requests() {
		if req.Header.Get("Authorization") != "Bearer sk-e2e" {
			t.Fatalf("%s without the key", req.Path)
		}
	}
}
