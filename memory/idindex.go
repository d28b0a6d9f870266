package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// idIndex maps memory IDs to the namespaces that hold them: a fold of every memory
// stream of the log that keeps only, of each memory an event put, its ID (hashed)
// and its namespace. It answers Memories.Locate, the lookup of a memory by ID
// alone, without reading every stream: it is built by the first lookup (one read of
// each stream), kept up to date by the namespaces this process folds, and caught up
// with the other writers of the log (other nodes, other processes) by a lookup that
// misses, from one listing of the streams and a read of the streams that grew, at
// most once per idRefreshEvery.
type idIndex struct {
	mu    sync.Mutex
	seed  maphash.Seed
	names []string          // namespaces, by index
	at    map[string]uint32 // namespace → index in names
	seq   []uint64          // the last seq folded of each namespace, by index
	ids   map[uint64]uint32 // hash of a memory ID → its namespace
	more  map[uint64][]uint32
	// refreshed is when the last catch-up with the log started (zero: never: the
	// index is not built).
	refreshed time.Time
	refresh   sync.Mutex // one catch-up at a time
	built     atomic.Bool
}

// idRefreshEvery bounds how often lookups that miss read the log's listing of
// streams: a memory another process wrote is found at most this long after.
const idRefreshEvery = time.Second

func newIDIndex() *idIndex {
	return &idIndex{seed: maphash.MakeSeed(), at: map[string]uint32{}, ids: map[uint64]uint32{}, more: map[uint64][]uint32{}}
}

// note folds the memory IDs one event of namespace put (seq its seq) into the
// index, if the index holds the namespace's events up to the one before: an event
// it is missing waits for the next catch-up. The caller holds x.mu.
func (x *idIndex) note(ns string, seq uint64, ids []string) {
	i, ok := x.at[ns]
	if !ok {
		i = uint32(len(x.names))
		x.at[ns] = i
		x.names = append(x.names, ns)
		x.seq = append(x.seq, 0)
	}
	if seq != x.seq[i]+1 {
		return
	}
	x.seq[i] = seq
	for _, id := range ids {
		h := maphash.String(x.seed, id)
		switch j, ok := x.ids[h]; {
		case !ok:
			x.ids[h] = i
		case j != i && !slices.Contains(x.more[h], i):
			x.more[h] = append(x.more[h], i) // another ID of the same hash, or an ID two namespaces use
		}
	}
}

// folded tells the index of an event a namespace of this process folded (ids the
// memories it put). It does nothing before the index is built.
func (x *idIndex) folded(ns string, seq uint64, ids []string) {
	if !x.built.Load() {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.refreshed.IsZero() {
		x.note(ns, seq, ids)
	}
}

// candidates returns the namespaces that may hold id, sorted (none when the index
// knows of no memory with its hash).
func (x *idIndex) candidates(id string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	h := maphash.String(x.seed, id)
	i, ok := x.ids[h]
	if !ok {
		return nil
	}
	out := []string{x.names[i]}
	for _, j := range x.more[h] {
		out = append(out, x.names[j])
	}
	slices.Sort(out)
	return out
}

// catchUp folds what the memory streams of log gained since the last catch-up,
// unless one started less than idRefreshEvery ago (the first builds the index).
func (x *idIndex) catchUp(ctx context.Context, log eventlog.Log) error {
	x.refresh.Lock()
	defer x.refresh.Unlock()
	x.mu.Lock()
	last := x.refreshed
	x.mu.Unlock()
	if !last.IsZero() && time.Since(last) < idRefreshEvery {
		return nil
	}
	start := time.Now()
	infos, err := log.Sessions(ctx, eventlog.Filter{Prefix: StreamPrefix})
	if err != nil {
		return fmt.Errorf("memory: listing namespaces: %w", err)
	}
	for _, info := range infos {
		if !IsStream(info.ID) {
			continue
		}
		ns := info.ID[len(StreamPrefix):]
		x.mu.Lock()
		from := uint64(0)
		if i, ok := x.at[ns]; ok {
			from = x.seq[i]
		}
		x.mu.Unlock()
		if info.LastSeq <= from {
			continue
		}
		events, err := log.Read(ctx, info.ID, from+1)
		if err != nil {
			return fmt.Errorf("memory: reading %s: %w", info.ID, err)
		}
		x.mu.Lock()
		for _, e := range events {
			x.note(ns, e.Seq, putIDs(e))
		}
		x.mu.Unlock()
	}
	x.mu.Lock()
	x.refreshed = start
	x.mu.Unlock()
	x.built.Store(true)
	return nil
}

// putIDs returns the memory an event puts (adds, changes, merges into, promotes or
// distils), without decoding the rest of its payload.
func putIDs(e messages.Envelope) []string {
	switch e.Type {
	case messages.TypeMemoryAdded, messages.TypeMemoryUpdated, messages.TypeMemoryMerged, messages.TypeMemoryPromoted, messages.TypeMemoryDistilled:
	default:
		return nil
	}
	var p struct {
		Memory struct {
			ID string `json:"memory_id"`
		} `json:"memory"`
	}
	if json.Unmarshal(e.Payload, &p) != nil || p.Memory.ID == "" {
		return nil
	}
	return []string{p.Memory.ID}
}

// Locate returns the namespaces of the log that may hold memory id, sorted:
// usually the one that does (History tells), rarely another whose memory's ID has
// the same hash. It reads no stream but those that grew: the first Locate of a
// process reads every memory stream once; after it, a memory this process wrote or
// folded is found at once, one another process wrote at most a second after it was
// written, and an unknown ID costs at most one listing of the streams a second,
// whatever the number of lookups. It returns none when no namespace holds id.
func (m *Memories) Locate(ctx context.Context, id string) ([]string, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if m.ids.built.Load() {
		if c := m.ids.candidates(id); c != nil {
			return c, nil // a hit reads nothing
		}
	}
	if err := m.ids.catchUp(ctx, m.cfg.Log); err != nil {
		return nil, err
	}
	return m.ids.candidates(id), nil
}
