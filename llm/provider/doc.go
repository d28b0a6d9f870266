// Package provider decides which model a Troupe node runs: it knows the
// OpenAI-compatible providers (OpenAI, DeepSeek, Qwen/DashScope, Zhipu, Moonshot,
// SiliconFlow, ModelScope, and local Ollama and vLLM servers), loads the user's
// settings, and detects a provider from them — falling back to the offline model,
// with a reason, when there is none.
//
// Settings enter through Load: defaults, then a JSON file (its "llm" object, or the
// whole file), then environment variables (TROUPE_LLM_PROVIDER, LLM_API_KEY,
// LLM_BASE_URL, LLM_MODEL, LLM_EMBEDDING_MODEL, LLM_TIMEOUT). Detect turns the Config
// and the provider key variables (OPENAI_API_KEY, DEEPSEEK_API_KEY, ...) into a
// Resolved — provider, base URL, model, key and the Reason it was chosen — from which
// NewModel and NewEmbedder build the llm.Model and the embedder:
//
//	cfg, err := provider.Load(provider.DefaultConfigFile, nil)
//	res, err := provider.Detect(ctx, cfg, nil, nil)
//	slog.Info("model", "llm", res) // the key is redacted
//	model, err := res.NewModel()
//
// Detect's rules, first match wins, are on Detect. Two of them protect keys: a
// provider's key variable is only used with that provider's own host, and an
// explicit setting that cannot work (a provider without its key, an unknown host
// without a model) is an error, never a silent fallback. Resolved and Config print
// the key as [REDACTED] under every fmt verb, in slog and in JSON; Redact scrubs
// keys from any other text. Environment and network access are injected (env, Probe),
// so detection is testable without either.
package provider
