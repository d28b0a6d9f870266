package memory

import (
	"math"
	"slices"
	"strings"
)

// BM25 parameters of KeywordIndex.
const (
	BM25K1 = 1.2
	BM25B  = 0.75
)

// Scored is a search hit: Score is normalised to [0,1] where the method says so, Raw
// is the score before normalisation.
type Scored struct {
	ID    string
	Score float64
	Raw   float64
}

// KeywordIndex is an incremental Okapi BM25 inverted index (k1 = 1.2, b = 0.75) over
// Tokenize's terms, or over the terms and with the parameters of its
// KeywordOptions (NewKeywordIndexWith). It keeps, per term, the postings (document → term frequency), so
// its document frequency is the postings' length; per document, its length and
// distinct terms, so Remove can take it out of every posting and leave nothing behind.
// Documents are numbered internally (numbers of removed documents are reused), which
// keeps postings small and search fast.
//
// The index is not safe for concurrent use; its owner (a memory tier actor)
// serialises access.
type KeywordIndex struct {
	postings map[string]map[uint32]uint32 // term → document number → term frequency
	docs     map[string]uint32            // ID → document number
	slots    []keywordDoc                 // by document number
	free     []uint32                     // numbers of removed documents
	totalLen int                          // sum of the documents' lengths, for the average
	tokenize func(string) []string
	k1, b    float64
}

// KeywordOptions configure a KeywordIndex. The zero value is NewKeywordIndex's.
type KeywordOptions struct {
	// Tokenize splits documents and queries into terms (default Tokenize). It must
	// be deterministic; a term it repeats counts as often in a document.
	Tokenize func(string) []string
	// K1 and B are BM25's term-frequency saturation and length normalisation
	// (defaults BM25K1 and BM25B; B is used when K1 is set, so K1 = 0.9 with B = 0
	// means no length normalisation).
	K1, B float64
}

type keywordDoc struct {
	id     string
	length int      // number of terms, repeats included
	terms  []string // distinct terms
}

// NewKeywordIndex returns an empty index.
func NewKeywordIndex() *KeywordIndex { return NewKeywordIndexWith(KeywordOptions{}) }

// NewKeywordIndexWith returns an empty index with the given options.
func NewKeywordIndexWith(o KeywordOptions) *KeywordIndex {
	ix := &KeywordIndex{postings: map[string]map[uint32]uint32{}, docs: map[string]uint32{},
		tokenize: o.Tokenize, k1: BM25K1, b: BM25B}
	if ix.tokenize == nil {
		ix.tokenize = Tokenize
	}
	if o.K1 > 0 {
		ix.k1, ix.b = o.K1, o.B
	}
	return ix
}

// termScore is BM25's weight of a term of inverse document frequency idf found f
// times in a document of length dl.
func (ix *KeywordIndex) termScore(idf, f, dl, avgdl float64) float64 {
	return idf * f * (ix.k1 + 1) / (f + ix.k1*(1-ix.b+ix.b*dl/avgdl))
}

// Put indexes text as document id, replacing what id held before. A text without
// terms still counts as a document (of length 0) until it is removed.
func (ix *KeywordIndex) Put(id, text string) {
	ix.Remove(id)
	words := ix.tokenize(text)
	tf := make(map[string]uint32, len(words))
	for _, w := range words {
		tf[w]++
	}
	var num uint32
	if n := len(ix.free); n > 0 {
		num, ix.free = ix.free[n-1], ix.free[:n-1]
	} else {
		num = uint32(len(ix.slots))
		ix.slots = append(ix.slots, keywordDoc{})
	}
	terms := make([]string, 0, len(tf))
	for t, f := range tf {
		terms = append(terms, t)
		p := ix.postings[t]
		if p == nil {
			p = map[uint32]uint32{}
			ix.postings[t] = p
		}
		p[num] = f
	}
	ix.slots[num] = keywordDoc{id: id, length: len(words), terms: terms}
	ix.docs[id] = num
	ix.totalLen += len(words)
}

