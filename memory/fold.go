package memory

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/internal/cjk"
	"github.com/troupe-run/troupe/messages"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// state is the fold of a namespace's stream: its live memories, its core blocks and
// the keys of the writes applied. It holds no projection and does no I/O, so History
// folds a fresh one to replay a memory's changes.
type state struct {
	ns   string
	seq  uint64
	mems map[string]*Memory
	// seen holds every memory ID the stream ever named: IDs are never reused, and a
	// rebuild deletes the vectors of the ones no longer live.
	seen map[string]struct{}
	// hashes holds the live memories by content hash: exact duplicates.
	hashes map[string]map[string]struct{}
	// working holds the IDs of the live working memories, the only ones with a TTL
	// and a capacity: expiry and eviction look at them, not at every memory.
	working map[string]struct{}
	keys    map[string]*keyed
	// requests holds, by client key, the digest of the request it was first
	// applied with (RequestKey).
	requests map[string]string
	blocks   map[string]*Block
	// letGo holds the memory sources of each semantic memory forgotten or cleared
	// (a distilled fact, one that absorbed duplicates), in the order they went: the
	// consolidator does not distil their clusters again (ForgottenSources).
	letGo [][]string
}

// keyed is what the writes with one idempotency key did: the memories their events
// added or changed (in order), and how many memories they forgot or cleared.
type keyed struct {
	ids     []string
	removed int
	// added holds the memories the key's memory.added events added, by content
	// hash and lasting (dupKey), forgotten ones too: an Add sent again gets the IDs
	// it got first.
	added map[dupKey]string
}

// effect is what one event did to the state: the memories it put (added or changed,
// live after it), the ones it removed (as they were), whether it changed a block,
// and every memory it touched, with the IDs related to it by the event (History).
type effect struct {
	put     []string
	removed []*Memory
	blocks  bool
	touched []touch
	// reason and key are the event's own (History reads them).
	reason, key string
	// unknown is the type of an event skipped: a memory event this build does
	// not know (skippable), which changed nothing here.
	unknown messages.Type
}

type touch struct {
	id      string
	related []string
}

func newState(ns string) *state {
	return &state{ns: ns, mems: map[string]*Memory{}, seen: map[string]struct{}{},
		hashes: map[string]map[string]struct{}{}, working: map[string]struct{}{}, keys: map[string]*keyed{}, requests: map[string]string{}, blocks: map[string]*Block{}}
}

