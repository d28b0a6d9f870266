package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	pmem "github.com/troupe-run/troupe/pipelines/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// Collection is the vector store collection of a tier and modality:
// "mem_<tier>_<modality>", e.g. mem_semantic_text or mem_perceptual_image.
func Collection(t Tier, m Modality) string {
	if m == "" {
		m = Text
	}
	return "mem_" + string(t) + "_" + string(m)
}

// collections lists every collection a namespace may use: text for each tier, and
// image and audio for the perceptual tier.
func collections() []string {
	out := make([]string, 0, len(Tiers)+2)
	for _, t := range Tiers {
		out = append(out, Collection(t, Text))
	}
	return append(out, Collection(Perceptual, Image), Collection(Perceptual, Audio))
}

// projection holds what a namespace's fold projects in memory (a BM25 index per
// tier, the semantic tier's entity graph and its entity names) and what it has
// projected into the vector store (which collection holds each memory's vector, and
// the memories whose vectors must still follow the fold).
type projection struct {
	keywords map[Tier]*pmem.KeywordIndex
	kwTier   map[string]Tier
	graph    *pmem.Graph
	// entities counts the semantic memories that mention each entity (normalised):
	// a query's words that name a known entity join its query entities.
	entities map[string]int
	entsOf   map[string][]string
	// vecAt is the collection that holds each memory's vector in the store; dirty
	// the memories whose vector must be upserted or deleted.
	vecAt map[string]string
	dirty map[string]struct{}
	// ever holds the collections each memory the stream ever named belonged to:
	// where a rebuild looks for vectors that must go.
	ever map[string][]string
	// stale holds the collections still to rebuild: every one, until a sync after
	// the namespace's first fold in this process succeeds there (the store may hold
	// items from an earlier run, among them memories forgotten since, or lack
	// vectors a process that died never wrote).
	stale map[string]bool
	// trouble holds the last error of the vector store in each collection where
	// the last request failed, and when a catch-up may try it again.
	trouble map[string]*trouble
	// parked holds the memories whose vector the store refused (one bad vector
	// must not hold up the others of its collection): not dirty, tried again when
	// the memory changes, when the namespace is folded anew, and after a wait
	// that grows with each refusal (Config.VectorRetry): a transient error the
	// store gave as a refusal keeps a memory out of it only that long.
	parked map[string]parking
	// retrying holds the parked memories put back among the dirty ones for
	// another try, with the wait before it: a refusal again doubles it.
	retrying map[string]time.Duration
	// parkedN is the count of parked memories, as last told to Memories
	// (Memories.ParkedVectors).
	parkedN int64
	// backlog is the count of vectors still to write or delete, as last told to
	// Memories (see Memories.VectorBacklog).
	backlog int64
}

// parking is why a memory's vector is not in the store: the collection that
// refused it, and its refusal.
type parking struct {
	coll  string
	err   error
	wait  time.Duration // the wait before the next try
	retry time.Time     // when a catch-up tries it again
}

// trouble is a collection's last failure in the vector store.
type trouble struct {
	err   error
	retry time.Time     // a catch-up leaves the collection alone until then
	wait  time.Duration // the wait after the last failure, doubled by the next
}

// The waits of a collection whose last request failed before a catch-up tries it
// again (a search that needs its vectors tries at once): from troubleWaitMin,
// doubled at each failure up to troubleWaitMax, or troubleWaitRefused for an error
// that will not pass by itself. Each try of a Milvus that is down takes about 2.5 s.
const (
	troubleWaitMin     = time.Second
	troubleWaitMax     = 10 * time.Second
	troubleWaitRefused = time.Minute
)

// refused reports whether err is a vector store's refusal that retrying will not
// change: a vector of another dimension than its collection's, a request the store
// finds invalid, a collection of another schema.
func refused(err error) bool {
	return errors.Is(err, vectorstore.ErrDimension) || errors.Is(err, vectorstore.ErrInvalid) || errors.Is(err, vectorstore.ErrSchema)
}

