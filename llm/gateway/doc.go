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
package gateway
