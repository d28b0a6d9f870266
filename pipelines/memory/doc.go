// Package memory holds the pure logic of agent memory: how memories are scored,
// tokenised, indexed by keyword, linked by entities, and how the ranked lists of
// several memory tiers are fused into one.
//
// Nothing here does I/O, reads the clock, draws random numbers or keeps package-level
// mutable state, so the memory tier actors and the consolidator can call it on the
// replay path and get the same answer every time. Ties are always broken by ID, never
// by map order.
//
// # How data enters and leaves
//
// Values go in and values come out. The caller passes what it knows, and time only as
// an age (now - created, computed by the caller from its own clock):
//
//   - Scoring: WorkingScore, EpisodicScore, SemanticScore and PerceptualScore turn a
//     relevance (a vector similarity, or Hybrid of a vector and a keyword score), an
//     age and an importance into a rank score, with the weights of the design
//     documents. Inputs are clamped to [0,1] and NaN counts as 0, so no formula
//     returns NaN.
//   - Text: Tokenize produces the search terms of a text; ContentHash the key of
//     exact-duplicate detection.
//   - Readings: Numbers and Negations read what two near texts may say otherwise
//     (their numbers, digits and English words alike, and how many negations they
//     hold), for the consolidator's dedupe and the offline write decision alike.
//   - KeywordIndex is an incremental BM25 inverted index: Put and Remove documents as
//     memories are written and forgotten, Search for the keyword score. It is a
//     projection of a namespace's memory events, rebuilt by replaying them.
//   - ExtractEntities is the offline entity and relation extractor; Graph holds the
//     entities and relations of a namespace's memories and scores a memory against a
//     query's entities (Graph.Score), or proposes memories near them
//     (Graph.Candidates). Like KeywordIndex it is a projection rebuilt from events.
//   - RRF fuses ranked ID lists; Merge merges the tiers' scored lists into the one
//     list the context builder selects from.
//
// KeywordIndex and Graph are not safe for concurrent use: each belongs to the one
// actor that owns its namespace.
package memory
