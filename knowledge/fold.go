package knowledge

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/text/unicode/norm"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troupe-run/troupe/internal/entity"
	"github.com/troupe-run/troupe/messages"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// Base is one knowledge base: the fold of its stream (its documents and their
// chunks) and the projections of that fold (a BM25 keyword index over the chunks'
// heading paths and text, and the chunks' vectors in the vector store), brought up
// to date with the log before every operation. It is safe for concurrent use:
// searches run in parallel with each other; a write holds the knowledge base for
// the time of its append and of the fold's update (its chunks and keyword index),
// so a search sees every document either as it was before a write or as it is
// after it, never a mix. The vector store is written after, without that lock
// (sync): a store that is slow or does not answer holds up no search nor write
// of the base, which search the fold's vectors until the store is in line.
type Base struct {
	bs     *Bases
	cfg    *Config
	name   string
	stream string
	// coll is the vector store collection of the live vectors' dimension
	// (collectionFor); retired holds those of the dimensions the base had before,
	// whose vectors the next rebuild deletes.
	coll    string
	retired []string
	s       entity.Stream
	use     entity.Use // its passivation (Bases.bases)

	mu sync.RWMutex
	// syncMu is held by the one sync of the store that runs at a time (sync),
	// which calls the store without mu: a store that stops answering holds up
	// no search and no write of the base, only the next sync.
	syncMu sync.Mutex
	st     *state
	kw     *pmem.KeywordIndex
	// dirty holds the chunks whose vector must be upserted (live) or deleted (gone)
	// from the store, each with the mark (gen) of its last change: what a failed
	// sync left is tried again by the next operation, and a chunk changed while a
	// sync wrote it stays dirty.
	dirty map[string]uint64
	gen   uint64
	// stale says the store may disagree with the fold on any chunk: until a
	// rebuild (rebuildVectors) after the first fold in this process succeeds (the
	// store is persistent and may hold chunks from before a restart, among them
	// chunks replaced or removed since, or lack those a process that died never
	// wrote). staleGen is the mark of the change that made it stale.
	stale    bool
	staleGen uint64
	// trouble is the vector store's last failure, while it lasts (nil: none); a
	// sync leaves the store alone until troubleRetry.
	trouble      error
	troubleRetry time.Time
	troubleWait  time.Duration
	// searchTrouble is a failure of the store met by a search (under mu's read
	// lock, so kept aside under its own lock), for the next sync to record.
	searchMu      sync.Mutex
	searchTrouble error
	// parked holds the chunks whose vector the store refused, and why: one bad
	// vector must not hold up the others. They are not tried again until the chunk
	// changes or the base is folded anew (a restart); searches score them in
	// memory beside the store's hits (Base.pool).
	parked map[string]error
	// backlog is the count of vectors still to write or delete, as last told to
	// Bases (see Bases.VectorBacklog).
	backlog int64
	// compacting says a compaction's deletion runs, without mu (Base.compact):
	// no other starts, and the base is not released, until it ends.
	// compactAsked says a write appended since the last check of whether a
	// compaction is due (compactIfDue).
	compacting, compactAsked bool
}

// The waits after a failure of the vector store before a sync tries it again:
// from troubleWaitMin, doubled at each failure up to troubleWaitMax, or
// troubleWaitRefused for an error that will not pass by itself. Searches do not
// wait for the store meanwhile: they search the fold's vectors (Base.Search).
const (
	troubleWaitMin     = time.Second
	troubleWaitMax     = 10 * time.Second
	troubleWaitRefused = time.Minute
)

// inLine reports whether the store holds exactly the fold's vectors, as of the
// last sync. The caller holds mu.
func (b *Base) inLine() bool { return !b.stale && len(b.dirty) == 0 && b.trouble == nil }

// releaseBase is the release function of Bases' entity.Loaded: a knowledge base in
// use (its lock taken: a write, or a search reading it), or whose store is not in
// line with its fold (what it lacks would wait for its next use), stays. Loaded
// again, it trusts the store with its vectors up to its seq, unless some were
// refused (parked: tried again by the rebuild of the next load).
func releaseBase(b *Base, let func(synced uint64)) bool {
	if !b.mu.TryLock() {
		return false
	}
	defer b.mu.Unlock()
	if !b.syncMu.TryLock() { // a sync writes the store
		return false
	}
	defer b.syncMu.Unlock()
	if !b.inLine() || b.backlog > 0 || b.compacting {
		return false
	}
	var synced uint64
	if len(b.parked) == 0 && len(b.retired) == 0 {
		synced = b.st.seq
	}
	let(synced)
	return true
}

// trustStore takes the vector store to hold every vector of the fold, as it did
// when this process released the knowledge base at this seq (entity.Use.ResumeAt):
// the fold of the events up to it marks nothing to write, no rebuild is due, and a
// base loaded again writes only what changed since. The caller holds mu for
// writing.
func (b *Base) trustStore() {
	clear(b.dirty)
	b.stale, b.retired = false, nil
}

