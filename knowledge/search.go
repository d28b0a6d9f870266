package knowledge

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// Mode says which lists a search fuses.
type Mode string

// The search modes.
const (
	// ModeHybrid fuses the vector list and the BM25 list of every query as
	// Query.Fusion says (the default).
	ModeHybrid Mode = "hybrid"
	// ModeVector searches by embedding only.
	ModeVector Mode = "vector"
	// ModeBM25 searches the keyword index only: no embedder is called.
	ModeBM25 Mode = "bm25"
)

// ParseMode reads a search mode; empty is ModeHybrid, and "keyword" is ModeBM25.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return ModeHybrid, nil
	case ModeHybrid, ModeVector, ModeBM25:
		return m, nil
	case "keyword":
		return ModeBM25, nil
	}
	return "", fmt.Errorf("%w: search mode %q: want hybrid, vector or bm25", ErrInvalid, s)
}

// Defaults and bounds of Query.
const (
	DefaultLimit = 5
	MaxLimit     = 100
	// DefaultPool is the candidate pool factor: each list proposes Pool × Limit
	// chunks.
	DefaultPool = 4
	MaxPool     = 20
	// MaxMultiQuery bounds the rewrites of a query.
	MaxMultiQuery = 8
	// MaxQueryBytes bounds a query, a rewrite and a hypothetical passage.
	MaxQueryBytes = 4096
	// RRFK is the constant of the reciprocal rank fusion (pipelines/memory RRF).
	RRFK = pmem.DefaultRRFK
)

// Query asks Search for chunks.
type Query struct {
	// Text is what to look for (required).
	Text string `json:"text"`
	// Limit bounds the hits (default 5, at most 100).
	Limit int `json:"limit,omitempty"`
	// Mode is ModeHybrid (default), ModeVector or ModeBM25.
	Mode Mode `json:"mode,omitempty"`
	// MultiQuery asks the model for that many rewrites of Text (at most 8), each
	// searched like Text, all lists fused. Without a model it is ignored (see
	// SearchResult.Notes).
	MultiQuery int `json:"multi_query,omitempty"`
	// HyDE asks the model for a hypothetical passage that answers Text, embedded
	// as a passage and searched as one more vector list. Without a model, or in
	// ModeBM25, it is ignored (see SearchResult.Notes).
	HyDE bool `json:"hyde,omitempty"`
	// Pool is the candidate pool factor: each list proposes Pool × Limit chunks
	// (default 4, at most 20), fused, deduplicated and reranked before the cut.
	Pool int `json:"pool,omitempty"`
	// Fusion is how a hybrid search (and the lists of MultiQuery and HyDE) is
	// fused: FusionConvex, FusionRRF or FusionWeightedRRF; "" is Config.Fusion.
	// A search of one list (ModeVector or ModeBM25 without MultiQuery and HyDE)
	// fuses nothing: its hits keep their scores whatever the fusion.
	Fusion Fusion `json:"fusion,omitempty"`
	// Alpha is the vector share of FusionConvex, in (0, 1]; 0 is Config.Alpha.
	Alpha float64 `json:"alpha,omitempty"`

	norm scoreNorm // FusionConvex's normalisation (tests compare them)
}

// check validates q and fills in its defaults.
func (q *Query) check(cfg *Config) error {
	q.Text = strings.TrimSpace(q.Text)
	switch {
	case q.Text == "":
		return fmt.Errorf("%w: empty query", ErrInvalid)
	case len(q.Text) > MaxQueryBytes:
		return fmt.Errorf("%w: query of %d bytes: at most %d", ErrInvalid, len(q.Text), MaxQueryBytes)
	case !utf8.ValidString(q.Text):
		return fmt.Errorf("%w: the query is not valid UTF-8", ErrInvalid)
	case q.Limit < 0 || q.MultiQuery < 0 || q.Pool < 0:
		return fmt.Errorf("%w: negative limit, multi_query or pool", ErrInvalid)
	case !(q.Alpha >= 0 && q.Alpha <= 1):
		return fmt.Errorf("%w: alpha %v: want 0 to 1", ErrInvalid, q.Alpha)
	case q.MultiQuery > MaxMultiQuery:
		return fmt.Errorf("%w: multi_query %d: at most %d", ErrInvalid, q.MultiQuery, MaxMultiQuery)
	}
	m, err := ParseMode(string(q.Mode))
	if err != nil {
		return err
	}
	q.Mode = m
	if q.Fusion, err = ParseFusion(string(q.Fusion)); err != nil {
		return err
	}
	if q.Limit == 0 {
		q.Limit = DefaultLimit
	}
	q.Limit = min(q.Limit, MaxLimit)
	if q.Pool == 0 {
		q.Pool = DefaultPool
	}
	q.Pool = min(q.Pool, MaxPool)
	if q.Fusion == "" {
		q.Fusion = cfg.Fusion
	}
	if q.Alpha == 0 {
		q.Alpha = cfg.Alpha
	}
	return nil
}