// apply folds one event of the stream.
func (s *state) apply(e messages.Envelope) (effect, error) {
	var eff effect
	if e.Seq != s.seq+1 {
		return eff, fmt.Errorf("memory: %s: seq %d follows %d", e.SessionID, e.Seq, s.seq)
	}
	p, err := e.Decode()
	if err != nil {
		if !skippable(e, err) {
			return eff, fmt.Errorf("memory: %w", err)
		}
		s.seq, eff.unknown = e.Seq, e.Type
		return eff, nil
	}
	ts := time.UnixMicro(e.TS).UTC()
	var key string
	var addedKey dupKey
	switch p := p.(type) {
	case *messages.MemoryAdded:
		key, eff.reason = p.Key, p.Reason
		s.put(p.Memory, ts, &eff, nil)
		addedKey = dupKeyOf(s.mems[p.Memory.MemoryID])
	case *messages.MemoryUpdated:
		key, eff.reason = p.Key, p.Reason
		s.put(p.Memory, ts, &eff, nil)
	case *messages.MemoryPromoted:
		key, eff.reason = p.Key, p.Reason
		s.put(p.Memory, ts, &eff, nil)
	case *messages.MemoryMerged:
		key, eff.reason = p.Key, p.Reason
		for _, id := range p.Merged {
			if m := s.remove(id, &eff); m != nil {
				eff.touched = append(eff.touched, touch{id: id, related: []string{p.Memory.MemoryID}})
			}
		}
		s.put(p.Memory, ts, &eff, slices.Clone(p.Merged))
	case *messages.MemoryDistilled:
		key, eff.reason = p.Key, p.Reason
		var from []string
		for _, src := range p.Memory.Sources {
			if src.Kind == "memory" && src.ID != "" {
				from = append(from, src.ID)
				eff.touched = append(eff.touched, touch{id: src.ID, related: []string{p.Memory.MemoryID}})
			}
		}
		s.put(p.Memory, ts, &eff, from)
	case *messages.MemoryInvalidated:
		key, eff.reason = p.Key, p.Reason
		if m := s.mems[p.MemoryID]; m != nil {
			at := time.UnixMicro(p.AtUS).UTC()
			m.InvalidAt, m.InvalidBy, m.Updated = &at, p.By, ts
			eff.put = append(eff.put, m.ID)
			eff.touched = append(eff.touched, touch{id: m.ID, related: nonEmpty(p.By)})
			if p.By != "" {
				eff.touched = append(eff.touched, touch{id: p.By, related: []string{m.ID}})
			}
		}
	case *messages.MemoryForgotten:
		key, eff.reason = p.Key, p.Reason
		for _, id := range p.MemoryIDs {
			if m := s.remove(id, &eff); m != nil {
				eff.touched = append(eff.touched, touch{id: id})
				s.letGoOf(m)
			}
		}
	case *messages.MemoryCleared:
		key, eff.reason = p.Key, p.Reason
		var ids []string
		for id, m := range s.mems {
			if p.Tier == "" || string(m.Tier) == p.Tier {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			s.letGoOf(s.remove(id, &eff))
			eff.touched = append(eff.touched, touch{id: id})
		}
		if p.Tier == "" && len(s.blocks) > 0 { // clear_all: the blocks go too
			clear(s.blocks)
			eff.blocks = true
		}
	case *messages.MemoryBlockSet:
		key, eff.reason = p.Key, p.Reason
		// A block an older build stored may hold a NUL (SetBlock refuses one now):
		// it would go into every prompt, so it is read without it.
		s.blocks[p.Label] = &Block{Label: p.Label, Value: CleanText(p.Value), Description: CleanText(p.Description), Limit: p.Limit}
		eff.blocks = true
	case *messages.MemoryBlockDeleted:
		key, eff.reason = p.Key, p.Reason
		delete(s.blocks, p.Label)
		eff.blocks = true
	case *messages.MemoryRemembered:
		// It changes no memory: its key alone is kept, so that the Remember it
		// ends is known as done (rememberedUnder). One under a client's key
		// (RequestKey: an Add whose every memory was stored already) keeps the
		// digest of its request only: the key is not applied, and the same
		// request sent again is answered as it was (the memories it finds).
		eff.reason = p.Reason
		if _, _, _, ok := splitRequestKey(p.Key); ok {
			s.noteRequest(p.Key)
		} else {
			key = p.Key
		}
	default:
		return eff, fmt.Errorf("memory: %s seq %d: a %s event has no place in a memory stream", e.SessionID, e.Seq, e.Type)
	}
	eff.key = key
	for _, id := range eff.put {
		if m := s.mems[id]; m != nil {
			m.Version = e.Seq
		}
	}
	if key != "" {
		k := s.keys[key]
		if k == nil {
			k = &keyed{}
			s.keys[key] = k
			s.noteRequest(key)
		}
		k.ids = append(k.ids, eff.put...)
		k.removed += len(eff.removed)
		if addedKey.hash != "" {
			if k.added == nil {
				k.added = map[dupKey]string{}
			}
			if _, ok := k.added[addedKey]; !ok {
				k.added[addedKey] = p.(*messages.MemoryAdded).Memory.MemoryID
			}
		}
	}
	s.seq = e.Seq
	return eff, nil
}

// skippable reports whether e, which failed to decode with err, is a memory
// event of a type this build does not know (a later build's, memory.remembered
// to a build before it): its fold skips it, so that a namespace a later build
// wrote to stays readable here (in a cluster's rolling upgrade, or after a
// rollback). It changes nothing this build folds: its memories, blocks and keys
// are what the events it knows made them. An event of a known type in a version
// newer than this build's is not skipped (its memories would be folded wrong),
// nor one of another kind (it has no place in a memory stream); a session's fold
// skips nothing (an event it skipped could change what it decides).
func skippable(e messages.Envelope, err error) bool {
	return errors.Is(err, messages.ErrUnknownType) && strings.HasPrefix(string(e.Type), "memory.")
}

// rememberedUnder reports whether a Remember under key is known as done: one of
// its facts' writes (factKey, invalidationKey) is applied, or its
// memory.remembered (it wrote nothing).
func (s *state) rememberedUnder(key string) bool {
	if key == "" {
		return false
	}
	if s.keys[key] != nil {
		return true
	}
	for i := range MaxFacts {
		k := factKey(key, i)
		if s.keys[k] != nil || s.keys[invalidationKey(k)] != nil {
			return true
		}
	}
	return false
}

// put stores rec as the memory it describes, keeping the times and the invalid
// mark of the memory it replaces.
func (s *state) put(rec messages.MemoryRecord, ts time.Time, eff *effect, related []string) {
	m := fromRecord(s.ns, rec)
	m.Created, m.Updated = ts, ts
	if old := s.mems[m.ID]; old != nil {
		m.Created, m.InvalidAt, m.InvalidBy = old.Created, old.InvalidAt, old.InvalidBy
		s.unhash(old)
		delete(s.working, old.ID)
	}
	s.mems[m.ID] = m
	if m.Tier == Working {
		s.working[m.ID] = struct{}{}
	}
	s.seen[m.ID] = struct{}{}
	if s.hashes[m.Hash] == nil {
		s.hashes[m.Hash] = map[string]struct{}{}
	}
	s.hashes[m.Hash][m.ID] = struct{}{}
	eff.put = append(eff.put, m.ID)
	eff.touched = append(eff.touched, touch{id: m.ID, related: related})
}

// remove takes memory id out of the live ones and returns it (nil if it was not live).
func (s *state) remove(id string, eff *effect) *Memory {
	m := s.mems[id]
	if m == nil {
		return nil
	}
	delete(s.mems, id)
	delete(s.working, id)
	s.unhash(m)
	eff.removed = append(eff.removed, m)
	return m
}

// letGoOf keeps the memory sources of m, a semantic memory forgotten or cleared.
func (s *state) letGoOf(m *Memory) {
	if m == nil || m.Tier != Semantic {
		return
	}
	var ids []string
	for _, src := range m.Sources {
		if src.Kind == "memory" && src.ID != "" && !slices.Contains(ids, src.ID) {
			ids = append(ids, src.ID)
		}
	}
	if len(ids) > 0 {
		s.letGo = append(s.letGo, ids)
	}
}

func (s *state) unhash(m *Memory) {
	if set := s.hashes[m.Hash]; set != nil {
		delete(set, m.ID)
		if len(set) == 0 {
			delete(s.hashes, m.Hash)
		}
	}
}

// byHash returns a live memory with the content hash that a memory written to tier
// is the duplicate of (DuplicateFor), the least ID when several.
func (s *state) byHash(hash string, tier Tier) (string, bool) {
	best := ""
	for id := range s.hashes[hash] {
		if m := s.mems[id]; m != nil && DuplicateFor(m.Tier, tier) && (best == "" || id < best) {
			best = id
		}
	}
	return best, best != ""
}

// DuplicateFor reports whether a memory of tier stored, of the same content, is
// the one a memory written to tier written is: any stored one for a working
// memory, one of a lasting tier (not working) for the others. A working memory
// goes within the working TTL, or past the tier's capacity: a fact written to a
// lasting tier and answered with its ID would go with it.
func DuplicateFor(stored, written Tier) bool { return written == Working || stored != Working }

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// fromRecord is the memory a record describes (without its event times). A record an
// older build wrote may hold NUL bytes in its content or outcome, which writes refuse
// now (checkContent): they are read without them (CleanText), so that such a memory
// reaches no prompt or answer with them, is found by its words, and is an exact
// duplicate of the same text written now (its hash is that of the text read). So is
// a record of full-width text (cjk.HasFullwidth), which older builds hashed without
// reading its letters as ASCII (pmem.Normalize).
func fromRecord(ns string, r messages.MemoryRecord) *Memory {
	mod := Modality(r.Modality)
	if mod == "" {
		mod = Text
	}
	content, hash := r.Content, r.Hash
	if strings.IndexByte(content, 0) >= 0 {
		content = CleanText(content)
		hash = pmem.ContentHash(content)
	} else if hash != "" && cjk.HasFullwidth(content) {
		hash = pmem.ContentHash(content)
	}
	return &Memory{
		ID: r.MemoryID, Namespace: ns, Tier: Tier(r.Tier), Modality: mod, Content: content, URI: r.URI,
		Importance: r.Importance, Timestamp: time.UnixMicro(r.AtUS).UTC(), Hash: hash,
		Vector: slices.Clone([]float32(r.Vector)), Embedder: r.Embedder, Metadata: cloneRaw(r.Metadata),
		Participants: slices.Clone(r.Participants), Outcome: CleanText(r.Outcome),
		Entities: slices.Clone(r.Entities), Relations: slices.Clone(r.Relations), Sources: cloneSources(r.Sources),
	}
}

// toRecord is the record of a memory, for the event that changes it.
func toRecord(m *Memory) messages.MemoryRecord {
	mod := string(m.Modality)
	if m.Modality == Text {
		mod = ""
	}
	return messages.MemoryRecord{
		MemoryID: m.ID, Tier: string(m.Tier), Modality: mod, Content: m.Content, URI: m.URI,
		Importance: m.Importance, AtUS: m.Timestamp.UnixMicro(), Hash: m.Hash,
		Vector: messages.Vector(slices.Clone(m.Vector)), Embedder: m.Embedder, Metadata: cloneRaw(m.Metadata),
		Participants: slices.Clone(m.Participants), Outcome: m.Outcome,
		Entities: slices.Clone(m.Entities), Relations: slices.Clone(m.Relations), Sources: cloneSources(m.Sources),
	}
}

func copyMemory(m *Memory) Memory {
	c := *m
	c.Vector = slices.Clone(m.Vector)
	c.Metadata = cloneRaw(m.Metadata)
	c.Participants = slices.Clone(m.Participants)
	c.Entities = slices.Clone(m.Entities)
	c.Relations = slices.Clone(m.Relations)
	c.Sources = cloneSources(m.Sources)
	if m.InvalidAt != nil {
		at := *m.InvalidAt
		c.InvalidAt = &at
	}
	return c
}

func cloneRaw(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return nil
	}
	return slices.Clone(r)
}

func cloneSources(src []messages.MemorySource) []messages.MemorySource {
	if src == nil {
		return nil
	}
	out := make([]messages.MemorySource, len(src))
	for i, s := range src {
		out[i] = s
		out[i].Detail = cloneRaw(s.Detail)
	}
	return out
}
