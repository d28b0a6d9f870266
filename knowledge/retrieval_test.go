package knowledge_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
)

// recorder records the requests a model receives.
type recorder struct {
	llm.Model
	mu   sync.Mutex
	reqs []llm.Request
}

func (r *recorder) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Model.Generate(ctx, req)
}

func scripted(t *testing.T, steps ...string) *recorder {
	t.Helper()
	s := llm.Script{Name: "scripted"}
	for _, c := range steps {
		s.Steps = append(s.Steps, llm.ScriptStep{Content: c})
	}
	m, err := llm.NewScripted(s)
	if err != nil {
		t.Fatal(err)
	}
	return &recorder{Model: m}
}

// corpus is a few documents, each on a topic of its own.
var corpus = map[string]string{
	"sauna.md":     "# Sauna\n\nThe sauna on floor two heats to eighty degrees; towels are at the desk.",
	"parking.md":   "# Parking\n\nVisitors park in garage B; the barrier opens with the intercom.",
	"printer.md":   "# Printer\n\nThe printer jams when the paper tray is overfilled; remove the tray and fan the sheets.",
	"wifi.md":      "# Wifi\n\nThe guest network is called lobby-guest; the password rotates every Monday.",
	"badges.md":    "# Badges\n\nLost badges are replaced by security in room 101 against a signed form.",
	"lunch.md":     "# Lunch\n\nThe canteen serves lunch from noon to two; vegetarian dishes are marked green.",
	"bikes.md":     "# Bikes\n\nBicycles go in the basement rack; electric bikes charge at the wall sockets.",
	"recycling.md": "# Recycling\n\nPaper, glass and plastic bins stand by the kitchen on every floor.",
}

func ingestCorpus(t *testing.T, b *knowledge.Base) {
	t.Helper()
	for src, md := range corpus {
		addText(t, b, src, md)
	}
}

func ids(hits []knowledge.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.ChunkID)
	}
	return out
}

