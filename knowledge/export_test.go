package knowledge

// WithZScore returns q with FusionConvex normalising every list by z-score: the
// quality test compares the normalisations.
func WithZScore(q Query) Query {
	q.norm = normZ
	return q
}

// WithMinMax returns q with FusionConvex normalising BM25 lists by min-max, like
// the vector lists, instead of by the share of the query a chunk matches.
func WithMinMax(q Query) Query {
	q.norm = normMinMax
	return q
}