// Hit is one chunk a search found.
type Hit struct {
	ChunkID string `json:"chunk_id"`
	Source  string `json:"source"`
	// HeadingPath is the chain of headings above the chunk, joined by " > ":
	// "# Guide > ## Install" ("" above the first heading).
	HeadingPath string `json:"heading_path,omitempty"`
	Content     string `json:"content"`
	// Score is the chunk's fused score over the lists searched: with
	// FusionConvex, Alpha × its normalised vector score + (1 − Alpha) × its BM25
	// score over the query's weight; with FusionRRF and FusionWeightedRRF, the
	// sum of weight/(60 + rank) (see the package documentation); a search of one
	// list, whatever its fusion, scores as FusionConvex does (a vector search's hit
	// its cosine to the query). Or what Config.Rerank made of it.
	Score float64 `json:"score"`
	// Start and End are byte offsets of the chunk in the source's Markdown.
	Start int `json:"start"`
	End   int `json:"end"`
}

// Label is how an answer cites the hit: "source > heading path", or the source
// alone above the first heading.
func (h Hit) Label() string {
	if h.HeadingPath == "" {
		return h.Source
	}
	return h.Source + " > " + h.HeadingPath
}

// SearchResult is what Search found, and how.
type SearchResult struct {
	Hits []Hit `json:"hits"`
	// Expanded holds the model's rewrites of the query that were searched beside it
	// (Query.MultiQuery).
	Expanded []string `json:"expanded,omitempty"`
	// HyDE is the hypothetical passage that was searched (Query.HyDE), "" when none.
	HyDE string `json:"hyde,omitempty"`
	// Notes say what was asked and not done, and why: multi-query or HyDE without a
	// model, a model call that failed.
	Notes []string `json:"notes,omitempty"`
}

// The Request.Step of each model call a retrieval makes (a scripted model answers
// by step), and its Request.Purpose.
const (
	stepExpand = 1
	stepHyDE   = 2
	stepAnswer = 3

	PurposeExpand = "kb_expand"
	PurposeHyDE   = "kb_hyde"
	PurposeAnswer = "kb_answer"
)

