// Package vectorstore defines the vector store seam used by memory and RAG: upsert
// vectors with metadata, search by cosine similarity with a metadata filter, delete.
//
// Store is the seam. Data enters as Items (ID, vector, string metadata, source text)
// grouped in named collections, and leaves as Hits ranked by cosine similarity. The
// contract (validation, atomic batches, filter before ranking, ties by ID) is written
// on Store and enforced by the conformance suite in vectorstore/vectorstoretest, which
// every implementation runs.
//
// Embedded, from Open, is the implementation: vectors held in memory, persisted to
// an append-only log file with a CRC per record. A crash can tear only the last
// record, which Open drops; damage anywhere else fails Open with ErrCorrupt instead of
// silently losing data. The log is compacted when it grows much larger than the live
// data. Config.Index chooses how it searches:
//
//   - IndexExact (the zero value, so the default of Open): every item that matches
//     the filter is scored; results never depend on index parameters. It costs time
//     linear in the collection (BenchmarkSearch: a few milliseconds per 10k vectors of
//     dimension 384 on one core), which suits collections up to some ten thousand
//     vectors.
//   - IndexHNSW: a hierarchical navigable small world graph per collection (M,
//     EfConstruction, EfSearch in Config.HNSW), for large collections such as memory
//     namespaces of 100k vectors and more: a query scores a few thousand items, at
//     the price of approximate results (go run ./bench/ann measures recall@10 and
//     latency against exact search; bench/ann/README.md has the numbers). Every
//     other rule of the contract holds as for exact search. A filtered query walks
//     the graph with a wider beam and keeps the nearest matching items it meets;
//     when the filter keeps under 2% of the collection, or the graph yields fewer
//     than K matches, the query is answered by an exact scan, so K matches come back
//     whenever K exist. Copies of one vector (a footer every document repeats) are
//     linked to one another once, so that they do not fill each other's links and
//     wall searches in; a query whose nearest items include some copies, with items
//     less near below them, is answered by an exact scan, as the graph may have
//     missed other copies. Collections up to HNSWConfig.ExactBelow items are always
//     scanned. Deletes and replaced vectors are unlinked at once: the nodes that
//     linked to them get new links (each Delete call scans every node's links once,
//     some milliseconds at 100k items, so delete in batches where possible). Node
//     levels come from a hash of the item ID, so the same writes build the same
//     graph. With a Path, the graphs are saved beside the log (Path + ".hnsw") on
//     Close and by writes once a sixteenth of the nodes (at least 4096) changed;
//     Open replays the log, loads the saved graph and redoes only what changed since
//     it was saved, so a crash costs seconds on the next Open. A missing or damaged
//     graph file is rebuilt from the log (about a millisecond per item at dimension
//     384, so minutes at 100k items), never trusted for results; so is, once, a
//     graph file of version 1 (builds before its copies of one vector were linked
//     to at most one other copy), whose links could leave such copies cut off from
//     the rest. A write holds
//     searches of the store off while it links its items into the graph (about a
//     millisecond per item at dimension 384).
//
// The distributed implementation, for clusters and larger collections, is
// vectorstore/milvus; it passes the same suite against the Milvus server .ci/run
// starts. CheckCollectionName and CheckVector hold the rules both apply to names and
// vectors.
//
// UpsertIsolating writes a batch of which the store may refuse some items (Refused:
// ErrInvalid, ErrDimension, or ErrRefused from a server): it splits a refused
// batch until the refused items stand alone, writes the others and returns the
// refused ones, so that one bad item cannot hold up its collection. Any other error
// (the store is down) fails the batch, to be tried again whole.
package vectorstore
