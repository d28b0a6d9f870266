package memory

import (
	"slices"
	"strings"

	"github.com/troupe-run/troupe/internal/cjk"
	"golang.org/x/text/unicode/norm"
)

// Relation is a typed edge between two entities, say {alice, works_at, acme}. Graph
// and ExtractEntities normalise entity names with NormalizeEntity.
type Relation struct {
	From, Type, To string
}

// NormalizeEntity is the form entity names are stored and compared in: NFC, narrow
// (cjk.Narrow), lowercased, trimmed, inner whitespace collapsed to one space.
func NormalizeEntity(name string) string {
	return strings.Join(strings.Fields(strings.ToLower(norm.NFC.String(cjk.Narrow(name)))), " ")
}

// MaxGraphHops is how far Graph.Score looks from a query entity.
const MaxGraphHops = 2

// Graph is the semantic tier's entity graph: which memories mention which entity, and
// which entities are related (relations are directed, but adjacency for hops is
// undirected). It keeps each memory's entities and relations, and counts how many
// relations support each edge, so Remove leaves nothing behind.
//
// The graph is not safe for concurrent use; its owner serialises access.
type Graph struct {
	mentions  map[string]map[string]struct{} // entity → memories that mention it
	adjacent  map[string]map[string]int      // entity → neighbour → relations supporting the edge
	relations map[Relation]int               // relation → memories that state it
	memories  map[string]graphMemory
}

type graphMemory struct {
	entities  []string   // distinct, sorted, relation endpoints included
	relations []Relation // distinct
}

// NewGraph returns an empty graph.
func NewGraph() *Graph {
	return &Graph{
		mentions:  map[string]map[string]struct{}{},
		adjacent:  map[string]map[string]int{},
		relations: map[Relation]int{},
		memories:  map[string]graphMemory{},
	}
}

// Put records that memory id mentions entities and states relations, replacing what
// id held before. Names are normalised; empty names and relations with an empty end
// are dropped; a relation's ends count as entities the memory mentions. A relation
// from an entity to itself is kept but adds no edge.
func (g *Graph) Put(id string, entities []string, relations []Relation) {
	g.Remove(id)
	var m graphMemory
	stated := map[Relation]bool{}
	for _, r := range relations {
		r = Relation{From: NormalizeEntity(r.From), Type: NormalizeEntity(r.Type), To: NormalizeEntity(r.To)}
		if r.From == "" || r.To == "" || stated[r] {
			continue
		}
		stated[r] = true
		m.relations = append(m.relations, r)
		m.entities = append(m.entities, r.From, r.To)
	}
	for _, e := range entities {
		if e = NormalizeEntity(e); e != "" {
			m.entities = append(m.entities, e)
		}
	}
	slices.Sort(m.entities)
	m.entities = slices.Compact(m.entities)
	if len(m.entities) == 0 {
		return
	}
	g.memories[id] = m
	for _, e := range m.entities {
		set := g.mentions[e]
		if set == nil {
			set = map[string]struct{}{}
			g.mentions[e] = set
		}
		set[id] = struct{}{}
	}
	for _, r := range m.relations {
		g.relations[r]++
		if r.From != r.To {
			g.link(r.From, r.To, 1)
			g.link(r.To, r.From, 1)
		}
	}
}

// link adds delta to the edge count from a to b, deleting what falls to zero.
func (g *Graph) link(a, b string, delta int) {
	n := g.adjacent[a]
	if n == nil {
		n = map[string]int{}
		g.adjacent[a] = n
	}
	n[b] += delta
	if n[b] <= 0 {
		delete(n, b)
	}
	if len(n) == 0 {
		delete(g.adjacent, a)
	}
}

// Remove forgets memory id: its mentions, and the relations only it stated (with
// their edges), entities no other memory mentions. Removing an unknown id does nothing.
func (g *Graph) Remove(id string) {
	m, ok := g.memories[id]
	if !ok {
		return
	}
	delete(g.memories, id)
	for _, e := range m.entities {
		delete(g.mentions[e], id)
		if len(g.mentions[e]) == 0 {
			delete(g.mentions, e)
		}
	}
	for _, r := range m.relations {
		if g.relations[r]--; g.relations[r] <= 0 {
			delete(g.relations, r)
		}
		if r.From != r.To {
			g.link(r.From, r.To, -1)
			g.link(r.To, r.From, -1)
		}
	}
}

// Entities is the number of distinct entities some memory mentions.
func (g *Graph) Entities() int { return len(g.mentions) }

// Relations is the number of distinct relations some memory states.
func (g *Graph) Relations() int { return len(g.relations) }

// Edges is the number of distinct undirected edges between different entities.
func (g *Graph) Edges() int {
	n := 0
	for _, nb := range g.adjacent {
		n += len(nb)
	}
	return n / 2
}