func newBase(bs *Bases, name string) *Base {
	b := &Base{bs: bs, cfg: &bs.cfg, name: name, stream: Stream(name), coll: Collection(name),
		st: newState(), kw: pmem.NewKeywordIndexWith(pmem.KeywordOptions{Tokenize: (&stemCache{}).terms}), dirty: map[string]uint64{},
		stale: true, parked: map[string]error{}}
	b.s = entity.Stream{Log: bs.cfg.Log, ID: b.stream, Kind: "knowledge", IDPrefix: "kb-", Now: bs.cfg.Now, Conflict: ErrConflict,
		Closed: func() error {
			if bs.closed.Load() {
				return ErrClosed
			}
			return nil
		}}
	return b
}

// baseFold is a knowledge base as entity.Stream folds it. The caller holds mu for
// writing.
type baseFold struct{ *Base }

func (f baseFold) Seq() uint64                     { return f.st.seq }
func (f baseFold) Apply(e messages.Envelope) error { return f.apply(e) }
func (f baseFold) Sync(context.Context) error      { f.countBacklog(); return nil }
func (f baseFold) Applied(key string) bool         { return f.st.keyDone(key) }

// Name returns the knowledge base's name.
func (b *Base) Name() string { return b.name }

// state is the fold of a knowledge base's stream.
type state struct {
	seq  uint64
	docs map[string]*document
	// unnormal counts the documents whose name is not in Unicode NFC (stored
	// before names were normalised): while there are none, storedName looks
	// nothing up beyond the name and its NFC.
	unnormal int
	chunks   map[string]*chunk
	// ever holds every chunk ID the stream ever named: a rebuild deletes the
	// vectors of those no longer live.
	ever map[string]struct{}
	keys map[string]keyed
	// firstDim is the dimension of the first chunk vector the stream held (0
	// before any): its vectors go to the collection Collection(name). anchor is
	// the seq of the event that held it, which compaction keeps.
	firstDim int
	anchor   uint64
	// trail holds, by source, the seqs of the stream's events of that source
	// still stored, ascending; events counts them all, live those of the live
	// documents' versions (a version split in parts has several: see
	// Base.compact).
	trail  map[string][]uint64
	events int
	live   int
	// keyedAt holds the time (the event's TS) of each event in the trails
	// that carries an idempotency key, by seq, and ts the latest event's
	// time: compaction keeps a keyed event for KeyRetention after it
	// (retained), so that a retry under its key is answered as it was.
	keyedAt map[uint64]int64
	ts      int64
	// marks holds the seqs of the key's marks (messages.KBKeyPart) in the
	// trails: no document's version, compaction deletes each once its key is
	// no longer retained, though it be the latest event of its source.
	marks map[uint64]struct{}
	// holes says the fold met seqs that compaction deleted: ever may lack chunks
	// the stream named once, whose vectors a store not in line at the
	// compaction (another node's) may still hold.
	holes bool
}

// document is one ingested document as the fold holds it.
type document struct {
	source, hash, embedder string
	// format is how its bytes were read (messages.KBDocumentIngested.Format),
	// conversion by which version of the reading (conversionOf).
	format               string
	conversion           int
	bytes, markdownBytes int
	chunks               []*chunk
	seq                  uint64
	// parts is the number of events its version was recorded in (1 unless its
	// chunk set was split: messages.KBDocumentIngested.Parts), seqs those of
	// them folded so far, the first one's seq.
	parts   int
	seqs    []uint64
	updated time.Time
}

// whole reports whether every event of d's version was folded: a version split
// across events (parts) of which some were not found (a log that lost them, an
// append that stored only some) holds only some of its chunks.
func (d *document) whole() bool { return len(d.seqs) >= d.parts }

// conversionOf is the version of the reading (rag.ConversionVersion) that made
// the chunks of an ingestion: as recorded, or 1 for an event that recorded its
// format and not the version (the format and version 1's reading came in one
// change), or 0 for one that recorded neither (read by the code before both).
func conversionOf(p *messages.KBDocumentIngested) int {
	if p.Conversion == 0 && p.Format != "" {
		return 1
	}
	return p.Conversion
}

// chunk is one live chunk.
type chunk struct {
	id, source  string
	index       int
	headingPath []string
	start, end  int
	tokens      int
	hash, text  string
	vector      []float32
}

// keyed is what the write under an idempotency key did.
type keyed struct {
	source string
	hash   string // the document's hash; "" for a removal
	// format is how its bytes were read ("" for a removal, or an event written
	// before it was recorded).
	format  string
	removed bool
	// seq is the seq of an ingestion's (first) event, or of a key's mark
	// (messages.KBKeyPart).
	seq    uint64
	result AddResult
}

