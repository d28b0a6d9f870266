package notes

// QueuedWrites is the number of writes waiting for the notes' next Append.
func (n *Notes) QueuedWrites() int { return n.batch.Queued() }
