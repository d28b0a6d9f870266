package memory

// SweepExamined is the number of namespaces the sweeps of m tried to release.
func SweepExamined(m *Memories) int64 {
	return m.spaces.Examined()
}
