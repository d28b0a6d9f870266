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
// Detect's rules, first match wins, are on Detect. Keys go only where they belong:
// a provider's key variable to that provider's own hosts; the user's own key
// (LLM_API_KEY, or the config file's llm.api_key_env) to the base URL it is paired
// with (LLM_BASE_URL beside LLM_API_KEY, llm.base_url beside llm.api_key_env) or,
// with no base URL, to the provider's own. Anything else is ErrKeyNotPaired, an error
// that names the variable and the host, never a key sent; Resolved.KeyRoute says
// which variable goes to which host, and FromSpec ends its reason with it. A fallback
// (FallbackFromSpec) names a provider and uses only that provider's URL and key
// variable. An explicit setting that cannot work (a provider without its key, an
// unknown host without a model) is an error, never a silent fallback. Resolved and
// Config print the key as [REDACTED] under every fmt verb, in slog and in JSON;
// Config.Secrets lists every key in the environment, for the node's redactor.
// Environment and network access are injected (env, Probe), so detection is testable
// without either.
package provider
