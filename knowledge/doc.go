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
// vector store hold exactly the fold's vectors (the store is persistent: it is
// asked for the base's items, those the fold does not hold — chunks replaced or
// removed since an earlier run — are deleted, the live ones it lacks or holds
// otherwise upserted; a store in line is not written), and keeps it in memory
// until it is unused for Config.IdleTimeout (10m), or earlier, least recently used
// first, when more than Config.MaxBases (1000) are loaded (Bases.ReleaseIdle,
// Bases.LoadedBases). A released base is folded again on its next use, trusting
// the store with the vectors it held at the release instead of writing them
// again. A base is not released while an ingestion, a search or an answer runs on
// it, while it is held (Bases.Hold), or while the store lacks some of its vectors:
// the bound is soft. A name (CheckName) is 1 to 64 ASCII letters, digits, '-'
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
// count, text hash and vector — goes into ONE write of kb.document_ingested: a
// changed document's new chunks replace its old ones in one step, a search sees
// the old version or the new one and never a mix, and a fold, a restart or a
// replay never calls the embedder. The write is one event, or, when the chunk set
// is over Config.MaxEventBytes (16 MiB) of JSON, several appended together (its
// parts: messages.KBDocumentIngested.Part), each under the bound, which the fold
// joins into the one version (the parts are of kb.document_ingested version 2,
// which a build from before them refuses instead of reading a part as the whole
// document; a document in one event is of version 1); a chunk that alone is over
// it is refused with ErrTooLarge, naming the document. A document whose rag.DocumentHash is the
// stored one, read the same way (rag.Format; a text sent as Markdown is
// "text/markdown") by the same version of the conversion
// (rag.ConversionVersion) and embedded by the same embedder
// (Config.EmbedderName), is skipped before it is converted: nothing is embedded
// nor written, and the result says StatusUnchanged; read another way (the bytes
// of guide.txt sent again as guide.md) it is converted anew, and with another
// embedder embedded again. A document read by an older conversion, or stored
// before its format was recorded (by the code before the table and heading fixes
// of version 1), is converted and embedded anew when it is sent again, once:
// StatusReplaced; so is a split version the fold did not find whole. Base.AddText takes Markdown for callers that send
// {source, content}; Base.Remove removes a document in one kb.document_removed
// event. Writes work like memory's (both are internal/entity's Stream.Write): they
// fold what the stream gained, decide against the fold, append at the next seq,
// and fold and decide again when another writer took it (eventlog.ErrSeqConflict),
// up to MaxAttempts; a key already applied returns the earlier result and writes
// nothing, unless its write was a split document stored in some of its parts only
// (the node stopped, or the log failed, amid the append): the same request sent
// again under the key writes the document again, whole, and then answers. A
// document found stored already, unchanged, under a client's key
// (Config.KeepsRequest) writes the key's mark (messages.KBKeyPart), which keeps
// the key's request so that the key with another document is refused on any
// node, after a restart too. A write after which the events later ones superseded outnumber the
// live documents compacts the stream (Base.Compact, CompactMin, CompactTail,
// eventlog.Compacting), without the knowledge base's lock while the log
// deletes, so searches and writes go on meanwhile. The slow steps of Add (conversion
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
// than Config.MaxChunks chunks (ErrTooLarge: they travel in one write) or past a
// bound of its conversion (HTML nested too deep, a zip bomb: rag.ErrTooLarge,
// also ErrTooLarge), a format Convert cannot read (rag.ErrUnsupported,
// rag.ErrMalformed), a document without text (ErrEmpty: empty or whitespace
// only; a page of headings only is its headings' text), a source name that is empty, over MaxSourceLen or holds a control
// character such as a newline or a bidirectional override (ErrInvalid, CheckSource).
//
// # Projections
//
// The vectors live in the vector store, one collection per knowledge base,
// Collection(name) = "kb_<name>" ('-' becomes '_' and a hash suffix keeps names
// apart: Milvus allows letters, digits and underscores only), an item per chunk
// whose ID is the chunk's ID, derived from the source, the document's hash and the
// chunk's index. A collection keeps the dimension of its first vectors for good: a
// base whose documents were all removed and added again by an embedder of another
// dimension puts its vectors in Collection(name) + "_d<dim>", and empties the
// collection before of its vectors. The BM25 index (pipelines/memory KeywordIndex) holds each chunk's
// heading path and text (see the tokenizer below). A chunk the embedder gives a zero vector (the hashing
// embedder and a chunk of punctuation) has no vector and is found by its words.
// A chunk whose vector the store refuses (vectorstore.Refused) is parked
// (vectorstore.UpsertIsolating writes the rest of its batch; Config.VectorParked
// hears of it) until it changes or the base is folded anew: searches score it in
// memory beside the store's hits and say so in a note. Bases.VectorBacklog counts
// the vectors still waiting for the store.
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
// with the passage embedder and searched as one more vector list. A hybrid search
// waits for those vectors at most Config.HybridEmbedWait, all of them together,
// then ranks by BM25 alone and says so in its notes.
//
// The lists are fused as Query.Fusion (default Config.Fusion, default
// FusionConvex) says:
//
//   - FusionConvex scores every candidate — every chunk of every list — by every
//     list, not only by those that found it: its cosine similarity to each query
//     vector (query, rewrites, HyDE passage; from the chunk's vector in the fold)
//     and its BM25 score for each query text (KeywordIndex.RawScores). A vector
//     list is min-max normalised over the candidates; a BM25 score is divided by
//     the query's weight (KeywordIndex.QueryWeight, the score of a chunk of average
//     length holding each query term once), so it says how much of the query the
//     chunk matches — near 1 for the chunk holding a query's rare identifier, a
//     fraction for one sharing a common word of a long question — instead of
//     making the best keyword match 1 however poor it is. The vector lists are
//     averaged, the BM25 lists are averaged, and a chunk scores
//     Alpha × vector + (1 − Alpha) × BM25 (Query.Alpha, default Config.Alpha,
//     default DefaultAlpha 0.5, DefaultHashingAlpha 0.2 with the offline hashing
//     embedder, whose vectors only blur BM25). A single list keeps its order, so
//     ModeVector and ModeBM25 rank as their one list does.
//   - FusionRRF is reciprocal rank fusion, k = 60: a chunk scores the sum over the
//     lists that rank it of 1/(60 + rank). A search of one list (ModeVector or
//     ModeBM25 without multi-query or HyDE) has nothing to fuse: its hits keep the
//     scores FusionConvex gives them (a cosine, a share of the query), whatever
//     the fusion. A ModeHybrid search is two lists, also when one of them is
//     empty (no keyword hit): rank fusion scores it as any other, and a note
//     says that no word of the query was found (with the offline hashing
//     embedder, whose vectors then meet by hash collisions only, it finds
//     nothing, unless HyDE's hypothetical answer shares a word with the base:
//     its vector alone then ranks).
//   - FusionWeightedRRF weights each BM25 vote by the same share of the query, at
//     most 1 (this was the default before FusionConvex).
//
// A chunk found by several lists counts once, and chunks with the same text
// (overlapping documents) are kept once, the best. Config.Rerank may then reorder
// (or shorten) that pool, and the pool is cut to Limit. A hit's HeadingPath is that
// of the chunk's first paragraph. The model calls carry a Request.Key derived from
// the knowledge base, the purpose and the query, so a recording gateway caches and
// replays them. Without a model, multi-query and HyDE are off and
// SearchResult.Notes says so. ModeVector and ModeBM25 search one kind of list.
// Documents, Chunks and Stats read the fold.
//
// The BM25 index is pipelines/memory's KeywordIndex (k1 1.2, b 0.75) with a
// tokenizer of its own: Unicode letters and digits, lowercased, English stopwords
// dropped, CJK bigrams, Snowball's English (Porter2) stemmer on words of ASCII
// letters (github.com/kljensen/snowball), and every identifier — letters and
// digits joined by - _ . : / or @, such as PAY-4013, max_connections, v2.3.5 —
// kept whole beside its parts, so an exact identifier outweighs chunks that hold
// its parts apart.
//
// # Measured quality
//
// TestRetrievalQuality measures each mode and fusion with multilingual-e5-small
// (TROUPE_TEST_EMBEDDINGS) on two labelled corpora. testdata/quality-hard.json
// has 176 confusable passages (three payment services with the same kinds of
// pages, one setting name in two products, error pages and release notes that
// differ by a code or a version, a team directory, runbooks, incidents, research
// abstracts, an HR FAQ in English and German) and 60 queries: identifiers and
// names, paraphrases, other languages, mixes. recall@10, recall@3, MRR@10,
// nDCG@10:
//
//	vector                0.942  0.792  0.772  0.795
//	bm25                  0.825  0.758  0.804  0.785
//	convex, Alpha 0.5     0.958  0.900  0.899  0.898   (the default)
//	convex, Alpha 0.4     0.958  0.867  0.884  0.890
//	convex, Alpha 0.6     0.958  0.900  0.872  0.878
//	convex, Alpha 0.7     0.958  0.892  0.857  0.864
//	rrf                   0.958  0.842  0.795  0.822
//	wrrf                  0.958  0.850  0.859  0.871
//	min-max BM25, 0.6     0.942  0.883  0.867  0.873
//	z-score, 0.6          0.958  0.883  0.871  0.879
//
// On testdata/quality.json (39 distinct passages, 20 queries) vector search is
// 1.000, 0.900, 0.916, 0.934; BM25 0.600, 0.600, 0.567, 0.575; convex fusion
// 1.000, 0.950, 0.956, 0.965 at every Alpha from 0.4 to 0.7; rrf 1.000, 0.850,
// 0.822, 0.864; wrrf 1.000, 0.950, 0.864, 0.897. Rank fusion scores neighbouring
// ranks of one list nearly alike, so a keyword vote reorders the embedding's
// near-ties and hybrid search lost MRR to vector search alone; convex fusion
// keeps the scores' gaps and beats both single modes on every figure. Alpha is
// not tuned to one corpus: the default is the best of the hard corpus and equal
// to the others on the small one, and BM25's share of the query is already below
// 1 for a natural-language question, which leaves the embedding the larger part
// there.
//
// # Answers
//
// Base.Ask searches, numbers the hits as evidence, each quoted between passage
// tags that its text cannot close (QuotePassage), and asks the model to answer
// citing them as "[source > heading path]". Every citation is checked against the
// evidence (a label, a source or an evidence number): what names nothing of it is
// listed in Answer.Unverified and marked in the text. With no model, with the
// offline model, or when the model's answer cites none of the evidence, the answer
// is extractive — the sentence of each of the best hits that shares the most words
// with the question, followed by its citation — and is labelled so
// (ExtractiveLabel, Answer.Extractive).
package knowledge