// keyDone reports whether the write under key was folded whole: a removal, or
// an ingestion of which every part was folded, or that a later change of its
// document superseded. An ingestion split across events of which only some
// were stored (the node stopped, or the log failed, amid the append) is not
// done: the key sent again writes it anew, whole, instead of answering a
// document that lacks chunks as stored.
func (s *state) keyDone(key string) bool {
	k, ok := s.keys[key]
	if !ok {
		return false
	}
	if k.removed {
		return true
	}
	d := s.docs[k.source]
	return d == nil || d.seq != k.seq || d.whole()
}

func newState() *state {
	return &state{docs: map[string]*document{}, chunks: map[string]*chunk{}, ever: map[string]struct{}{}, keys: map[string]keyed{},
		trail: map[string][]uint64{}, keyedAt: map[uint64]int64{}, marks: map[uint64]struct{}{}}
}

// effect is what one event changed: the chunks it added and those it removed.
type effect struct {
	added, removed []*chunk
}

// apply folds one event of the stream.
func (s *state) apply(e messages.Envelope) (effect, error) {
	var eff effect
	// Seqs grow; they skip those of the events compaction deleted (Base.compact).
	if e.Seq <= s.seq {
		return eff, fmt.Errorf("knowledge: %s: seq %d follows %d", e.SessionID, e.Seq, s.seq)
	}
	s.holes = s.holes || e.Seq > s.seq+1
	p, err := e.Decode()
	if err != nil {
		return eff, fmt.Errorf("knowledge: %w", err)
	}
	s.ts = max(s.ts, e.TS)
	switch p := p.(type) {
	case *messages.KBDocumentIngested:
		for _, c := range p.Chunks {
			// Whether or not the event is folded (a part without its first
			// one, below): compaction keeps the anchor alone.
			if s.firstDim == 0 && len(c.Vector) > 0 {
				s.firstDim, s.anchor = len(c.Vector), e.Seq
				break
			}
		}
		if p.Part == messages.KBKeyPart {
			// A key's mark: it changes no document, and keeps the key's
			// request (see markKey). In the trail of its source, so that
			// compaction keeps it for KeyRetention, as a write of the key.
			if _, ok := s.keys[p.Key]; p.Key != "" && !ok {
				s.keys[p.Key] = keyed{source: p.Source, hash: p.Hash, format: p.Format, seq: e.Seq, result: AddResult{Source: p.Source,
					Status: StatusUnchanged, Hash: p.Hash, Chunks: p.ChunkCount, Tokens: p.Tokens, Bytes: p.Bytes, MarkdownBytes: p.MarkdownBytes}}
			}
			s.trail[p.Source] = append(s.trail[p.Source], e.Seq)
			s.marks[e.Seq] = struct{}{}
			s.keyedEvent(e, p.Key)
			break
		}
		if p.Part > 1 {
			if err := s.applyPart(e, p, &eff); err != nil {
				return eff, err
			}
			s.trail[p.Source] = append(s.trail[p.Source], e.Seq)
			s.keyedEvent(e, p.Key)
			break
		}
		status := StatusAdded
		if old := s.docs[p.Source]; old != nil {
			status = StatusReplaced
			eff.removed = s.drop(old)
		}
		if p.Status == StatusAdded || p.Status == StatusReplaced {
			// As the write answered: the version it replaced may have been
			// compacted away since.
			status = p.Status
		}
		d := &document{source: p.Source, hash: p.Hash, embedder: p.Embedder, format: p.Format, conversion: conversionOf(p), bytes: p.Bytes,
			markdownBytes: p.MarkdownBytes, seq: e.Seq, parts: max(p.Parts, 1), seqs: []uint64{e.Seq}, updated: time.UnixMicro(e.TS).UTC()}
		tokens, err := s.addChunks(e, p, d, &eff)
		if err != nil {
			return eff, err
		}
		s.docs[p.Source] = d
		s.live++
		s.trail[p.Source] = append(s.trail[p.Source], e.Seq)
		s.keyedEvent(e, p.Key)
		if !norm.NFC.IsNormalString(p.Source) {
			s.unnormal++
		}
		if p.Key != "" {
			if k, ok := s.keys[p.Key]; ok && !k.removed && k.source == p.Source && k.hash == p.Hash {
				// The write of a key that was stored in some of its parts,
				// made again (keyDone): its answer is the request's.
				status = k.result.Status
			}
			s.keys[p.Key] = keyed{source: p.Source, hash: p.Hash, format: p.Format, seq: e.Seq, result: AddResult{Source: p.Source, Status: status,
				Hash: p.Hash, Chunks: len(p.Chunks), Tokens: tokens, Bytes: p.Bytes, MarkdownBytes: p.MarkdownBytes}}
		}
	case *messages.KBDocumentRemoved:
		if old := s.docs[p.Source]; old != nil {
			eff.removed = s.drop(old)
		}
		if p.Key != "" {
			s.keys[p.Key] = keyed{source: p.Source, removed: true}
		}
		s.trail[p.Source] = append(s.trail[p.Source], e.Seq)
		s.keyedEvent(e, p.Key)
	default:
		return eff, fmt.Errorf("knowledge: %s seq %d: a %s event has no place in a knowledge base's stream", e.SessionID, e.Seq, e.Type)
	}
	s.seq = e.Seq
	s.events++
	return eff, nil
}