// fused is the reciprocal rank fusion of the hits of single-list searches (each
// in its list's order: a single list keeps its scores, whatever the fusion): a
// hit's vote is 1/(60 + rank), and the fusion sums each chunk's votes, best
// first, ties by chunk ID.
func fused(lists ...[]knowledge.Hit) []string {
	score := map[string]float64{}
	for _, l := range lists {
		for i, h := range l {
			score[h.ChunkID] += 1 / float64(60+i+1)
		}
	}
	out := slices.Collect(maps.Keys(score))
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(score[b], score[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return out
}

// Multi-query: the model's rewrites are parsed (numbering, bullets, quotes, a
// label, repeats and the query itself dropped), each is searched, and the lists
// are fused by reciprocal rank with the query's own.
func TestMultiQueryExpansion(t *testing.T) {
	const query = "my paper keeps getting stuck"
	reply := "1. printer paper jam\n- \"overfilled paper tray\"\n\n* Query: printer paper jam\n  my paper keeps getting stuck  \n3) fan the sheets\n4. one too many"
	model := scripted(t, reply)
	f := newFixture(t, func(c *knowledge.Config) { c.Model = model })
	b := f.base(t, "office")
	ingestCorpus(t, b)
	res := search(t, b, knowledge.Query{Text: query, Mode: knowledge.ModeBM25, MultiQuery: 3, Limit: 20, Fusion: knowledge.FusionRRF})
	want := []string{"printer paper jam", "overfilled paper tray", "fan the sheets"}
	if !slices.Equal(res.Expanded, want) {
		t.Fatalf("expanded %q, want %q", res.Expanded, want)
	}
	if len(model.reqs) != 1 {
		t.Fatalf("%d model calls, want 1", len(model.reqs))
	}
	req := model.reqs[0]
	prompt := req.Messages[len(req.Messages)-1].Content
	if req.Purpose != knowledge.PurposeExpand || req.Step != 1 || !strings.Contains(prompt, "Write 3 different search queries") ||
		!strings.Contains(prompt, "Query: "+query) || !strings.Contains(req.Messages[0].Content, "one per line") {
		t.Errorf("request %+v", req)
	}
	var lists [][]knowledge.Hit
	for _, q := range append([]string{query}, want...) {
		lists = append(lists, search(t, b, knowledge.Query{Text: q, Mode: knowledge.ModeBM25, Limit: 20, Fusion: knowledge.FusionRRF}).Hits)
	}
	if got, w := ids(res.Hits), fused(lists...); !slices.Equal(got, w) {
		t.Errorf("hits %v, want the fusion %v", got, w)
	}
	// Convex fusion: a chunk scores the mean of its BM25 scores over the query's
	// weight for each text searched (a single list scores exactly that).
	convex := search(t, b, knowledge.Query{Text: query, Mode: knowledge.ModeBM25, MultiQuery: 3, Limit: 20, Fusion: knowledge.FusionConvex})
	sum := map[string]float64{}
	for _, q := range append([]string{query}, want...) {
		for _, h := range search(t, b, knowledge.Query{Text: q, Mode: knowledge.ModeBM25, Limit: 20, Fusion: knowledge.FusionConvex}).Hits {
			sum[h.ChunkID] += h.Score
		}
	}
	if len(convex.Hits) != len(sum) {
		t.Errorf("convex: %d hits, want %d", len(convex.Hits), len(sum))
	}
	for i, h := range convex.Hits {
		if w := sum[h.ChunkID] / 4; math.Abs(h.Score-w) > 1e-12 || i > 0 && h.Score > convex.Hits[i-1].Score {
			t.Errorf("convex: %s scores %v, want the mean %v, in order", h.Source, h.Score, w)
		}
	}
	if lists[0][0].Source != "recycling.md" || res.Hits[0].Source != "printer.md" {
		t.Errorf("the query alone finds %v first; expanded, %s, want recycling.md then printer.md", sources(lists[0]), res.Hits[0].Source)
	}
	// The key is derived from the query: the same search sends the same key.
	search(t, b, knowledge.Query{Text: query, Mode: knowledge.ModeBM25, MultiQuery: 3, Limit: 20})
	search(t, b, knowledge.Query{Text: "another question", Mode: knowledge.ModeBM25, MultiQuery: 3})
	n := len(model.reqs)
	if k := model.reqs[n-2].Key; k != req.Key || k == "" || model.reqs[n-1].Key == k || !strings.HasPrefix(k, "kb/office/kb_expand/") {
		t.Errorf("keys %q %q %q", req.Key, k, model.reqs[n-1].Key)
	}
}

// HyDE: the model's hypothetical passage is embedded as a passage and its vector
// list fused with the query's.
func TestHyDE(t *testing.T) {
	const query = "where do I leave my two-wheeler"
	const passage = "Bicycles go in the basement rack, and electric bikes charge at the wall sockets."
	model := scripted(t, "unused rewrite", passage)
	passages := &countingEmbedder{Embedder: llm.HashingEmbedder{}}
	f := newFixture(t, func(c *knowledge.Config) {
		c.Model, c.Embedder, c.QueryEmbedder = model, passages, llm.HashingEmbedder{}
	})
	b := f.base(t, "office")
	ingestCorpus(t, b)
	before := passages.calls.Load()
	res := search(t, b, knowledge.Query{Text: query, Mode: knowledge.ModeVector, HyDE: true, Limit: 8, Fusion: knowledge.FusionRRF})
	if res.HyDE != passage || len(res.Expanded) != 0 {
		t.Fatalf("HyDE %q expanded %q", res.HyDE, res.Expanded)
	}
	if passages.calls.Load() != before+1 {
		t.Errorf("the passage was not embedded with the passage embedder")
	}
	req := model.reqs[0]
	if len(model.reqs) != 1 || req.Purpose != knowledge.PurposeHyDE || req.Step != 2 ||
		!strings.Contains(req.Messages[1].Content, "Question: "+query) || !strings.HasPrefix(req.Key, "kb/office/kb_hyde/") {
		t.Errorf("requests %+v", model.reqs)
	}
	alone := search(t, b, knowledge.Query{Text: query, Mode: knowledge.ModeVector, Limit: 8, Fusion: knowledge.FusionRRF}).Hits
	asPassage := search(t, b, knowledge.Query{Text: passage, Mode: knowledge.ModeVector, Limit: 8, Fusion: knowledge.FusionRRF}).Hits
	if got, w := ids(res.Hits), fused(alone, asPassage); !slices.Equal(got, w) {
		t.Errorf("hits %v, want the fusion %v", got, w)
	}
	rank := func(hits []knowledge.Hit) int {
		return slices.IndexFunc(hits, func(h knowledge.Hit) bool { return h.Source == "bikes.md" })
	}
	if rank(res.Hits) >= rank(alone) || rank(res.Hits) > 1 {
		t.Errorf("bikes.md ranks %d with HyDE, %d without", rank(res.Hits), rank(alone))
	}
	// Convex fusion averages the query's and the passage's cosine similarities:
	// HyDE lifts bikes.md there too.
	convex := search(t, b, knowledge.Query{Text: query, Mode: knowledge.ModeVector, HyDE: true, Limit: 8, Fusion: knowledge.FusionConvex}).Hits
	aloneConvex := search(t, b, knowledge.Query{Text: query, Mode: knowledge.ModeVector, Limit: 8, Fusion: knowledge.FusionConvex}).Hits
	if !slices.Equal(ids(aloneConvex), ids(alone)) {
		t.Errorf("one vector list: convex %v, rrf %v: both must keep its order", ids(aloneConvex), ids(alone))
	}
	if rank(convex) >= rank(aloneConvex) || rank(convex) > 1 {
		t.Errorf("convex: bikes.md ranks %d with HyDE, %d without", rank(convex), rank(aloneConvex))
	}
}

// Without a model (or with the offline one), multi-query and HyDE are off and the
// result says so; the search is the plain hybrid one.
func TestNoModelTurnsExpansionOff(t *testing.T) {
	for name, m := range map[string]llm.Model{"none": nil, "offline": llm.Offline{}} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, func(c *knowledge.Config) { c.Model = m })
			if f.bases.HasModel() {
				t.Error("HasModel")
			}
			b := f.base(t, "office")
			ingestCorpus(t, b)
			res := search(t, b, knowledge.Query{Text: "printer jam", MultiQuery: 3, HyDE: true})
			plain := search(t, b, knowledge.Query{Text: "printer jam"})
			if !slices.Equal(res.Hits, plain.Hits) || len(res.Expanded) != 0 || res.HyDE != "" || len(res.Notes) != 2 ||
				!strings.Contains(res.Notes[0], map[string]string{"none": "no language model", "offline": "offline model is rule-based"}[name]) {
				t.Errorf("%+v", res)
			}
		})
	}
}

