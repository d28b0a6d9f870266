// Package redact removes secrets from text before it is logged, stored or published.
// It is the one place that decides what a secret looks like; the session actors (on
// every event payload), the node's ingress (on task input) and the LLM client (on
// provider error messages) all use it.
//
// A Redactor is built with the secret values it must know — typically every API key
// variable present in the environment (llm/provider's Config.Secrets) — and learns
// those its program obtains later (Redactor.Add: reloaded API tokens, OAuth tokens);
// it replaces, with Redacted:
//
//   - each of those values, wherever it occurs (longest first, so a secret that
//     contains another goes whole; values shorter than MinSecretLen are ignored, being
//     too likely to match ordinary text);
//   - strings shaped like credentials, whatever their value: "sk-" keys (OpenAI,
//     DeepSeek, DashScope, Moonshot, SiliconFlow, Anthropic "sk-ant-"), Zhipu "id.secret"
//     keys, ModelScope "ms-" UUID keys, JWTs, bearer tokens, Slack "xox?-" and "xapp-"
//     tokens, GitHub "ghp_"-style and "github_pat_" tokens, Google "AIza" keys and AWS
//     "AKIA" access key IDs;
//   - both of those written with JSON string escapes ("\u0073k-…", "tok\/…"), as a
//     model may write a tool call's arguments, which are JSON text inside a JSON
//     string: each is replaced whole, escapes and all, up to a few levels of JSON
//     inside JSON strings deep. Text without a \u, \/ or \\ escape costs one byte
//     scan more.
//
// Text enters as bytes (Redactor.Bytes, for JSON payloads) or a string
// (Redactor.String) and leaves with the secrets replaced; Redacted contains no
// character JSON escapes, so a JSON document stays valid. Most text holds no secret:
// a byte scan rules that out before any regular expression runs, and text with nothing
// to replace is returned as it is, without copying.
//
// Handler does the same to log records (a node's log lines carry what its MCP servers
// write to stderr and errors that name URLs), and SecretName, HeaderSecrets and
// URLSecrets say which values of a configuration are secrets: a header's, a
// secret-named variable's, a URL's password and api_key-like query values.
package redact