// keyedEvent records the time of event e, just added to a trail, when it
// carries an idempotency key a client may send again (see retained; not
// AutoKeyPrefix's).
func (s *state) keyedEvent(e messages.Envelope, key string) {
	if key != "" && !strings.HasPrefix(key, AutoKeyPrefix) {
		s.keyedAt[e.Seq] = e.TS
	}
}

// addChunks adds the chunks of ingestion p (of event e) to document d, and to
// eff, and returns their tokens.
func (s *state) addChunks(e messages.Envelope, p *messages.KBDocumentIngested, d *document, eff *effect) (int, error) {
	tokens := 0
	for _, c := range p.Chunks {
		ch := &chunk{id: c.ChunkID, source: p.Source, index: c.Index, headingPath: slices.Clone(c.HeadingPath),
			start: c.Start, end: c.End, tokens: c.Tokens, hash: c.Hash, text: c.Text, vector: slices.Clone([]float32(c.Vector))}
		if prev := s.chunks[ch.id]; prev != nil && prev.source != p.Source {
			return 0, fmt.Errorf("knowledge: %s seq %d: chunk %s of %q is already a chunk of %q", e.SessionID, e.Seq, ch.id, p.Source, prev.source)
		}
		d.chunks = append(d.chunks, ch)
		s.chunks[ch.id] = ch
		s.ever[ch.id] = struct{}{}
		eff.added = append(eff.added, ch)
		tokens += ch.tokens
	}
	return tokens, nil
}

// applyPart folds part p.Part (from 2) of an ingestion split across events: its
// chunks join the document's version that the earlier parts hold. A part that
// does not follow them, at the next seq (the parts are appended together) —
// its first part was compacted away, and a later event of the source
// supersedes it (Base.compact) — holds nothing the fold needs: it is not
// folded.
func (s *state) applyPart(e messages.Envelope, p *messages.KBDocumentIngested, eff *effect) error {
	d := s.docs[p.Source]
	if d == nil || d.hash != p.Hash || d.embedder != p.Embedder || d.format != p.Format || d.conversion != conversionOf(p) || d.parts != p.Parts ||
		len(d.seqs) != p.Part-1 || e.Seq != d.seqs[len(d.seqs)-1]+1 {
		return nil
	}
	tokens, err := s.addChunks(e, p, d, eff)
	if err != nil {
		return err
	}
	d.seqs = append(d.seqs, e.Seq)
	s.live++
	if k, ok := s.keys[p.Key]; p.Key != "" && ok && !k.removed && k.source == p.Source && k.hash == p.Hash {
		k.result.Chunks += len(p.Chunks)
		k.result.Tokens += tokens
		s.keys[p.Key] = k
	}
	return nil
}

// drop takes document d and its chunks out of the state and returns the chunks.
func (s *state) drop(d *document) []*chunk {
	for _, c := range d.chunks {
		delete(s.chunks, c.id)
	}
	delete(s.docs, d.source)
	s.live -= len(d.seqs)
	if !norm.NFC.IsNormalString(d.source) {
		s.unnormal--
	}
	return d.chunks
}

// dim is the dimension of the knowledge base's vectors, and the embedder of a
// document that has them (0 and "" when no chunk has a vector). except is a source
// left out (the one a write replaces).
func (s *state) dim(except string) (int, string) {
	for _, src := range slices.Sorted(maps.Keys(s.docs)) {
		if src == except {
			continue
		}
		for _, c := range s.docs[src].chunks {
			if len(c.vector) > 0 {
				return len(c.vector), s.docs[src].embedder
			}
		}
	}
	return 0, ""
}

// indexText is what the keyword index holds of a chunk: its heading path and text,
// so that a query naming a section finds the chunks below it.
func indexText(c *chunk) string {
	if len(c.headingPath) == 0 {
		return c.text
	}
	return strings.Join(c.headingPath, "\n") + "\n" + c.text
}

// fold folds the events appended since the last fold and brings the keyword
// index up to date, marking the vectors to write (the caller calls sync once it
// released mu). The caller holds mu for writing.
func (b *Base) fold(ctx context.Context) error { return b.s.CatchUp(ctx, baseFold{b}) }