// Search finds the chunks that answer q. In ModeHybrid, every query searched (q.Text,
// and its rewrites under q.MultiQuery) proposes two lists of Pool × Limit chunks —
// nearest by the query embedder's vector, best by BM25 over heading path and text —
// and q.HyDE adds the nearest to the hypothetical passage's vector; the lists are
// fused as q.Fusion says (FusionConvex: every candidate scored by every list and
// the vector and BM25 scores mixed by q.Alpha), chunks with the same text
// (overlapping documents) kept once (the best), Config.Rerank applied to that pool, and the pool
// cut to q.Limit. The model calls carry Request.Key derived from the knowledge base
// and the query, so a recording gateway replays them. When the query embedder
// fails, or gives vectors of another dimension than the knowledge base's (its
// server switched models), a hybrid search ranks by BM25 alone and a note says
// so; a vector search fails with ErrEmbedder (ErrDimension for the dimension).
func (b *Base) Search(ctx context.Context, q Query) (SearchResult, error) {
	if err := q.check(b.cfg); err != nil {
		return SearchResult{}, err
	}
	defer b.bs.hold(b)()
	if err := b.refresh(ctx); err != nil {
		return SearchResult{}, err
	}
	var res SearchResult
	queries := []string{q.Text}
	model := b.cfg.Model
	if q.MultiQuery > 0 {
		switch {
		case model == nil:
			res.Notes = append(res.Notes, "multi-query expansion is off: "+b.cfg.noModel())
		default:
			more, err := b.expand(ctx, q.Text, q.MultiQuery)
			if err != nil {
				if ctx.Err() != nil {
					return SearchResult{}, fmt.Errorf("knowledge: expanding the query: %w", ctx.Err())
				}
				res.Notes = append(res.Notes, "multi-query expansion failed, the query was searched alone: "+err.Error())
			}
			res.Expanded = more
			queries = append(queries, more...)
		}
	}
	// Every embedding of the search ends by one deadline (embedWithin).
	var embedBy time.Time
	var hydeVec []float32
	if q.HyDE {
		switch {
		case model == nil:
			res.Notes = append(res.Notes, "HyDE is off: "+b.cfg.noModel())
		case q.Mode == ModeBM25:
			res.Notes = append(res.Notes, "HyDE is off in bm25 mode: it searches by vector")
		default:
			passage, err := b.hyde(ctx, q.Text)
			if err == nil {
				var vs [][]float32
				vs, err = b.embedWithin(ctx, q.Mode, &embedBy, b.cfg.Embedder, []string{passage})
				if err == nil && len(vs[0]) > 0 {
					res.HyDE, hydeVec = passage, vs[0]
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					return SearchResult{}, fmt.Errorf("knowledge: HyDE: %w", ctx.Err())
				}
				res.Notes = append(res.Notes, "HyDE failed, it was left out: "+err.Error())
			}
		}
	}
	var qvecs [][]float32
	if q.Mode != ModeBM25 {
		vs, err := b.embedWithin(ctx, q.Mode, &embedBy, b.cfg.QueryEmbedder, queries)
		switch {
		case err != nil && q.Mode == ModeHybrid && ctx.Err() == nil:
			// Degraded results over none: the BM25 half answers, and says so. A
			// vector search has no other half: it fails.
			res.Notes = append(res.Notes, "the query embedder failed, so the search ranked by BM25 alone, without the vector half: "+err.Error())
			q.Mode, hydeVec = ModeBM25, nil
		case err != nil:
			return SearchResult{}, fmt.Errorf("knowledge: embedding the query: %w", err)
		}
		qvecs = vs
	}
	if hydeVec != nil {
		qvecs = append(qvecs, hydeVec)
	}
	pool, notes, err := b.pool(ctx, q, queries, qvecs, res.HyDE)
	if errors.Is(err, ErrDimension) && q.Mode == ModeHybrid {
		// As when the embedder fails: the BM25 half answers, and says so.
		res.Notes = append(res.Notes, "the query's vectors are not of the knowledge base's dimension, so the search ranked by BM25 alone, without the vector half: "+err.Error())
		q.Mode = ModeBM25
		pool, notes, err = b.pool(ctx, q, queries, nil, "")
	}
	if err != nil {
		return SearchResult{}, err
	}
	res.Notes = append(res.Notes, notes...)
	if b.cfg.Rerank != nil && len(pool) > 0 {
		pool, err = b.rerank(ctx, q.Text, pool)
		if err != nil {
			return SearchResult{}, err
		}
	}
	if len(pool) > q.Limit {
		pool = slices.Clip(pool[:q.Limit])
	}
	res.Hits = pool
	if res.Hits == nil {
		res.Hits = []Hit{}
	}
	return res, nil
}

// embedWithin is embedRetry of a search's texts: in a hybrid search by *by, the
// end of Config.HybridEmbedWait from the search's first embedding (set then), so
// that its embeddings together (HyDE's passage, then the query) wait at most that
// long, and whose end is an error (the BM25 half answers alone); in a vector
// search within ctx alone.
func (b *Base) embedWithin(ctx context.Context, mode Mode, by *time.Time, e llm.Embedder, texts []string) ([][]float32, error) {
	if mode != ModeHybrid || b.cfg.HybridEmbedWait < 0 {
		return b.embedRetry(ctx, e, texts)
	}
	if by.IsZero() {
		*by = time.Now().Add(b.cfg.HybridEmbedWait)
	}
	wctx, cancel := context.WithDeadline(ctx, *by)
	defer cancel()
	vs, err := b.embedRetry(wctx, e, texts)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return nil, fmt.Errorf("%w: no answer within %v (knowledge.Config.HybridEmbedWait): %w", ErrEmbedder, b.cfg.HybridEmbedWait, err)
	}
	return vs, err
}