// A failing model does not fail the search: the query is searched alone.
func TestExpansionFailureDegrades(t *testing.T) {
	model := scripted(t, "only step one")
	f := newFixture(t, func(c *knowledge.Config) { c.Model = model })
	b := f.base(t, "office")
	ingestCorpus(t, b)
	res := search(t, b, knowledge.Query{Text: "printer", HyDE: true}) // HyDE is step 2: the script has none
	if res.HyDE != "" || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "HyDE failed") || len(res.Hits) == 0 {
		t.Errorf("%+v", res)
	}
}

func TestAskCitesEvidence(t *testing.T) {
	answer := "Towels are at the desk [sauna.md > # Sauna]. The sauna heats to eighty degrees [1]. " +
		"It is open all night [handbook.pdf > # Hours]. See [the site](https://example.com). " +
		"Code like temps[7] and `t[9]` cites nothing; [1][3] and [#2, 3] cite twice each; [9] is no passage."
	model := scripted(t, "x", "y", answer)
	f := newFixture(t, func(c *knowledge.Config) { c.Model = model })
	b := f.base(t, "office")
	ingestCorpus(t, b)
	ans, err := b.Ask(testCtx(t), "How hot is the sauna and where are towels?", knowledge.AskOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Extractive || ans.Model != "scripted" {
		t.Fatalf("answer %+v", ans)
	}
	if len(ans.Hits) != 3 || len(ans.Citations) != 3 || ans.Citations[0].Source != "sauna.md" || ans.Citations[0].HeadingPath != "# Sauna" ||
		ans.Citations[0].ChunkID != ans.Hits[0].ChunkID || ans.Citations[1].ChunkID != ans.Hits[2].ChunkID || ans.Citations[2].ChunkID != ans.Hits[1].ChunkID {
		t.Errorf("citations %+v (hits %v)", ans.Citations, sources(ans.Hits))
	}
	if !slices.Equal(ans.Unverified, []string{"handbook.pdf > # Hours", "9"}) || !strings.Contains(ans.Text, "[handbook.pdf > # Hours (not in the evidence)]") ||
		!strings.Contains(ans.Text, "[the site](https://example.com)") || !strings.Contains(ans.Text, "temps[7] and `t[9]`") ||
		!strings.Contains(ans.Text, "[9 (not in the evidence)] is no passage") {
		t.Errorf("text %q unverified %q", ans.Text, ans.Unverified)
	}
	req := model.reqs[len(model.reqs)-1]
	prompt := req.Messages[1].Content
	if req.Purpose != knowledge.PurposeAnswer || req.Step != 3 || !strings.Contains(prompt, "<passage n=\"1\">\n[sauna.md > # Sauna]\n") ||
		!strings.Contains(prompt, "Question: How hot is the sauna") || !strings.Contains(req.Messages[0].Content, "cite") {
		t.Errorf("request %+v", req)
	}
}

// A model's answer that cites nothing of the evidence is replaced by an
// extractive one; so is the answer without a model, and with the offline model
// (which answers every question with what it can do).
func TestAskExtractiveFallback(t *testing.T) {
	for name, m := range map[string]llm.Model{
		"uncited": scripted(t, "x", "y", "The sauna is hot [wiki]."),
		"none":    nil,
		"offline": llm.Offline{},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, func(c *knowledge.Config) { c.Model = m })
			b := f.base(t, "office")
			ingestCorpus(t, b)
			ans, err := b.Ask(testCtx(t), "Where do visitors park?", knowledge.AskOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !ans.Extractive || ans.Model != "" || !strings.HasPrefix(ans.Text, knowledge.ExtractiveLabel) || len(ans.Notes) == 0 {
				t.Fatalf("answer %+v", ans)
			}
			if !strings.Contains(ans.Text, "- Visitors park in garage B; the barrier opens with the intercom. [parking.md > # Parking]") {
				t.Errorf("text %q", ans.Text)
			}
			if len(ans.Citations) == 0 || ans.Citations[0].Source != "parking.md" {
				t.Errorf("citations %+v", ans.Citations)
			}
			if name == "uncited" && !slices.Equal(ans.Unverified, []string{"wiki"}) {
				t.Errorf("unverified %q", ans.Unverified)
			}
		})
	}
	f := newFixture(t)
	b := f.base(t, "empty")
	ans, err := b.Ask(testCtx(t), "anything?", knowledge.AskOptions{})
	if err != nil || len(ans.Hits) != 0 || !strings.Contains(ans.Text, "holds nothing") {
		t.Errorf("empty knowledge base: %+v %v", ans, err)
	}
}

