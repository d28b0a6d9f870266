package llm

import (
	"context"
	"hash/fnv"
	"math"
	"strings"
	"unicode"

	"github.com/troupe-run/troupe/internal/cjk"
	"golang.org/x/text/unicode/norm"
)

// HashingEmbedder is an offline embedder: it hashes a text's lower-cased words and word
// pairs into a fixed number of buckets (feature hashing) and L2-normalises the counts.
// It is lexical, not semantic — "car" and "automobile" share nothing — and is there
// so that caches, memory and RAG work on a machine with no embedding model; configure
// an embeddings endpoint for real semantic similarity.
type HashingEmbedder struct {
	// Dim is the vector size (default 256).
	Dim int
}

var _ LexicalEmbedder = HashingEmbedder{}

// Lexical implements LexicalEmbedder: the vectors find words, not meaning.
func (HashingEmbedder) Lexical() bool { return true }

// Embed implements Embedder.
func (h HashingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dim := h.Dim
	if dim <= 0 {
		dim = 256
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, dim)
		// NFC: a decomposed "é" (e + U+0301) is the composed one, not "e" and a
		// separator; narrow: "ｔｅａ" typed in an input method's full-width mode is "tea".
		words := strings.FieldsFunc(strings.ToLower(norm.NFC.String(cjk.Narrow(t))), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		add := func(s string, w float32) {
			f := fnv.New64a()
			f.Write([]byte(s))
			x := f.Sum64()
			sign := float32(1)
			if x>>63 == 1 {
				sign = -1
			}
			v[x%uint64(dim)] += sign * w
		}
		for j, w := range words {
			add(w, 1)
			if j > 0 {
				add(words[j-1]+" "+w, 0.5)
			}
		}
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if n > 0 {
			inv := float32(1 / math.Sqrt(n))
			for k := range v {
				v[k] *= inv
			}
		}
		out[i] = v
	}
	return out, nil
}
