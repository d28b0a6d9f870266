package vectorstore

// GraphChanges reports how many nodes of a collection's HNSW graph changed since the
// graph was last saved or loaded (-1 when the collection has no graph), so tests can
// tell a loaded graph from a rebuilt one.
func (s *Embedded) GraphChanges(collection string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.colls[collection]
	if c == nil || c.g == nil {
		return -1
	}
	return c.g.changes
}