// pool runs every list of a search under one read lock, so that every hit comes
// from one version of the knowledge base, fuses them (Query.Fusion) and drops
// repeated texts.
//
// The vector lists come from the vector store while it holds the fold's vectors;
// while it lags (it failed, or a sync has not caught up) or when it fails the
// search, they come from the fold's own vectors, searched exhaustively in memory,
// and a note says so. A search by vector of a knowledge base whose chunks have
// no vector (its passage embedder gave zero vectors), or of a query without one,
// has no vector list: a hybrid search ranks by BM25 alone, and a note says so.
// hyde is HyDE's hypothetical passage, whose vector is the last of qvecs, or "".
func (b *Base) pool(ctx context.Context, q Query, queries []string, qvecs [][]float32, hyde string) (_ []Hit, notes []string, _ error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	k := q.Pool * q.Limit
	var (
		vecLists, kwLists []rankedList
		vecQueries        [][]float32 // the vectors searched, beside vecLists
		hydeList          = -1        // the index in vecLists of HyDE's vector's list
	)
	if q.Mode != ModeBM25 {
		dim, _ := b.st.dim("")
		var lag error // why the store is not searched
		if !b.inLine() {
			lag = b.trouble
			if lag == nil {
				lag = errors.New("its vectors are not all written yet")
			}
		}
		for i, v := range qvecs {
			if len(v) == 0 || dim == 0 {
				continue
			}
			if len(v) != dim {
				// The node's embedder changed model, not the request: an embedder
				// fault (Search answers a hybrid search by BM25).
				return nil, nil, fmt.Errorf("%w: the query embedder gives %d dimensions, the knowledge base's vectors have %d: search with the embedder it was ingested with",
					ErrDimension, len(v), dim)
			}
			var ids []string
			if lag == nil {
				hits, err := b.cfg.Vectors.Search(ctx, b.coll, vectorstore.Query{Vector: v, K: k})
				switch {
				case err != nil && ctx.Err() != nil:
					return nil, nil, fmt.Errorf("knowledge: searching %s: %w", b.coll, err)
				case err != nil:
					lag = fmt.Errorf("searching %s: %w", b.coll, err)
					b.searchFailed(lag)
				default:
					ids = b.withParked(v, hits, k)
				}
			}
			if lag != nil {
				ids = b.nearestInFold(v, k)
			}
			var l rankedList
			for _, id := range ids {
				if b.st.chunks[id] != nil { // the store may hold a chunk replaced since
					l.add(id, 1)
				}
			}
			if hyde != "" && i == len(qvecs)-1 {
				hydeList = len(vecLists)
			}
			vecLists, vecQueries = append(vecLists, l), append(vecQueries, v)
		}
		switch {
		case len(b.st.chunks) == 0:
		case len(vecLists) == 0 && dim == 0:
			notes = append(notes, "the knowledge base's chunks have no vectors (its embedder gave none), so the search"+bm25Alone(q.Mode))
		case len(vecLists) == 0:
			notes = append(notes, "the query has no vector (its embedder found nothing in it), so the search"+bm25Alone(q.Mode))
		case lag != nil:
			notes = append(notes, fmt.Sprintf("the vector store lags (%v): the vector lists were searched in the knowledge base's %d chunk vectors in memory, exhaustively", lag, len(b.st.chunks)))
		case len(b.parked) > 0:
			first := slices.Min(slices.Collect(maps.Keys(b.parked)))
			notes = append(notes, fmt.Sprintf("the vector store refused the vectors of %d chunks (scored in memory beside its hits): %v", len(b.parked), b.parked[first]))
		}
	}
	var kwTexts []string // the texts searched, beside kwLists
	if q.Mode != ModeVector {
		for _, text := range queries {
			weight := b.kw.QueryWeight(text)
			var l rankedList
			for _, h := range b.kw.Search(text, k, nil) {
				w := 1.0
				if q.Fusion == FusionWeightedRRF {
					w = keywordWeight(h.Raw, weight)
				}
				l.add(h.ID, w)
			}
			kwLists, kwTexts = append(kwLists, l), append(kwTexts, text)
		}
	}
	if q.Mode == ModeHybrid && len(vecLists) > 0 && len(kwLists) > 0 && !slices.ContainsFunc(kwLists, func(l rankedList) bool { return len(l.ids) > 0 }) {
		note, lexical := b.noWordNote(q)
		switch {
		case !lexical:
		case hydeList >= 0 && len(b.kw.Search(hyde, 1, nil)) > 0:
			// The query's vectors meet the passages by hash collisions only; HyDE's
			// hypothetical answer shares words with them: its list alone ranks.
			vecLists, vecQueries = vecLists[hydeList:hydeList+1], vecQueries[hydeList:hydeList+1]
			note = noWordHead + "the hits are ranked by the words of HyDE's hypothetical answer alone (the offline hashing embedder's vectors find words, not meaning)"
		default:
			return []Hit{}, append(notes, note), nil
		}
		notes = append(notes, note)
	}
	var fused []fusedID
	switch {
	case (q.Fusion == FusionRRF || q.Fusion == FusionWeightedRRF) && len(vecLists)+len(kwLists) > 1:
		fused = fuse(append(vecLists, kwLists...))
	default:
		// One list has nothing to fuse: it keeps its order and its scores (a
		// vector search its cosines, a BM25 search its share of the query),
		// whatever the fusion; rank fusion would score its hits 1/61, 1/62, …
		fused = b.fuseConvex(q, vecLists, vecQueries, kwLists, kwTexts)
	}
	hits := b.hits(fused)
	return hits, notes, nil
}

