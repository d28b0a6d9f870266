package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/troupe-run/troupe/internal/cjk"
	"golang.org/x/text/unicode/norm"

	pmem "github.com/troupe-run/troupe/pipelines/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// Search modes.
const (
	ModeHybrid  = "hybrid"
	ModeVector  = "vector"
	ModeKeyword = "keyword"
)

// CandidateFactor is how many candidates each source (vector search, keyword index,
// entity graph) proposes per tier, as a multiple of the limit.
const CandidateFactor = 4

// MaxVectorWiden bounds how far a tier's search widens its vector candidates when
// the memories it leaves out (invalidated facts, a filter's) take the store's top
// hits: to at most this many times CandidateFactor × limit.
const MaxVectorWiden = 64

// maxExactFilter bounds the episodic memories that structured filters may leave for
// Search to score all of them (exact cosine from the fold's vectors); above it, the
// filters are intersected with the vector store's and the keyword index's hits.
const maxExactFilter = 4096

// Query asks Search for memories.
type Query struct {
	// Text is what to look for. Empty lists the memories the filters keep, ranked by
	// their formula with no relevance (recency and importance).
	Text string
	// Tiers limits the search (empty: every tier).
	Tiers []Tier
	// Limit bounds the results (default DefaultLimit, at most MaxLimit).
	Limit int
	// Mode is ModeHybrid (default), ModeVector or ModeKeyword.
	Mode string
	// Modality limits the perceptual tier to one modality, searched with that
	// modality's encoder; image or audio also limits the search to the perceptual
	// tier, the only one that holds them. Empty searches every modality.
	Modality Modality
	// Since and Until bound the memories' Timestamp (zero: unbounded).
	Since, Until time.Time
	// MinImportance keeps memories at least this important.
	MinImportance float64
	// Participants keeps the episodic memories in which every one of them took part
	// (case-insensitive); the other tiers have no participants and ignore it.
	Participants []string
	// IncludeInvalid keeps memories that a newer one invalidated.
	IncludeInvalid bool
}

// Result is a memory Search found, with its score.
type Result struct {
	Memory Memory  `json:"memory"`
	Score  float64 `json:"score"`
}

