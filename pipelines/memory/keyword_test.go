package memory

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// A three-document corpus scored by hand.
//
//	d1 "red fox"     → [red fox]      dl 2
//	d2 "red dog red" → [red dog red]  dl 3
//	d3 "blue fish"   → [blue fish]    dl 2
//	N = 3, avgdl = 7/3
//
// Query "red fox":
//
//	idf(red) = ln(1 + (3-2+0.5)/(2+0.5)) = ln 1.6    = 0.4700036292
//	idf(fox) = ln(1 + (3-1+0.5)/(1+0.5)) = ln(8/3)   = 0.9808292530
//	d1: f=1, dl=2: 1-0.75+0.75*2/(7/3) = 25/28; tf = 1*2.2/(1+1.2*25/28) = 2.2/(29/14) = 30.8/29
//	    raw = (ln 1.6 + ln 8/3) * 30.8/29 = 1.4508328823 * 1.0620689655 = 1.5408845784
//	d2: f=2, dl=3: 1-0.75+0.75*3/(7/3) = 17/14; tf = 2*2.2/(2+1.2*17/14) = 4.4/(121/35) = 14/11
//	    raw = ln 1.6 * 14/11 = 0.5981864372
//	d3: no query term.
//	Score: d1 1, d2 0.5981864372/1.5408845784 = 0.3882097632
func TestKeywordIndexBM25ByHand(t *testing.T) {
	ix := NewKeywordIndex()
	ix.Put("d1", "red fox")
	ix.Put("d2", "red dog red")
	ix.Put("d3", "blue fish")
	got := ix.Search("red fox", 10, nil)
	want := []Scored{
		{ID: "d1", Score: 1, Raw: 1.5408845783975802},
		{ID: "d2", Score: 0.3882097631504109, Raw: 0.5981864372218454},
	}
	if len(got) != len(want) {
		t.Fatalf("Search = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].ID != want[i].ID {
			t.Fatalf("Search = %+v, want %+v", got, want)
		}
		near(t, got[i].ID+" Raw", got[i].Raw, want[i].Raw)
		near(t, got[i].ID+" Score", got[i].Score, want[i].Score)
	}
	// A repeated query term counts once.
	again := ix.Search("red red fox fox", 10, nil)
	near(t, "repeated terms", again[0].Raw, want[0].Raw)
	if hits := ix.Search("purple", 10, nil); len(hits) != 0 {
		t.Errorf("unknown term matched %+v", hits)
	}
	if hits := ix.Search("", 10, nil); len(hits) != 0 {
		t.Errorf("empty query matched %+v", hits)
	}
}

// TestKeywordIndexQueryWeight: N = 3; idf(red) = ln(1 + 1.5/2.5) = ln 1.6,
// idf(fox) = ln(1 + 2.5/1.5) = ln(8/3), and purple, in no document, ln(1 + 3.5/0.5) = ln 8.
func TestKeywordIndexQueryWeight(t *testing.T) {
	ix := NewKeywordIndex()
	near(t, "empty index", ix.QueryWeight("red"), 0)
	ix.Put("d1", "red fox")
	ix.Put("d2", "red dog red")
	ix.Put("d3", "blue fish")
	near(t, "red fox", ix.QueryWeight("red fox fox"), math.Log(1.6)+math.Log(8.0/3))
	near(t, "red purple", ix.QueryWeight("red purple"), math.Log(1.6)+math.Log(8))
	near(t, "no terms", ix.QueryWeight("the"), 0)
}

func TestKeywordIndexKAndTies(t *testing.T) {
	ix := NewKeywordIndex()
	for _, id := range []string{"c", "a", "b", "d"} {
		ix.Put(id, "same words here") // equal scores: ties go by ID
	}
	ix.Put("e", "other text")
	ids := func(hits []Scored) []string {
		var out []string
		for _, h := range hits {
			out = append(out, h.ID)
		}
		return out
	}
	if got := ids(ix.Search("words", 2, nil)); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("k=2: %v", got)
	}
	if got := ids(ix.Search("words", 0, nil)); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("k=0 (all): %v", got)
	}
	keep := func(id string) bool { return id != "a" && id != "c" }
	if got := ids(ix.Search("words", 10, keep)); !slices.Equal(got, []string{"b", "d"}) {
		t.Errorf("keep: %v", got)
	}
}

