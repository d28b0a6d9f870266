package knowledge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/entity"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/pipelines/rag"
	"github.com/troupe-run/troupe/vectorstore"
)

// StreamPrefix starts the ID of every knowledge base's stream in the event log.
const StreamPrefix = eventlog.KnowledgeStreamPrefix

// Status is what session listings show as the status of a knowledge base's stream,
// which is not a session and has none.
const Status = "kb"

// Stream returns the ID of the stream that holds knowledge base name's events.
func Stream(name string) string { return StreamPrefix + name }

// IsStream reports whether a stream ID of the event log is a knowledge base.
func IsStream(id string) bool { return strings.HasPrefix(id, StreamPrefix) }

// MaxNameLen bounds a knowledge base's name, in bytes.
const MaxNameLen = 64

// CheckName accepts knowledge base names like "docs" or "team-handbook_2": 1 to 64
// bytes of ASCII letters, digits, '-' and '_', starting with a letter or a digit.
// The name is part of the stream's ID and of the vector collection's name, which
// Milvus restricts to letters, digits and underscores.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty knowledge base name", ErrInvalid)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: knowledge base name of %d bytes: at most %d", ErrInvalid, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || (i > 0 && (c == '-' || c == '_'))
		if !ok {
			return fmt.Errorf("%w: knowledge base name %q: use ASCII letters, digits, '-' and '_', starting with a letter or digit (like docs or team-handbook)", ErrInvalid, name)
		}
	}
	return nil
}

// Collection is the vector store collection of knowledge base name: "kb_" and the
// name with '-' turned into '_' (Milvus allows letters, digits and underscores only);
// a name that had a '-' also gets "_" and 8 hex digits of its hash, so that "a-b"
// and "a_b" keep collections of their own.
func Collection(name string) string {
	if !strings.Contains(name, "-") {
		return "kb_" + name
	}
	sum := sha256.Sum256([]byte(name))
	return "kb_" + strings.ReplaceAll(name, "-", "_") + "_" + hex.EncodeToString(sum[:4])
}

// Errors of knowledge base operations.
var (
	// ErrInvalid means a malformed request (a bad name, an empty source, an
	// unknown search mode): nothing was changed.
	ErrInvalid = errors.New("knowledge: invalid request")
	// ErrNotFound means the knowledge base holds no document of that source.
	ErrNotFound = errors.New("knowledge: no such document")
	// ErrEmpty means a document holds no text to index (an empty file, a PDF of
	// scanned pages); nothing was written.
	ErrEmpty = errors.New("knowledge: the document holds no text")
	// ErrTooLarge means a document over MaxDocumentBytes, one that cuts into more
	// than Config.MaxChunks chunks, one with a chunk that alone is over
	// Config.MaxEventBytes in an event, or one past a bound of its conversion
	// (rag.ErrTooLarge); nothing was written.
	ErrTooLarge = errors.New("knowledge: document too large")
	// ErrEmbedder means the embedder failed: a permanent error, or a transient one
	// still failing after Config.EmbedAttempts attempts.
	ErrEmbedder = errors.New("knowledge: embedding failed")
	// ErrDimension means a document's vectors are not of the dimension of the
	// knowledge base's (another embedder ingested it): trying again fails the same
	// way. It wraps ErrEmbedder.
	ErrDimension = fmt.Errorf("%w: another dimension than the knowledge base's vectors", ErrEmbedder)
	// ErrConflict is wrapped by the error of a write that lost its seq to other
	// writers MaxAttempts times in a row. It is transient.
	ErrConflict = errors.New("knowledge: the knowledge base's stream kept changing under the write")
	// ErrKeyReused means an idempotency key applied to one change came with another
	// (another source or another document); nothing was written. It wraps ErrInvalid.
	ErrKeyReused = fmt.Errorf("%w: the idempotency key was used for another change", ErrInvalid)
	// ErrClosed is returned by the operations of a closed Bases.
	ErrClosed = errors.New("knowledge: closed")
)

