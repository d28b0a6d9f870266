package openai

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/troupe-run/troupe/llm"
)

// DefaultBatchSize is how many texts one /embeddings request carries when
// EmbedderConfig.BatchSize is zero. Some providers accept fewer (DashScope: 10); set
// BatchSize for them.
const DefaultBatchSize = 64

// EmbedderConfig describes an embedding model behind an OpenAI-compatible
// /embeddings endpoint. Only BaseURL and Model are required.
type EmbedderConfig struct {
	// Provider names the provider in errors, e.g. "openai".
	Provider string
	BaseURL  string
	APIKey   string
	// Model is the embedding model, e.g. "text-embedding-3-small".
	Model string
	// Timeout bounds each batch request; 0 means DefaultTimeout.
	Timeout time.Duration
	// BatchSize is the number of texts per request; 0 means DefaultBatchSize.
	BatchSize int
	// Dimensions asks models that support it for shorter vectors; nil: the model's own.
	Dimensions   *int
	ExtraHeaders map[string]string
	HTTPClient   *http.Client
}

// Validate reports what is missing or malformed.
func (c EmbedderConfig) Validate() error {
	if err := validateBaseURL(c.BaseURL); err != nil {
		return err
	}
	if c.Model == "" {
		return fmt.Errorf("llm/openai: %s: no embedding model configured", c.chat().providerName())
	}
	if err := validateHeaders(c.chat().providerName(), c.APIKey, c.ExtraHeaders); err != nil {
		return err
	}
	if c.Timeout < 0 || c.BatchSize < 0 {
		return fmt.Errorf("llm/openai: negative timeout or batch size")
	}
	if c.Dimensions != nil && *c.Dimensions <= 0 {
		return fmt.Errorf("llm/openai: dimensions must be positive, got %d", *c.Dimensions)
	}
	return nil
}

func (c EmbedderConfig) chat() Config {
	return Config{Provider: c.Provider, BaseURL: c.BaseURL, APIKey: c.APIKey, Model: c.Model, Timeout: c.Timeout}
}

// String describes the configuration without its API key.
func (c EmbedderConfig) String() string {
	return "openai.EmbedderConfig" + c.chat().String()[len("openai.Config"):]
}

// Format makes every fmt verb print String, never the key.
func (c EmbedderConfig) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, c.String()) }

// LogValue implements slog.LogValuer without the key.
func (c EmbedderConfig) LogValue() slog.Value { return c.chat().LogValue() }

// Embedder turns texts into vectors. It is immutable and safe for concurrent use.
type Embedder struct {
	cfg EmbedderConfig
	svc sdk.EmbeddingService
	who caller
}

var _ llm.Embedder = (*Embedder)(nil)

// NewEmbedder builds an embedder from cfg. It sends nothing over the network.
func NewEmbedder(cfg EmbedderConfig) (*Embedder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Provider = cfg.chat().providerName()
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	cfg.ExtraHeaders = maps.Clone(cfg.ExtraHeaders)
	return &Embedder{
		cfg: cfg,
		svc: sdk.NewEmbeddingService(clientOptions(cfg.BaseURL, cfg.APIKey, cfg.ExtraHeaders, cfg.HTTPClient)...),
		who: caller{provider: cfg.Provider, model: cfg.Model, apiKey: cfg.APIKey, callTimeout: cfg.chat().timeout()},
	}, nil
}

// Name is the embedding model's name.
func (e *Embedder) Name() string { return e.cfg.Model }

// String describes the embedder without its API key.
func (e Embedder) String() string {
	return fmt.Sprintf("openai.Embedder{%s %s at %s}", e.cfg.Provider, e.cfg.Model, ShownURL(e.cfg.BaseURL))
}

// Format makes every fmt verb print String, never the key.
func (e Embedder) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, e.String()) }

// Embed implements llm.Embedder: it returns one vector per text, in the order of texts. It sends the texts in
// batches of BatchSize, one after another, and places each vector by the index the
// provider reports. A failed batch fails the call (errors as Model.Generate); no
// partial result is returned.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	const op = "embeddings"
	out := make([][]float32, len(texts))
	for start := 0; start < len(texts); start += e.cfg.BatchSize {
		if err := ctx.Err(); err != nil {
			return nil, e.who.errorf(op, "%w", err)
		}
		batch := texts[start:min(start+e.cfg.BatchSize, len(texts))]
		if err := e.embedBatch(ctx, batch, out[start:start+len(batch)]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (e *Embedder) embedBatch(ctx context.Context, batch []string, into [][]float32) error {
	const op = "embeddings"
	params := sdk.EmbeddingNewParams{
		Model:          e.cfg.Model,
		Input:          sdk.EmbeddingNewParamsInputUnion{OfArrayOfStrings: batch},
		EncodingFormat: sdk.EmbeddingNewParamsEncodingFormatFloat,
	}
	if e.cfg.Dimensions != nil {
		params.Dimensions = sdk.Int(int64(*e.cfg.Dimensions))
	}
	call, cancel := context.WithTimeoutCause(ctx, e.who.callTimeout, errCallTimeout)
	defer cancel()
	x := &exchange{limit: embeddingsBound(len(batch))} // a server that sends without end fails before it fills the memory
	res, err := e.svc.New(call, params, option.WithMiddleware(x.middleware))
	if err != nil {
		return e.who.classify(op, ctx, call, x, err)
	}
	if res == nil || len(res.Data) != len(batch) {
		n := 0
		if res != nil {
			n = len(res.Data)
		}
		return e.who.errorf(op, "%w: %d vectors for %d texts", ErrMalformedResponse, n, len(batch))
	}
	for _, d := range res.Data {
		i := int(d.Index)
		if i < 0 || i >= len(batch) || into[i] != nil {
			return e.who.errorf(op, "%w: vector index %d is out of range or repeated", ErrMalformedResponse, d.Index)
		}
		v := make([]float32, len(d.Embedding))
		for j, f := range d.Embedding {
			v[j] = float32(f)
		}
		into[i] = v
	}
	return nil
}