// noWordNote says that a hybrid search found no word of its query (common words
// aside): its vector half alone ranked the hits, and under FusionConvex its
// min-max normalisation gives the best Alpha and the worst 0 whether or not any
// answers the query, so the scores cannot say that nothing matched. lexical is
// true when the embedders are lexical (llm.IsLexical: the offline
// llm.HashingEmbedder, bare or wrapped), whose vectors without a shared word are
// near by hash collisions only: the search then finds nothing, unless HyDE's
// hypothetical answer shares a word with the knowledge base (pool). An agent's
// evidence reads noWordHead and "ranked by meaning alone" in a recorded result
// (actors/gather.go's foundByMeaning): keep those words.
func (b *Base) noWordNote(q Query) (note string, lexical bool) {
	const head = noWordHead
	if b.cfg.lexical {
		return head + "nothing matches it (the offline hashing embedder's vectors find words, not meaning)", true
	}
	if q.Fusion == FusionConvex {
		return head + fmt.Sprintf("the hits are ranked by meaning alone, and their scores rank them against each other (the best scores %g, the vector share, the worst 0), not how well any matches the query", q.Alpha), false
	}
	return head + "the hits are ranked by meaning alone, and their scores rank them against each other, not how well any matches the query", false
}

// noWordHead begins the note of a hybrid search that found no word of its query.
const noWordHead = "no word of the query is in the knowledge base (common words do not count): "

// bm25Alone ends a note on a missing vector list: what a search of mode m did
// without it.
func bm25Alone(m Mode) string {
	if m == ModeVector {
		return " found nothing by vector"
	}
	return " ranked by BM25 alone, without the vector half"
}

// withParked returns the IDs of the store's hits for query vector v, with the
// parked chunks (whose vectors the store refused) scored in memory among them, at
// most k, best first. The caller holds mu.
func (b *Base) withParked(v []float32, hits []vectorstore.Hit, k int) []string {
	type scored struct {
		id    string
		score float64
	}
	all := make([]scored, 0, len(hits)+len(b.parked))
	for _, h := range hits {
		if _, p := b.parked[h.ID]; !p {
			all = append(all, scored{h.ID, float64(h.Score)})
		}
	}
	for id := range b.parked {
		if c := b.st.chunks[id]; c != nil && len(c.vector) == len(v) {
			all = append(all, scored{id, cosine(v, c.vector)})
		}
	}
	if len(b.parked) > 0 {
		slices.SortStableFunc(all, func(x, y scored) int { return cmp.Compare(y.score, x.score) })
	}
	ids := make([]string, 0, min(k, len(all)))
	for _, s := range all[:min(k, len(all))] {
		ids = append(ids, s.id)
	}
	return ids
}

// nearestInFold returns the IDs of the k live chunks whose vectors are nearest to v
// by cosine, nearest first (ties by ID): the store's search, done over the fold.
func (b *Base) nearestInFold(v []float32, k int) []string {
	type scored struct {
		id    string
		score float64
	}
	all := make([]scored, 0, len(b.st.chunks))
	for id, c := range b.st.chunks {
		if len(c.vector) == len(v) {
			all = append(all, scored{id, cosine(v, c.vector)})
		}
	}
	slices.SortFunc(all, func(x, y scored) int {
		if c := cmp.Compare(y.score, x.score); c != 0 {
			return c
		}
		return strings.Compare(x.id, y.id)
	})
	ids := make([]string, 0, min(k, len(all)))
	for _, s := range all[:min(k, len(all))] {
		ids = append(ids, s.id)
	}
	return ids
}