// Remove deletes document id from every posting; a term left without postings is
// deleted too. Removing an unknown id does nothing.
func (ix *KeywordIndex) Remove(id string) {
	num, ok := ix.docs[id]
	if !ok {
		return
	}
	d := ix.slots[num]
	for _, t := range d.terms {
		p := ix.postings[t]
		delete(p, num)
		if len(p) == 0 {
			delete(ix.postings, t)
		}
	}
	ix.totalLen -= d.length
	delete(ix.docs, id)
	ix.slots[num] = keywordDoc{}
	if int(num) == len(ix.slots)-1 {
		ix.slots = ix.slots[:num] // the last number: shrink instead of remembering it
	} else {
		ix.free = append(ix.free, num)
	}
	if len(ix.docs) == 0 {
		ix.slots, ix.free = nil, nil
	}
}

// Len is the number of documents.
func (ix *KeywordIndex) Len() int { return len(ix.docs) }

// Terms is the number of distinct terms with at least one posting.
func (ix *KeywordIndex) Terms() int { return len(ix.postings) }

// DF is the document frequency of a term as the index's tokenizer produces it (0 if
// unknown).
func (ix *KeywordIndex) DF(term string) int { return len(ix.postings[term]) }

// Search returns up to k documents (k <= 0: all) with a positive BM25 score that
// keep accepts (nil keep: all), best first, ties by ID ascending.
//
// For N documents of average length avgdl, a query term t with document frequency
// df(t) and frequency f in a document of length dl adds
//
//	idf(t) * f*(k1+1) / (f + k1*(1 - b + b*dl/avgdl)),  idf(t) = ln(1 + (N-df+0.5)/(df+0.5))
//
// to that document's Raw score; a query term counts once however often it repeats.
// Score is Raw divided by the highest Raw among the documents keep accepts, so the
// best hit scores 1. Search visits only the postings of the query's terms, and keep
// is asked once about each document in them.
func (ix *KeywordIndex) Search(query string, k int, keep func(id string) bool) []Scored {
	if len(ix.docs) == 0 {
		return nil
	}
	terms := ix.tokenize(query)
	slices.Sort(terms)
	terms = slices.Compact(terms)
	n := float64(len(ix.docs))
	avgdl := float64(ix.totalLen) / n
	acc := newAccumulator(ix, terms)
	for _, t := range terms { // sorted, so each document sums in the same order every time
		p := ix.postings[t]
		if len(p) == 0 {
			continue
		}
		df := float64(len(p))
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for num, f := range p {
			if !acc.admit(num, ix.slots[num].id, keep) {
				continue
			}
			ff := float64(f)
			dl := float64(ix.slots[num].length)
			acc.add(num, ix.termScore(idf, ff, dl, avgdl))
		}
	}
	top := topK{k: k}
	for _, num := range acc.touched {
		if r := acc.get(num); r > 0 {
			top.offer(Scored{ID: ix.slots[num].id, Raw: r})
		}
	}
	hits := top.sorted()
	for i := range hits {
		hits[i].Score = hits[i].Raw / hits[0].Raw
	}
	return hits
}

// RawScores returns the Raw score Search gives each of ids for query (unknown
// documents and documents without a query term are left out), looking up only
// those documents: for scoring a few candidates without walking the postings.
func (ix *KeywordIndex) RawScores(query string, ids []string) map[string]float64 {
	out := map[string]float64{}
	if len(ix.docs) == 0 || len(ids) == 0 {
		return out
	}
	terms := ix.tokenize(query)
	slices.Sort(terms)
	terms = slices.Compact(terms)
	n := float64(len(ix.docs))
	avgdl := float64(ix.totalLen) / n
	for _, id := range ids {
		num, ok := ix.docs[id]
		if !ok {
			continue
		}
		dl := float64(ix.slots[num].length)
		var r float64
		for _, t := range terms { // in Search's order, so the sums are equal
			p := ix.postings[t]
			f, ok := p[num]
			if !ok {
				continue
			}
			df := float64(len(p))
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			ff := float64(f)
			r += ix.termScore(idf, ff, dl, avgdl)
		}
		if r > 0 {
			out[id] = r
		}
	}
	return out
}