// Defaults and bounds of Config.
const (
	// MaxDocumentBytes is the largest document Add accepts (rag.MaxDocumentBytes).
	MaxDocumentBytes = rag.MaxDocumentBytes
	// DefaultMaxChunks bounds the chunks of one document: they travel in one
	// write.
	DefaultMaxChunks = 4096
	// DefaultMaxEventBytes bounds the payload of one kb.document_ingested event
	// (Config.MaxEventBytes): a chunk set over it is split across several
	// events of one write. What it bounds is one value of the log: 16 MiB is far
	// under what SQLite stores in one (SQLITE_MAX_LENGTH, 1e9 bytes: over it the
	// log refused a document's event, "string or blob too big"), and high
	// enough that nearly every document is one event, read by every build
	// (a split one's parts are of a newer schema version). It is no size the
	// logs handle well: the ClickHouse log asks for payloads well under 1 MiB
	// (eventlog/clickhouse, "Large payloads"), and it does not bound a write:
	// the parts of a split document are one append, so one SQLite transaction
	// or one ClickHouse INSERT, whatever their total (up to MaxChunks chunks).
	DefaultMaxEventBytes = 16 << 20
	// DefaultEmbedBatch is how many chunks one Embed call carries.
	DefaultEmbedBatch = 32
	// DefaultEmbedAttempts bounds the calls of one batch that fail with
	// llm.ErrTransient.
	DefaultEmbedAttempts = 5
	// DefaultEmbedBackoff is the wait after a batch's first transient failure; it
	// doubles after each further one, up to MaxEmbedBackoff.
	DefaultEmbedBackoff = 250 * time.Millisecond
	MaxEmbedBackoff     = 8 * time.Second
	// DefaultHybridEmbedWait is Config.HybridEmbedWait's default: a query's
	// embedding is one short text, which an embedder that answers at all
	// answers well within it.
	DefaultHybridEmbedWait = 10 * time.Second
	// MaxAttempts bounds the appends of one write that lose their seq to another
	// writer of the stream.
	MaxAttempts = entity.MaxAttempts
	// VectorBatch is the number of items of one Upsert or Delete.
	VectorBatch = 1000
	// MaxSourceLen bounds a source's name, in bytes.
	MaxSourceLen = 1024
	// DefaultIdleTimeout and DefaultMaxBases are the defaults of the passivation
	// of knowledge bases (Config.IdleTimeout, Config.MaxBases).
	DefaultIdleTimeout = 10 * time.Minute
	DefaultMaxBases    = 1000
)