// check validates q and fills in its defaults.
func (q *Query) check() error {
	switch {
	case q.Limit < 0:
		return fmt.Errorf("%w: negative limit %d", ErrInvalid, q.Limit)
	case q.Limit == 0:
		q.Limit = DefaultLimit
	case q.Limit > MaxLimit:
		q.Limit = MaxLimit
	}
	switch q.Mode {
	case "":
		q.Mode = ModeHybrid
	case ModeHybrid, ModeVector, ModeKeyword:
	default:
		return fmt.Errorf("%w: search mode %q: want hybrid, vector or keyword", ErrInvalid, q.Mode)
	}
	if q.Modality != "" {
		if _, err := ParseModality(string(q.Modality)); err != nil {
			return err
		}
	}
	for _, t := range q.Tiers {
		if _, err := ParseTier(string(t)); err != nil {
			return err
		}
	}
	if len(q.Tiers) == 0 {
		q.Tiers = Tiers
	}
	if q.MinImportance != 0 {
		if err := CheckImportance(q.MinImportance); err != nil {
			return fmt.Errorf("min importance: %w", err)
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Since.After(q.Until) {
		return fmt.Errorf("%w: since %s is after until %s", ErrInvalid, q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339))
	}
	return nil
}

// candidate is a memory proposed to a tier's formula, with its relevance terms.
type candidate struct {
	id      string
	cos     float64 // cosine, negatives clamped to 0
	vector  float64 // cos scaled over the tier's candidates (see calibrate)
	hasVec  bool
	keyword float64 // BM25 over the query's weight (see keywordScore)
	hasKw   bool
	graph   float64
}

// Search finds memories: per tier, candidates from the vector store and the
// keyword index (CandidateFactor × limit each) and, in the semantic tier, the entity
// graph, ranked by the tier's formula (see the package documentation), then merged
// across tiers by score, ties by ID. Expired working memories are forgotten first
// (reason "ttl: not written for TTL") and never returned.
//
// Only the vectors need the vector store. A search by vector (ModeVector) that
// cannot have them — the store does not answer, or refuses the namespace's vectors
// in a collection searched — fails with an error wrapping ErrVectorStore that says
// why; a hybrid search ranks that collection's memories without the store (the
// keyword index's and the graph's candidates, each with the cosine of the vector its
// event holds) and says so (SearchNoted); a keyword search never asks the store.
// Likewise, when the query embedder fails, a hybrid search ranks the keyword
// index's and the graph's candidates without vectors and says so; a vector search
// fails.
func (ns *Namespace) Search(ctx context.Context, q Query) ([]Result, error) {
	res, _, err := ns.SearchNoted(ctx, q)
	return res, err
}

// SearchNoted is Search, with a note that says what the search did without ("" for
// nothing): the collections whose vectors a hybrid search ranked without the vector
// store, and why.
func (ns *Namespace) SearchNoted(ctx context.Context, q Query) ([]Result, string, error) {
	s, err := ns.startSearch(ctx, q)
	if err != nil {
		return nil, "", err
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if err := ns.prepareSearch(ctx, s); err != nil {
		return nil, "", err
	}
	lists := make([][]pmem.Ranked, 0, len(s.q.Tiers))
	for _, t := range slices.Compact(slices.Clone(s.q.Tiers)) {
		list, err := s.tier(ctx, t)
		if err != nil {
			return nil, "", err
		}
		lists = append(lists, list)
	}
	return s.results(lists...), s.note(), nil
}

// VectorNote says what a hybrid search of q would rank without the vector store
// now, as SearchNoted's note does: the collections it searches whose last request
// to the store failed, or that lack some of the fold's vectors. It is "" for a
// search of another mode, and when the store serves every collection q searches.
// A caller that searched through TierSearch asks it after the search.
func (ns *Namespace) VectorNote(q Query) string {
	if q.check() != nil || q.Mode != ModeHybrid || strings.TrimSpace(q.Text) == "" {
		return ""
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	s := &search{ns: ns, q: q}
	for _, t := range q.Tiers {
		for _, mod := range s.modalities(t) {
			c := Collection(t, mod)
			if (ns.pj.trouble[c] != nil || ns.behind(c)) && ns.uses(c) {
				if s.without == nil {
					s.without = map[string]error{}
				}
				s.without[c] = ns.vectorError(c)
			}
		}
	}
	return s.note()
}

// note says which collections the search ranked without the vector store, and why.
// It also names the collections searched that refused some of the namespace's
// vectors (parked): those memories are found by keyword and entity only. The caller
// holds s.ns.mu.
func (s *search) note() string {
	var notes []string
	for _, mod := range slices.Sorted(maps.Keys(s.unembedded)) {
		notes = append(notes, fmt.Sprintf("the query embedder failed, so %s memories were ranked by keyword and entity graph only, without vectors: %v", mod, s.unembedded[mod]))
	}
	if len(s.without) > 0 {
		colls := slices.Sorted(maps.Keys(s.without))
		why := make([]string, len(colls))
		for i, c := range colls {
			why[i] = s.without[c].Error()
		}
		notes = append(notes, fmt.Sprintf("ranked by keyword and entity graph without the vector store in %s: %s", strings.Join(colls, ", "), strings.Join(why, "; ")))
	}
	if s.q.Mode != ModeKeyword {
		for _, t := range s.q.Tiers {
			for _, mod := range s.modalities(t) {
				c := Collection(t, mod)
				if _, told := s.without[c]; told {
					continue
				}
				if n := s.ns.pj.parkedIn(c); n > 0 {
					notes = append(notes, fmt.Sprintf("%s refused the vectors of %d memories of namespace %s (found by keyword only): %v", c, n, s.ns.name, s.ns.pj.lastParked(c)))
				}
			}
		}
	}
	return strings.Join(notes, "; ")
}

// startSearch starts a search of q: it checks q and embeds the query once. The
// caller does not hold ns.mu: a query embedder that is slow, hangs or trickles its
// answer until its timeout holds up no write, search or read of the namespace.
func (ns *Namespace) startSearch(ctx context.Context, q Query) (*search, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	s := &search{ns: ns, q: q, text: strings.TrimSpace(q.Text), qvecs: map[Modality][]float32{}}
	if s.text != "" && q.Mode != ModeKeyword {
		if err := s.embedQuery(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// prepareSearch readies s, started by startSearch, to rank: it folds the namespace
// (forgetting what expired) and takes the time of the search. The caller holds
// ns.mu.
func (ns *Namespace) prepareSearch(ctx context.Context, s *search) error {
	if err := ns.foldExpire(ctx); err != nil {
		return err
	}
	s.now = ns.cfg.Now()
	return nil
}

// results merges the tiers' ranked lists, best first, up to the query's limit; a
// memory forgotten since its tier was ranked is left out, and so is a working
// memory whose content a lasting memory found too holds (the same hash and
// modality: the one a write of that content is answered with, DuplicateFor), so
// that the fact comes back once. The caller holds ns.mu.
func (s *search) results(lists ...[]pmem.Ranked) []Result {
	merged := pmem.Merge(0, lists...)
	type content struct {
		hash string
		mod  Modality
	}
	lasting := map[content]bool{}
	for _, r := range merged {
		if m := s.ns.st.mems[r.ID]; m != nil && m.Hash != "" && m.Tier != Working {
			lasting[content{m.Hash, m.Modality}] = true
		}
	}
	out := make([]Result, 0, min(len(merged), max(s.q.Limit, 0)))
	for _, r := range merged {
		if s.q.Limit > 0 && len(out) == s.q.Limit {
			break
		}
		m := s.ns.st.mems[r.ID]
		if m == nil || m.Tier == Working && lasting[content{m.Hash, m.Modality}] {
			continue
		}
		out = append(out, Result{Memory: copyMemory(m), Score: r.Score})
	}
	return out
}

// search is one Search under way; its namespace's mu is held.
type search struct {
	ns    *Namespace
	q     Query
	text  string
	now   time.Time
	qvecs map[Modality][]float32 // the query's embedding per modality (nil: none)
	qents []string
	// without holds the collections a hybrid search ranked without the vector
	// store, and why.
	without map[string]error
	// unembedded holds the modalities whose query embedding failed in a hybrid
	// search, and why: their memories were ranked without vectors.
	unembedded map[Modality]error
}

// modalities returns the modalities Search looks at in tier t.
func (s *search) modalities(t Tier) []Modality {
	switch {
	case t != Perceptual && (s.q.Modality == "" || s.q.Modality == Text):
		return []Modality{Text}
	case t != Perceptual:
		return nil
	case s.q.Modality == "":
		return []Modality{Text, Image, Audio}
	}
	return []Modality{s.q.Modality}
}

// embedQuery embeds the query text once per modality searched. It reads only s's
// query and the namespace's configuration: the caller need not hold ns.mu.
func (s *search) embedQuery(ctx context.Context) error {
	for _, t := range s.q.Tiers {
		for _, mod := range s.modalities(t) {
			if _, ok := s.qvecs[mod]; ok {
				continue
			}
			v, err := s.embedOne(ctx, mod)
			if err != nil && s.q.Mode == ModeHybrid && ctx.Err() == nil {
				// A hybrid search answers by keyword and entity graph, and says
				// so, rather than not at all; a vector search fails below.
				if s.unembedded == nil {
					s.unembedded = map[Modality]error{}
				}
				s.unembedded[mod] = err
				s.qvecs[mod] = nil
				continue
			}
			if err != nil {
				return err
			}
			s.qvecs[mod] = v
		}
	}
	return nil
}

// embedOne embeds the query for modality mod: its vector (nil for a zero one), or
// why the query embedder failed or answered what is no vector.
func (s *search) embedOne(ctx context.Context, mod Modality) ([]float32, error) {
	vs, err := s.ns.queryEmbedder(mod).Embed(ctx, []string{s.text})
	if err != nil {
		return nil, fmt.Errorf("memory: embedding the query for %s memories: %w", mod, err)
	}
	if len(vs) != 1 {
		return nil, fmt.Errorf("memory: the %s query embedder returned %d vectors for 1 text", mod, len(vs))
	}
	v, err := usable(vs[0])
	if err != nil {
		return nil, fmt.Errorf("memory: the %s query embedder: %w", mod, err)
	}
	return v, nil
}

// keep reports whether memory m may be a result of tier t: live in t, of a
// modality searched, valid (unless asked otherwise), not expired, and within the
// structured filters.
func (s *search) keep(t Tier, mods []Modality, m *Memory) bool {
	switch {
	case m == nil || m.Tier != t || !slices.Contains(mods, m.Modality):
		return false
	case m.InvalidAt != nil && !s.q.IncludeInvalid:
		return false
	case s.ns.expired(m, s.now):
		return false
	case !s.q.Since.IsZero() && m.Timestamp.Before(s.q.Since):
		return false
	case !s.q.Until.IsZero() && m.Timestamp.After(s.q.Until):
		return false
	case m.Importance < s.q.MinImportance:
		return false
	}
	if t == Episodic {
		for _, p := range s.q.Participants {
			if !slices.ContainsFunc(m.Participants, func(x string) bool { return strings.EqualFold(x, strings.TrimSpace(p)) }) {
				return false
			}
		}
	}
	return true
}

// filtered reports whether the query narrows episodic memories by structure.
func (s *search) filtered() bool {
	return !s.q.Since.IsZero() || !s.q.Until.IsZero() || s.q.MinImportance > 0 || len(s.q.Participants) > 0
}

// tier ranks tier t's candidates by its formula.
func (s *search) tier(ctx context.Context, t Tier) ([]pmem.Ranked, error) {
	mods := s.modalities(t)
	if len(mods) == 0 {
		return nil, nil
	}
	ns := s.ns
	keep := func(id string) bool { return s.keep(t, mods, ns.st.mems[id]) }
	k := CandidateFactor * s.q.Limit
	cands := map[string]*candidate{}
	get := func(id string) *candidate {
		c := cands[id]
		if c == nil {
			c = &candidate{id: id}
			cands[id] = c
		}
		return c
	}
	exact := false
	if s.text == "" || (t == Episodic && s.filtered()) {
		// Structured filters first: every memory they keep is a candidate, when few
		// enough to score them all exactly (an empty query ranks them all).
		var all []string
		for id := range ns.st.mems {
			if keep(id) {
				all = append(all, id)
			}
		}
		if s.text == "" || len(all) <= maxExactFilter {
			exact = true
			for _, id := range all {
				get(id)
			}
		}
	}
	if s.text != "" && !exact {
		if s.q.Mode != ModeKeyword {
			for _, mod := range mods {
				qv := s.qvecs[mod]
				if qv == nil {
					continue
				}
				coll := Collection(t, mod)
				// The store ranks the namespace's vectors of the tier; what the
				// search leaves out (invalidated facts, its filters) is dropped
				// after, so while it drops hits and the store has more, it asks
				// for more (up to MaxVectorWiden × k): closer memories it leaves
				// out must not hide the ones it keeps.
				for want := k; ; want *= 4 {
					hits, err := ns.searchVectors(ctx, coll, t, qv, want, s.q.Mode == ModeVector)
					if err != nil && s.q.Mode == ModeHybrid && errors.Is(err, ErrVectorStore) {
						if s.without == nil {
							s.without = map[string]error{}
						}
						s.without[coll] = err
						break
					}
					if err != nil {
						return nil, err
					}
					kept := 0
					for _, h := range hits {
						if id := ns.memoryID(h.ID); id != "" && keep(id) {
							c := get(id)
							c.cos, c.hasVec = max(0, float64(h.Score)), true
							kept++
						}
					}
					if kept >= k || len(hits) < want || want >= MaxVectorWiden*k {
						break
					}
				}
			}
		}
		if s.q.Mode != ModeVector {
			weight := ns.pj.keywords[t].QueryWeight(s.text)
			for _, h := range ns.pj.keywords[t].Search(s.text, k, keep) {
				c := get(h.ID)
				c.keyword, c.hasKw = keywordScore(h.Raw, weight), true
			}
		}
	}
	if t == Semantic && s.text != "" {
		s.qents = s.queryEntities()
		if len(s.qents) > 0 && !exact {
			for _, h := range ns.pj.graph.Candidates(s.qents, pmem.MaxGraphHops, k) {
				if keep(h.ID) {
					get(h.ID)
				}
			}
		}
	}
	if s.text != "" {
		s.complete(t, cands)
		s.calibrate(cands)
	}
	out := make([]pmem.Ranked, 0, len(cands))
	graphScore := func(string) float64 { return 0 }
	if t == Semantic && len(s.qents) > 0 {
		graphScore = ns.pj.graph.Scorer(s.qents)
	}
	for _, c := range cands {
		m := ns.st.mems[c.id]
		c.graph = graphScore(c.id)
		var rel float64
		switch s.q.Mode {
		case ModeHybrid:
			rel = pmem.Hybrid(c.vector, c.hasVec, c.keyword)
		case ModeVector:
			rel = c.vector
		case ModeKeyword:
			rel = c.keyword
		}
		if s.text != "" && c.cos <= 0 && c.keyword <= 0 && c.graph <= 0 {
			continue // nothing of the query matched
		}
		age := s.now.Sub(m.Timestamp)
		var score float64
		switch t {
		case Working:
			switch s.q.Mode {
			case ModeHybrid:
				score = pmem.WorkingScore(c.vector, c.hasVec, c.keyword, age, m.Importance)
			case ModeVector:
				score = pmem.WorkingScore(c.vector, c.hasVec, 0, age, m.Importance)
			case ModeKeyword:
				score = pmem.WorkingScore(0, false, c.keyword, age, m.Importance)
			}
		case Episodic:
			score = pmem.EpisodicScore(rel, age, m.Importance)
		case Semantic:
			score = pmem.SemanticScore(rel, c.graph, m.Importance)
		case Perceptual:
			score = pmem.PerceptualScore(rel, age, m.Importance)
		}
		out = append(out, pmem.Ranked{ID: c.id, Tier: string(t), Score: score})
	}
	return out, nil
}

// searchVectors asks the vector store for the k vectors of tier t in collection
// coll nearest qv, among which those the fold put there.
//
// The collection must hold the fold's vectors first: when some are not there yet (a
// write while the store did not answer), they are put there now. When that fails,
// or the store does not answer the search, the error wraps ErrVectorStore and says
// why. A collection that failed lately is tried again at once only when must is
// set (a search by vector alone); else, until its wait is over, the error comes
// without a request to the store. A collection where the fold put no vector of the
// namespace is not asked at all: nothing it returns would be kept.
//
// Items of the namespace that the fold never put there may crowd them out: the
// store outlived the event log (a data directory started afresh on the same
// Milvus), or another deployment shares the store and the namespace's name. While
// the store returns as many hits as asked and fewer of the fold's than it holds,
// the namespace asks for four times as many again (up to maxVectorK): search
// ranks the memories it knows, never deletes what another may own.
//
// The store holds every vector the fold put there, so a store that returns fewer
// hits than asked, and not all of those the fold put there, has lost some: a
// Milvus started afresh without its data, or a collection dropped. The namespace
// then puts back the collection's vectors (they are in its events) and searches
// again, instead of finding its memories by keyword alone until the next restart.
// The caller holds ns.mu.
func (ns *Namespace) searchVectors(ctx context.Context, coll string, t Tier, qv []float32, k int, must bool) ([]vectorstore.Hit, error) {
	p := ns.pj
	if !ns.uses(coll) {
		if n := p.parkedIn(coll); n > 0 {
			// Every vector of the namespace there was refused: nothing to search.
			return nil, fmt.Errorf("%w: %s refused the vectors of %d memories of namespace %s (the memories are in the log; searches by keyword find them): %w",
				ErrVectorStore, coll, n, ns.name, p.lastParked(coll))
		}
		return nil, nil
	}
	if !must && p.waiting(coll, time.Now()) {
		return nil, ns.vectorError(coll)
	}
	if ns.behind(coll) {
		_ = ns.syncVectors(ctx, coll)
		if ns.behind(coll) {
			return nil, ns.vectorError(coll)
		}
	}
	held := ns.held(coll)
	if held == 0 {
		return nil, nil
	}
	// own keeps the hits of the vectors the fold put there, at most k, best first.
	own := func(hits []vectorstore.Hit) []vectorstore.Hit {
		var out []vectorstore.Hit
		for _, h := range hits {
			if len(out) < k && p.vecAt[ns.memoryID(h.ID)] == coll {
				out = append(out, h)
			}
		}
		return out
	}
	q := vectorstore.Query{Vector: qv, K: k, Filter: map[string]string{"ns": ns.name, "tier": string(t)}}
	restored := false
	for {
		hits, err := ns.cfg.Vectors.Search(ctx, coll, q)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("memory: searching %s: %w", coll, err)
			}
			ns.failed(coll, fmt.Errorf("memory: searching %s: %w", coll, err), time.Now())
			return nil, ns.vectorError(coll)
		}
		ns.recovered(coll)
		mine := own(hits)
		switch {
		case len(mine) >= min(k, held):
			return mine, nil
		case len(hits) >= q.K:
			if q.K >= maxVectorK {
				return mine, nil
			}
			q.K = min(4*q.K, maxVectorK) // crowded out by items the fold never had
		case restored:
			return mine, nil
		default:
			// Fewer than asked: the store returned every item it holds under the
			// filter, and lacks some of the fold's.
			for id, c := range p.vecAt {
				if c == coll {
					p.dirty[id] = struct{}{}
				}
			}
			if err := ns.syncVectors(ctx, coll); err != nil || ns.behind(coll) {
				return nil, ns.vectorError(coll) // putting back what the store lost failed
			}
			restored = true
		}
	}
}

// held counts the vectors of the namespace that collection coll holds.
func (ns *Namespace) held(coll string) int {
	n := 0
	for _, c := range ns.pj.vecAt {
		if c == coll {
			n++
		}
	}
	return n
}

// uses reports whether a vector search of the namespace needs collection coll: it
// holds vectors of the namespace, or must take some.
func (ns *Namespace) uses(coll string) bool { return ns.behind(coll) || ns.held(coll) > 0 }

// vectorError says why collection coll cannot serve a search: its last failure,
// or the failures of the collections its memories must leave first. It wraps
// ErrVectorStore. The caller holds ns.mu.
func (ns *Namespace) vectorError(coll string) error {
	p := ns.pj
	if t := p.trouble[coll]; t != nil {
		if refused(t.err) {
			return fmt.Errorf("%w: %s refuses the vectors of namespace %s, and will until it or the embedder changes (the memories are in the log; searches by keyword find them): %w", ErrVectorStore, coll, ns.name, t.err)
		}
		return fmt.Errorf("%w: %s cannot serve namespace %s: %w", ErrVectorStore, coll, ns.name, t.err)
	}
	var errs []error
	for _, c := range slices.Sorted(maps.Keys(p.trouble)) {
		errs = append(errs, p.trouble[c].err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s lacks vectors of namespace %s that must first leave another collection: %w", ErrVectorStore, coll, ns.name, errors.Join(errs...))
	}
	return fmt.Errorf("%w: %s lacks vectors of namespace %s", ErrVectorStore, coll, ns.name)
}

// maxVectorK bounds the K of a vector search that items the fold never had crowd.
const maxVectorK = 4096

// complete gives every candidate both relevance terms of its mode: the cosine of
// the query with the memory's vector as the fold holds it, where the vector store
// did not return it, and its keyword score where the keyword index's top hits did
// not hold it.
func (s *search) complete(t Tier, cands map[string]*candidate) {
	ns := s.ns
	if s.q.Mode != ModeKeyword {
		for _, c := range cands {
			if c.hasVec {
				continue
			}
			m := ns.st.mems[c.id]
			if qv := s.qvecs[m.Modality]; qv != nil && len(qv) == len(m.Vector) {
				c.cos, c.hasVec = max(0, cosine(qv, m.Vector)), true
			}
		}
	}
	if s.q.Mode != ModeVector {
		var want []string
		for _, c := range cands {
			if !c.hasKw {
				want = append(want, c.id)
			}
		}
		if len(want) == 0 {
			return
		}
		weight := ns.pj.keywords[t].QueryWeight(s.text)
		for id, raw := range ns.pj.keywords[t].RawScores(s.text, want) {
			c := cands[id]
			c.keyword, c.hasKw = keywordScore(raw, weight), true
		}
	}
}

// keywordScore is a memory's keyword term: its BM25 score over the query's weight
// (pipelines/memory KeywordIndex.QueryWeight, the score of a memory of average
// length holding each query term once), at most 1. It says how much of the query the
// memory matches: 1 for all of it, a fraction for a few of its words, the rarer words
// weighing more. Dividing by the best hit instead would give 1 to the best of weak
// matches — one common word of a long question — and let it outweigh the vector
// term of the memory that answers it in other words.
func keywordScore(raw, weight float64) float64 {
	if raw <= 0 || weight <= 0 {
		return 0
	}
	return min(1, raw/weight)
}

// calibrate sets every candidate's vector term: its cosine rescaled from the floor
// of the tier's candidates of its modality, (cos − floor) / (1 − floor), 0 at the
// floor and 1 for an identical text. The floor is the least cosine among the n
// candidates, shrunk toward 0 when they are few: floor = least · n / (n +
// FloorPrior).
//
// The design formulas weigh the vector term against the keyword term (0.7 and 0.3),
// the graph, recency and importance as if each spanned [0, 1]. Raw cosines need not:
// a sentence embedding model compresses them into a narrow band (with
// multilingual-e5-small, unrelated texts score about 0.7 and a good match about
// 0.85), so a keyword hit on one common word would outweigh the whole spread of the
// vector term. The candidates — the vector store's nearest K, the keyword index's
// best K, the graph's — include memories that do not answer the query, and the least
// of their cosines stands for what an unrelated memory scores with this embedder;
// rescaled from it, the vector term spreads over what the model tells apart. A few
// candidates (a small namespace) may all answer the query, so their least is weak
// evidence of the floor: it counts as n parts in n + FloorPrior, the rest at 0, the
// floor of an embedder whose unrelated texts are orthogonal (one candidate keeps
// about its cosine). The top is not stretched to 1 (as min-max scaling would): a
// query that nothing answers well keeps a weak vector term, so the other terms and
// the other tiers still count. For the offline hashing embedder, whose unrelated
// texts score about 0, the floor is about 0 and the term about the cosine.
func (s *search) calibrate(cands map[string]*candidate) {
	type pool struct {
		least float64
		n     int
	}
	pools := map[Modality]*pool{}
	for _, c := range cands {
		if !c.hasVec {
			continue
		}
		mod := s.ns.st.mems[c.id].Modality
		if p := pools[mod]; p == nil {
			pools[mod] = &pool{least: c.cos, n: 1}
		} else {
			p.least, p.n = min(p.least, c.cos), p.n+1
		}
	}
	for _, c := range cands {
		if !c.hasVec {
			continue
		}
		p := pools[s.ns.st.mems[c.id].Modality]
		c.vector = Calibrated(c.cos, Floor(p.least, p.n))
	}
}

// Floor is the floor of n cosines whose least is least: least · n / (n +
// FloorPrior), the least shrunk toward 0 when the cosines are few (see calibrate).
// The consolidator's conflict and clustering rules take the floor of a tier's
// memories by the same rule; its dedupe, which merges, a median shrunk toward a
// conservative prior.
func Floor(least float64, n int) float64 {
	return least * float64(n) / float64(n+FloorPrior)
}

// Calibrated is cos rescaled from floor: (cos − floor) / (1 − floor), 0 at the floor
// (and below it, and for a cosine of 0 or less) and 1 for an identical text.
func Calibrated(cos, floor float64) float64 {
	switch {
	case cos <= 0:
		return 0
	case floor >= 1:
		return 1
	default:
		return max(0, (cos-floor)/(1-floor))
	}
}

// FloorPrior is how many candidates at cosine 0 the floor of the vector term is
// shrunk toward (see Namespace.Search): with many candidates their least cosine is
// the floor, with few it weighs little. The consolidator weighs its priors by it too.
const FloorPrior = 10

// queryEntities is what the query names of the graph: the entities the offline
// extractor finds in it, and its runs of one to three words that name an entity a
// semantic memory mentions (queries are often lowercase: "where does alice work").
func (s *search) queryEntities() []string {
	ents, _ := pmem.ExtractEntities(s.text)
	words := strings.FieldsFunc(strings.ToLower(norm.NFC.String(cjk.Narrow(s.text))), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '@' && r != '.' && r != '_' && r != '-'
	})
	for i := range words {
		words[i] = strings.Trim(words[i], ".-_")
	}
	for n := 1; n <= 3; n++ {
		for i := 0; i+n <= len(words); i++ {
			w := strings.Join(words[i:i+n], " ")
			if s.ns.pj.entities[pmem.NormalizeEntity(w)] > 0 {
				ents = append(ents, w)
			}
		}
	}
	for i := range ents {
		ents[i] = pmem.NormalizeEntity(ents[i])
	}
	slices.Sort(ents)
	return slices.Compact(ents)
}

// cosine is the cosine similarity of two vectors of one dimension (0 if either is
// zero).
func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
