// Package openai runs Troupe's llm.Model against any OpenAI-compatible chat
// completions API — OpenAI itself, DeepSeek, Qwen (DashScope), Zhipu, Moonshot,
// SiliconFlow, ModelScope, Ollama, vLLM — through the official openai-go SDK.
//
// An llm.Request enters Model.Generate and becomes one POST {BaseURL}/chat/completions:
// system, user, assistant (with tool_calls) and tool (with tool_call_id) messages map
// one to one, and each messages.ToolSpec becomes a function tool whose parameters are
// its JSON Schema, sent byte for byte (an empty schema becomes
// {"type":"object","properties":{}}). The first choice comes back as one assistant
// llm.Response: its text, its tool calls (several when the model calls tools in
// parallel; a missing call id is replaced by "call_<step>_<n>"), and its usage,
// including cached prompt tokens. A provider that reports no usage leaves Usage zero,
// for the gateway's tokenizer to fill in.
//
//	m, err := openai.New(openai.Config{Provider: "deepseek", BaseURL: "https://api.deepseek.com/v1",
//		APIKey: key, Model: "deepseek-chat", Timeout: time.Minute})
//	resp, err := m.Generate(ctx, llm.Request{Step: 1, Messages: msgs, Tools: specs})
//
// A call with an idempotency key (llm.Request.Outward, or llm.Request.Key, the
// effect key, when it has none) sends a digest of it and the model as an
// Idempotency-Key header, the same on every attempt and when the call is issued
// again after a crash, so a provider that deduplicates by it performs the call
// once; Outward is unique across event logs, so another deployment's call of a
// session of the same name at the same seq is another request.
//
// Optional capabilities, found by type assertion: Stream (the Streamer interface)
// delivers Deltas as they arrive and returns the same Response Generate would;
// Capabilities (llm.CapabilityReporter) reports native tools, streaming and JSON
// mode; Provider (the gateway's ProviderNamer) names the provider. Embedder is an
// llm.Embedder that turns texts into vectors through /embeddings, in batches, in order.
//
// # Errors
//
// One call is one HTTP attempt: the SDK's own retries are off, because retries,
// fallback and quotas belong to the gateway. Every error names the provider and model
// and is classified for it:
//
//   - an HTTP error is an *llm.APIError (wrapped) with the status, the provider's
//     message (API key redacted) and RetryAfter from retry-after-ms, Retry-After
//     (seconds or HTTP date) or, on 429, x-ratelimit-reset-*; 408, 409, 429 and 5xx
//     are transient (errors.Is(err, llm.ErrTransient));
//   - an error object answered with HTTP 200 ({"error": ...}, or vLLM's
//     {"object": "error", ...}) is an *llm.APIError too when its code is an HTTP
//     status (vLLM's 400 is not transient), else it wraps llm.ErrTransient, and so
//     is one sent as a stream's first event (before any chunk) but for code 400;
//     sent as an event mid-stream, or as the first with code 400, it wraps
//     llm.ErrTransient (vLLM reports any failure of a stream with code 400, an
//     engine that died before the first token included), an *llm.APIError when
//     its code is 401, 403, 429, 408, 409 or 5xx;
//   - a call that runs past Config.Timeout, a refused or dropped connection, a
//     stream cut short (ErrTruncatedStream) or one that sent nothing for
//     Config.StreamIdleTimeout once its answer began (ErrStalledStream) wrap
//     llm.ErrTransient;
//   - when the caller's ctx ends first, the error wraps ctx.Err() and is not transient;
//   - ErrMalformedResponse (a body that is not the expected JSON or event stream) and
//     ErrInvalidRequest (a conversation that cannot be sent) are not transient.
//
// Config, Model and Embedder print without the API key, under every fmt verb and in
// slog, and provider messages that echo the key have it redacted (package redact: the
// key, and any string shaped like a credential).
//
// Package openaitest holds the fake OpenAI-compatible server the tests run against;
// other packages' tests may use it too.
package openai
