package vectorstore

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
)

// ErrRefused is wrapped by the error of a write the store's server refused for what
// the items hold (a payload it does not take), not for a failure of its own or of
// the connection. Like ErrInvalid and ErrDimension it is permanent: the same items
// are refused again.
var ErrRefused = errors.New("vectorstore: the store refused the items")

// Refused reports whether err is a refusal of a write's items that retrying will not
// change: ErrInvalid, ErrDimension or ErrRefused. ErrSchema is not one: it is a
// refusal of the collection, whatever the items.
func Refused(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrDimension) || errors.Is(err, ErrRefused)
}

// Parked is an item a store refused: UpsertIsolating wrote the rest of its batch
// without it.
type Parked struct {
	Item Item
	// Err is the store's refusal of a batch of the item alone (or of the items of
	// its dimension alone, when the collection holds another dimension).
	Err error
}

// UpsertIsolating upserts items into collection in batches of at most batch items
// (no bound when batch <= 0). A batch the store refuses (Refused) is split until
// the items it refuses stand alone: those are returned as parked, and the others
// are written. Items of another dimension than the batch's most common one are
// tried apart first, most common dimension first, so one odd vector cannot fix the
// dimension of a new collection; a group of one dimension that the collection
// refuses with ErrDimension is parked whole, without splitting. Any other error
// (the store is down, ctx ended) ends the call: it returns what was parked so far
// and the error, and the caller tries the same items again later (the items written
// already are written again, which Upsert allows).
func UpsertIsolating(ctx context.Context, s Store, collection string, items []Item, batch int) (parked []Parked, err error) {
	if batch <= 0 {
		batch = max(len(items), 1)
	}
	for b := range slices.Chunk(items, batch) {
		p, err := isolate(ctx, s, collection, b)
		parked = append(parked, p...)
		if err != nil {
			return parked, err
		}
	}
	return parked, nil
}

// isolate writes items, splitting them on a refusal; see UpsertIsolating.
func isolate(ctx context.Context, s Store, collection string, items []Item) ([]Parked, error) {
	if len(items) == 0 {
		return nil, nil
	}
	err := s.Upsert(ctx, collection, items)
	switch {
	case err == nil:
		return nil, nil
	case !Refused(err) || ctx.Err() != nil:
		return nil, err
	case len(items) == 1:
		return []Parked{{Item: items[0], Err: err}}, nil
	}
	if groups := byDimension(items); len(groups) > 1 {
		var parked []Parked
		for _, g := range groups {
			p, err := isolate(ctx, s, collection, g)
			parked = append(parked, p...)
			if err != nil {
				return parked, err
			}
		}
		return parked, nil
	}
	if errors.Is(err, ErrDimension) {
		// One dimension, and the collection holds another: every item is refused.
		parked := make([]Parked, len(items))
		for i, it := range items {
			parked[i] = Parked{Item: it, Err: err}
		}
		return parked, nil
	}
	half := len(items) / 2
	parked, err := isolate(ctx, s, collection, items[:half])
	if err != nil {
		return parked, err
	}
	p, err := isolate(ctx, s, collection, items[half:])
	return append(parked, p...), err
}

// byDimension groups items by the length of their vectors, keeping their order
// within a group: the largest group first, then by dimension.
func byDimension(items []Item) [][]Item {
	groups := map[int][]Item{}
	for _, it := range items {
		groups[len(it.Vector)] = append(groups[len(it.Vector)], it)
	}
	dims := slices.Collect(maps.Keys(groups))
	slices.SortFunc(dims, func(a, b int) int {
		if c := cmp.Compare(len(groups[b]), len(groups[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	out := make([][]Item, len(dims))
	for i, d := range dims {
		out[i] = groups[d]
	}
	return out
}