// Config configures the knowledge bases of a node.
type Config struct {
	// Log holds the knowledge bases' streams (required).
	Log eventlog.Log
	// Vectors holds the vector projection (required): one collection per
	// knowledge base, Collection(name) (see the package doc for a base that changed
	// its embedder's dimension), an item per chunk.
	Vectors vectorstore.Store
	// Embedder embeds chunks (passages); default llm.HashingEmbedder{} (offline,
	// lexical, not semantic).
	Embedder llm.Embedder
	// QueryEmbedder embeds queries; default Embedder. With e5 models the passage
	// model is "e5-passage" and the query model "e5-query". HyDE's hypothetical
	// passage is embedded with Embedder, as a passage.
	QueryEmbedder llm.Embedder
	// EmbedderName is recorded in every ingestion event; default "hashing" when
	// Embedder is defaulted, else "embedder".
	EmbedderName string
	// Model, when set, rewrites queries (Query.MultiQuery), writes hypothetical
	// answers (Query.HyDE) and answers questions (Base.Ask). Nil, or the offline
	// rule-based model (llm.OfflineName), which is no language model: queries are
	// searched as given and Ask answers extractively.
	Model llm.Model
	// Redact, when set, rewrites a document's Markdown after conversion and before
	// it is chunked, embedded and stored: secrets must not enter the events. The
	// document's hash stays that of the bytes given, so an unchanged document is
	// still recognised.
	Redact func(string) string
	// Rerank, when set, reorders the fused, deduplicated candidate pool of a search
	// before it is cut to the limit. It may drop hits; hits it adds are ignored.
	Rerank func(ctx context.Context, query string, hits []Hit) ([]Hit, error)
	// Fusion is how hybrid searches fuse their lists when the Query does not say
	// (default FusionConvex); Alpha is FusionConvex's vector share, in (0, 1]
	// (default DefaultAlpha; DefaultHashingAlpha when both embedders are
	// lexical, llm.IsLexical: the offline hashing embedder, bare or wrapped by an
	// embedder that passes Lexical on).
	Fusion Fusion
	Alpha  float64
	// Chunk says how documents are cut (pipelines/rag defaults: 512 tokens,
	// 64 tokens of overlap, cl100k_base).
	Chunk rag.ChunkOptions
	// EmbedBatch is the number of chunks per Embed call (default 32).
	EmbedBatch int
	// EmbedAttempts bounds the calls of one batch while the embedder fails with
	// llm.ErrTransient (default 5); EmbedBackoff is the first wait between them
	// (default 250ms), doubled after each failure up to MaxEmbedBackoff, or the
	// embedder's llm.RetryAfter hint when it gives one.
	EmbedAttempts int
	EmbedBackoff  time.Duration
	// HybridEmbedWait bounds how long a hybrid search waits, in all, for the
	// vectors of its query (the query embedder's calls and their retries) and of
	// HyDE's passage, counted from its first embedding: past it the search ranks by BM25 alone, with a note saying so, as
	// when the embedder fails (default DefaultHybridEmbedWait; negative: no bound
	// but the caller's context). An embedder that stopped answering would
	// otherwise hold every search for its timeout once per attempt (the node's
	// default: 2 minutes, 5 attempts). A vector search, which has no other
	// half, waits for its embedder as long as its context lets it.
	HybridEmbedWait time.Duration
	// MaxChunks bounds the chunks of one document (default 4096).
	MaxChunks int
	// MaxEventBytes bounds the JSON payload of one kb.document_ingested event
	// (default DefaultMaxEventBytes): a document's chunk set over it is
	// recorded in several events, appended together (messages.KBDocumentIngested
	// Part and Parts); a document with a chunk that alone does not fit is
	// refused with ErrTooLarge.
	MaxEventBytes int
	// Now is the clock of events, and of IdleTimeout (default time.Now).
	Now func() time.Time
	// IdleTimeout releases a knowledge base from memory (its fold: its chunks'
	// text and vectors, and its keyword index) once no operation used it for
	// this long (default DefaultIdleTimeout; negative: never); MaxBases bounds
	// the knowledge bases loaded at once (default DefaultMaxBases; negative: no
	// bound): past it, the least recently used are released first. A released
	// base is folded again from its events on its next use, and its vectors,
	// already in the store, are not written again. A base in use (an ingestion,
	// a search or an answer running on it, or held: Bases.Hold), or whose vectors
	// the store still lacks, is not released, so the bound is soft.
	IdleTimeout time.Duration
	MaxBases    int
	// VectorTrouble, when set, hears of the vector store's failures in a knowledge
	// base's collection (err set) and of its recovery there (err nil). Writes and
	// searches go on without the store (see Base.Search), so this is the sign of
	// an outage.
	VectorTrouble func(base, collection string, err error)
	// CompactTrouble, when set, hears of a failed compaction of a knowledge
	// base's stream (Base.Compact): the write that started it is stored; a later
	// write tries again.
	CompactTrouble func(base string, err error)
	// VectorParked, when set, hears of each chunk whose vector the store refused
	// (a vector of another dimension than its collection's, a payload it does not
	// take): the other vectors of its batch are written, and this one is left out
	// of the store (parked) until the chunk changes or the base is folded anew;
	// searches score parked chunks in memory. A node logs it and counts it. It is
	// called with the knowledge base's lock held and must not block.
	VectorParked func(base, collection, chunkID string, err error)
	// KeepsRequest, when set, says which idempotency keys are a client's, each
	// naming one request: a document sent under one of them and found stored
	// already, unchanged, writes the key's mark (messages.KBKeyPart), which keeps
	// the key's request, so that the key sent again with another document is
	// refused (ErrKeyReused) after a restart and on another node too, as when it
	// wrote the document. nil, or false for a key: nothing is written then, and
	// the key's request is not kept. A node sets it for its HTTP keys, unless it
	// is pinned to decision rules whose builds cannot fold a mark
	// (actors.MarksKBRequests).
	KeepsRequest func(key string) bool

	offline bool // Model was the offline model: no language model
	// lexical: both embedders' vectors find words, not meaning (llm.IsLexical).
	lexical bool
}

