package memory

// SweepExamined is the number of namespaces the sweeps of m tried to release.
func SweepExamined(m *Memories) int64 {
	return m.spaces.Examined()
}

// BatchQueued is the number of writes of ns waiting for its next batch.
func BatchQueued(ns *Namespace) int { return ns.batch.Queued() }
