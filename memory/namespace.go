package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/entity"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// Defaults and bounds of Config and Query.
const (
	DefaultWorkingCapacity = 50
	DefaultWorkingTTL      = 60 * time.Minute
	DefaultMaxContentBytes = 16 << 10
	DefaultBlockLimit      = 2000
	DefaultLimit           = 10
	MaxLimit               = 100
	// MaxAttempts bounds the appends of one write that lose their seq to another
	// writer of the namespace's stream.
	MaxAttempts = entity.MaxAttempts
	// MaxFuture is how far past now a memory's timestamp may lie.
	MaxFuture = 24 * time.Hour
	// VectorBatch is the number of items of one Upsert or Delete when a namespace's
	// vectors are rebuilt.
	VectorBatch = 1000
	// Default dimensions of the offline encoders of image and audio descriptions
	// (text uses llm.HashingEmbedder's default, 256): each modality has its own
	// collection and its own dimension.
	DefaultImageDim = 512
	DefaultAudioDim = 128
)

// ErrConflict is wrapped by the error of a write that lost its seq to other writers
// MaxAttempts times in a row. It is transient: the call may be made again.
var ErrConflict = errors.New("memory: the namespace's stream kept changing under the write")

// ErrVectorStore is wrapped by the error of an operation that needed the vector
// store and did not get what it needed: a search by vector while the store does
// not answer, or refuses the namespace's vectors in a collection searched. The
// memories are in the log all the same: writes, and searches by keyword, go on
// without the store, and their vectors are put in it once it takes them.
var ErrVectorStore = errors.New("memory: vector store")

// ErrClosed is returned by the operations of a closed Memories.
var ErrClosed = errors.New("memory: closed")