// noModel says why there is no language model.
func (c *Config) noModel() string {
	if c.offline {
		return "the offline model is rule-based, not a language model"
	}
	return "no language model is configured"
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Log == nil:
		return errors.New("knowledge: no event log")
	case c.Vectors == nil:
		return errors.New("knowledge: no vector store")
	case !(c.Alpha >= 0 && c.Alpha <= 1):
		return fmt.Errorf("knowledge: Alpha %v: want 0 to 1", c.Alpha)
	}
	if _, err := ParseFusion(string(c.Fusion)); err != nil {
		return fmt.Errorf("knowledge: %w", err)
	}
	switch {
	case c.EmbedBatch < 0 || c.EmbedAttempts < 0 || c.EmbedBackoff < 0 || c.MaxChunks < 0 || c.MaxEventBytes < 0:
		return errors.New("knowledge: EmbedBatch, EmbedAttempts, EmbedBackoff, MaxChunks and MaxEventBytes must not be negative")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Embedder == nil {
		c.Embedder = llm.HashingEmbedder{}
		if c.EmbedderName == "" {
			c.EmbedderName = "hashing"
		}
	}
	if c.EmbedderName == "" {
		c.EmbedderName = "embedder"
	}
	if c.QueryEmbedder == nil {
		c.QueryEmbedder = c.Embedder
	}
	// One property decides both the default vector share and what a search that
	// found no word of its query answers, whoever wraps the embedders.
	c.lexical = llm.IsLexical(c.Embedder) && llm.IsLexical(c.QueryEmbedder)
	c.Fusion, _ = ParseFusion(string(c.Fusion)) // Validate said it parses
	if c.Fusion == "" {
		c.Fusion = DefaultFusion
	}
	if c.Alpha == 0 {
		c.Alpha = DefaultAlpha
		if c.lexical {
			c.Alpha = DefaultHashingAlpha
		}
	}
	if c.Model != nil && c.Model.Name() == llm.OfflineName {
		c.Model, c.offline = nil, true
	}
	if c.EmbedBatch == 0 {
		c.EmbedBatch = DefaultEmbedBatch
	}
	if c.EmbedAttempts == 0 {
		c.EmbedAttempts = DefaultEmbedAttempts
	}
	if c.EmbedBackoff == 0 {
		c.EmbedBackoff = DefaultEmbedBackoff
	}
	if c.HybridEmbedWait == 0 {
		c.HybridEmbedWait = DefaultHybridEmbedWait
	}
	if c.MaxChunks == 0 {
		c.MaxChunks = DefaultMaxChunks
	}
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = DefaultMaxEventBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxBases == 0 {
		c.MaxBases = DefaultMaxBases
	}
}

// Bases is the knowledge of a node: its knowledge bases, each folded from its
// stream on first use and kept in memory until it is idle (Config.IdleTimeout,
// Config.MaxBases). It is safe for concurrent use.
type Bases struct {
	cfg Config

	closed  atomic.Bool
	backlog atomic.Int64 // the bases' vectors still to write (VectorBacklog)
	bases   *entity.Loaded[*Base]
}

// VectorBacklog is the number of chunk vectors of the open knowledge bases that
// the vector store still lacks, or holds and should not: what waits for the store
// while it is down, as of each base's last operation.
func (bs *Bases) VectorBacklog() int { return int(bs.backlog.Load()) }

// CatchUpVectors, while the vector store lacks some vectors (VectorBacklog),
// refreshes every open knowledge base, which writes what it can of them: after an
// outage, the vectors of a base nobody adds to or searches reach the store too. A
// base whose store failed lately waits out its delay. It returns the first error
// of a refresh.
//
// A node calls it every few seconds: it also releases the knowledge bases idle
// past IdleTimeout or over MaxBases (ReleaseIdle), at most every 10 s.
func (bs *Bases) CatchUpVectors(ctx context.Context) error {
	bs.bases.Sweep(bs.cfg.Now(), bs.cfg.IdleTimeout, bs.cfg.MaxBases, false, "")
	if bs.VectorBacklog() == 0 {
		return nil
	}
	return bs.bases.Each(func(b *Base) error { return b.Refresh(ctx) })
}

