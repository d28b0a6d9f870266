package openai

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// The embeddings of a batch past their bound (maxAnswerBytes, and maxVectorBytes for
// each text) fail at once (malformed, not transient) instead of being read into
// memory to their end, as a chat answer past its bound does: the embeddings
// endpoint read a body of any size, so that a server that sent without end filled
// the node's memory until the call's timeout. Embeddings within it are read.
func TestEmbeddingsLargerThanTheBoundFail(t *testing.T) {
	defer func(a, v int64) { maxAnswerBytes, maxVectorBytes = a, v }(maxAnswerBytes, maxVectorBytes)
	maxAnswerBytes, maxVectorBytes = 4<<10, 1<<10 // 6 KiB for a batch of two texts
	vector := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = 0.123456789
		}
		return v
	}
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{Body: openaitest.EmbeddingsJSON([][]float64{vector(1000), vector(1000)}, []int{0, 1})}, // some 24 KiB
		openaitest.Reply{Body: openaitest.EmbeddingsJSON([][]float64{vector(8), vector(8)}, []int{0, 1})},
	))
	e, err := NewEmbedder(EmbedderConfig{Provider: "fake", BaseURL: srv.URL, Model: "e", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = e.Embed(ctx, []string{"a", "b"})
	if !errors.Is(err, ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) || !strings.Contains(err.Error(), "larger than 6 KiB") {
		t.Fatalf("%v; want a malformed answer, larger than the bound", err)
	}
	if got, err := e.Embed(ctx, []string{"a", "b"}); err != nil || len(got) != 2 || len(got[0]) != 8 {
		t.Fatalf("small: %v %v", got, err)
	}
}
