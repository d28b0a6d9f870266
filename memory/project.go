package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	pmem "github.com/troupe-run/troupe/pipelines/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// Collection is the vector store collection of a tier and modality:
// "mem_<tier>_<modality>", e.g. mem_semantic_text or mem_perceptual_image.
func Collection(t Tier, m Modality) string {
	if m == "" {
		m = Text
	}
	return "mem_" + string(t) + "_" + string(m)
}

// collections lists every collection a namespace may use: text for each tier, and
// image and audio for the perceptual tier.
func collections() []string {
	out := make([]string, 0, len(Tiers)+2)
	for _, t := range Tiers {
		out = append(out, Collection(t, Text))
	}
	return append(out, Collection(Perceptual, Image), Collection(Perceptual, Audio))
}

// projection holds what a namespace's fold projects in memory (a BM25 index per
// tier, the semantic tier's entity graph and its entity names) and what it has
// projected into the vector store (which collection holds each memory's vector, and
// the memories whose vectors must still follow the fold).
type projection struct {
	keywords map[Tier]*pmem.KeywordIndex
	kwTier   map[string]Tier
	graph    *pmem.Graph
	// entities counts the semantic memories that mention each entity (normalised):
	// a query's words that name a known entity join its query entities.
	entities map[string]int
	entsOf   map[string][]string
	// vecAt is the collection that holds each memory's vector in the store; dirty
	// the memories whose vector must be upserted or deleted.
	vecAt map[string]string
	dirty map[string]struct{}
	// ever holds the collections each memory the stream ever named belonged to:
	// where a rebuild looks for vectors that must go.
	ever map[string][]string
}

func newProjection() *projection {
	p := &projection{keywords: map[Tier]*pmem.KeywordIndex{}, kwTier: map[string]Tier{}, graph: pmem.NewGraph(),
		entities: map[string]int{}, entsOf: map[string][]string{}, vecAt: map[string]string{}, dirty: map[string]struct{}{},
		ever: map[string][]string{}}
	for _, t := range Tiers {
		p.keywords[t] = pmem.NewKeywordIndex()
	}
	return p
}

// indexText is what the keyword index holds of a memory: its content, the outcome
// and participants of an episode, and the URI of a perceptual memory.
func indexText(m *Memory) string {
	parts := []string{m.Content}
	if m.Outcome != "" {
		parts = append(parts, m.Outcome)
	}
	parts = append(parts, m.Participants...)
	if m.URI != "" {
		parts = append(parts, m.URI)
	}
	return strings.Join(parts, "\n")
}

// apply brings the in-memory projections in line with one event's effect and marks
// the vectors it changed.
func (p *projection) apply(st *state, eff effect) {
	for _, m := range eff.removed {
		p.drop(m.ID)
		p.dirty[m.ID] = struct{}{}
	}
	for _, id := range eff.put {
		m := st.mems[id]
		if m == nil {
			continue // put, then removed by the same event
		}
		if t, ok := p.kwTier[id]; ok && t != m.Tier {
			p.keywords[t].Remove(id)
		}
		if c := Collection(m.Tier, m.Modality); !slices.Contains(p.ever[id], c) {
			p.ever[id] = append(p.ever[id], c)
		}
		p.keywords[m.Tier].Put(id, indexText(m))
		p.kwTier[id] = m.Tier
		p.unmention(id)
		if m.Tier == Semantic {
			rels := make([]pmem.Relation, len(m.Relations))
			for i, r := range m.Relations {
				rels[i] = pmem.Relation{From: r.From, Type: r.Type, To: r.To}
			}
			p.graph.Put(id, m.Entities, rels)
			p.mention(id, m)
		} else {
			p.graph.Remove(id)
		}
		p.dirty[id] = struct{}{}
	}
}

// drop takes memory id out of the keyword index and the graph.
func (p *projection) drop(id string) {
	if t, ok := p.kwTier[id]; ok {
		p.keywords[t].Remove(id)
		delete(p.kwTier, id)
	}
	p.graph.Remove(id)
	p.unmention(id)
}

func (p *projection) mention(id string, m *Memory) {
	set := map[string]bool{}
	for _, e := range m.Entities {
		set[pmem.NormalizeEntity(e)] = true
	}
	for _, r := range m.Relations {
		set[pmem.NormalizeEntity(r.From)] = true
		set[pmem.NormalizeEntity(r.To)] = true
	}
	delete(set, "")
	ents := slices.Sorted(maps.Keys(set))
	for _, e := range ents {
		p.entities[e]++
	}
	p.entsOf[id] = ents
}

func (p *projection) unmention(id string) {
	for _, e := range p.entsOf[id] {
		if p.entities[e]--; p.entities[e] <= 0 {
			delete(p.entities, e)
		}
	}
	delete(p.entsOf, id)
}