// apply folds one event into the state and the keyword index, and marks the
// vectors it changed.
func (b *Base) apply(e messages.Envelope) error {
	if r := b.use.ResumeAt(); r != 0 && b.st.seq < r && e.Seq > r && !b.st.holes {
		// The event at the seq of the release was compacted away: the fold of
		// those before it is the state the store was left in line with.
		b.trustStore()
	}
	eff, err := b.st.apply(e)
	if err != nil {
		return err
	}
	for _, c := range eff.removed {
		b.kw.Remove(c.id)
		b.mark(c.id)
		delete(b.parked, c.id)
	}
	for _, c := range eff.added {
		b.kw.Put(c.id, indexText(c))
		b.mark(c.id)
		delete(b.parked, c.id) // a changed chunk gets another try
	}
	for _, c := range eff.added {
		if len(c.vector) > 0 {
			b.useCollection(b.collectionFor(len(c.vector)))
			break
		}
	}
	if e.Seq == b.use.ResumeAt() && !b.st.holes {
		// Unless compaction deleted events up to it: those may have named chunks
		// the store held at the release and replaced since, which only a
		// rebuild finds (rebuildVectors).
		b.trustStore()
	}
	return nil
}

// collectionFor is the vector store collection of a knowledge base's vectors of
// dimension dim: Collection(name) for the dimension of its first vectors,
// Collection(name) + "_d" + dim for another. A collection keeps its dimension for
// good, even emptied; a base whose documents were all removed and added again by
// an embedder of another dimension (a move from the offline embedder to a model)
// gets a collection of its own instead of one that refuses its vectors.
func (b *Base) collectionFor(dim int) string {
	if dim == b.st.firstDim {
		return Collection(b.name)
	}
	return Collection(b.name) + "_d" + strconv.Itoa(dim)
}

// useCollection makes coll the collection of the live vectors: when it is another
// than before, the one before is retired (the next sync rebuilds, deleting every
// vector the stream named from it) and the new one filled. The caller holds mu for
// writing.
func (b *Base) useCollection(coll string) {
	if coll == b.coll {
		return
	}
	if !slices.Contains(b.retired, b.coll) {
		b.retired = append(b.retired, b.coll)
	}
	b.retired = slices.DeleteFunc(b.retired, func(c string) bool { return c == coll })
	b.coll, b.stale = coll, true
	b.gen++
	b.staleGen = b.gen
}

// mark marks chunk id's vector to be written (or deleted) by the next sync. The
// caller holds mu for writing.
func (b *Base) mark(id string) {
	b.gen++
	b.dirty[id] = b.gen
}

// write makes one change (entity.Stream.Write): it folds the stream and, unless the
// key was applied already, appends the events change builds (one, or the parts of
// a split ingestion) for the next seqs in one append, again after a refold when
// another writer took them. change checks its input against the folded state; its
// error is returned with nothing written, and no payload writes nothing. The caller holds mu for writing, and calls compactIfDue once
// it released it (a write that appended asks for a compaction: compactAsked).
func (b *Base) write(ctx context.Context, key string, change func() ([]messages.Payload, error)) (applied bool, err error) {
	if b.use.Released() {
		// Released while its caller held it: the base loaded in its place folds
		// this write before its next use (entity.Loaded.Open).
		defer b.bs.bases.Changed(b.name)
	}
	wrote := false
	applied, err = b.s.Write(ctx, baseFold{b}, key, func(context.Context) ([]messages.Payload, error) {
		ps, err := change()
		if err != nil || len(ps) == 0 {
			wrote = false
			return nil, err
		}
		wrote = true
		return ps, nil
	})
	if err == nil && wrote && !applied {
		b.compactAsked = true
	}
	return applied, err
}

// vectorItem is the store item of a live chunk: its vector and where it comes
// from. The text stays in the fold (a search reads it there), so no chunk size the
// configuration allows meets a store's text limit (Milvus: 65,535 bytes).
func (b *Base) vectorItem(c *chunk) vectorstore.Item {
	return vectorstore.Item{ID: c.id, Vector: c.vector, Metadata: map[string]string{"kb": b.name, "source": c.source}}
}

// sync brings the vector store in line with the fold, unless it failed lately
// (troubleRetry) or another sync runs (which goes on while it finds more to
// write): a rebuild while stale, else the chunks marked dirty. It reads what to
// write under mu, writes it without mu, so that searches and writes of the base
// go on while the store is slow or does not answer (they search the fold's
// vectors meanwhile: Base.pool), then records under mu what was written,
// leaving marked what changed meanwhile. A failure is recorded (trouble) and
// told to Config.VectorTrouble; what it left is tried again by a later
// operation. It never fails the operation: the events are in the log. The
// caller does not hold mu.
func (b *Base) sync(ctx context.Context) {
	if !b.syncMu.TryLock() {
		return
	}
	defer b.syncMu.Unlock()
	for range syncRounds {
		if !b.syncRound(ctx) {
			return
		}
	}
}

// syncRounds bounds the rounds of one sync while writes keep marking vectors;
// a later operation (or Bases.CatchUpVectors) writes the rest.
const syncRounds = 8

// syncPlan is what one round of sync writes, read from the fold under mu.
type syncPlan struct {
	gen     uint64
	rebuild bool
	coll    string
	retired []string
	// rebuild: every chunk the stream named, the live ones' items, and what
	// storedVectors and the check of compacted events need.
	ever  []string
	live  map[string]vectorstore.Item
	probe []float32
	want  int
	holes bool
	seq   uint64
	// not rebuild: the dirty chunks to delete and to upsert.
	dels []string
	ups  []vectorstore.Item
}