// hits turns fused IDs into hits, each text kept once (the best).
func (b *Base) hits(fused []fusedID) []Hit {
	var out []Hit
	seen := map[string]bool{} // text hashes
	for _, s := range fused {
		c := b.st.chunks[s.id]
		if c == nil || seen[c.hash] {
			continue
		}
		seen[c.hash] = true
		out = append(out, hitOf(c, s.score))
	}
	return out
}

// fuseConvex scores the candidates — every chunk of every list — by every list:
// its cosine similarity to each query vector (from the chunk's vector in the
// fold) and its BM25 score for each query text (KeywordIndex.RawScores), so that a
// chunk one list missed is not scored as if it were irrelevant to it, and mixes
// them (see fuseConvex).
func (b *Base) fuseConvex(q Query, vecLists []rankedList, vecQueries [][]float32, kwLists []rankedList, kwTexts []string) []fusedID {
	var ids []string
	index := map[string]int{}
	for _, l := range append(slices.Clip(vecLists), kwLists...) {
		for _, id := range l.ids {
			if _, ok := index[id]; !ok {
				index[id] = len(ids)
				ids = append(ids, id)
			}
		}
	}
	vec := make([]candidateScores, len(vecQueries))
	for j, v := range vecQueries {
		vec[j] = make(candidateScores, len(ids))
		for i, id := range ids {
			vec[j][i] = cosine(v, b.st.chunks[id].vector)
		}
	}
	kw := make([]candidateScores, len(kwTexts))
	for j, text := range kwTexts {
		raw := b.kw.RawScores(text, ids)
		weight := b.kw.QueryWeight(text)
		kw[j] = make(candidateScores, len(ids))
		for i, id := range ids {
			kw[j][i] = raw[id] // 0 when the chunk holds no query term
			if q.norm == normCoverage && weight > 0 {
				kw[j][i] = raw[id] / weight // not capped: it keeps BM25's order
			}
		}
	}
	return fuseConvex(ids, vec, kw, q.Alpha, q.norm)
}

// rankedList is one list of a search, best first, with the weight of each entry's
// vote.
type rankedList struct {
	ids     []string
	weights []float64
}

func (l *rankedList) add(id string, w float64) {
	l.ids = append(l.ids, id)
	l.weights = append(l.weights, w)
}

// keywordWeight is the weight of a BM25 hit's vote under FusionWeightedRRF: how
// much of the query it matches, its raw score over the query's weight
// (KeywordIndex.QueryWeight, the score of a chunk of average length holding every
// query term once), at most 1. A chunk that shares one common word with a long
// question votes little; one that holds the query's rare identifier votes fully.
func keywordWeight(raw, queryWeight float64) float64 {
	if raw <= 0 || queryWeight <= 0 {
		return 0
	}
	return min(1, raw/queryWeight)
}

type fusedID struct {
	id    string
	score float64
}

// fuse fuses ranked lists by weighted reciprocal rank: an ID scores the sum over the
// lists that hold it of weight/(RRFK + rank), rank from 1. With every weight 1 it is
// pipelines/memory RRF. Best first, ties by ID.
func fuse(lists []rankedList) []fusedID {
	score := map[string]float64{}
	var order []string
	for _, l := range lists {
		seen := map[string]bool{}
		for i, id := range l.ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			if _, ok := score[id]; !ok {
				order = append(order, id)
			}
			score[id] += l.weights[i] / float64(RRFK+i+1)
		}
	}
	out := make([]fusedID, len(order))
	for i, id := range order {
		out[i] = fusedID{id, score[id]}
	}
	sortFused(out)
	return out
}

func hitOf(c *chunk, score float64) Hit {
	return Hit{ChunkID: c.id, Source: c.source, HeadingPath: strings.Join(c.headingPath, " > "), Content: c.text,
		Score: score, Start: c.start, End: c.end}
}

// rerank applies Config.Rerank to the pool: its order is kept, hits it drops are
// dropped, and hits that were not in the pool (or repeated) are ignored.
func (b *Base) rerank(ctx context.Context, query string, pool []Hit) ([]Hit, error) {
	in := make(map[string]bool, len(pool))
	for _, h := range pool {
		in[h.ChunkID] = true
	}
	got, err := b.cfg.Rerank(ctx, query, slices.Clone(pool))
	if err != nil {
		return nil, fmt.Errorf("knowledge: reranking: %w", err)
	}
	out := make([]Hit, 0, len(got))
	for _, h := range got {
		if in[h.ChunkID] {
			in[h.ChunkID] = false
			out = append(out, h)
		}
	}
	return out, nil
}