// Config configures the memories of a node.
type Config struct {
	// Log holds the namespaces' streams (required).
	Log eventlog.Log
	// Vectors holds the vector projection (required): one collection per tier and
	// modality, "mem_<tier>_<modality>" (mem_semantic_text, mem_perceptual_image),
	// each item with the metadata {"ns": namespace, "tier": tier}.
	Vectors vectorstore.Store
	// Embedder embeds stored text (passages); default llm.HashingEmbedder{} (offline,
	// lexical, not semantic).
	Embedder llm.Embedder
	// QueryEmbedder embeds query text; default Embedder. With e5 models, the
	// passage model is "e5-passage" and the query model "e5-query".
	QueryEmbedder llm.Embedder
	// EmbedderName is recorded in every text memory's record (MemoryRecord.Embedder);
	// default "hashing" when Embedder is defaulted, else "embedder".
	EmbedderName string
	// Encoders embed image and audio memories, and queries for them. Default, for a
	// modality without one: the offline fallback, an llm.HashingEmbedder of its own
	// dimension (DefaultImageDim, DefaultAudioDim) over the memory's text
	// description: lexical matching of descriptions, not perception of the media.
	Encoders map[Modality]llm.Embedder
	// Model, when set, drives extraction and the ADD/UPDATE/DELETE/NONE decisions of
	// the write path; heuristics are used without it.
	Model llm.Model
	// Extract extracts the entities and relations of a semantic memory's content on
	// write; default pmem.ExtractEntities (offline heuristics).
	Extract func(ctx context.Context, text string) ([]string, []pmem.Relation, error)
	// Now is the clock of events, ages, decay and TTL (default time.Now).
	Now func() time.Time
	// NewID makes memory IDs (default "m_" + 16 random hex digits).
	NewID func() string
	// WorkingCapacity bounds the working memories of a namespace (default 50);
	// WorkingTTL is how long a working memory lives after it was last written
	// (default 60m).
	WorkingCapacity int
	WorkingTTL      time.Duration
	// MaxContentBytes bounds a memory's content (default 16 KiB), and each of its
	// metadata (as compact JSON), outcome, URI and participants (together).
	MaxContentBytes int
	// BlockLimit is the size bound of a core block, in characters, when the block
	// names none (default 2000).
	BlockLimit int
	// Redact rewrites the caller's text before it is stored (content, metadata, URI,
	// participants, outcome, sources, reasons, core blocks): secrets must not enter
	// events.
	Redact func(string) string
	// Written, when set, hears of every Add that stored new memories (through the
	// HTTP API, the memory tool, Remember or a caller of its own): the namespace and
	// how many memories it added (duplicates and an Add repeated under its key add
	// none). A node wakes the namespace's consolidator with it. It is called after
	// the write, outside the namespace's lock, and must not block.
	Written func(namespace string, added int)
	// IdleTimeout releases a namespace from memory (its fold and projections:
	// tens of KB, more with its memories) once no operation used it for this long
	// (default DefaultIdleTimeout; negative: never); MaxNamespaces bounds the
	// namespaces loaded at once (default DefaultMaxNamespaces; negative: no
	// bound): past it, the least recently used are released first. A released
	// namespace is folded again from its events on its next use, and its vectors
	// are not written again. A namespace in use, held (Memories.Hold: a
	// consolidation run), or whose vectors the store still lacks is not released,
	// so the bound is soft. Their times are read from Now.
	IdleTimeout   time.Duration
	MaxNamespaces int
	// VectorRetry is how long a vector the store refused waits before a catch-up
	// (CatchUpVectors, or the namespace's next operation) tries it again: a
	// transient error the store gave as a refusal must not keep a memory out of
	// vector search for good. Each refusal again doubles the wait, up to 32 times
	// this (default DefaultVectorRetry, 2 minutes: about an hour at most).
	VectorRetry time.Duration
	// Opened, when set, hears of each namespace each time this process loads it
	// (folds its stream: first, and again after it was released): a node starts
	// the namespace's consolidation schedule with it. It is called once the fold
	// succeeded, and must not block.
	Opened func(namespace string)
	// VectorTrouble, when set, hears of the vector store's failures in a
	// namespace's collection (err) and of its recovery there (err nil, once the
	// collection took a request again after failing): the memories are stored all
	// the same, their vectors follow. A node logs them. It is called with the
	// namespace's lock held, at most once per failed request, and must not block.
	VectorTrouble func(namespace, collection string, err error)
	// Skipped, when set, hears of the memory events of a type this build does not
	// know (a later build's) that a namespace's fold skipped instead of failing
	// the namespace: the namespace, the type and the seq of the first such event
	// seen, once per type for the Memories, however many events and namespaces
	// hold it. A node logs it. It may be called with the namespace's lock held,
	// and must not block.
	Skipped func(namespace string, t messages.Type, seq uint64)
	// VectorParked, when set, hears of each memory whose vector the store refused
	// (a vector of another dimension than its collection's, a payload it does not
	// take): the other vectors of its batch are written, and this one is left out
	// of the store (parked) until the memory changes, the namespace is folded
	// anew, or VectorRetry has passed; searches by keyword find it all the same. A
	// node logs it and counts it (a refusal of a try again too).
	// It is called with the namespace's lock held and must not block.
	VectorParked func(namespace, collection, id string, err error)
	// Consolidate is the memory tool's consolidate action; nil: unavailable.
	Consolidate func(ctx context.Context, ns *Namespace, key string) (string, error)
	// Unmarked says that the streams are shared with builds that cannot fold a
	// memory.remembered (a node pinned to decision rules before 12 for a
	// rolling upgrade: actors.MarksRemembered): an Add under a client's
	// request key whose every memory is stored already then writes none, and
	// keeps no request for the key.
	Unmarked bool
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Log == nil:
		return errors.New("memory: no event log")
	case c.Vectors == nil:
		return errors.New("memory: no vector store")
	case c.WorkingCapacity < 0 || c.WorkingTTL < 0 || c.MaxContentBytes < 0 || c.BlockLimit < 0:
		return errors.New("memory: limits must not be negative")
	}
	for m := range c.Encoders {
		if m != Image && m != Audio && m != Text {
			return fmt.Errorf("memory: an encoder for unknown modality %q", m)
		}
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
	enc := map[Modality]llm.Embedder{}
	for m, e := range c.Encoders {
		enc[m] = e
	}
	if enc[Image] == nil {
		enc[Image] = llm.HashingEmbedder{Dim: DefaultImageDim}
	}
	if enc[Audio] == nil {
		enc[Audio] = llm.HashingEmbedder{Dim: DefaultAudioDim}
	}
	c.Encoders = enc
	if c.Extract == nil {
		c.Extract = func(_ context.Context, text string) ([]string, []pmem.Relation, error) {
			ents, rels := pmem.ExtractEntities(text)
			return ents, rels, nil
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = func() string {
			var b [8]byte
			_, _ = rand.Read(b[:])
			return "m_" + hex.EncodeToString(b[:])
		}
	}
	if c.WorkingCapacity == 0 {
		c.WorkingCapacity = DefaultWorkingCapacity
	}
	if c.WorkingTTL == 0 {
		c.WorkingTTL = DefaultWorkingTTL
	}
	if c.MaxContentBytes == 0 {
		c.MaxContentBytes = DefaultMaxContentBytes
	}
	if c.BlockLimit == 0 {
		c.BlockLimit = DefaultBlockLimit
	}
	if c.VectorRetry <= 0 {
		c.VectorRetry = DefaultVectorRetry
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxNamespaces == 0 {
		c.MaxNamespaces = DefaultMaxNamespaces
	}
}

// Memories is the memory of a node: its namespaces, each folded from its stream on
// first use and kept in memory until it is idle (Config.IdleTimeout,
// Config.MaxNamespaces). It is safe for concurrent use.
type Memories struct {
	cfg Config

	closed  atomic.Bool
	backlog atomic.Int64 // the namespaces' vectors still to write (VectorBacklog)
	// parkedN and retriedN count the vectors the store refused that wait for
	// another try (ParkedVectors), and those tries (ParkedRetries).
	parkedN, retriedN atomic.Int64
	spaces            *entity.Loaded[*Namespace]
	ids               *idIndex // memory ID → namespace (Locate)
	// skipped holds the memory event types the folds skipped (Config.Skipped):
	// each is told once.
	skipped sync.Map
}

// skip tells Config.Skipped of e, an event of namespace ns of a type its fold
// skipped, unless an event of its type was told before.
func (m *Memories) skip(ns string, e messages.Envelope) {
	if _, told := m.skipped.LoadOrStore(e.Type, struct{}{}); !told && m.cfg.Skipped != nil {
		m.cfg.Skipped(ns, e.Type, e.Seq)
	}
}

// Open returns the memories cfg describes. It validates cfg and reads nothing yet.
func Open(cfg Config) (*Memories, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	m := &Memories{cfg: cfg, ids: newIDIndex()}
	m.spaces = entity.NewLoaded(func(ns *Namespace) *entity.Use { return &ns.use }, releaseNamespace)
	return m, nil
}

// VectorBacklog is the number of vectors of the open namespaces that the vector
// store still lacks, or holds and should not: what waits for the store while it is
// down, as of each namespace's last operation.
func (m *Memories) VectorBacklog() int { return int(m.backlog.Load()) }

// CatchUpVectors, while the vector store lacks some vectors (VectorBacklog),
// refreshes every open namespace, which writes what it can of them: after an
// outage, the vectors of a namespace nobody writes to or searches reach the store
// too. A collection that failed lately waits out its delay. It returns the first
// error of a refresh.
//
// A node calls it every few seconds: it also releases the namespaces idle past
// IdleTimeout or over MaxNamespaces (ReleaseIdle), at most every 10 s.
//
// It also tries again the vectors the store refused (parked) whose wait
// (Config.VectorRetry) is over, in the namespaces that have some.
func (m *Memories) CatchUpVectors(ctx context.Context) error {
	m.spaces.Sweep(m.cfg.Now(), m.cfg.IdleTimeout, m.cfg.MaxNamespaces, false, "")
	all := m.VectorBacklog() > 0
	if !all && m.ParkedVectors() == 0 {
		return nil
	}
	now := time.Now().UnixNano()
	return m.spaces.Each(func(ns *Namespace) error {
		if due := ns.parkDue.Load(); all || (due != 0 && due <= now) {
			return ns.Refresh(ctx)
		}
		return nil
	})
}

// ParkedVectors is the number of vectors of the loaded namespaces that the store
// refused and that wait to be tried again (Config.VectorRetry).
func (m *Memories) ParkedVectors() int { return int(m.parkedN.Load()) }

// ParkedRetries counts the tries of refused vectors after their wait, since Open.
func (m *Memories) ParkedRetries() int64 { return m.retriedN.Load() }

// Namespace returns the namespace name, folding its stream on first use. Its vector
// projection is rebuilt by the syncs that follow (the vector store may hold items
// from before a restart: the live ones are upserted again and the forgotten ones
// deleted); a vector store that does not answer, or refuses some vectors, fails
// neither this nor the operations that need no vectors (see Namespace.Search).
func (m *Memories) Namespace(ctx context.Context, name string) (*Namespace, error) {
	if err := CheckNamespace(name); err != nil {
		return nil, err
	}
	if m.closed.Load() {
		return nil, ErrClosed
	}
	now := m.cfg.Now()
	ns, stale, err := m.spaces.Open(name, now, func() *Namespace { return newNamespace(m, name) }, func(ns *Namespace) error {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		if err := ns.fold(ctx); err != nil {
			return err
		}
		if m.cfg.Opened != nil {
			m.cfg.Opened(name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if stale {
		if err := ns.Refresh(ctx); err != nil {
			return nil, err
		}
	}
	m.spaces.Sweep(now, m.cfg.IdleTimeout, m.cfg.MaxNamespaces, false, name)
	return ns, nil
}

// Namespaces lists the namespaces whose streams are in the log, sorted.
func (m *Memories) Namespaces(ctx context.Context) ([]string, error) {
	out, err := entity.List(ctx, m.cfg.Log, StreamPrefix, IsStream)
	if err != nil {
		return nil, fmt.Errorf("memory: listing namespaces: %w", err)
	}
	return out, nil
}

// Close stops m: later operations fail with ErrClosed. It closes neither the log
// nor the vector store, which the caller owns. It is idempotent.
func (m *Memories) Close() error {
	m.closed.Store(true)
	return nil
}

// Namespace is one memory namespace: the fold of its stream and the projections of
// that fold (a keyword index per tier, the entity graph, the core blocks and the
// vectors in the store), brought up to date with the log before every operation. It
// is safe for concurrent use: its reads and searches take its lock one at a time,
// and the writes called at once are decided one after another and appended
// together (entity.Batch), their slow calls (embedding, extraction) made before.
type Namespace struct {
	m      *Memories
	cfg    *Config
	name   string
	stream string
	s      entity.Stream
	batch  entity.Batch // the writes, decided and appended in groups

	namespaceUse

	mu sync.Mutex
	st *state
	pj *projection
	// pending holds the memory IDs the events folded since the last sync put,
	// for the ID index (Memories.Locate), which hears of them once they are
	// stored: a batch folds its events before its Append, which may fail.
	pending []idNote
	// cleanAt is the seq up to which the vector store held every vector of the
	// fold at the last sync (0: it lacked some, or unknown); trustAt is cleanAt
	// as it was when a failed batch reset the fold: its refold trusts the store
	// with what it folds up to there (trustStore) instead of writing it all again.
	cleanAt, trustAt uint64
}

// idNote is what the ID index is told of one event (idIndex.folded).
type idNote struct {
	seq uint64
	ids []string
}

func newNamespace(m *Memories, name string) *Namespace {
	ns := &Namespace{m: m, cfg: &m.cfg, name: name, stream: Stream(name), st: newState(name), pj: newProjection()}
	ns.s = entity.Stream{Log: m.cfg.Log, ID: ns.stream, Kind: "memory", IDPrefix: "mem-", Now: m.cfg.Now, Conflict: ErrConflict,
		Closed: func() error {
			if m.closed.Load() {
				return ErrClosed
			}
			return nil
		}}
	ns.batch = entity.Batch{Stream: &ns.s, Fold: nsFold{ns}, Lock: &ns.mu, Before: func(context.Context) ([]messages.Payload, error) {
		if p := ns.expiry(); p != nil {
			return []messages.Payload{p}, nil
		}
		return nil, nil
	}}
	return ns
}

// nsFold is a namespace as entity.Stream folds it. The caller holds mu.
type nsFold struct{ *Namespace }

func (f nsFold) Seq() uint64                     { return f.st.seq }
func (f nsFold) Apply(e messages.Envelope) error { return f.apply(e) }
func (f nsFold) Sync(ctx context.Context) error  { f.catchUpVectors(ctx); return nil }
func (f nsFold) Applied(key string) bool         { return f.st.keys[key] != nil }

// Reset forgets the fold, after a batch whose Append failed folded its events
// (entity.Batch): the next catch-up folds the stream again from its start. The
// in-memory projections go with it; what the vector store holds stays known:
// the refold trusts it up to the seq it was in line with (trustAt), and a
// collection's failures keep their waits.
func (f nsFold) Reset() {
	ns := f.Namespace
	old := ns.pj
	ns.st, ns.pj, ns.pending = newState(ns.name), newProjection(), nil
	ns.pj.trouble, ns.pj.backlog, ns.pj.parkedN = old.trouble, old.backlog, old.parkedN
	ns.trustAt = ns.cleanAt
}

// Name returns the namespace's name.
func (ns *Namespace) Name() string { return ns.name }

// fold folds the events appended since the last fold and brings the projections
// up to date. The caller holds mu.
func (ns *Namespace) fold(ctx context.Context) error { return ns.s.CatchUp(ctx, nsFold{ns}) }

// apply folds one event into the state and the in-memory projections; the vectors
// follow in syncVectors.
func (ns *Namespace) apply(e messages.Envelope) error {
	eff, err := ns.st.apply(e)
	if err != nil {
		return err
	}
	if eff.unknown != "" {
		ns.m.skip(ns.name, e)
	}
	ns.pj.apply(ns.st, eff)
	ns.pending = append(ns.pending, idNote{seq: e.Seq, ids: eff.put})
	if e.Seq == ns.use.ResumeAt() || e.Seq == ns.trustAt {
		ns.trustStore()
	}
	return nil
}

// noteIDs tells the ID index of the events folded since the last time: they are
// stored. The caller holds mu.
func (ns *Namespace) noteIDs() {
	for _, n := range ns.pending {
		ns.m.ids.folded(ns.name, n.seq, n.ids)
	}
	ns.pending = ns.pending[:0]
}

// write makes one change in the namespace's batch (entity.Batch.Write): it folds
// the stream, forgets the working memories that expired, and, unless the key was
// applied already, appends the events change builds for the next seqs, together
// with the changes of the writes called at the same time, again after a refold
// when another writer took them. change runs with mu held and checks its input
// against the folded state (the writes of the batch before it included); its error
// is returned with nothing written for it. A nil change, or one that returns no
// events, writes nothing but the expiry. done, when set, runs with mu held once the
// change is stored (applied: the key's earlier change was), and reads what the
// caller returns. The caller does not hold mu, and makes its slow calls (embedding)
// before.
func (ns *Namespace) write(ctx context.Context, key string, change func() ([]messages.Payload, error), done func(applied bool)) error {
	err := ns.batch.Write(ctx, key, func(context.Context) ([]messages.Payload, error) {
		if change == nil {
			return nil, nil
		}
		return change()
	}, done)
	if ns.use.Released() {
		// Released while its caller held it: the namespace loaded in its place
		// folds this write before its next use (entity.Loaded.Open).
		ns.m.spaces.Changed(ns.name)
	}
	return err
}

// foldExpire folds the stream and forgets the working memories that expired, in
// an Append of its own: what a search does first. The caller holds mu.
func (ns *Namespace) foldExpire(ctx context.Context) error {
	if ns.use.Released() {
		defer ns.m.spaces.Changed(ns.name) // as write
	}
	_, err := ns.s.Write(ctx, nsFold{ns}, "", func(ctx context.Context) ([]messages.Payload, error) {
		if err := ns.expire(ctx); err != nil {
			if errors.Is(err, eventlog.ErrSeqConflict) {
				return nil, err // refold, then decide again
			}
			return nil, fmt.Errorf("memory: expiring working memories of %s: %w", ns.name, err)
		}
		return nil, nil
	})
	return err
}

// Get returns the live memory id (invalid ones included).
func (ns *Namespace) Get(id string) (Memory, bool) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	m := ns.st.mems[id]
	if m == nil {
		return Memory{}, false
	}
	return copyMemory(m), true
}

// Snapshot returns every live memory (invalid ones included), by ID. A working
// memory past its TTL is not live: the next search or write forgets it (a search
// never returns one), whoever looks first.
func (ns *Namespace) Snapshot() []Memory {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	now := ns.cfg.Now()
	out := make([]Memory, 0, len(ns.st.mems))
	for _, m := range ns.st.mems {
		if !ns.expired(m, now) {
			out = append(out, copyMemory(m))
		}
	}
	slices.SortFunc(out, func(a, b Memory) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// ForgottenSources returns, for each semantic memory forgotten or cleared that had
// memories among its sources (a distilled fact, one that absorbed duplicates), those
// memories' IDs, in the order the memories went: the clusters they cover were
// distilled once and their fact let go, so the consolidator does not distil them
// again.
func (ns *Namespace) ForgottenSources() [][]string {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	out := make([][]string, len(ns.st.letGo))
	for i, ids := range ns.st.letGo {
		out[i] = slices.Clone(ids)
	}
	return out
}

// RememberedUnder reports whether a Remember under key is done, as of the last
// fold (Refresh): one of its facts' writes (factKey, invalidationKey: see
// Remember) is applied, or, when it wrote nothing, the memory.remembered it ended
// with (RememberOptions.Mark). A Remember that wrote nothing without the mark (an
// older build's, or one stopped between its extraction and its mark) reports
// false: performed again under key, it writes nothing twice.
func (ns *Namespace) RememberedUnder(key string) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.st.rememberedUnder(key)
}

// Refresh folds what other writers appended to the namespace's stream since the
// last operation.
func (ns *Namespace) Refresh(ctx context.Context) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.fold(ctx)
}

// TierStats counts the memories of a tier.
type TierStats struct {
	Count         int     `json:"count"`
	Invalid       int     `json:"invalid"`
	AvgImportance float64 `json:"avg_importance"`
}

// Stats describes a namespace: its memories per tier (every tier present), the
// distinct terms of its keyword indexes (summed over tiers), its graph's entities
// and relations, its core blocks that hold a value, and the last seq folded.
type Stats struct {
	Namespace string             `json:"namespace"`
	Tiers     map[Tier]TierStats `json:"tiers"`
	Keywords  int                `json:"keywords"`
	Entities  int                `json:"entities"`
	Relations int                `json:"relations"`
	Blocks    int                `json:"blocks"`
	Seq       uint64             `json:"seq"`
}

// Stats returns the namespace's statistics as of the last fold.
func (ns *Namespace) Stats() Stats {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	s := Stats{Namespace: ns.name, Tiers: map[Tier]TierStats{}, Seq: ns.st.seq,
		Entities: ns.pj.graph.Entities(), Relations: ns.pj.graph.Relations(), Blocks: len(ns.st.blocks)}
	sum := map[Tier]float64{}
	for _, t := range Tiers {
		s.Tiers[t] = TierStats{}
		s.Keywords += ns.pj.keywords[t].Terms()
	}
	for _, m := range ns.st.mems {
		ts := s.Tiers[m.Tier]
		ts.Count++
		if m.InvalidAt != nil {
			ts.Invalid++
		}
		sum[m.Tier] += m.Importance
		s.Tiers[m.Tier] = ts
	}
	for t, ts := range s.Tiers {
		if ts.Count > 0 {
			ts.AvgImportance = sum[t] / float64(ts.Count)
			s.Tiers[t] = ts
		}
	}
	return s
}
