package messages

// The events of a knowledge base (package knowledge). A knowledge base ("docs",
// "handbook") is an event-sourced entity like a memory namespace: its changes are
// appended to a stream of its own, "kb/<name>" (not a session: no task runs there),
// and its documents, chunks, vector collection and keyword index are the fold of
// that stream. One event carries a document's whole chunk set, vectors included, so
// a fold or a replay never calls the embedder and a reader never sees half of a
// document's new version beside half of its old one.
//
// Key is the idempotency key of the operation that made the change (an HTTP
// request's key, a CLI run's key), empty for a change made without one.

// KBChunk is one chunk of an ingested document, as package pipelines/rag cut it
// from the document's Markdown.
type KBChunk struct {
	// ChunkID identifies the chunk within its knowledge base: derived from the
	// source, the document's hash and Index, so a changed document's chunks get new
	// IDs.
	ChunkID string `json:"chunk_id"`
	// Index is the chunk's position in its document, from 0.
	Index int `json:"index"`
	// HeadingPath is the chain of Markdown headings above the chunk, outermost first
	// ("# Guide", "## Install"): a chunk holds one section's text (a heading starts a
	// chunk), except in a document too long for that, whose chunks may span sections
	// and are labelled by the section they start in.
	HeadingPath []string `json:"heading_path,omitempty"`
	// Start and End are byte offsets into the document's Markdown.
	Start int `json:"start"`
	End   int `json:"end"`
	// Tokens is the chunk's token count (cl100k_base unless configured otherwise).
	Tokens int `json:"tokens"`
	// Hash is the hex SHA-256 of Text: chunks of overlapping documents that hold the
	// same text share it.
	Hash string `json:"hash"`
	Text string `json:"text"`
	// Vector is Text's embedding as computed at ingestion.
	Vector Vector `json:"vector,omitempty"`
}

// KBDocumentIngested records a document's ingestion: Chunks is its whole chunk set,
// which replaces every chunk an earlier version of Source had.
//
// A chunk set too large for one event (knowledge.Config.MaxEventBytes) is
// recorded in Parts events appended together, in one Append, at consecutive
// seqs: Part 1 replaces the document's chunks as a whole event does, and each
// next part (Part 2 to Parts), with the same Source and Hash, adds its chunks to
// that version. Every part repeats the document's fields (Key, Reason, Bytes,
// Embedder, Format, Conversion, Status). Part and Parts are 0 in an event that holds the
// whole chunk set.
//
// The parts of a split chunk set are of schema version 2, an event that holds
// it whole of version 1: a build that reads version 1 only (from before the
// parts) refuses a part (ErrFutureVersion), where it would have read each part
// as the whole document, kept the last one's chunks and dropped the others,
// and still reads every document that is not split.
type KBDocumentIngested struct {
	Key    string `json:"key,omitempty"`
	Reason string `json:"reason"`
	// Source names the document: a path as given to the ingester, a URL, or the
	// caller's name for a text.
	Source string `json:"source"`
	// Hash is the hex SHA-256 of the document's bytes (rag.DocumentHash): an
	// unchanged document is recognised by it and not ingested again.
	Hash string `json:"hash"`
	// Bytes is the size of the document, MarkdownBytes that of its Markdown.
	Bytes         int `json:"bytes"`
	MarkdownBytes int `json:"markdown_bytes"`
	// Embedder names the model that computed the vectors (e5-passage, hashing).
	Embedder string `json:"embedder"`
	// Format says how the bytes were read into Markdown: rag.Format's name
	// ("markdown", "text", "html", "pdf", …), or "text/markdown" for a text sent
	// as Markdown; "" in an event written before it was recorded. The same bytes
	// read another way are another version of the document.
	Format string `json:"format,omitempty"`
	// Conversion is the version of the conversion and chunking that read the
	// document (rag.ConversionVersion); 0 in an event written before it was
	// recorded. A document read by an older one than the ingester's is read
	// again when it is sent again, unchanged bytes or not.
	Conversion int `json:"conversion,omitempty"`
	// Status is what the write answered, "added" or "replaced" (the document
	// was new, or replaced a version of it), for a retry under Key to answer
	// the same once compaction deleted the version it replaced; "" in an event
	// written before it was recorded (the fold then tells by the versions it
	// read). A build from before it ignores it, as every field it does not
	// know.
	Status string `json:"status,omitempty"`
	// Part and Parts say which part of a chunk set split across several events
	// this is (see above): 0 when the event holds it whole.
	Part   int       `json:"part,omitempty"`
	Parts  int       `json:"parts,omitempty"`
	Chunks []KBChunk `json:"chunks"`
	// ChunkCount and Tokens are the document's chunks and their tokens, in a
	// key's mark only (KBKeyPart), which repeats none of its chunks: the answer
	// its key's retry gets.
	ChunkCount int `json:"chunk_count,omitempty"`
	Tokens     int `json:"tokens,omitempty"`
}

// KBKeyPart is the Part of a kb.document_ingested that holds no chunk and
// changes no document: the mark of a write under a client's idempotency key
// (Key) that found its document stored already, unchanged (Status
// "unchanged"), which keeps the key's request (Source, Hash, Format), so that
// the key sent again with another document is refused after a restart and on
// another node too. It is written with Parts 2, so of schema version 2: a build
// from before the split chunk sets refuses it (ErrFutureVersion) rather than
// read it as the document's whole chunk set, none; a build that splits them
// folds it as a part that follows no first part, which it folds as nothing (no
// version of a document has so many parts).
const KBKeyPart = 1 << 30

// KBDocumentRemoved records that a document and all its chunks left the knowledge
// base.
type KBDocumentRemoved struct {
	Key    string `json:"key,omitempty"`
	Reason string `json:"reason"`
	Source string `json:"source"`
}

// MessageType implements Payload.
func (*KBDocumentIngested) MessageType() Type { return TypeKBDocumentIngested }

// schemaVersion implements versioned: 2 for a part of a split chunk set, 1 for
// a whole one (see KBDocumentIngested).
func (p *KBDocumentIngested) schemaVersion() int {
	if p.Parts > 1 {
		return 2
	}
	return 1
}

// MessageType implements Payload.
func (*KBDocumentRemoved) MessageType() Type { return TypeKBDocumentRemoved }
