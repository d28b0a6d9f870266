package provider

// ResolveFallback is resolveFallback, for the tests: what FallbackFromSpec resolves a
// PROVIDER[:MODEL] spec to.
var ResolveFallback = resolveFallback
