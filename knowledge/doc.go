// Package knowledge is the knowledge base of retrieval-augmented generation:
// named collections of documents ("docs", "handbook") that are ingested once,
// searched by meaning and by words, and quoted in cited answers.
//
// A knowledge base is an event-sourced entity, like a memory namespace (package
// memory). Its changes are events (messages.KBDocumentIngested,
// messages.KBDocumentRemoved), each with its reason and idempotency key, appended to
// the node's event log in a stream of its own, Stream(name) = "kb/<name>", which is
// not a session (eventlog.IsSession says no; Status is what a session listing
// should show for it).
// Its documents and chunks, its vector collection and its BM25 keyword index are
// projections of that stream, rebuilt by folding it.
//
// # How data enters
//
// Open builds the Bases of a node from a Config (the log and the vector store are
// required; the embedders, the model, the chunking, the clock and the limits have
// defaults). Bases.Base folds a knowledge base's stream on its first use, makes the
// vector store hold exactly the fold's vectors (the store is persistent: chunks
// replaced or removed since an earlier run are deleted, the live ones upserted
// again), and caches it. A name (CheckName) is 1 to 64 ASCII letters, digits, '-'
// and '_', starting with a letter or digit.
//
// Base.Add ingests one document: the pure pipeline of package pipelines/rag converts
// it to Markdown (Convert, by the source's extension or content: Markdown, text,
// HTML, CSV, JSON, code, DOCX, XLSX, PDF text), splits it into paragraphs under
// their heading paths (Split) and packs them into chunks of at most 512 tokens with
// 64 tokens of paragraph overlap (Pack, cl100k_base; Config.Chunk). The chunks are
// embedded with the passage embedder in batches of Config.EmbedBatch (32); a batch
// that fails with llm.ErrTransient is tried again after 250ms, then twice as long
// each time (or the embedder's Retry-After), up to Config.EmbedAttempts (5) calls,
// then the ingestion fails with ErrEmbedder, as it does at once on a permanent
// error. The whole chunk set — text, heading path, offsets into the Markdown, token
// count, text hash and vector — goes into ONE kb.document_ingested event: a changed
// document's new chunks replace its old ones in one step, a search sees the old
// version or the new one and never a mix, and a fold, a restart or a replay never
// calls the embedder. A document whose rag.DocumentHash is the stored one, embedded
// by the same embedder (Config.EmbedderName), is skipped before it is converted:
// nothing is embedded nor written, and the result says StatusUnchanged; with another
// embedder it is embedded again. Base.AddText takes Markdown for callers that send
// {source, content}; Base.Remove removes a document in one kb.document_removed
// event. Writes work like memory's: they fold what the stream gained, decide
// against the fold, append at the next seq, and fold and decide again when another
// writer took it (eventlog.ErrSeqConflict), up to MaxAttempts; a key already applied
// returns the earlier result and writes nothing. The slow steps of Add (conversion
// and embedding) run outside the knowledge base's lock, so documents are ingested in
// parallel.
//
// AddFolder ingests files and folders (walked recursively, hidden names skipped,
// symbolic links to folders not followed, so a link loop cannot hang it) with a
// bounded number of workers (GOMAXPROCS), reports each file to a Progress callback
// (done of total, the source, its bytes), and reports the files it could not ingest
// — unreadable, too large, a corrupt PDF, a binary format it does not know, no text —
// in FolderResult.Failed while it ingests the others. A file's source is its path as
// given (a folder's files: the folder's cleaned path joined with the names below
// it): relative paths stay relative. FolderOptions.Prune also removes the
// documents of files that left the folders given.
//
// Bad input gets a clear error and writes nothing: a document over
// MaxDocumentBytes (ErrTooLarge, also rag.ErrTooLarge) or one that cuts into more
// than Config.MaxChunks chunks (ErrTooLarge: they travel in one event), a format
// Convert cannot read (rag.ErrUnsupported, rag.ErrMalformed), a document without
// text (ErrEmpty), a source name that is empty, over MaxSourceLen or holds a control
// character such as a newline (ErrInvalid, CheckSource).
//
// # Projections
//
// The vectors live in the vector store, one collection per knowledge base,
// Collection(name) = "kb_<name>" ('-' becomes '_' and a hash suffix keeps names
// apart: Milvus allows letters, digits and underscores only), an item per chunk
// whose ID is the chunk's ID, derived from the source, the document's hash and the
// chunk's index. The BM25 index (pipelines/memory KeywordIndex) holds each chunk's
// heading path and text. A chunk the embedder gives a zero vector (the hashing
// embedder and a chunk of punctuation) has no vector and is found by its words.
//
// # How data leaves: search
//
// Base.Search takes a Query. In the default hybrid mode every query text proposes
// two candidate lists of Pool × Limit chunks (Pool 4, Limit 5 by default): the
// nearest by the query embedder (Config.QueryEmbedder: with e5, queries and
// passages have their own prefixes, the models "e5-query" and "e5-passage") and the
// best by BM25. With a language model (Config.Model, not the offline rule-based
// one), Query.MultiQuery asks it for that many rewrites of the query (one per line;
// numbering, bullets and quotes are removed, repeats and the query itself dropped:
// the original query is always searched), each searched like the query, and
// Query.HyDE asks it for a hypothetical passage that answers the query, embedded
// with the passage embedder and searched as one more vector list. All lists are
// fused by reciprocal rank (k = 60): a chunk scores the sum over the lists that
// hold it of weight/(60 + rank). A vector hit's weight is 1; a BM25 hit's is the
// share of the query it matches — its BM25 score over the query's weight
// (KeywordIndex.QueryWeight, the score of a chunk of average length holding each
// query term once), at most 1 — so a chunk holding the query's rare identifier
// votes fully and one that shares a single common word of a long question votes
// little (plain RRF let such hits push paraphrase answers down: on
// testdata/quality.json with e5, hybrid recall@3 0.85 and MRR@10 0.82 against 0.95
// and 0.86 weighted). A chunk found by several lists counts once, and chunks with
// the same text (overlapping documents) are kept once, the best. Config.Rerank may
// then reorder (or shorten) that pool, and the pool is cut to Limit. A hit's
// HeadingPath is that of the chunk's first paragraph. The model calls carry a Request.Key derived from the
// knowledge base, the purpose and the query, so a recording gateway caches and
// replays them. Without a model, multi-query and HyDE are off and
// SearchResult.Notes says so. ModeVector and ModeBM25 search one kind of list.
// Documents, Chunks and Stats read the fold.
//
// testdata/quality.json is a small labelled corpus (39 passages, 20 queries) on
// which TestRetrievalQuality measures recall@10, recall@3 and MRR@10 of each mode
// with a real embedder (TROUPE_TEST_EMBEDDINGS): some queries share only a rare
// identifier with their answer (BM25 finds them: a commit hash among one with two
// digits swapped), others paraphrase it or ask in another language (the embedding
// finds them). With multilingual-e5-small, recall@10 is vector 1.00, BM25 0.60,
// hybrid 1.00; recall@3 0.90, 0.60, 0.95; MRR@10 0.92, 0.57, 0.86 — the fusion's
// flat ranks let a keyword vote reorder the embedding's near-ties.
//
// # Answers
//
// Base.Ask searches, numbers the hits as evidence and asks the model to answer
// citing them as "[source > heading path]". Every citation is checked against the
// evidence (a label, a source or an evidence number): what names nothing of it is
// listed in Answer.Unverified and marked in the text. With no model, with the
// offline model, or when the model's answer cites none of the evidence, the answer
// is extractive — the sentence of each of the best hits that shares the most words
// with the question, followed by its citation — and is labelled so
// (ExtractiveLabel, Answer.Extractive).
package knowledge