// A BM25 hit's vote weighs the share of the query it matches: a chunk holding every
// query term votes fully, one holding a single common word of the query a fraction.
// A hybrid search shows the weight as the difference of a chunk's score under rrf
// and under wrrf, (1 − weight)/(60 + its BM25 rank): the vector votes are the
// same under both. A BM25 search alone (one list) fuses nothing: it scores as
// convex fusion does, by that share.
func TestKeywordVoteWeighsQueryCoverage(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	addText(t, b, "all.md", "Rotate the staging certificate with the renewal job.")
	addText(t, b, "one.md", "The staging area is on the left.")
	for i := range 6 {
		addText(t, b, fmt.Sprintf("filler%d.md", i), fmt.Sprintf("Filler note %d about staging and lunch.", i))
	}
	const q = "rotate staging certificate renewal"
	hits := search(t, b, knowledge.Query{Text: q, Mode: knowledge.ModeBM25, Limit: 10, Fusion: knowledge.FusionWeightedRRF}).Hits
	if len(hits) < 2 || hits[0].Source != "all.md" {
		t.Fatalf("hits %v", sources(hits))
	}
	score := func(f knowledge.Fusion) map[string]float64 {
		out := map[string]float64{}
		for _, h := range search(t, b, knowledge.Query{Text: q, Mode: knowledge.ModeHybrid, Limit: 10, Fusion: f}).Hits {
			out[h.Source] = h.Score
		}
		return out
	}
	rrf, wrrf := score(knowledge.FusionRRF), score(knowledge.FusionWeightedRRF)
	for rank, h := range hits {
		vote := 1.0 / float64(knowledge.RRFK+rank+1)
		weight := 1 - (rrf[h.Source]-wrrf[h.Source])/vote
		switch {
		case rank == 0 && (weight < 0.9 || weight > 1+1e-9):
			t.Errorf("the chunk holding every term votes %.3f of a full vote, want nearly all of it", weight)
		case rank > 0 && weight > 1.0/3:
			t.Errorf("%s matches one common word and votes %.3f of a full vote, more than a third", h.Source, weight)
		}
	}
	// Convex fusion scores BM25 by the same share, on its own scale: near 1 for
	// the chunk holding every term, a fraction for one common word.
	convex := search(t, b, knowledge.Query{Text: "rotate staging certificate renewal", Mode: knowledge.ModeBM25, Limit: 10,
		Fusion: knowledge.FusionConvex}).Hits
	if !slices.Equal(ids(convex), ids(hits)) || convex[0].Score < 0.9 || convex[0].Score > 1.2 {
		t.Fatalf("convex: hits %v, the first scoring %v: want BM25's order and nearly 1", sources(convex), convex[0].Score)
	}
	for i, h := range hits {
		if h.Score != convex[i].Score {
			t.Errorf("%s scores %v searched alone under wrrf, %v under convex: one list keeps its scores", h.Source, h.Score, convex[i].Score)
		}
	}
	for _, h := range convex[1:] {
		if h.Score > 1.0/3 {
			t.Errorf("convex: %s matches one common word and scores %v, more than a third", h.Source, h.Score)
		}
	}
}