// vectorItem is the store item of a live memory with a vector.
func (ns *Namespace) vectorItem(m *Memory) vectorstore.Item {
	return vectorstore.Item{ID: ns.vectorID(m.ID), Vector: m.Vector, Text: m.Content,
		Metadata: map[string]string{"ns": ns.name, "tier": string(m.Tier)}}
}

// vectorID is the store's ID of memory id's vector: collections are shared by the
// namespaces, and memory IDs are unique within one namespace only.
func (ns *Namespace) vectorID(id string) string { return ns.name + "/" + id }

// memoryID is the memory of a store item of the namespace ("" for another's).
func (ns *Namespace) memoryID(vectorID string) string {
	id, ok := strings.CutPrefix(vectorID, ns.name+"/")
	if !ok {
		return ""
	}
	return id
}

// wantAt is the collection that should hold memory id's vector ("" for none).
func (ns *Namespace) wantAt(id string) string {
	m := ns.st.mems[id]
	if m == nil || len(m.Vector) == 0 {
		return ""
	}
	return Collection(m.Tier, m.Modality)
}

// syncVectors brings the vector store in line with the fold: the vectors of the
// memories marked dirty are deleted from where they were and upserted where they
// belong. What fails stays marked, for the next operation to try again.
func (ns *Namespace) syncVectors(ctx context.Context) error {
	p := ns.pj
	if len(p.dirty) == 0 {
		return nil
	}
	dels := map[string][]string{}
	ups := map[string][]vectorstore.Item{}
	for _, id := range slices.Sorted(maps.Keys(p.dirty)) {
		want := ns.wantAt(id)
		if cur := p.vecAt[id]; cur != "" && cur != want {
			dels[cur] = append(dels[cur], ns.vectorID(id))
		}
		if want != "" {
			ups[want] = append(ups[want], ns.vectorItem(ns.st.mems[id]))
		}
	}
	for _, c := range slices.Sorted(maps.Keys(dels)) {
		if err := ns.deleteVectors(ctx, c, dels[c]); err != nil {
			return err
		}
		for _, vid := range dels[c] {
			delete(p.vecAt, ns.memoryID(vid))
		}
	}
	for _, c := range slices.Sorted(maps.Keys(ups)) {
		if err := ns.upsertVectors(ctx, c, ups[c]); err != nil {
			return err
		}
		for _, it := range ups[c] {
			p.vecAt[ns.memoryID(it.ID)] = c
		}
	}
	clear(p.dirty)
	return nil
}

// rebuildVectors makes the vector store hold exactly the fold's vectors after a
// namespace's first fold in this process: the store is persistent and may hold
// items from an earlier run, among them memories forgotten since, or vectors a
// process that died never wrote. Every memory the stream ever named is deleted from
// each collection it belonged to and should no longer be in, and every live one
// upserted, in batches of VectorBatch. It is idempotent.
func (ns *Namespace) rebuildVectors(ctx context.Context) error {
	p := ns.pj
	dels := map[string][]string{}
	ups := map[string][]vectorstore.Item{}
	for _, id := range slices.Sorted(maps.Keys(p.ever)) {
		want := ns.wantAt(id)
		for _, c := range p.ever[id] {
			if c != want {
				dels[c] = append(dels[c], ns.vectorID(id))
			}
		}
		if want != "" {
			ups[want] = append(ups[want], ns.vectorItem(ns.st.mems[id]))
		}
	}
	for _, c := range collections() {
		if err := ns.deleteVectors(ctx, c, dels[c]); err != nil {
			return err
		}
		if err := ns.upsertVectors(ctx, c, ups[c]); err != nil {
			return err
		}
	}
	clear(p.vecAt)
	for c, items := range ups {
		for _, it := range items {
			p.vecAt[ns.memoryID(it.ID)] = c
		}
	}
	clear(p.dirty)
	return nil
}

func (ns *Namespace) upsertVectors(ctx context.Context, coll string, items []vectorstore.Item) error {
	for batch := range slices.Chunk(items, VectorBatch) {
		if err := ns.cfg.Vectors.Upsert(ctx, coll, batch); err != nil {
			return fmt.Errorf("memory: %s: upserting %d vectors into %s: %w", ns.name, len(batch), coll, err)
		}
	}
	return nil
}

func (ns *Namespace) deleteVectors(ctx context.Context, coll string, ids []string) error {
	for batch := range slices.Chunk(ids, VectorBatch) {
		if err := ns.cfg.Vectors.Delete(ctx, coll, batch); err != nil {
			return fmt.Errorf("memory: %s: deleting %d vectors from %s: %w", ns.name, len(batch), coll, err)
		}
	}
	return nil
}
