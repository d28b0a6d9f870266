package provider

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/troupe-run/troupe/llm"
)

// FromSpec turns a model spec into a model and a sentence saying why it was chosen:
//
//	auto              provider auto-detection (keys in the environment, a local
//	                  Ollama or vLLM, else the offline model)
//	offline           the offline rule-based planner
//	scripted:FILE     a script of responses
//	PROVIDER[:MODEL]  a named provider (openai, deepseek, qwen, zhipu, moonshot,
//	                  siliconflow, modelscope, ollama, vllm), optionally with a model
//
// The sentence ends with the key route (Resolved.KeyRoute): which variable's key goes
// to which host. It also returns the API key the model uses, so that it can be
// redacted from events.
func FromSpec(ctx context.Context, spec string, base Config, env func(string) string) (llm.Model, string, string, error) {
	switch {
	case spec == "offline":
		// The spec may come from --model, TROUPE_MODEL, the configuration file or an
		// agent's model: the sentence names none of them, as a provider's "is
		// configured" does not.
		return llm.NewOffline(), `the offline rule-based model (model "offline")`, "", nil
	case strings.HasPrefix(spec, "scripted:"):
		m, err := llm.FromSpec(spec)
		return m, "a scripted model (" + spec + ")", "", err
	}
	return fromResolved(resolveSpec(ctx, spec, base, env))
}

// resolveSpec resolves auto (or "") and PROVIDER[:MODEL] on base (Detect).
func resolveSpec(ctx context.Context, spec string, base Config, env func(string) string) (Resolved, error) {
	if spec != "" && spec != "auto" {
		if err := CheckSpec(spec); err != nil {
			return Resolved{}, fmt.Errorf("model: %w", err)
		}
		name, model, _ := strings.Cut(spec, ":")
		base.Provider = name
		if model != "" {
			base.Model = model
		}
	}
	return Detect(ctx, base, env, nil)
}

// EmbedderFromSpec returns the embedder of the provider a model spec resolves to, as
// FromSpec resolves it (Resolved.NewEmbedder): for offline and scripted:FILE the
// offline llm.HashingEmbedder (no endpoint is reached), otherwise the provider's
// embeddings endpoint with its embedding model (ErrNoEmbedder when it has none). It
// also returns the API key, so that it can be redacted from events.
func EmbedderFromSpec(ctx context.Context, spec string, base Config, env func(string) string) (llm.Embedder, string, error) {
	if spec == "offline" || strings.HasPrefix(spec, "scripted:") {
		return llm.HashingEmbedder{}, "", nil
	}
	r, err := resolveSpec(ctx, spec, base, env)
	if err != nil {
		return nil, "", err
	}
	e, err := r.NewEmbedder()
	return e, r.APIKey, err
}

func fromResolved(r Resolved, err error) (llm.Model, string, string, error) {
	if err != nil {
		return nil, "", "", err
	}
	m, err := r.NewModel()
	if err != nil {
		return nil, "", "", err
	}
	why := r.Reason
	if route := r.KeyRoute(); route != "" {
		why += "; " + route
	}
	return m, why, r.APIKey, nil
}

// CheckSpec reports whether FromSpec understands spec (it does not look for keys or
// files): auto, offline, scripted:FILE, or PROVIDER[:MODEL] with a known provider.
func CheckSpec(spec string) error {
	const want = "want auto, offline, scripted:FILE or PROVIDER[:MODEL]"
	switch {
	case spec == "auto" || spec == "offline":
		return nil
	case strings.HasPrefix(spec, "scripted:"):
		if strings.TrimSpace(strings.TrimPrefix(spec, "scripted:")) == "" {
			return fmt.Errorf("%q: scripted:FILE needs the path of a script file", spec)
		}
		return nil
	}
	name, model, hasModel := strings.Cut(spec, ":")
	if _, ok := Lookup(name); !ok || strings.TrimSpace(name) != name {
		return fmt.Errorf("%q is not a model spec: %s, with PROVIDER one of %s", spec, want, strings.Join(names(), ", "))
	}
	if hasModel && strings.TrimSpace(model) == "" {
		return fmt.Errorf("%q has no model after the colon: %s", spec, want)
	}
	return nil
}

// FallbackFromSpec is FromSpec for a fallback model. A fallback that names a
// provider (PROVIDER[:MODEL]) runs at that provider's own base URL with that
// provider's own key variable and nothing else: LLM_BASE_URL, LLM_API_KEY, LLM_MODEL,
// TROUPE_LLM_PROVIDER and the config file configure the primary model, and its key
// is not the fallback's to send. Its per-request timeout is env's EnvTimeout (and its
// stream idle bound EnvStreamIdleTimeout): pass
// the primary's Config.TimeoutEnv for the node's own (its config file's llm.timeout
// included). auto, offline and scripted:FILE are as in FromSpec.
func FallbackFromSpec(ctx context.Context, spec string, env func(string) string) (llm.Model, string, string, error) {
	name, _, _ := strings.Cut(spec, ":")
	if _, ok := Lookup(name); !ok {
		return FromSpec(ctx, spec, DefaultConfig(), env)
	}
	return fromResolved(resolveFallback(ctx, spec, env))
}

// resolveFallback resolves a fallback's PROVIDER[:MODEL] spec (FallbackFromSpec).
func resolveFallback(ctx context.Context, spec string, env func(string) string) (Resolved, error) {
	name, model, _ := strings.Cut(spec, ":")
	p, ok := Lookup(name)
	if !ok {
		return Resolved{}, fmt.Errorf("model: %q names no provider", spec)
	}
	if env == nil {
		env = os.Getenv
	}
	own := func(k string) string {
		if k == p.KeyEnv || k == EnvTimeout || k == EnvStreamIdleTimeout {
			return env(k)
		}
		return ""
	}
	if p.KeyEnv != "" && strings.TrimSpace(own(p.KeyEnv)) == "" {
		// Detect's error would offer LLM_API_KEY too, which is not a fallback's to use.
		return Resolved{}, fmt.Errorf("llm/provider: provider %q is configured but %s holds no API key: set it (a fallback or an agent's model takes its provider's own key variable only)",
			p.Name, p.KeyEnv)
	}
	cfg := DefaultConfig()
	cfg.Provider, cfg.Model, cfg.DisableProbe = p.Name, model, true
	return Detect(ctx, cfg, own, nil)
}