// Convex fusion mixes the vector and the BM25 scores of every candidate by Alpha:
// at 1 it ranks as vector search, and a rare identifier BM25 finds lifts its chunk
// above the embedding's near-ties at the default.
func TestConvexFusion(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	ingestCorpus(t, b)
	addText(t, b, "errors.md", "# Errors\n\nError PAY-4013 means the card has expired.")
	addText(t, b, "errors2.md", "# Errors\n\nError PAY-4031 means the card was declined by the bank.")
	const q = "which printer tray PAY-4013"
	vec := search(t, b, knowledge.Query{Text: q, Mode: knowledge.ModeVector, Limit: 5}).Hits
	allVec := search(t, b, knowledge.Query{Text: q, Fusion: knowledge.FusionConvex, Alpha: 1, Limit: 5}).Hits
	if !slices.Equal(ids(vec), ids(allVec)) {
		t.Errorf("alpha 1: %v, want vector search's %v", sources(allVec), sources(vec))
	}
	hyb := search(t, b, knowledge.Query{Text: q, Limit: 5}).Hits
	if len(hyb) < 2 || hyb[0].Score > 1 || hyb[len(hyb)-1].Score < 0 {
		t.Fatalf("hybrid %v: scores outside [0, 1]", hyb)
	}
	top := map[string]bool{hyb[0].Source: true, hyb[1].Source: true}
	if !top["errors.md"] || !top["printer.md"] {
		t.Errorf("hybrid %v: want errors.md and printer.md first", sources(hyb))
	}
	for _, bad := range []knowledge.Query{{Text: q, Alpha: 1.5}, {Text: q, Alpha: -0.1}, {Text: q, Fusion: "sum"}} {
		if _, err := b.Search(testCtx(t), bad); !errors.Is(err, knowledge.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: f.store, Fusion: "max"}); err == nil {
		t.Error("Open accepted the fusion max")
	}
}