// LoadedBases is the number of knowledge bases this process holds in memory,
// folded (see Config.IdleTimeout and Config.MaxBases).
func (bs *Bases) LoadedBases() int { return bs.bases.Count() }

// Loaded reports whether knowledge base name is held in memory, folded, now (it
// may be released just after: see Config.IdleTimeout). A base may be loaded and
// empty: one that has no events is folded, empty, when it is asked for by name.
func (bs *Bases) Loaded(name string) bool { return bs.bases.Has(name) }

// ReleaseIdle releases the knowledge bases unused for IdleTimeout, and the least
// recently used ones past MaxBases (see Config.IdleTimeout), now: a node does it
// in its background catch-up (CatchUpVectors), and the opening of a base does it
// too. It returns how many it released.
func (bs *Bases) ReleaseIdle() int {
	return bs.bases.Sweep(bs.cfg.Now(), bs.cfg.IdleTimeout, bs.cfg.MaxBases, true, "")
}

// Hold returns knowledge base name, as Base does, held in memory until release is
// called: a long operation that calls the base several times is not cut by its
// release in the middle. Its own operations (Add, Search, Ask) hold it while they
// run. release is idempotent.
func (bs *Bases) Hold(ctx context.Context, name string) (b *Base, release func(), err error) {
	b, err = bs.Base(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return b, bs.bases.Hold(b, bs.cfg.Now), nil
}

// Open returns the knowledge bases cfg describes. It validates cfg and reads nothing
// yet.
func Open(cfg Config) (*Bases, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	bs := &Bases{cfg: cfg}
	bs.bases = entity.NewLoaded(func(b *Base) *entity.Use { return &b.use }, releaseBase)
	return bs, nil
}

// Base returns knowledge base name (CheckName), folding its stream and bringing its
// vector collection in line with the fold on first use: the store is persistent and
// may hold chunks from before a restart, among them chunks replaced or removed
// since. A knowledge base that has no events yet is empty; its stream starts with
// its first document. A base released since its last use (Config.IdleTimeout) is
// folded again, trusting the store with the vectors it held then.
func (bs *Bases) Base(ctx context.Context, name string) (*Base, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if bs.closed.Load() {
		return nil, ErrClosed
	}
	now := bs.cfg.Now()
	b, stale, err := bs.bases.Open(name, now, func() *Base { return newBase(bs, name) }, func(b *Base) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.fold(ctx)
	})
	if err != nil {
		return nil, err
	}
	if stale {
		if err := b.refresh(ctx); err != nil {
			return nil, err
		}
	} else {
		// The first sync (a rebuild) happens here, without the locks of the
		// base and of the registry; a store that is down leaves the base
		// stale, for a later operation, and the base opens anyway.
		b.sync(ctx)
	}
	bs.bases.Sweep(now, bs.cfg.IdleTimeout, bs.cfg.MaxBases, false, name)
	return b, nil
}

// hold keeps b loaded while an operation runs on it (Bases.Hold).
func (bs *Bases) hold(b *Base) (release func()) { return bs.bases.Hold(b, bs.cfg.Now) }

// List lists the knowledge bases whose streams are in the log, sorted.
func (bs *Bases) List(ctx context.Context) ([]string, error) {
	if bs.closed.Load() {
		return nil, ErrClosed
	}
	out, err := entity.List(ctx, bs.cfg.Log, StreamPrefix, IsStream)
	if err != nil {
		return nil, fmt.Errorf("knowledge: listing knowledge bases: %w", err)
	}
	return out, nil
}

// HasModel reports whether a language model is configured for query rewriting,
// HyDE and generated answers (not the offline rule-based model).
func (bs *Bases) HasModel() bool { return bs.cfg.Model != nil }

// Close stops bs: later operations fail with ErrClosed. It closes neither the log
// nor the vector store, which the caller owns. It is idempotent.
func (bs *Bases) Close() error {
	bs.closed.Store(true)
	return nil
}