// syncRound runs one round of sync; it reports whether another may find more
// to write. The caller holds syncMu, not mu.
func (b *Base) syncRound(ctx context.Context) bool {
	b.mu.Lock()
	p, ok := b.planSync()
	b.mu.Unlock()
	if !ok {
		return false
	}
	var err error
	var refused []vectorstore.Parked
	if p.rebuild {
		refused, err = b.rebuildVectors(ctx, p)
	} else {
		refused, err = b.syncVectors(ctx, p)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.countBacklog()
	for _, r := range refused {
		if g, marked := b.dirty[r.Item.ID]; b.st.chunks[r.Item.ID] == nil || marked && g > p.gen {
			continue // changed since: it gets another try
		}
		perr := fmt.Errorf("knowledge: %s: the vector of chunk %s (%s) was refused by %s: %w", b.name, r.Item.ID, r.Item.Metadata["source"], p.coll, r.Err)
		b.parked[r.Item.ID] = perr
		if b.cfg.VectorParked != nil {
			b.cfg.VectorParked(b.name, p.coll, r.Item.ID, perr)
		}
	}
	now := b.cfg.Now()
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller gave up: nothing is known of the store.
		return false
	case err != nil:
		b.failed(err, now)
		return false
	}
	if p.rebuild {
		b.retired = slices.DeleteFunc(b.retired, func(c string) bool { return slices.Contains(p.retired, c) && c != b.coll })
		if b.staleGen <= p.gen {
			b.stale = false
		}
	}
	// The chunks marked when the round was planned were all written (planSync puts
	// each in ups or dels, or the rebuild wrote them all); one marked since has a
	// later mark, and stays.
	maps.DeleteFunc(b.dirty, func(_ string, g uint64) bool { return g <= p.gen })
	b.recovered()
	return b.stale || len(b.dirty) > 0
}

// recovered clears the vector store's last failure, if any, and tells
// Config.VectorTrouble that it is over. The caller holds mu for writing.
func (b *Base) recovered() {
	if b.trouble == nil {
		return
	}
	b.trouble, b.troubleWait = nil, 0
	if b.cfg.VectorTrouble != nil {
		b.cfg.VectorTrouble(b.name, b.coll, nil)
	}
}

// planSync reads what a round of sync writes; ok false when there is nothing to
// write, or the store failed lately. The caller holds mu for writing.
func (b *Base) planSync() (p syncPlan, ok bool) {
	defer b.countBacklog()
	b.searchMu.Lock()
	met := b.searchTrouble
	b.searchTrouble = nil
	b.searchMu.Unlock()
	now := b.cfg.Now()
	if met != nil {
		b.failed(met, now)
	}
	if b.trouble != nil && now.Before(b.troubleRetry) {
		return p, false
	}
	if !b.stale && len(b.dirty) == 0 {
		b.recovered() // nothing to write: the store is in line again
		return p, false
	}
	p = syncPlan{gen: b.gen, rebuild: b.stale, coll: b.coll, retired: slices.Clone(b.retired)}
	if p.rebuild {
		p.ever = slices.Sorted(maps.Keys(b.st.ever))
		p.live = make(map[string]vectorstore.Item, len(b.st.chunks))
		var probe string // the probe is the vector of the live chunk of the least ID
		for id, c := range b.st.chunks {
			if len(c.vector) > 0 {
				p.live[id] = b.vectorItem(c)
				if p.probe == nil || id < probe {
					probe, p.probe = id, c.vector
				}
			}
		}
		p.want, p.holes, p.seq = len(p.ever), b.st.holes, b.st.seq
		if p.holes {
			// The store may hold chunks the stream no longer names (see
			// rebuildVectors): ask for as many as Milvus answers at most.
			p.want = max(p.want, storedVectorsHoles)
		}
		return p, true
	}
	for _, id := range slices.Sorted(maps.Keys(b.dirty)) {
		if c := b.st.chunks[id]; c != nil && len(c.vector) > 0 {
			p.ups = append(p.ups, b.vectorItem(c))
		} else {
			p.dels = append(p.dels, id)
		}
	}
	return p, true
}

// failed records a failure of the vector store and tells Config.VectorTrouble.
// The caller holds mu for writing.
func (b *Base) failed(err error, now time.Time) {
	b.trouble = err
	b.troubleWait = min(max(2*b.troubleWait, troubleWaitMin), troubleWaitMax)
	if errors.Is(err, vectorstore.ErrDimension) || errors.Is(err, vectorstore.ErrInvalid) || errors.Is(err, vectorstore.ErrSchema) {
		b.troubleWait = troubleWaitRefused
	}
	b.troubleRetry = now.Add(b.troubleWait)
	if b.cfg.VectorTrouble != nil {
		b.cfg.VectorTrouble(b.name, b.coll, err)
	}
}

