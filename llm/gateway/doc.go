// Package gateway is the layer between agents and model providers: a llm.Model that
// wraps a fallback chain of models with retries (exponential backoff with jitter,
// honouring Retry-After, never retrying a request that cannot succeed), concurrency
// limits per provider, token quotas per key, team and agent over a sliding window,
// token accounting and cost from a price table, and an exact-match and a semantic
// response cache (per namespace, with TTL and a per-request bypass).
//
// A Request enters Generate; it leaves as the first successful answer of the chain,
// with Usage filled in (counted offline when the provider reported none) and CostUSD
// priced, Model set to the model that answered, and Cached set when a cache answered.
// The LocalEffects of package actors runs every model call of a node through one Gateway.
//
// # Middleware
//
// Each concern is a Middleware, a func(llm.Model) llm.Model in a file of its own:
// ExactCache, SemanticCache, Quotas, Fallback, Pricing, CountTokens, Retry and
// LimitConcurrency. New composes them, in one place, from a Config; Chain composes
// any other selection. From the outside in, a request meets:
//
//	ExactCache       cache.go     a hit costs nothing else: no embedding, no quota, no call
//	SemanticCache    semantic.go  a hit costs one embedding and no call
//	Quotas           quota.go     refuses before any call; charges the answer's tokens
//	Fallback         fallback.go  tries chain[0], then chain[1], ...
//	  for each model of the chain, on its own:
//	  Pricing          pricing.go   CostUSD at the price of the model that answered
//	  CountTokens      tokens.go    counts the tokens a provider did not report
//	  Retry            retry.go     retries transient failures of this model
//	  Cooldown         cooldown.go  after a 429, holds its provider's calls until the wait ends
//	  LimitConcurrency limit.go     one of the provider's slots per attempt
//	  Streaming        stream.go    streams the attempt when the caller asks (llm.WithDeltas)
//	  the model
//
// The order is the behaviour:
//   - The caches are outermost, so a cached answer makes no call, spends no quota and
//     is served even when the quota is spent; it carries the Model and CostUSD of the
//     answer it repeats. The exact cache comes first because its key is a hash, the
//     semantic one's an embedding. An answer a cache served is not stored again, nor
//     is a failure, an empty answer or one the provider did not finish (a
//     llm.Response.FinishReason: cut at the output limit, filtered, …), so that the
//     same request asked again reaches the provider again.
//   - Quotas is outside Fallback, so a refusal is not retried nor tried on another
//     model, and the tokens charged are those of the answer given, whichever model gave
//     it, as CountTokens counted them when its provider reported none.
//   - Fallback is outside Retry, so each model spends its retries before the next is
//     tried; any error that is left falls over (a 4xx too), except a cancelled context.
//   - Pricing and CountTokens wrap each model of the chain, so an answer is counted and
//     priced once, as the model that gave it, whatever the retries before it.
//   - Every layer keeps the Usage of a failed call (llm.Model): Retry adds its failed
//     attempts' to its answer or failure, Fallback the models' it tried (each priced
//     as its own), Quotas charges it, so what a task records and budgets count is
//     what was spent (a ReAct reply that could not be parsed was).
//   - Cooldown is inside Retry, so every attempt, the first as the retries, waits for
//     its provider's cooldown after a 429 (by base URL and key, shared by every call
//     of the node) instead of finding the limit again on its own; a model with a
//     fallback after it does not wait, and Fallback tries the next one at once. It is
//     outside LimitConcurrency, so a call waiting holds no slot.
//   - Retry is outside LimitConcurrency, so a call holds its provider's slot during an
//     attempt, not during the backoff between attempts.
//
// Config.Routes adds chains that a request asks for by the names of their models
// (llm.Request.Models: an agent's own model and fallbacks). Each is composed as the
// gateway's own chain, with the same caches and quotas (built once, shared), and each
// model, told by its name, is wrapped once whichever chains it is in.
//
// # Streaming
//
// A caller that wants an answer's increments as they come puts a llm.DeltaFunc in the
// call's context (llm.WithDeltas); every layer passes it down with the context, and
// Streaming, innermost, streams each attempt of a model that can (llm.Streamer).
// Each provider call streamed is a new attempt (llm.DeltaFunc's attempt number): a
// stream cut mid-answer (openai.ErrTruncatedStream, transient) is retried by Retry
// and streams again from the start under the next attempt, and a fallback model
// does the same; the increments of the failed attempt belong to no answer. The
// answer the gateway returns is always whole, as without streaming. A cache hit
// streams nothing.
//
// Every layer passes the request's context down. A cancelled context stops them all:
// no further attempt, no wait, no fallback, and the error wraps ctx.Err().
package gateway
