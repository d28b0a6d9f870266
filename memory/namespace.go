package memory

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/eventlog"
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
	MaxAttempts = 20
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
	// MaxContentBytes bounds a memory's content (default 16 KiB).
	MaxContentBytes int
	// BlockLimit is the size bound of a core block, in characters, when the block
	// names none (default 2000).
	BlockLimit int
	// Redact rewrites content before it is stored: secrets must not enter events.
	Redact func(string) string
	// Written, when set, hears of every Add that stored new memories (through the
	// HTTP API, the memory tool, Remember or a caller of its own): the namespace and
	// how many memories it added (duplicates and an Add repeated under its key add
	// none). A node wakes the namespace's consolidator with it. It is called after
	// the write, outside the namespace's lock, and must not block.
	Written func(namespace string, added int)
	// Consolidate is the memory tool's consolidate action; nil: unavailable.
	Consolidate func(ctx context.Context, ns *Namespace, key string) (string, error)
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
}

// Memories is the memory of a node: its namespaces, each folded from its stream on
// first use and cached. It is safe for concurrent use.
type Memories struct {
	cfg Config

	closed atomic.Bool

	mu     sync.Mutex
	spaces map[string]*Namespace
}

// Open returns the memories cfg describes. It validates cfg and reads nothing yet.
func Open(cfg Config) (*Memories, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Memories{cfg: cfg, spaces: map[string]*Namespace{}}, nil
}

// Namespace returns the namespace name, folding its stream and bringing its vector
// projection up to date on first use (the vector store may hold items from before a
// restart: the live ones are upserted again and the forgotten ones deleted).
func (m *Memories) Namespace(ctx context.Context, name string) (*Namespace, error) {
	if err := CheckNamespace(name); err != nil {
		return nil, err
	}
	if m.closed.Load() {
		return nil, ErrClosed
	}
	m.mu.Lock()
	ns := m.spaces[name]
	if ns == nil {
		ns = newNamespace(m, name)
		m.spaces[name] = ns
	}
	m.mu.Unlock()
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if !ns.opened {
		if err := ns.fold(ctx); err != nil {
			return nil, err
		}
		if err := ns.rebuildVectors(ctx); err != nil {
			return nil, err
		}
		ns.opened = true
	}
	return ns, nil
}

// Namespaces lists the namespaces whose streams are in the log, sorted.
func (m *Memories) Namespaces(ctx context.Context) ([]string, error) {
	infos, err := m.cfg.Log.Sessions(ctx, eventlog.Filter{Prefix: StreamPrefix})
	if err != nil {
		return nil, fmt.Errorf("memory: listing namespaces: %w", err)
	}
	var out []string
	for _, s := range infos {
		if IsStream(s.ID) {
			out = append(out, s.ID[len(StreamPrefix):])
		}
	}
	slices.Sort(out)
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
// is safe for concurrent use; its operations are serialized.
type Namespace struct {
	m      *Memories
	cfg    *Config
	name   string
	stream string

	mu     sync.Mutex
	opened bool // folded and its vectors rebuilt: Memories.Namespace returns it
	st     *state
	pj     *projection
}

func newNamespace(m *Memories, name string) *Namespace {
	return &Namespace{m: m, cfg: &m.cfg, name: name, stream: Stream(name), st: newState(name), pj: newProjection()}
}

// Name returns the namespace's name.
func (ns *Namespace) Name() string { return ns.name }

// fold folds the events appended since the last fold and brings the projections
// up to date. The caller holds mu.
func (ns *Namespace) fold(ctx context.Context) error {
	if ns.m.closed.Load() {
		return ErrClosed
	}
	events, err := ns.cfg.Log.Read(ctx, ns.stream, ns.st.seq+1)
	if err != nil {
		return fmt.Errorf("memory: reading %s: %w", ns.stream, err)
	}
	for _, e := range events {
		if err := ns.apply(e); err != nil {
			return err
		}
	}
	return ns.syncVectors(ctx)
}

// apply folds one event into the state and the in-memory projections; the vectors
// follow in syncVectors.
func (ns *Namespace) apply(e messages.Envelope) error {
	eff, err := ns.st.apply(e)
	if err != nil {
		return err
	}
	ns.pj.apply(ns.st, eff)
	return nil
}

// write makes one change: it folds the stream and, unless the key was applied
// already, appends the events change builds for the next seqs (in one Append), again
// after a refold when another writer took them. change checks its input against the
// folded state; its error is returned with nothing written. A change that returns
// no events writes nothing. The caller holds mu.
func (ns *Namespace) write(ctx context.Context, key string, change func() ([]messages.Payload, error)) (applied bool, err error) {
	for range MaxAttempts {
		if err := ns.fold(ctx); err != nil {
			return false, err
		}
		if key != "" && ns.st.keys[key] != nil {
			return true, nil
		}
		if err := ns.expire(ctx); errors.Is(err, eventlog.ErrSeqConflict) {
			continue
		} else if err != nil {
			return false, fmt.Errorf("memory: expiring working memories of %s: %w", ns.name, err)
		}
		if change == nil {
			return false, nil
		}
		ps, err := change()
		if err != nil {
			return false, err
		}
		if len(ps) == 0 {
			return false, nil
		}
		events := make([]messages.Envelope, len(ps))
		now := ns.cfg.Now().UnixMicro()
		for i, p := range ps {
			e, err := messages.NewEnvelope(p)
			if err != nil {
				return false, err
			}
			e.ID, e.SessionID, e.Seq, e.TS, e.Actor = ns.eventID(key, i, e.Payload), ns.stream, ns.st.seq+1+uint64(i), now, "memory"
			events[i] = e
		}
		err = ns.cfg.Log.Append(ctx, events)
		if errors.Is(err, eventlog.ErrSeqConflict) {
			continue // another writer took the seq: refold, then decide again
		}
		if err != nil {
			return false, fmt.Errorf("memory: appending to %s: %w", ns.stream, err)
		}
		for _, e := range events {
			if err := ns.apply(e); err != nil {
				return false, err
			}
		}
		return false, ns.syncVectors(ctx)
	}
	return false, fmt.Errorf("%w: %d appends in a row found their seq taken by another writer", ErrConflict, MaxAttempts)
}

// eventID is the ID of the i-th event of a write: derived from the key and the
// payload when there is a key, so that the same call's events are the same events
// wherever they are appended. The payload is part of it because the log takes an
// event whose ID is already stored at its (stream, seq) as a repeat without looking
// at its payload: two writers deciding differently under one key (new memory IDs
// each) must conflict, so that the loser refolds and returns the winner's result.
func (ns *Namespace) eventID(key string, i int, payload []byte) string {
	if key == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return "mem-" + hex.EncodeToString(b[:])
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", ns.stream, key, i)
	h.Write(payload)
	return "mem-" + hex.EncodeToString(h.Sum(nil)[:16])
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

// Snapshot returns every live memory (invalid ones included), by ID.
func (ns *Namespace) Snapshot() []Memory {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	out := make([]Memory, 0, len(ns.st.mems))
	for _, m := range ns.st.mems {
		out = append(out, copyMemory(m))
	}
	slices.SortFunc(out, func(a, b Memory) int { return compareStrings(a.ID, b.ID) })
	return out
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

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
