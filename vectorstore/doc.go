// Package vectorstore defines the vector store seam used by memory and RAG: upsert
// vectors with metadata, search by cosine similarity with a metadata filter, delete.
//
// Store is the seam. Data enters as Items (ID, vector, string metadata, source text)
// grouped in named collections, and leaves as Hits ranked by cosine similarity. The
// contract (validation, atomic batches, filter before ranking, ties by ID) is written
// on Store and enforced by the conformance suite in vectorstore/vectorstoretest, which
// every implementation runs.
//
// Embedded, from Open, is the default implementation: exact search (every item that
// matches the filter is scored; there is no approximate index, so results never depend
// on index parameters) over vectors held in memory, persisted to an append-only log
// file with a CRC per record. A crash can tear only the last record, which Open drops;
// damage anywhere else fails Open with ErrCorrupt instead of silently losing data.
// The log is compacted when it grows much larger than the live data. Exact search
// costs time linear in the collection (BenchmarkSearch: a few milliseconds per 10k
// vectors of dimension 384 on one core), which suits the collections an agent builds,
// up to some hundred thousand vectors. The distributed implementation, for clusters
// and larger collections, is vectorstore/milvus; it passes the same suite against the
// Milvus server .ci/run starts. CheckCollectionName and CheckVector hold the rules
// both apply to names and vectors.
package vectorstore
