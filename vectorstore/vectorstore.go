package vectorstore

import (
	"context"
	"errors"
)

// Store is the vector store seam. Implementations are safe for concurrent use.
//
// Every method checks its request before doing anything: an invalid request fails with
// an error wrapping ErrInvalid (or ErrDimension) and changes nothing. A request whose
// ctx is already done fails with an error wrapping ctx.Err() and changes nothing.
// After an implementation's Close, methods fail with ErrClosed.
type Store interface {
	// Upsert inserts items or replaces those with the same ID in the collection,
	// creating the collection on first use. A replaced item loses its old vector,
	// metadata and text entirely. When a batch names an ID twice, the later item wins.
	//
	// All vectors of a collection have the same dimension, fixed by the first
	// successful Upsert and kept while the collection exists, even when every item has
	// been deleted. A vector of another dimension fails with ErrDimension. An empty ID,
	// an empty vector, a vector with a NaN or infinite component, or a zero vector
	// (which has no direction) fails with ErrInvalid. The batch is atomic: if any item
	// fails, nothing of the batch is written. An empty batch does nothing.
	Upsert(ctx context.Context, collection string, items []Item) error
	// Search returns up to q.K items most similar (cosine) to q.Vector among those whose
	// metadata matches every key/value of q.Filter, best first. The filter is applied
	// before ranking, so K matching items come back whenever K exist. Ties break by ID
	// (ascending). An unknown collection returns no hits and no error.
	//
	// q.K <= 0 or an invalid q.Vector (rules as for Upsert) fails with ErrInvalid; a
	// q.Vector whose dimension differs from the collection's fails with ErrDimension.
	// Hits are copies: callers may modify them.
	Search(ctx context.Context, collection string, q Query) ([]Hit, error)
	// Delete removes items by ID; unknown IDs and unknown collections are ignored. An
	// empty ID fails with ErrInvalid and deletes nothing.
	Delete(ctx context.Context, collection string, ids []string) error
}

// Item is one stored vector with its metadata and source text. A Store copies what it
// is given: callers may reuse an Item after Upsert returns.
type Item struct {
	ID       string            `json:"id"`
	Vector   []float32         `json:"vector"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Text     string            `json:"text,omitempty"`
}

// Query asks for the K nearest items that match Filter (exact match on every pair; an
// item lacking a key does not match). A nil or empty Filter matches every item.
type Query struct {
	Vector []float32
	K      int
	Filter map[string]string
}

// Hit is one search result; Score is cosine similarity in [-1, 1]. Hit.Vector is the
// vector as it was upserted (not normalized).
type Hit struct {
	Item
	Score float32 `json:"score"`
}

// Errors of the vector store. They are permanent: retrying the same request fails
// the same way.
var (
	// ErrDimension means a vector's length differs from its collection's dimension.
	ErrDimension = errors.New("vectorstore: vector dimension does not match the collection")
	// ErrInvalid means a malformed request: empty collection or ID, bad vector, K <= 0.
	ErrInvalid = errors.New("vectorstore: invalid request")
	// ErrSchema means a collection the store finds is not one it can use: made by
	// another program, or of another schema.
	ErrSchema = errors.New("vectorstore: the collection is not of this store's schema")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("vectorstore: store is closed")
)