// Score is normalised over the documents keep accepts: the best of them scores 1.
func TestKeywordIndexKeepNormalises(t *testing.T) {
	ix := NewKeywordIndex()
	ix.Put("strong", "golang golang golang")
	ix.Put("weak", "golang and many other unrelated words in a longer text")
	hits := ix.Search("golang", 10, func(id string) bool { return id == "weak" })
	if len(hits) != 1 || hits[0].ID != "weak" || hits[0].Score != 1 {
		t.Errorf("hits = %+v", hits)
	}
}

// Search visits only the postings of the query's terms: keep is asked about exactly
// the documents that hold one.
func TestKeywordIndexNoFullScan(t *testing.T) {
	ix := NewKeywordIndex()
	for i := range 1000 {
		ix.Put(fmt.Sprint(i), "common filler words")
	}
	for _, id := range []string{"7", "70", "700"} {
		ix.Put(id, "common filler zebra")
	}
	var asked []string
	hits := ix.Search("zebra", 10, func(id string) bool { asked = append(asked, id); return true })
	slices.Sort(asked)
	if !slices.Equal(asked, []string{"7", "70", "700"}) || len(hits) != 3 {
		t.Errorf("keep asked about %v, hits %+v", asked, hits)
	}
	// A query whose postings cover every document: keep is asked once per document,
	// not once per term.
	asked = nil
	hits = ix.Search("common filler zebra", 5, func(id string) bool { asked = append(asked, id); return id != "7" })
	if len(asked) != 1000 || len(hits) != 5 || hits[0].ID != "70" || hits[1].ID != "700" {
		t.Errorf("keep asked %d times, hits %+v", len(asked), hits)
	}
}

func TestKeywordIndexPutReplaces(t *testing.T) {
	ix := NewKeywordIndex()
	ix.Put("m1", "alpha beta")
	ix.Put("m1", "gamma")
	if ix.Len() != 1 || ix.Terms() != 1 || ix.DF("alpha") != 0 || ix.DF("gamma") != 1 {
		t.Errorf("Len %d Terms %d df(alpha) %d df(gamma) %d", ix.Len(), ix.Terms(), ix.DF("alpha"), ix.DF("gamma"))
	}
	if hits := ix.Search("alpha", 10, nil); len(hits) != 0 {
		t.Errorf("old text still found: %+v", hits)
	}
	if hits := ix.Search("gamma", 10, nil); len(hits) != 1 || hits[0].ID != "m1" {
		t.Errorf("new text not found: %+v", hits)
	}
	// An empty text is a document of length 0.
	ix.Put("m2", "the of and")
	if ix.Len() != 2 || ix.Terms() != 1 {
		t.Errorf("Len %d Terms %d", ix.Len(), ix.Terms())
	}
}