// searchFailed keeps a failure of the store met by a search, for the next sync.
func (b *Base) searchFailed(err error) {
	b.searchMu.Lock()
	b.searchTrouble = err
	b.searchMu.Unlock()
}

// syncVectors writes the dirty chunks of p: upserted when live, deleted when
// gone. The caller holds syncMu, not mu.
func (b *Base) syncVectors(ctx context.Context, p syncPlan) ([]vectorstore.Parked, error) {
	if err := b.deleteVectorsFrom(ctx, p.coll, p.dels); err != nil {
		return nil, err
	}
	return b.upsertVectors(ctx, p.coll, p.ups)
}

// countBacklog counts the vectors the store still lacks or holds wrongly (the
// dirty chunks, or every chunk the stream named while a rebuild is due) and tells
// Bases the change. The caller holds mu for writing.
func (b *Base) countBacklog() {
	n := int64(len(b.dirty))
	if b.stale {
		n = int64(len(b.st.ever))
	}
	if b.use.Released() {
		// A released instance a caller still held: the one loaded in its place
		// folds the same writes and counts them; this one stops counting, or
		// nothing would take its share off the total again.
		n = 0
	}
	b.bs.backlog.Add(n - b.backlog)
	b.backlog = n
}

// rebuildVectors makes the vector store hold exactly the fold's vectors of p
// after the first fold in this process: every chunk the stream ever named that
// is no longer live is deleted, every live one upserted, in batches of
// VectorBatch. What the store holds already as the fold has it (storedVectors)
// is not written again, so that opening a base in line with its store (every
// node rag command, every start of a node) writes nothing, and only the chunks
// of the stream it holds are deleted. It is idempotent. The caller holds syncMu,
// not mu.
func (b *Base) rebuildVectors(ctx context.Context, p syncPlan) ([]vectorstore.Parked, error) {
	var dels []string
	var ups []vectorstore.Item
	stored := b.storedVectors(ctx, p)
	for _, id := range p.ever {
		it, live := p.live[id]
		switch {
		case live:
			if st, ok := stored[id]; ok && sameVector(st, it) {
				continue
			}
			ups = append(ups, it)
		case stored == nil:
			dels = append(dels, id)
		default:
			// Only what the stream named: an item it never did may be another
			// node's newer write to a shared store (Milvus), not yet folded here.
			if _, ok := stored[id]; ok {
				dels = append(dels, id)
			}
		}
	}
	if stored != nil && p.holes {
		// Compaction deleted events that may have named chunks the store still
		// holds: its items of the base that the fold does not hold are stale, if
		// the stream gained nothing since the fold (a writer appends before it
		// writes to the store, so any item listed is of an event stored by now).
		var unknown []string
		for id := range stored {
			if _, named := slices.BinarySearch(p.ever, id); !named { // p.ever is sorted
				unknown = append(unknown, id)
			}
		}
		if len(unknown) > 0 {
			if newer, err := b.cfg.Log.Read(ctx, b.stream, p.seq+1); err == nil && len(newer) == 0 {
				slices.Sort(unknown)
				dels = append(dels, unknown...)
			}
		}
	}
	for _, coll := range p.retired {
		if err := b.deleteVectorsFrom(ctx, coll, p.ever); err != nil {
			return nil, err
		}
	}
	if err := b.deleteVectorsFrom(ctx, p.coll, dels); err != nil {
		return nil, err
	}
	return b.upsertVectors(ctx, p.coll, ups)
}

// storedVectors lists the items the store's collection holds for the knowledge
// base, by ID: a search for any of its vectors, filtered on the base, for more
// items than the stream ever named (a vectorstore.Store returns every match when
// there are no more than K). nil when it cannot tell (no live vector to search
// with, the store failing or refusing so large a K, more items than expected, a
// base of more than storedVectorsMax chunks, whose copies would cost more memory
// than writing them again costs time): the rebuild then writes everything.
func (b *Base) storedVectors(ctx context.Context, p syncPlan) map[string]vectorstore.Item {
	ever := p.want
	if ever >= storedVectorsMax || p.probe == nil {
		return nil
	}
	hits, err := b.cfg.Vectors.Search(ctx, p.coll, vectorstore.Query{Vector: p.probe, K: ever + 1, Filter: map[string]string{"kb": b.name}})
	if err != nil || len(hits) > ever {
		return nil
	}
	out := make(map[string]vectorstore.Item, len(hits))
	for _, h := range hits {
		out[h.ID] = h.Item
	}
	return out
}

// storedVectorsHoles is how many items a rebuild after compaction asks the
// store for at least: Milvus's largest topK.
const storedVectorsHoles = 16384

// storedVectorsMax bounds the items storedVectors asks the store for: their
// vectors are copied (100 MB at 384 dimensions).
const storedVectorsMax = 1 << 16