// Score is the graph score of memory id for a query's entities, in [0,1]. Each
// distinct query entity q (normalised, empty names dropped) earns
//
//	1    if the memory mentions q,
//	0.5  else if the memory mentions an entity one relation away from q,
//	0.25 else if the memory mentions an entity two relations away from q,
//	0    otherwise,
//
// and the score is the mean over the query entities. Equivalently score =
// direct_share + 0.5*one_hop_share + 0.25*two_hop_share, each share being the
// fraction of query entities whose nearest mention in the memory is at that
// distance. An unknown memory or an empty query scores 0.
func (g *Graph) Score(queryEntities []string, id string) float64 {
	m, ok := g.memories[id]
	q := normalizeSet(queryEntities)
	if !ok || len(q) == 0 {
		return 0
	}
	sum := 0.0
	for _, e := range q {
		d := g.distance(e, m.entities, MaxGraphHops)
		if d >= 0 {
			sum += hopWeight(d)
		}
	}
	return sum / float64(len(q))
}

// hopWeight is 1 for a direct mention and halves with every hop.
func hopWeight(d int) float64 { return 1 / float64(int(1)<<d) }

// distance is the number of hops from entity from to the nearest of targets (sorted),
// or -1 if none is within maxHops.
func (g *Graph) distance(from string, targets []string, maxHops int) int {
	has := func(e string) bool { _, ok := slices.BinarySearch(targets, e); return ok }
	if has(from) {
		return 0
	}
	seen := map[string]bool{from: true}
	frontier := []string{from}
	for d := 1; d <= maxHops && len(frontier) > 0; d++ {
		var next []string
		for _, e := range frontier {
			for nb := range g.adjacent[e] {
				if seen[nb] {
					continue
				}
				if has(nb) {
					return d
				}
				seen[nb] = true
				next = append(next, nb)
			}
		}
		frontier = next
	}
	return -1
}

// Scorer returns Score(queryEntities, id) as a function of id, for scoring many
// memories against one query: the hops from each query entity are found once (one
// walk of at most MaxGraphHops relations per query entity), and each call then
// looks up the memory's entities.
func (g *Graph) Scorer(queryEntities []string) func(id string) float64 {
	dists := g.hops(normalizeSet(queryEntities), MaxGraphHops)
	return func(id string) float64 {
		m, ok := g.memories[id]
		if !ok || len(dists) == 0 {
			return 0
		}
		return scoreFrom(dists, m.entities)
	}
}

// hops returns, per query entity, the distance of every entity within maxHops
// relations of it (itself at 0).
func (g *Graph) hops(q []string, maxHops int) []map[string]int {
	out := make([]map[string]int, len(q))
	for i, e := range q {
		dist := map[string]int{e: 0}
		frontier := []string{e}
		for d := 1; d <= maxHops && len(frontier) > 0; d++ {
			var next []string
			for _, x := range frontier {
				for nb := range g.adjacent[x] {
					if _, ok := dist[nb]; !ok {
						dist[nb] = d
						next = append(next, nb)
					}
				}
			}
			frontier = next
		}
		out[i] = dist
	}
	return out
}

// scoreFrom is Score of a memory mentioning entities, from the hops of the query
// entities.
func scoreFrom(dists []map[string]int, entities []string) float64 {
	sum := 0.0
	for _, dist := range dists {
		best := -1
		for _, e := range entities {
			if d, ok := dist[e]; ok && (best < 0 || d < best) {
				best = d
			}
		}
		if best >= 0 {
			sum += hopWeight(best)
		}
	}
	return sum / float64(len(dists))
}

// Candidates returns up to k memories (k <= 0: all) that mention an entity within
// maxHops relations of a query entity (maxHops is clamped to [0, MaxGraphHops]),
// scored by Score, best first, ties by ID ascending. Raw holds the same score. It
// lets the semantic tier find memories its vector search missed.
//
// It gathers the memories by distance: those mentioning a query entity first, then
// those one relation away, and so on. A memory not gathered before distance d
// scores at most hopWeight(d) (each query entity earns it at most that), so once k
// gathered memories score more, the farther ones cannot enter the top k and are
// not looked at: in a large graph, two hops from a common entity reach most of it.
func (g *Graph) Candidates(queryEntities []string, maxHops, k int) []Scored {
	maxHops = max(0, min(maxHops, MaxGraphHops))
	q := normalizeSet(queryEntities)
	if len(q) == 0 {
		return nil
	}
	dists := g.hops(q, MaxGraphHops) // Score looks MaxGraphHops far
	levels := make([][]string, maxHops+1)
	least := map[string]int{} // entity → its distance from the nearest query entity
	for _, dist := range dists {
		for e, d := range dist {
			if l, ok := least[e]; d <= maxHops && (!ok || d < l) {
				least[e] = d
			}
		}
	}
	for e, d := range least {
		levels[d] = append(levels[d], e)
	}
	seen := map[string]bool{}
	var out []Scored
	for d, entities := range levels {
		if d > 0 && k > 0 && len(out) >= k {
			slices.SortFunc(out, byScore)
			if out[k-1].Score > hopWeight(d) {
				break
			}
		}
		for _, e := range entities {
			for id := range g.mentions[e] {
				if !seen[id] {
					seen[id] = true
					s := scoreFrom(dists, g.memories[id].entities)
					out = append(out, Scored{ID: id, Score: s, Raw: s})
				}
			}
		}
	}
	slices.SortFunc(out, byScore)
	if k > 0 && len(out) > k {
		out = slices.Clip(out[:k])
	}
	return out
}

// normalizeSet normalises names, drops empty ones and returns them sorted and distinct.
func normalizeSet(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n = NormalizeEntity(n); n != "" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