// After Remove the index is as if the document had never been added: same Len,
// Terms, df, average length (so the same scores), and no empty postings left.
func TestKeywordIndexRemoveLeavesNoDebris(t *testing.T) {
	base := map[string]string{
		"a": "the quick brown fox jumps over the lazy dog",
		"b": "a lazy afternoon with tea",
		"c": "brown bread and tea",
	}
	fresh := NewKeywordIndex()
	ix := NewKeywordIndex()
	for _, id := range []string{"a", "b", "c"} {
		fresh.Put(id, base[id])
		ix.Put(id, base[id])
	}
	extra := map[string]string{
		"x": "zebra unicorn brown tea tea tea", // new terms and shared ones
		"y": "lazy lazy dog 東京",
		"b": "rewritten text entirely", // replaces b, then b is put back below
	}
	for _, id := range []string{"x", "y", "b"} {
		ix.Put(id, extra[id])
	}
	ix.Remove("x")
	ix.Remove("y")
	ix.Put("b", base["b"])
	ix.Remove("never-added")

	if ix.Len() != fresh.Len() || ix.Terms() != fresh.Terms() || ix.totalLen != fresh.totalLen {
		t.Fatalf("Len %d/%d Terms %d/%d totalLen %d/%d", ix.Len(), fresh.Len(), ix.Terms(), fresh.Terms(), ix.totalLen, fresh.totalLen)
	}
	for term := range fresh.postings {
		if got, want := postingsByID(ix, term), postingsByID(fresh, term); !maps.Equal(got, want) {
			t.Errorf("postings of %q: %v, want %v", term, got, want)
		}
	}
	for _, q := range []string{"lazy dog", "brown tea", "zebra", "quick fox tea"} {
		if got, want := ix.Search(q, 0, nil), fresh.Search(q, 0, nil); !slices.Equal(got, want) {
			t.Errorf("Search(%q) = %+v, want %+v", q, got, want)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		ix.Remove(id)
	}
	if ix.Len() != 0 || ix.Terms() != 0 || ix.totalLen != 0 || len(ix.docs) != 0 || len(ix.slots) != 0 || len(ix.free) != 0 {
		t.Errorf("empty index holds Len %d Terms %d totalLen %d", ix.Len(), ix.Terms(), ix.totalLen)
	}
	if hits := ix.Search("tea", 10, nil); hits != nil {
		t.Errorf("empty index found %+v", hits)
	}
}

// postingsByID is a term's postings keyed by document ID.
func postingsByID(ix *KeywordIndex, term string) map[string]uint32 {
	out := map[string]uint32{}
	for num, f := range ix.postings[term] {
		out[ix.slots[num].id] = f
	}
	return out
}

// The same documents put in any order rank a query the same way, to the bit.
func TestKeywordIndexDeterministic(t *testing.T) {
	docs := syntheticDocs(500, 1)
	var first []Scored
	for seed := range uint64(5) {
		ix := NewKeywordIndex()
		order := rand.New(rand.NewPCG(seed, 7)).Perm(len(docs))
		for _, i := range order {
			ix.Put(fmt.Sprintf("m%04d", i), docs[i])
		}
		got := ix.Search("w1 w2 w3 w10 w20", 20, nil)
		if seed == 0 {
			first = got
			if len(first) == 0 {
				t.Fatal("no hits")
			}
			continue
		}
		if !slices.Equal(got, first) {
			t.Fatalf("order %d: %+v, want %+v", seed, got, first)
		}
	}
}

// syntheticDocs makes n short documents over a Zipf-like vocabulary of 5000 words.
func syntheticDocs(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 42))
	zipf := rand.NewZipf(r, 1.1, 1, 4999)
	docs := make([]string, n)
	var b strings.Builder
	for i := range docs {
		b.Reset()
		for j := range 8 + r.IntN(8) {
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "w%d", zipf.Uint64())
		}
		docs[i] = b.String()
	}
	return docs
}

const benchDocs = 100_000

func benchIndex(b *testing.B) (*KeywordIndex, []string) {
	docs := syntheticDocs(benchDocs, 1)
	ix := NewKeywordIndex()
	for i, d := range docs {
		ix.Put(fmt.Sprintf("m%06d", i), d)
	}
	return ix, docs
}

// BenchmarkKeywordIndexPut replaces documents of a 100k-document index.
func BenchmarkKeywordIndexPut(b *testing.B) {
	ix, docs := benchIndex(b)
	ids := make([]string, benchDocs)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%06d", i)
	}
	i := 0
	for b.Loop() {
		ix.Put(ids[i%benchDocs], docs[(i*7919)%benchDocs])
		i++
	}
}

// BenchmarkKeywordIndexSearch runs three-term queries, one common and two rarer
// terms, against 100k documents, keeping the top 10.
func BenchmarkKeywordIndexSearch(b *testing.B) {
	ix, _ := benchIndex(b)
	queries := []string{"w1 w50 w700", "w2 w123 w4000", "w3 w99 w2500", "w10 w11 w12"}
	i := 0
	for b.Loop() {
		ix.Search(queries[i%len(queries)], 10, nil)
		i++
	}
}

// BenchmarkKeywordIndexSearchRare searches for terms with short postings.
func BenchmarkKeywordIndexSearchRare(b *testing.B) {
	ix, _ := benchIndex(b)
	i := 0
	for b.Loop() {
		ix.Search(fmt.Sprintf("w%d w%d", 3000+i%1000, 4000+i%900), 10, nil)
		i++
	}
}

// TestKeywordIndexRawScores: RawScores gives the documents it is asked about the Raw
// scores Search gives them.
func TestKeywordIndexRawScores(t *testing.T) {
	ix := NewKeywordIndex()
	ix.Put("d1", "red fox")
	ix.Put("d2", "red dog red")
	ix.Put("d3", "blue fish")
	got := ix.RawScores("red fox", []string{"d2", "d3", "nope", "d1"})
	want := map[string]float64{}
	for _, h := range ix.Search("red fox", 0, nil) {
		want[h.ID] = h.Raw
	}
	if !maps.Equal(got, want) {
		t.Errorf("RawScores = %v, want %v", got, want)
	}
	if got := ix.RawScores("red", nil); len(got) != 0 {
		t.Errorf("no ids: %v", got)
	}
}