// sameVector reports whether the stored item a is the item b to write.
func sameVector(a, b vectorstore.Item) bool {
	return a.ID == b.ID && slices.Equal(a.Vector, b.Vector) && maps.Equal(a.Metadata, b.Metadata) && a.Text == b.Text
}

// upsertVectors upserts items into coll in batches of VectorBatch. The items the
// store refuses are returned, to be parked (syncRound), the others written
// (vectorstore.UpsertIsolating); an error that is no refusal (the store is down)
// fails the rest.
func (b *Base) upsertVectors(ctx context.Context, coll string, items []vectorstore.Item) ([]vectorstore.Parked, error) {
	refused, err := vectorstore.UpsertIsolating(ctx, b.cfg.Vectors, coll, items, VectorBatch)
	if err != nil {
		return refused, fmt.Errorf("knowledge: %s: upserting %d vectors into %s: %w", b.name, len(items), coll, err)
	}
	return refused, nil
}

func (b *Base) deleteVectorsFrom(ctx context.Context, coll string, ids []string) error {
	for batch := range slices.Chunk(ids, VectorBatch) {
		if err := b.cfg.Vectors.Delete(ctx, coll, batch); err != nil {
			return fmt.Errorf("knowledge: %s: deleting %d vectors from %s: %w", b.name, len(batch), coll, err)
		}
	}
	return nil
}

// refresh folds what other writers appended since the last operation, and
// syncs the store (sync).
func (b *Base) refresh(ctx context.Context) error {
	b.mu.Lock()
	err := b.fold(ctx)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	b.sync(ctx)
	return nil
}

// Refresh folds what other writers (another process on the same log) appended to
// the knowledge base's stream since the last operation.
func (b *Base) Refresh(ctx context.Context) error { return b.refresh(ctx) }

// Document describes one document of a knowledge base.
type Document struct {
	Source string `json:"source"`
	// Hash is rag.DocumentHash of the document's bytes.
	Hash string `json:"hash"`
	// Bytes is the document's size, MarkdownBytes that of its Markdown.
	Bytes         int `json:"bytes"`
	MarkdownBytes int `json:"markdown_bytes"`
	Chunks        int `json:"chunks"`
	Tokens        int `json:"tokens"`
	// Embedder names the model that embedded its chunks.
	Embedder string `json:"embedder"`
	// Format says how its bytes were read into Markdown (rag.Format, or
	// "text/markdown" for a text sent as Markdown); "" when ingested before that
	// was recorded.
	Format string `json:"format,omitempty"`
	// Seq is the event that ingested it, Updated that event's time.
	Seq     uint64    `json:"seq"`
	Updated time.Time `json:"updated"`
}

// Documents lists the documents of the knowledge base as of the last fold, by
// source.
func (b *Base) Documents() []Document {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]Document, 0, len(b.st.docs))
	for _, src := range slices.Sorted(maps.Keys(b.st.docs)) {
		out = append(out, b.st.docs[src].describe())
	}
	return out
}

// Chunks returns the chunks of document source as of the last fold, in their
// order in the document (Score 0); false when the knowledge base holds no such
// document.
func (b *Base) Chunks(source string) ([]Hit, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	d := b.st.docs[b.storedName(source)]
	if d == nil {
		return nil, false
	}
	out := make([]Hit, len(d.chunks))
	for i, c := range d.chunks {
		out[i] = hitOf(c, 0)
	}
	return out, true
}

func (d *document) describe() Document {
	tokens := 0
	for _, c := range d.chunks {
		tokens += c.tokens
	}
	return Document{Source: d.source, Hash: d.hash, Bytes: d.bytes, MarkdownBytes: d.markdownBytes, Chunks: len(d.chunks),
		Tokens: tokens, Embedder: d.embedder, Format: d.format, Seq: d.seq, Updated: d.updated}
}

// Stats describes a knowledge base.
type Stats struct {
	Name       string `json:"name"`
	Collection string `json:"collection"`
	Documents  int    `json:"documents"`
	Chunks     int    `json:"chunks"`
	Tokens     int    `json:"tokens"`
	Bytes      int64  `json:"bytes"`
	// Terms is the number of distinct terms of the keyword index.
	Terms int `json:"terms"`
	// Dim is the dimension of the vectors (0 when none), Embedder the model that
	// computed them.
	Dim      int    `json:"dim"`
	Embedder string `json:"embedder,omitempty"`
	// Seq is the last event folded.
	Seq uint64 `json:"seq"`
}

// Stats returns the knowledge base's figures as of the last fold.
func (b *Base) Stats() Stats {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s := Stats{Name: b.name, Collection: b.coll, Documents: len(b.st.docs), Chunks: len(b.st.chunks), Terms: b.kw.Terms(), Seq: b.st.seq}
	for _, d := range b.st.docs {
		s.Bytes += int64(d.bytes)
		for _, c := range d.chunks {
			s.Tokens += c.tokens
		}
	}
	s.Dim, s.Embedder = b.st.dim("")
	return s
}