// waiting reports whether collection c failed lately: a catch-up leaves it alone.
func (p *projection) waiting(c string, now time.Time) bool {
	t := p.trouble[c]
	return t != nil && now.Before(t.retry)
}

// fail records a failure of the vector store in collection c.
func (p *projection) fail(c string, err error, now time.Time) {
	t := p.trouble[c]
	if t == nil {
		t = &trouble{}
		p.trouble[c] = t
	}
	t.err = err
	t.wait = min(max(2*t.wait, troubleWaitMin), troubleWaitMax)
	if refused(err) {
		t.wait = troubleWaitRefused
	}
	t.retry = now.Add(t.wait)
}

// failed records a failure of the vector store in collection c, and tells
// Config.VectorTrouble.
func (ns *Namespace) failed(c string, err error, now time.Time) {
	ns.pj.fail(c, err, now)
	if ns.cfg.VectorTrouble != nil {
		ns.cfg.VectorTrouble(ns.name, c, err)
	}
}

// recovered records a success of the vector store in collection c, and tells
// Config.VectorTrouble when c had failed.
func (ns *Namespace) recovered(c string) {
	if ns.pj.trouble[c] == nil {
		return
	}
	delete(ns.pj.trouble, c)
	if ns.cfg.VectorTrouble != nil {
		ns.cfg.VectorTrouble(ns.name, c, nil)
	}
}

func newProjection() *projection {
	p := &projection{keywords: map[Tier]*pmem.KeywordIndex{}, kwTier: map[string]Tier{}, graph: pmem.NewGraph(),
		entities: map[string]int{}, entsOf: map[string][]string{}, vecAt: map[string]string{}, dirty: map[string]struct{}{},
		ever: map[string][]string{}, stale: map[string]bool{}, trouble: map[string]*trouble{}, parked: map[string]parking{},
		retrying: map[string]time.Duration{}}
	for _, c := range collections() {
		p.stale[c] = true
	}
	for _, t := range Tiers {
		p.keywords[t] = pmem.NewKeywordIndex()
	}
	return p
}

// indexText is what the keyword index holds of a memory: its content, the outcome
// and participants of an episode, and the URI of a perceptual memory.
func indexText(m *Memory) string {
	parts := []string{m.Content}
	if m.Outcome != "" {
		parts = append(parts, m.Outcome)
	}
	parts = append(parts, m.Participants...)
	if m.URI != "" {
		parts = append(parts, m.URI)
	}
	return strings.Join(parts, "\n")
}

// apply brings the in-memory projections in line with one event's effect and marks
// the vectors it changed.
func (p *projection) apply(st *state, eff effect) {
	for _, m := range eff.removed {
		p.drop(m.ID)
		p.dirty[m.ID] = struct{}{}
		delete(p.parked, m.ID)
		delete(p.retrying, m.ID)
	}
	for _, id := range eff.put {
		m := st.mems[id]
		if m == nil {
			continue // put, then removed by the same event
		}
		if t, ok := p.kwTier[id]; ok && t != m.Tier {
			p.keywords[t].Remove(id)
		}
		if c := Collection(m.Tier, m.Modality); !slices.Contains(p.ever[id], c) {
			p.ever[id] = append(p.ever[id], c)
		}
		p.keywords[m.Tier].Put(id, indexText(m))
		p.kwTier[id] = m.Tier
		p.unmention(id)
		if m.Tier == Semantic {
			rels := make([]pmem.Relation, len(m.Relations))
			for i, r := range m.Relations {
				rels[i] = pmem.Relation{From: r.From, Type: r.Type, To: r.To}
			}
			p.graph.Put(id, m.Entities, rels)
			p.mention(id, m)
		} else {
			p.graph.Remove(id)
		}
		p.dirty[id] = struct{}{}
		delete(p.parked, id) // a changed memory gets another try, from the first wait
		delete(p.retrying, id)
	}
}

// drop takes memory id out of the keyword index and the graph.
func (p *projection) drop(id string) {
	if t, ok := p.kwTier[id]; ok {
		p.keywords[t].Remove(id)
		delete(p.kwTier, id)
	}
	p.graph.Remove(id)
	p.unmention(id)
}