// QueryWeight is the sum of the idf of query's distinct terms (as Search computes
// them; a term no document holds has the highest idf, ln(1 + (N+0.5)/0.5)): the Raw
// score of a document of average length that holds each query term once. Raw /
// QueryWeight says how much of the query a document matches, near 1 when it holds
// every term and a fraction when it holds a few common ones; it can exceed 1 for a
// document shorter than average or repeating a term. An empty index or a query
// without terms weighs 0.
func (ix *KeywordIndex) QueryWeight(query string) float64 {
	if len(ix.docs) == 0 {
		return 0
	}
	terms := ix.tokenize(query)
	slices.Sort(terms)
	terms = slices.Compact(terms)
	n := float64(len(ix.docs))
	var w float64
	for _, t := range terms {
		df := float64(len(ix.postings[t]))
		w += math.Log(1 + (n-df+0.5)/(df+0.5))
	}
	return w
}

// accumulator sums the documents' scores during a search. When the query's postings
// are long compared with the number of documents it sums into a slice indexed by
// document number, otherwise into a map; either way touched lists the documents in
// the postings, so nothing else is visited. A score is positive once a document is
// admitted; rejected marks documents keep turned down.
type accumulator struct {
	dense   []float64
	sparse  map[uint32]float64
	touched []uint32
}

const rejected = -1.0

func newAccumulator(ix *KeywordIndex, terms []string) *accumulator {
	total := 0
	for _, t := range terms {
		total += len(ix.postings[t])
	}
	if total*8 >= len(ix.slots) {
		return &accumulator{dense: make([]float64, len(ix.slots)), touched: make([]uint32, 0, total)}
	}
	return &accumulator{sparse: make(map[uint32]float64, total), touched: make([]uint32, 0, total)}
}

func (a *accumulator) get(num uint32) float64 {
	if a.dense != nil {
		return a.dense[num]
	}
	return a.sparse[num]
}

func (a *accumulator) set(num uint32, v float64) {
	if a.dense != nil {
		a.dense[num] = v
	} else {
		a.sparse[num] = v
	}
}

// admit reports whether document num takes part, asking keep the first time only.
func (a *accumulator) admit(num uint32, id string, keep func(string) bool) bool {
	switch v := a.get(num); {
	case v == rejected:
		return false
	case v > 0:
		return true
	}
	if keep != nil && !keep(id) {
		a.set(num, rejected)
		return false
	}
	a.touched = append(a.touched, num)
	return true
}

func (a *accumulator) add(num uint32, v float64) { a.set(num, a.get(num)+v) }

// topK keeps the k best hits by Raw (k <= 0: all) in a heap whose root is the worst.
type topK struct {
	k    int
	hits []Scored
}

func (t *topK) offer(s Scored) {
	if t.k <= 0 || len(t.hits) < t.k {
		t.hits = append(t.hits, s)
		if t.k > 0 {
			t.up(len(t.hits) - 1)
		}
		return
	}
	if byRaw(s, t.hits[0]) >= 0 {
		return // no better than the worst kept
	}
	t.hits[0] = s
	t.down(0)
}

// worse reports whether hit i ranks below hit j.
func (t *topK) worse(i, j int) bool { return byRaw(t.hits[i], t.hits[j]) > 0 }

func (t *topK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.worse(i, p) {
			return
		}
		t.hits[i], t.hits[p] = t.hits[p], t.hits[i]
		i = p
	}
}

func (t *topK) down(i int) {
	for {
		w := i
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(t.hits) && t.worse(c, w) {
				w = c
			}
		}
		if w == i {
			return
		}
		t.hits[i], t.hits[w] = t.hits[w], t.hits[i]
		i = w
	}
}

// sorted returns the kept hits best first.
func (t *topK) sorted() []Scored {
	slices.SortFunc(t.hits, byRaw)
	return t.hits
}

// byRaw orders hits by Raw score, best first, then by ID ascending.
func byRaw(x, y Scored) int {
	switch {
	case x.Raw > y.Raw:
		return -1
	case x.Raw < y.Raw:
		return 1
	}
	return strings.Compare(x.ID, y.ID)
}

// byScore orders hits by Score, best first, then by ID ascending.
func byScore(x, y Scored) int {
	switch {
	case x.Score > y.Score:
		return -1
	case x.Score < y.Score:
		return 1
	}
	return strings.Compare(x.ID, y.ID)
}
