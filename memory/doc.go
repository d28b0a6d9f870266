// Package memory is agent memory: namespaces of memories ("user:alice",
// "agent:planner") in four tiers — working, episodic, semantic and perceptual —
// with core blocks always in an agent's context.
//
// A namespace is an event-sourced entity, like a session. Its changes are events
// (messages.MemoryAdded, MemoryUpdated, MemoryMerged, MemoryPromoted,
// MemoryDistilled, MemoryInvalidated, MemoryForgotten, MemoryCleared,
// MemoryBlockSet, MemoryBlockDeleted, and MemoryRemembered, which changes no
// memory: a Remember with RememberOptions.Mark that wrote nothing), each with the
// reason it was made and the sources it came from, appended to the node's event log in a stream of its own,
// Stream(namespace) = "memory/<namespace>", which is not a session. Its memories,
// its vector index (a vectorstore.Store), its keyword index (BM25), its entity graph
// and its core blocks are projections of that stream, rebuilt by folding it.
//
// # How data enters
//
// Open builds the Memories of a node from a Config (the log and the vector store
// are required; the embedders, the clock, the ID source, the limits and the
// redaction have defaults). Memories.Namespace folds a namespace's stream on its
// first use and caches it. The fold skips a memory event of a type this build does
// not know (a later build's, in a cluster's rolling upgrade or after a rollback),
// telling Config.Skipped once per type, instead of failing the namespace; any
// other event it cannot read fails it. Every write takes an idempotency key — a key already in
// the stream is not applied again, the earlier result is returned — and works like
// tools/notes: it folds what the stream gained, checks the request against the
// folded state (a malformed request wraps ErrInvalid, an unknown memory ErrNotFound,
// and nothing is written), and appends its events at the next seqs in one Append. When
// another writer (another process on the same log) took those seqs, the append fails
// with eventlog.ErrSeqConflict, and the write folds again and decides again, up to
// MaxAttempts times (then ErrConflict). The events of a keyed write have IDs derived
// from the key and the payload, so a retried write is a repeat the log ignores, and two
// writers deciding differently under one key conflict instead of diverging. A
// client's key (an HTTP Idempotency-Key) is given as RequestKey(key, digest of
// the request): sent again with another request, it fails with ErrKeyReused.
//
// Each memory has a Version, the seq of the event that last changed it (folded, so
// the same on every node and after a replay). Forget, Merge, Promote, Distill and
// Invalidate take Expect: a compare-and-set on the versions of the memories the
// caller read, checked in the same decision as above, so against the stream as
// stored; a memory changed since fails the write with ErrChanged (the consolidator
// skips its decision until its next run).
//
// Namespace.Add checks every request of a batch before anything else (content,
// MaxContentBytes, importance, tier, modality, metadata, a timestamp at most a day
// ahead). An exact duplicate — the same pipelines/memory ContentHash (case,
// whitespace, Unicode composition, the width of letters and digits (full-width "ｔｅａ" is "tea") and invisible characters aside) as a live memory of the namespace or an
// earlier request of the batch, not a working one for a memory of another tier
// (DuplicateFor) — is answered NONE with the existing ID, calling no
// embedder and writing nothing. The others are embedded with one Embed call per
// modality, their entities and relations extracted when they are semantic
// (Config.Extract, by default pipelines/memory's offline ExtractEntities), and added
// in one Append, a batch of a thousand memories included. The vector goes into the
// event (MemoryRecord.Vector), so a fold, a recovery or a replay never embeds again.
// An embedder that fails, or answers a vector that is empty or holds a NaN or an
// infinite component, fails the write, which writes nothing (a hybrid search ranks
// by keyword instead, and says so); a zero vector is a memory without one.
//
// The working tier is bounded: a write that would leave more than WorkingCapacity
// working memories forgets the least valuable (importance × WorkingTimeDecay of
// their age, the oldest first among equals) in the same Append, with the reason
// "capacity N"; working memories written more than WorkingTTL ago are forgotten,
// with the reason "ttl: not written for 1h0m0s" (the TTL), by the next write or
// search, and no search returns them.
//
// Update changes content (embedded and extracted again), importance or metadata
// (merged key by key, a key set to null deleted). Forget and Clear remove memories;
// Clear of every tier also empties the core blocks (clear_all forgets all there is).
// Merge keeps one memory and folds others into it: it gains their sources, a source
// {kind "memory", id, detail: the merged one's metadata} for each, and their
// metadata keys it lacks (on a conflict its own value stays, the other is in the
// source's detail; so is a key that would take its metadata past MaxContentBytes). Promote moves a memory to another tier keeping its ID (working
// to episodic), Distill adds a semantic memory whose sources are the memories it
// was distilled from (they stay), and Invalidate marks a memory no longer true
// (with the time, and the newer memory that contradicts it): it keeps its history
// and search skips it unless Query.IncludeInvalid. Forgetting, merging and
// clearing take a memory out of every projection: vectors, keyword index, graph.
//
// # Projections
//
// Each tier has its own BM25 index (over the content, an episode's outcome and
// participants, a perceptual memory's URI); the semantic tier has the entity graph
// of its memories' entities and relations. The vectors live in the vector store, one
// collection per tier and modality, Collection(tier, modality) = "mem_<tier>_<modality>"
// (text for every tier; image and audio for the perceptual tier, each of its own
// dimension), as items "<namespace>/<id>" with the metadata {"ns", "tier"}. The
// store is persistent and shared: after a namespace's first fold in a process, the
// vectors of its live memories are upserted again and those of every memory it ever
// had that is no longer live (or lives in another collection now) are deleted, in
// batches of VectorBatch; afterwards each write moves the vectors it changed. A
// search whose vector store holds fewer of a collection's vectors than the fold put
// there (a Milvus started afresh without its data) puts them back and searches again;
// one whose hits are crowded by items of the namespace the log never had (a store
// that outlived the log, or shared by another deployment) asks for more, up to 4096.
//
// The log, not the vector store, holds the memories, so only what needs vectors
// waits for the store. A write is stored and answered while the store does not
// answer or refuses some vectors (another dimension, a collection of another
// schema): what the store did not take stays marked, collection by collection, and
// later operations put it there (a collection that failed is left alone 1 to 10 s,
// a refusal a minute, before a catch-up tries it again). A search by vector of a
// collection that lacks some of the fold's vectors, or whose store fails, fails
// with ErrVectorStore naming the collection and the cause; a hybrid search ranks
// that collection without the store and says so (Namespace.SearchNoted); a keyword
// search never asks the store, and no search asks about a collection that holds
// none of the namespace's vectors.
//
// A store that refuses some items of a batch (vectorstore.Refused: a vector of
// another dimension, a payload Milvus does not take) has them isolated
// (vectorstore.UpsertIsolating): the others are written, and each refused memory
// is parked — told to Config.VectorParked, left out of the store until it
// changes, the namespace is folded anew or Config.VectorRetry passed (2 minutes,
// doubled at each refusal up to about an hour: a transient error the store gave
// as a refusal keeps it out only that long; CatchUpVectors tries it), named in a
// search's note, and found by keyword and entity only — so one bad vector holds up
// nothing. Memories.ParkedVectors counts them. Memories.VectorBacklog
// counts the vectors still waiting for the store.
//
// # How data leaves: search and scoring
//
// Namespace.Search looks at each tier asked for (all by default). Its candidates
// come from the vector store (the query embedded with QueryEmbedder, or with the
// encoder of the modality for image and audio memories, before the search takes
// the namespace, so that a slow embedder holds up no other write or search of it; K = CandidateFactor ×
// limit, filtered on ns and tier), from the tier's keyword index (the same K) and,
// in the semantic tier, from the entity graph (the entities of the query: those
// ExtractEntities finds, and its runs of one to three words that name an entity a
// memory mentions). Every candidate then gets both relevance terms, each in [0, 1]:
//
//   - the vector term: the cosine of the query with the memory (computed from the
//     memory's vector as the fold holds it where the store did not return it; clamped
//     at 0), rescaled from the floor of the tier's candidates of its modality:
//     (cosine − floor) / (1 − floor), floor the least cosine among the n of them
//     shrunk toward 0 when they are few, least·n/(n + FloorPrior). Sentence embedding
//     models compress cosines into a narrow band (multilingual-e5-small: unrelated
//     texts about 0.7, a good match about 0.85); the candidates include memories that
//     do not answer the query, and the least of their cosines stands for what an
//     unrelated memory scores with this embedder, so the term spans what the model
//     tells apart whatever its range (for the hashing embedder the floor is about 0
//     and the term about the cosine). A few candidates may all answer the query, so
//     their least weighs little. The top is not stretched to 1: a query nothing
//     answers well keeps a weak vector term.
//   - the keyword term: the memory's BM25 score over the query's weight
//     (KeywordIndex.QueryWeight: the sum of the idf of the query's terms, the score of
//     a memory of average length holding each once), at most 1: how much of the query
//     the memory matches, rare words weighing more. A memory holding every term
//     scores about 1, one holding a common word of a long question a fraction — not
//     1 because it is the best of weak matches.
//
// Neither is stretched so that a tier's best scores 1: both say how well the memory
// answers the query, so the design weights (0.7 vector, 0.3 keyword, and the graph,
// recency and importance terms of the formulas) act as written whatever the
// embedder, and a keyword hit on one common word does not outweigh the memory the
// embedding finds. The tier's formula (package pipelines/memory) then ranks them, with
// age = now − the memory's Timestamp and rel, the relevance, by mode:
//
//   - hybrid (default): rel = Hybrid(vector, hasVector, keyword) = 0.7·vector +
//     0.3·keyword, or keyword alone for a memory without a vector;
//   - vector: rel = vector;
//   - keyword: rel = keyword.
//
// and the formulas:
//
//	working     hybrid:  WorkingScore(vector, hasVector, keyword, age, importance)
//	            vector:  WorkingScore(vector, hasVector, 0, age, importance)
//	            keyword: WorkingScore(0, false, keyword, age, importance)
//	            each Hybrid(…) × WorkingTimeDecay(age) × (0.8 + 0.4·importance)
//	episodic    EpisodicScore(rel, age, importance)
//	            = (0.8·rel + 0.2·Recency(age)) × (0.8 + 0.4·importance)
//	semantic    SemanticScore(rel, graph, importance)
//	            = (0.7·rel + 0.3·graph) × (0.8 + 0.4·importance), graph = Graph.Score
//	perceptual  PerceptualScore(rel, age, importance), the episodic formula
//
// A candidate that matched nothing of the query (cosine, keyword and graph 0) is
// dropped. testdata/quality.json is a small labelled corpus on which
// TestRetrievalQuality measures recall@3 and MRR@10 of each mode with a real
// embedder.
//
// In the episodic tier, structured filters (Since, Until, MinImportance, Participants) come
// first: the memories they keep are all scored (up to 4096; beyond, the filters are
// intersected with the store's and the index's hits). Since, Until and MinImportance
// also filter the other tiers; they have no participants. Invalid memories are left
// out unless IncludeInvalid. The tiers' lists are merged by score (pipelines/memory
// Merge), ties by ID; an empty query ranks what the filters keep by formula alone.
//
// Get, Snapshot, Stats, Blocks and RenderBlocks read the fold; History folds the
// stream afresh and returns every event that touched a memory — added, updated,
// merged into it or merged away, promoted, a source of a distillation or distilled,
// invalidated or invalidating, forgotten or cleared — with its reason and key.
// Memories.Locate finds the namespace of a memory by its ID alone, from an index of
// the IDs each namespace's events put (see idIndex), without a read of every stream.
//
// # In an agent's loop
//
// On a node (package node), an agent with the memory tool (node.Config.MemoryTool)
// has the core blocks of its namespace in the system prompt of every task: the
// node's ingress renders them (RenderBlocks) when the task is submitted, and records
// them with it (messages.TaskSubmitted.Memory; nothing when no block holds a value),
// so that the session's decisions, a recovery and replay verify build the prompt
// from the log, never from a live read. A block the agent edits during a task
// (core_memory_append, core_memory_replace) shows from its next task on. With
// node.Config.MemoryWriteAfterTask ("write_after_task"), the node calls Remember on
// that namespace after each completed task, with the task's input and output as the
// turn, under the key "<session>/<seq of task.completed>/<task ID>", with
// RememberOptions.Mark (unless the node is pinned to decision rules older than 12,
// whose builds cannot fold the mark: actors.MarksRemembered): a turn with nothing
// to keep ends with a memory.remembered under that key, so the node's recovery at
// its next start (RememberedUnder) does not extract it again. History lists no mark: it touches no memory.
//
// # Image and audio offline
//
// Perceptual memories of images and audio are stored by their text description
// (Content; URI locates the media). Without Config.Encoders, the offline fallback
// embeds that description with a hashing embedder of the modality's own dimension
// (DefaultImageDim, DefaultAudioDim): it matches descriptions by their words, as the
// text hashing embedder does, and perceives nothing of the media. Configure real
// encoders (CLIP-like, taking the same text for queries) for cross-modal search.
package memory