func (p *projection) mention(id string, m *Memory) {
	set := map[string]bool{}
	for _, e := range m.Entities {
		set[pmem.NormalizeEntity(e)] = true
	}
	for _, r := range m.Relations {
		set[pmem.NormalizeEntity(r.From)] = true
		set[pmem.NormalizeEntity(r.To)] = true
	}
	delete(set, "")
	ents := slices.Sorted(maps.Keys(set))
	for _, e := range ents {
		p.entities[e]++
	}
	p.entsOf[id] = ents
}

func (p *projection) unmention(id string) {
	for _, e := range p.entsOf[id] {
		if p.entities[e]--; p.entities[e] <= 0 {
			delete(p.entities, e)
		}
	}
	delete(p.entsOf, id)
}

// vectorItem is the store item of a live memory with a vector.
func (ns *Namespace) vectorItem(m *Memory) vectorstore.Item {
	return vectorstore.Item{ID: ns.vectorID(m.ID), Vector: m.Vector, Text: m.Content,
		Metadata: map[string]string{"ns": ns.name, "tier": string(m.Tier)}}
}

// vectorID is the store's ID of memory id's vector: collections are shared by the
// namespaces, and memory IDs are unique within one namespace only.
func (ns *Namespace) vectorID(id string) string { return ns.name + "/" + id }

// memoryID is the memory of a store item of the namespace ("" for another's).
func (ns *Namespace) memoryID(vectorID string) string {
	id, ok := strings.CutPrefix(vectorID, ns.name+"/")
	if !ok {
		return ""
	}
	return id
}

// wantAt is the collection that should hold memory id's vector ("" for none).
func (ns *Namespace) wantAt(id string) string {
	m := ns.st.mems[id]
	if m == nil || len(m.Vector) == 0 {
		return ""
	}
	return Collection(m.Tier, m.Modality)
}

