package openai_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// vectorOf is the fake server's embedding of a text: distinct per text.
func vectorOf(s string) []float64 { return []float64{float64(len(s)), float64(s[0]), 0.5} }

// embeddingServer embeds each batch, listing the vectors in reverse order so that a
// client placing them by position instead of by index gets them wrong.
func embeddingServer(t *testing.T) *openaitest.Server {
	return openaitest.NewServer(t, func(r openaitest.Request) openaitest.Reply {
		var body struct {
			Input []string `json:"input"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || !r.Is("/embeddings") {
			return openaitest.Error(400, "bad embeddings request")
		}
		var vecs [][]float64
		var order []int
		for i, s := range body.Input {
			vecs = append(vecs, vectorOf(s))
			order = append([]int{i}, order...)
		}
		return openaitest.Reply{Body: openaitest.EmbeddingsJSON(vecs, order)}
	})
}

func TestEmbedBatchesInOrder(t *testing.T) {
	srv := embeddingServer(t)
	e, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: "fake", BaseURL: srv.URL, APIKey: testKey,
		Model: "fake-embedding", BatchSize: 2, Dimensions: new(3)})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"alpha", "be", "gamma!", "d", "epsilon"}
	got, err := e.Embed(deadline(t), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range texts {
		want := vectorOf(s)
		if len(got[i]) != len(want) || got[i][0] != float32(want[0]) || got[i][1] != float32(want[1]) {
			t.Fatalf("vector %d = %v, want %v", i, got[i], want)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 batches", len(reqs))
	}
	for i, batch := range [][]string{{"alpha", "be"}, {"gamma!", "d"}, {"epsilon"}} {
		body := reqs[i].JSON(t)
		var input []string
		for _, v := range body["input"].([]any) {
			input = append(input, v.(string))
		}
		if !reflect.DeepEqual(input, batch) || body["model"] != "fake-embedding" || body["encoding_format"] != "float" || body["dimensions"] != 3.0 {
			t.Fatalf("request %d: %s", i, reqs[i].Body)
		}
	}
	if out, err := e.Embed(deadline(t), nil); err != nil || len(out) != 0 || len(srv.Requests()) != 3 {
		t.Fatalf("no texts must send nothing: %v %v", out, err)
	}
	if e.Name() != "fake-embedding" {
		t.Fatal(e.Name())
	}
}

func TestEmbedErrors(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{Body: openaitest.EmbeddingsJSON([][]float64{{1}, {2}}, []int{0, 1})},
		openaitest.Error(429, "slow down", "Retry-After", "4"),
		openaitest.Reply{Body: openaitest.EmbeddingsJSON([][]float64{{1}}, []int{0})},         // one vector for two texts
		openaitest.Reply{Body: openaitest.EmbeddingsJSON([][]float64{{1}, {2}}, []int{0, 0})}, // a repeated index
		openaitest.Reply{Delay: time.Minute},
	))
	e, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: "fake", BaseURL: srv.URL, Model: "m", BatchSize: 2, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The second batch is rate limited: the whole call fails, with no partial result.
	out, err := e.Embed(deadline(t), []string{"a", "b", "c"})
	if api := apiError(t, err); api.StatusCode != 429 || api.RetryAfter != 4*time.Second || out != nil {
		t.Fatalf("%v %v", out, err)
	}
	for _, want := range []error{openai.ErrMalformedResponse, openai.ErrMalformedResponse, llm.ErrTransient} {
		if _, err := e.Embed(deadline(t), []string{"a", "b"}); !errors.Is(err, want) {
			t.Fatalf("%v: want %v", err, want)
		}
	}
	if _, err := openai.NewEmbedder(openai.EmbedderConfig{BaseURL: srv.URL}); err == nil {
		t.Fatal("an embedder without a model must be rejected")
	}
}