// A vector search scores a hit by its cosine to the query, as a memory search
// does, so a score says how near a passage is: a query on cakes that shares one
// word with a passage on ports scores it low. Before, the cosines were min-max
// normalised over the candidates: every vector search's best hit scored 1 and its
// pool's worst 0, whatever the query. A single list has nothing to fuse, so rank
// fusion (rrf, wrrf) keeps the cosines too: it scored the hits 1/61, 1/62, ….
func TestVectorSearchScoresAreCosines(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	addText(t, b, "ports.md", "# Ports\n\nThe node listens for HTTP on port 8080.\n")
	addText(t, b, "backups.md", "# Backups\n\nStop the node and copy the data directory.\n")
	addText(t, b, "kafka.md", "# Kafka\n\nSessions are partitioned by key on Kafka.\n")
	embed := func(text string) []float32 {
		v, err := llm.HashingEmbedder{}.Embed(testCtx(t), []string{text})
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	cos := func(a, b []float32) float64 {
		var dot, na, nb float64
		for i := range a {
			dot, na, nb = dot+float64(a[i])*float64(b[i]), na+float64(a[i])*float64(a[i]), nb+float64(b[i])*float64(b[i])
		}
		return dot / math.Sqrt(na*nb)
	}
	for _, fusion := range []knowledge.Fusion{"", knowledge.FusionConvex, knowledge.FusionRRF, knowledge.FusionWeightedRRF} {
		for _, q := range []string{"which port does the node listen on", "a chocolate cake recipe with port wine"} {
			res := search(t, b, knowledge.Query{Text: q, Mode: knowledge.ModeVector, Limit: 3, Fusion: fusion})
			if len(res.Hits) == 0 || res.Hits[0].Source != "ports.md" {
				t.Fatalf("fusion %q, %q: hits %v, want ports.md first", fusion, q, sources(res.Hits))
			}
			for _, h := range res.Hits {
				chunks, _ := b.Chunks(h.Source)
				if want := cos(embed(q), embed(chunks[0].Content)); math.Abs(h.Score-want) > 1e-6 {
					t.Errorf("fusion %q, %q: %s scores %.4f, its cosine is %.4f", fusion, q, h.Source, h.Score, want)
				}
			}
		}
	}
}

// A hybrid search is two lists, the vector one and the keyword one, also when
// one of them is empty (a query none of whose words is in the knowledge base):
// under rank fusion its hits score 1/(60 + rank) as those of any hybrid search,
// not their cosines, so that the scores of two queries are on one scale. Only a
// search of one list (ModeVector, ModeBM25) keeps its scores whatever the fusion.
func TestHybridSearchWithoutKeywordHitsIsRankFused(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	addText(t, b, "ports.md", "# Ports\n\nThe node listens for HTTP on port 8080.\n")
	addText(t, b, "backups.md", "# Backups\n\nStop the node and copy the data directory.\n")
	for _, fusion := range []knowledge.Fusion{knowledge.FusionRRF, knowledge.FusionWeightedRRF} {
		res := search(t, b, knowledge.Query{Text: "zzqx wvut", Limit: 3, Fusion: fusion})
		if len(res.Hits) != 2 {
			t.Fatalf("fusion %q: hits %v, want both chunks from the vector list", fusion, sources(res.Hits))
		}
		for i, h := range res.Hits {
			if want := 1 / float64(61+i); math.Abs(h.Score-want) > 1e-9 {
				t.Errorf("fusion %q: hit %d (%s) scores %.5f, want 1/%d", fusion, i+1, h.Source, h.Score, 61+i)
			}
		}
	}
}