// syncVectors brings the vector store in line with the fold, collection by
// collection: a collection still to rebuild (stale, after the namespace's first fold
// in this process) gets every vector the fold puts there and loses the namespace's
// items the fold moved or forgot; the others get the changes of the memories marked
// dirty. A failure in one collection leaves the others done: what failed stays
// marked for the next sync, and the collection waits a while (troubleWait) before a
// catch-up tries it again. A collection that failed lately is tried now only when it
// is force (a search that needs its vectors); "" forces none. It returns the errors
// of the collections that failed (nil when all that were tried succeeded).
func (ns *Namespace) syncVectors(ctx context.Context, force string) error {
	p := ns.pj
	defer ns.countBacklog()
	now := time.Now()
	ns.retryParked(now)
	if len(p.dirty) == 0 && len(p.stale) == 0 {
		return nil
	}
	type work struct {
		dels []string        // memory IDs whose vectors must leave the collection
		ups  map[string]bool // memory IDs whose vectors must be upserted there
	}
	colls := map[string]*work{}
	at := func(c string) *work {
		w := colls[c]
		if w == nil {
			w = &work{ups: map[string]bool{}}
			colls[c] = w
		}
		return w
	}
	for c := range p.stale {
		w := at(c)
		for _, id := range slices.Sorted(maps.Keys(p.ever)) {
			want := ns.wantAt(id)
			if want != c && slices.Contains(p.ever[id], c) {
				w.dels = append(w.dels, id)
			}
			if want == c {
				w.ups[id] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.dirty)) {
		want := ns.wantAt(id)
		if cur := p.vecAt[id]; cur != "" && cur != want && !p.stale[cur] {
			at(cur).dels = append(at(cur).dels, id)
		}
		if want != "" && !p.stale[want] {
			at(want).ups[id] = true
		}
	}
	tried := func(c string) bool { return c == force || !p.waiting(c, now) }
	failed := map[string]error{}
	undeleted := map[string]bool{} // memories whose old vector is still in place
	// Deletes first: a memory whose vector could not leave its old collection is not
	// put in its new one this time, so that it never stands in two.
	for _, c := range slices.Sorted(maps.Keys(colls)) {
		w := colls[c]
		if !tried(c) {
			for _, id := range w.dels {
				undeleted[id] = true
			}
			continue
		}
		ids := make([]string, len(w.dels))
		for i, id := range w.dels {
			ids[i] = ns.vectorID(id)
		}
		if err := ns.deleteVectors(ctx, c, ids); err != nil {
			failed[c] = err
			for _, id := range w.dels {
				undeleted[id] = true
			}
			continue
		}
		for _, id := range w.dels {
			if p.vecAt[id] == c {
				delete(p.vecAt, id)
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(colls)) {
		w := colls[c]
		if !tried(c) || failed[c] != nil {
			continue
		}
		var items []vectorstore.Item
		for _, id := range slices.Sorted(maps.Keys(w.ups)) {
			if !undeleted[id] {
				items = append(items, ns.vectorItem(ns.st.mems[id]))
			}
		}
		refused, err := ns.upsertVectors(ctx, c, items)
		for _, r := range refused {
			id := ns.memoryID(r.Item.ID)
			wait := ns.cfg.VectorRetry
			if prev, ok := p.retrying[id]; ok {
				wait = min(2*prev, vectorRetryMaxFactor*ns.cfg.VectorRetry)
			}
			delete(p.retrying, id)
			p.parked[id] = parking{coll: c, err: r.Err, wait: wait, retry: now.Add(wait)}
			if ns.cfg.VectorParked != nil {
				ns.cfg.VectorParked(ns.name, c, id, r.Err)
			}
		}
		if err != nil {
			failed[c] = err
			continue
		}
		for _, it := range items {
			if id := ns.memoryID(it.ID); p.parked[id].coll != c {
				p.vecAt[id] = c
			}
		}
		delete(p.stale, c)
		ns.recovered(c)
	}
	for _, c := range slices.Sorted(maps.Keys(failed)) {
		ns.failed(c, failed[c], now)
	}
	// A dirty memory is done when its vector is where the fold wants it and in no
	// other collection it was known in.
	for id := range p.dirty {
		want := ns.wantAt(id)
		cur := p.vecAt[id]
		if pk, ok := p.parked[id]; ok && pk.coll == want && cur == "" {
			cur = want // refused there: parked, not waiting
		}
		if cur == want && !undeleted[id] && (want == "" || !p.stale[want]) {
			delete(p.dirty, id)
			delete(p.retrying, id)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	errs := make([]error, 0, len(failed))
	for _, c := range slices.Sorted(maps.Keys(failed)) {
		errs = append(errs, failed[c])
	}
	return errors.Join(errs...)
}

// catchUpVectors is the sync of a catch-up (entity.Fold.Sync): it tries the
// collections that did not fail lately and never fails. What it could not do waits
// for the next operation, and a search that needs those vectors says why they are
// missing (behind): writes, and searches that need no vectors, go on while the
// vector store is down or refuses some of them.
func (ns *Namespace) catchUpVectors(ctx context.Context) {
	ns.noteIDs()
	_ = ns.syncVectors(ctx, "")
	p := ns.pj
	ns.cleanAt = 0
	if len(p.dirty) == 0 && len(p.stale) == 0 && len(p.parked) == 0 {
		ns.cleanAt = ns.st.seq
	}
}

// behind reports whether collection c lacks some of the fold's vectors (or holds
// some it should not), and why when a store error says so.
func (ns *Namespace) behind(c string) bool {
	p := ns.pj
	if p.stale[c] {
		return true
	}
	for id := range p.dirty {
		if p.vecAt[id] == c || ns.wantAt(id) == c {
			return true
		}
	}
	return false
}

// upsertVectors upserts items into coll in batches of VectorBatch. The items the
// store refuses are returned, the others written (vectorstore.UpsertIsolating); an
// error that is no refusal (the store is down) fails the rest.
func (ns *Namespace) upsertVectors(ctx context.Context, coll string, items []vectorstore.Item) ([]vectorstore.Parked, error) {
	refused, err := vectorstore.UpsertIsolating(ctx, ns.cfg.Vectors, coll, items, VectorBatch)
	for i := range refused {
		refused[i].Err = fmt.Errorf("memory: %s: the vector of memory %s was refused by %s: %w", ns.name, ns.memoryID(refused[i].Item.ID), coll, refused[i].Err)
	}
	if err != nil {
		return refused, fmt.Errorf("memory: %s: upserting %d vectors into %s: %w", ns.name, len(items), coll, err)
	}
	return refused, nil
}

// vectorRetryMaxFactor bounds the wait before a refused vector is tried again:
// at most this many times Config.VectorRetry.
const vectorRetryMaxFactor = 32

// retryParked puts the parked memories whose wait is over back among the dirty
// ones, for the sync to try them again, unless their collection failed lately.
// The caller holds mu.
func (ns *Namespace) retryParked(now time.Time) {
	p := ns.pj
	for id, pk := range p.parked {
		if ns.wantAt(id) != pk.coll {
			delete(p.parked, id) // moved since (apply unparks a change: not expected)
			continue
		}
		if now.Before(pk.retry) || p.waiting(pk.coll, now) {
			continue
		}
		delete(p.parked, id)
		p.dirty[id] = struct{}{}
		p.retrying[id] = pk.wait
		ns.m.retriedN.Add(1)
	}
}

// parkedDue returns when the first parked memory may be tried again (zero: none
// parked). The caller holds mu.
func (p *projection) parkedDue() time.Time {
	var first time.Time
	for _, pk := range p.parked {
		if first.IsZero() || pk.retry.Before(first) {
			first = pk.retry
		}
	}
	return first
}

// countBacklog counts the vectors the store still lacks or holds wrongly (the
// dirty memories, and the live ones of collections still to rebuild) and tells
// Memories the change. The caller holds ns.mu.
func (ns *Namespace) countBacklog() {
	p := ns.pj
	n := int64(len(p.dirty))
	if len(p.stale) > 0 {
		for id := range ns.st.mems {
			if _, d := p.dirty[id]; !d && p.stale[ns.wantAt(id)] {
				n++
			}
		}
	}
	parked := int64(len(p.parked))
	if ns.use.Released() {
		// A released instance a caller still held: the one loaded in its place
		// folds the same writes and counts them; this one stops counting, or
		// nothing would take its share off the totals again.
		n, parked = 0, 0
	}
	ns.m.backlog.Add(n - p.backlog)
	p.backlog = n
	ns.m.parkedN.Add(parked - p.parkedN)
	p.parkedN = parked
	var due int64
	if t := p.parkedDue(); !t.IsZero() {
		due = t.UnixNano()
	}
	ns.parkDue.Store(due)
}

// parkedIn counts the memories whose vector collection coll refused.
func (p *projection) parkedIn(coll string) int {
	n := 0
	for _, pk := range p.parked {
		if pk.coll == coll {
			n++
		}
	}
	return n
}

func (ns *Namespace) deleteVectors(ctx context.Context, coll string, ids []string) error {
	for batch := range slices.Chunk(ids, VectorBatch) {
		if err := ns.cfg.Vectors.Delete(ctx, coll, batch); err != nil {
			return fmt.Errorf("memory: %s: deleting %d vectors from %s: %w", ns.name, len(batch), coll, err)
		}
	}
	return nil
}

// lastParked is the refusal of a memory parked in collection coll (the first by
// ID), to say why.
func (p *projection) lastParked(coll string) error {
	var first string
	var err error
	for id, pk := range p.parked {
		if pk.coll == coll && (err == nil || id < first) {
			first, err = id, pk.err
		}
	}
	return err
}

// trustStore takes the vector store to hold every vector of the fold, as it did
// when this process released the namespace at this seq (entity.Use.ResumeAt): the
// fold of the events up to it marks nothing to write, and a namespace loaded again
// writes only what changed since. The caller holds mu.
func (ns *Namespace) trustStore() {
	p := ns.pj
	clear(p.dirty)
	clear(p.stale)
	clear(p.vecAt)
	for id := range ns.st.mems {
		if c := ns.wantAt(id); c != "" {
			p.vecAt[id] = c
		}
	}
}