// modelKey is the idempotency key of a retrieval's model call: the same knowledge
// base, purpose and input always give the same key, so a recording gateway can
// replay the call.
func (b *Base) modelKey(purpose string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return b.stream + "/" + purpose + "/" + hex.EncodeToString(h.Sum(nil)[:12])
}

// generate makes one model call and returns its text.
func (b *Base) generate(ctx context.Context, purpose string, step int, key string, msgs []messages.ChatMessage) (string, error) {
	resp, err := b.cfg.Model.Generate(ctx, llm.Request{Key: key, Step: step, Purpose: purpose, Messages: msgs,
		Scope: llm.Scope{Agent: "kb:" + b.name}})
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(resp.Message.Content), nil
}

// expandSystem is the instruction of a query rewrite.
const expandSystem = "You rewrite search queries for a document search engine. You answer with the rewritten queries only, one per line, without numbering, quotes or commentary."

// expand asks the model for n rewrites of query and returns those that differ from
// it and from each other, at most n.
func (b *Base) expand(ctx context.Context, query string, n int) ([]string, error) {
	prompt := fmt.Sprintf("Write %d different search queries that would find the passages answering the query below: "+
		"use other words and synonyms, spell out abbreviations, and name the likely section or concept. "+
		"Keep the query's language, and add one English query if it is in another language.\n\nQuery: %s", n, query)
	text, err := b.generate(ctx, PurposeExpand, stepExpand, b.modelKey(PurposeExpand, query, strconv.Itoa(n)), []messages.ChatMessage{
		{Role: messages.RoleSystem, Content: expandSystem}, {Role: messages.RoleUser, Content: prompt}})
	if err != nil {
		return nil, err
	}
	return parseRewrites(text, query, n), nil
}

// parseRewrites reads a model's rewrites: one per line, list markers ("1.", "2)",
// "-", "*", "•"), quotes and a "Query:" label removed, blank lines, rewrites equal to
// the query (case and spacing aside) and repeats dropped, each at most
// MaxQueryBytes, at most n.
func parseRewrites(text, query string, n int) []string {
	norm := func(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }
	seen := map[string]bool{norm(query): true}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		s := strings.TrimSpace(line)
		s = strings.TrimLeftFunc(s, func(r rune) bool { return unicode.IsDigit(r) })
		s = strings.TrimLeft(s, ".)-*•·: \t")
		if label, rest, ok := strings.Cut(s, ":"); ok && len(label) <= 12 && strings.Contains(strings.ToLower(label), "query") {
			s = rest
		}
		s = strings.Trim(strings.TrimSpace(s), "\"'`“”‘’")
		s = strings.TrimSpace(s)
		if s == "" || !utf8.ValidString(s) {
			continue
		}
		if len(s) > MaxQueryBytes {
			s = strings.ToValidUTF8(s[:MaxQueryBytes], "")
		}
		if seen[norm(s)] {
			continue
		}
		seen[norm(s)] = true
		out = append(out, s)
		if len(out) == n {
			break
		}
	}
	return out
}

// hydeSystem is the instruction of a hypothetical passage.
const hydeSystem = "You write passages of technical documentation. You answer with the passage only."

// hyde asks the model for a passage that answers query, as a document of the
// knowledge base would.
func (b *Base) hyde(ctx context.Context, query string) (string, error) {
	prompt := "Write a short passage (three to five sentences) of documentation that answers the question below, " +
		"as the document that holds the answer would put it. Write it in the question's language. " +
		"If you do not know the answer, write a plausible one: the passage is used to search, not shown.\n\nQuestion: " + query
	text, err := b.generate(ctx, PurposeHyDE, stepHyDE, b.modelKey(PurposeHyDE, query), []messages.ChatMessage{
		{Role: messages.RoleSystem, Content: hydeSystem}, {Role: messages.RoleUser, Content: prompt}})
	if err != nil {
		return "", err
	}
	if text == "" {
		return "", errors.New("the model wrote an empty passage")
	}
	if len(text) > MaxQueryBytes {
		text = strings.ToValidUTF8(text[:MaxQueryBytes], "")
	}
	return text, nil
}
