package vectorstore

import (
	"context"
	"errors"
)

// Store is the vector store seam. Implementations are safe for concurrent use.
type Store interface {
	// Upsert inserts items or replaces those with the same ID in the collection,
	// creating the collection on first use. All vectors of a collection have the same
	// dimension; a mismatch fails with ErrDimension and writes nothing.
	Upsert(ctx context.Context, collection string, items []Item) error
	// Search returns up to q.K items most similar (cosine) to q.Vector among those whose
	// metadata matches every key/value of q.Filter, best first. Ties break by ID.
	// An unknown collection returns no hits.
	Search(ctx context.Context, collection string, q Query) ([]Hit, error)
	// Delete removes items by ID; unknown IDs are ignored.
	Delete(ctx context.Context, collection string, ids []string) error
}

// Item is one stored vector with its metadata and source text.
type Item struct {
	ID       string            `json:"id"`
	Vector   []float32         `json:"vector"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Text     string            `json:"text,omitempty"`
}

// Query asks for the K nearest items that match Filter (exact match on every pair).
type Query struct {
	Vector []float32
	K      int
	Filter map[string]string
}

// Hit is one search result; Score is cosine similarity in [-1, 1].
type Hit struct {
	Item
	Score float32 `json:"score"`
}

// Errors of the vector store.
var (
	ErrDimension = errors.New("vectorstore: vector dimension does not match the collection")
	ErrInvalid   = errors.New("vectorstore: invalid request")
)
