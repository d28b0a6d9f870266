package context

import "github.com/troupe-run/troupe/pipelines/rag"

// Cl100k is rag.Cl100k, the allocation-free cl100k_base counter the builder's
// callers count with.
type Cl100k = rag.Cl100k
