package consolidator

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/troupe-run/troupe/memory"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// Kind is what a decision does to its memories.
type Kind string

// The kinds of decision, each applied through one Target method.
const (
	// Forget removes memories (Target.Forget).
	Forget Kind = "forget"
	// Merge folds duplicates into the memory kept (Target.Merge), which keeps their
	// provenance.
	Merge Kind = "merge"
	// Promote moves a working memory to the episodic tier (Target.Promote).
	Promote Kind = "promote"
	// Distill writes a semantic fact summarising a cluster of episodic memories,
	// linked to them as its sources (Target.Distill).
	Distill Kind = "distill"
	// Invalidate marks an older fact invalid because a newer one contradicts it
	// (Target.Invalidate); nothing is overwritten.
	Invalidate Kind = "invalidate"
)

// Decision is one change the consolidator makes, with its reason.
type Decision struct {
	Kind Kind `json:"kind"`
	// IDs are the memories acted on: forgotten, merged away, promoted, the sources
	// of a distillation (oldest first), the invalidated one.
	IDs []string `json:"ids"`
	// Into is, for Merge, the memory kept; for Distill, the semantic memory made
	// (once applied).
	Into string `json:"into,omitempty"`
	// By is, for Invalidate, the newer memory that contradicts IDs[0].
	By string `json:"by,omitempty"`
	// To is, for Promote, the tier the memory moves to.
	To memory.Tier `json:"to,omitempty"`
	// Reason says why, with the numbers: "importance 0.12 < 0.2 and age 45d > 30d".
	Reason string `json:"reason"`
	// Content and Importance are, for Distill, the fact and its importance. The
	// planner leaves Content empty: the model writes it (Consolidator).
	Content    string  `json:"content,omitempty"`
	Importance float64 `json:"importance,omitempty"`
	// Judge marks an Invalidate that is only a candidate: two semantically close
	// facts the model must judge contradictory before it is applied.
	Judge bool `json:"judge,omitempty"`
}

// String is the decision on one line: "forget m_1: importance 0.12 < 0.2 and age 45d > 30d".
func (d Decision) String() string {
	s := d.subject()
	if d.Kind == Distill && d.Content != "" {
		s += fmt.Sprintf(" (%q)", d.Content)
	}
	return s + ": " + d.Reason
}

// subject is the decision without its reason: "merge m_2 into m_1".
func (d Decision) subject() string {
	s := fmt.Sprintf("%s %s", d.Kind, strings.Join(d.IDs, ", "))
	switch {
	case d.Kind == Merge || d.Kind == Distill && d.Into != "":
		s += " into " + d.Into
	case d.Kind == Promote:
		s += " to " + string(d.To)
	case d.Kind == Invalidate:
		s += " by " + d.By
	}
	return s
}

// Plan decides what to change in a namespace holding mems at time now. It is pure and
// deterministic: the same memories (in any order) and policy give the same decisions,
// in the order they are to be applied:
//
//  1. forget memories less important than MinImportance and older than their tier's
//     MaxAge, least valuable first;
//  2. merge exact duplicates (same Hash), then semantic ones (cosine of their vectors,
//     calibrated from the floor of the tier's cosines, ≥ DuplicateThreshold), within a
//     tier and modality: the more important one is kept, then the older, then the
//     smaller ID;
//  3. promote working memories more important than PromoteAbove to episodic;
//  4. forget the least valuable memories of a tier past its Capacity;
//  5. invalidate older semantic facts contradicted by newer ones on a functional
//     relation, and propose pairs of close facts for the model to judge (Judge);
//  6. propose clusters of episodic memories not yet distilled (Distill, no Content).
//
// Each rule sees the memories the earlier ones left: a merged memory is not
// forgotten, a promoted one counts as episodic. Invalid memories (InvalidAt set) are
// history: only rule 1 applies to them, and they do not count towards a capacity.
// Value is importance × Recency(age), age counting from Timestamp (Created when
// Timestamp is zero); ties go to the older memory, then the smaller ID. Rule 4 ranks
// the working tier by importance × the working tier's own decay
// (pipelines/memory.WorkingTimeDecay) instead, as the namespace does when a write
// takes that tier past its capacity.
//
// Rules 2, 5 and 6 compare memories pairwise. Within a set of fewer than
// ExhaustiveBelow memories (a tier and modality for rules 2 and 6, the valid semantic
// facts for rule 5) every pair is compared. In larger sets, where that is quadratic,
// close pairs are found by locality-sensitive hashing and then compared exactly: the
// decisions stay deterministic and independent of the order of mems, but a pair right
// at a threshold is missed about once in a hundred (see ExhaustiveBelow). The work
// per memory is bounded there (near.go): in a bucket of thousands of alike memories
// (one template's), a memory is compared with its nearest neighbours in the bucket's
// order, not with all, so that a run plans in time linear in the namespace's size;
// a close pair this run misses, the next one may find.
func Plan(now time.Time, mems []memory.Memory, p Policy) []Decision {
	d, _ := PlanContext(context.Background(), now, mems, p)
	return d
}

// PlanContext is Plan that gives up when ctx is done: planning a large namespace
// takes a while, and a run abandoned (at its timeout) should not go on using a core.
// It then returns no decisions and ctx.Err().
func PlanContext(ctx context.Context, now time.Time, mems []memory.Memory, p Policy) ([]Decision, error) {
	d, _, err := planContext(ctx, now, mems, nil, nil, p)
	return d, err
}

// planContext is PlanContext for a namespace whose forgotten facts were distilled
// from the memory sets letGo (Forgetting): rule 6 takes their clusters as distilled.
// The questions whose answers are in answered (Settled), their memories unchanged,
// are not asked again; settled lists those answers.
func planContext(ctx context.Context, now time.Time, mems []memory.Memory, letGo [][]string, answered map[string]bool, p Policy) (_ []Decision, settled []string, _ error) {
	p = p.withDefaults()
	pl := newPlanner(ctx, now, mems, p)
	pl.letGo = letGo
	pl.answered = answered
	if len(answered) > 0 {
		pl.asked = make(map[string]bool, len(answered))
		for a := range answered {
			if i := strings.LastIndexByte(a, '@'); i > 0 {
				pl.asked[a[:i]] = true
			}
		}
	}
	for _, rule := range []func(){pl.forgetOld, pl.dedupe, pl.promote, pl.capacity, pl.conflicts, pl.clusters} {
		if pl.err == nil {
			pl.err = ctx.Err()
		}
		if pl.err != nil {
			return nil, nil, pl.err
		}
		rule()
	}
	if pl.err != nil {
		return nil, nil, pl.err
	}
	return pl.out, pl.stillSettled, nil
}

// planOld is the decisions of rule 1 alone (forgetting by age), which PlanContext
// makes first: one pass over mems, no pair compared. Run applies them before it
// plans the rest, so that a plan cut short by the run's timeout forgets all the same.
func planOld(now time.Time, mems []memory.Memory, p Policy) []Decision {
	pl := newPlanner(context.Background(), now, mems, p.withDefaults())
	pl.forgetOld()
	return pl.out
}

// item is a memory as the plan goes on: its tier after promotion, and whether an
// earlier decision removed it.
type item struct {
	m    *memory.Memory
	tier memory.Tier
	at   time.Time
	// norm is the squared norm of the memory's vector, sketch its hash (near.go),
	// once computed.
	norm   float64
	sketch *[sketchWords]uint64
	// nums is the memory's numbers (numbers), once computed; numsSet says so.
	nums    string
	numsSet bool
	// negs is how many negations the memory's content holds (negations), once
	// computed; negSet says so.
	negs   int
	negSet bool
	// words are the memory's words (pmem.TokenizeStem, unstemmed), named those
	// written with a capital (namesOutside), once computed.
	words, named map[string]bool
	gone         bool
	// invalidated is set by a conflict decision of this plan.
	invalidated bool
	// merged is set when a merge of this plan folds the memory into another, which
	// keeps its sources.
	merged bool
	// absorbed are the names (names) of the memories a merge of this plan folds
	// into this one.
	absorbed []string
}

// names are the IDs under which it may be the source of a fact: its own, those of
// the memories merged into it (its "memory" sources; absorbed in this plan).
func (it *item) names() []string {
	out := append([]string{it.m.ID}, it.absorbed...)
	for _, s := range it.m.Sources {
		if s.Kind == "memory" && s.ID != "" {
			out = append(out, s.ID)
		}
	}
	return out
}

func (it *item) valid() bool { return !it.gone && it.m.InvalidAt == nil && !it.invalidated }

type planner struct {
	ctx context.Context
	// err is ctx's error once a check found it done; steps counts the work since
	// the last check.
	err        error
	steps      int
	compared   int             // the cosines computed (tests count them)
	planes     map[int]*planes // by dimension
	now        time.Time
	p          Policy
	functional map[string]bool // normalised relation types
	items      []*item         // by ID
	out        []Decision
	letGo      [][]string // the sources of the facts forgotten (rule 6)
	// answered are the answers of questions that changed nothing (Settled);
	// stillSettled those of them this plan found holding (Report.Settled).
	answered     map[string]bool
	asked        map[string]bool // the questions of answered
	stillSettled []string
	// dupScales are the scales rule 2 calibrated the semantic tier's cosines by,
	// by modality: the conflict rule tells by them which pairs rule 2 took for
	// duplicates (a floor of its own, from the facts left after the merges, may
	// be lower, and calibrate a pair rule 2 kept as two facts above
	// DuplicateThreshold: then neither merged nor judged).
	dupScales map[memory.Modality]scale
}

func newPlanner(ctx context.Context, now time.Time, mems []memory.Memory, p Policy) *planner {
	ms := slices.Clone(mems)
	slices.SortStableFunc(ms, func(a, b memory.Memory) int { return cmp.Compare(a.ID, b.ID) })
	ms = slices.CompactFunc(ms, func(a, b memory.Memory) bool { return a.ID == b.ID })
	pl := &planner{ctx: ctx, now: now, p: p, functional: map[string]bool{}, items: make([]*item, len(ms))}
	for _, r := range p.FunctionalRelations {
		pl.functional[norm(r)] = true
	}
	for i := range ms {
		at := ms[i].Timestamp
		if at.IsZero() {
			at = ms[i].Created
		}
		pl.items[i] = &item{m: &ms[i], tier: ms[i].Tier, at: at, norm: dot(ms[i].Vector, ms[i].Vector)}
	}
	return pl
}

// checkEvery is how many steps (comparisons of two vectors, mostly) the planner
// takes between two checks of its context.
const checkEvery = 4096

// tick counts n steps of work and reports whether the plan goes on: false once its
// context is done.
func (pl *planner) tick(n int) bool {
	if pl.err != nil {
		return false
	}
	if pl.steps += n; pl.steps >= checkEvery {
		pl.steps = 0
		pl.err = pl.ctx.Err()
	}
	return pl.err == nil
}

// cos is the cosine of a's and b's vectors (cosine, with the norms computed once).
func (pl *planner) cos(a, b *item) (float64, bool) {
	if len(a.m.Vector) != len(b.m.Vector) || len(a.m.Vector) == 0 || a.norm == 0 || b.norm == 0 {
		return 0, false
	}
	pl.compared++
	return dot(a.m.Vector, b.m.Vector) / math.Sqrt(a.norm*b.norm), true
}

func (pl *planner) age(it *item) time.Duration { return pl.now.Sub(it.at) }

func (pl *planner) value(it *item) float64 { return Value(it.m.Importance, pl.age(it)) }

// olderFirst orders by time, then ID.
func olderFirst(a, b *item) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.m.ID, b.m.ID)
}

// keepFirst orders the memories a merge would rather keep first: more important,
// then older, then smaller ID.
func keepFirst(a, b *item) int {
	if c := cmp.Compare(b.m.Importance, a.m.Importance); c != 0 {
		return c
	}
	return olderFirst(a, b)
}

// leastValuableFirst orders by value, then older first.
func (pl *planner) leastValuableFirst(a, b *item) int { return byValue(pl.value)(a, b) }

// byValue orders by value, then older first.
func byValue(value func(*item) float64) func(a, b *item) int {
	return func(a, b *item) int {
		if c := cmp.Compare(value(a), value(b)); c != 0 {
			return c
		}
		return olderFirst(a, b)
	}
}

func (pl *planner) where(keep func(*item) bool) []*item {
	var out []*item
	for _, it := range pl.items {
		if keep(it) {
			out = append(out, it)
		}
	}
	return out
}

func (pl *planner) emit(d Decision) { pl.out = append(pl.out, d) }

// forgetOld is rule 1.
func (pl *planner) forgetOld() {
	if pl.p.MinImportance < 0 {
		return
	}
	old := pl.where(func(it *item) bool {
		limit, ok := pl.p.MaxAge[it.tier]
		return !it.gone && ok && limit > 0 && it.m.Importance < pl.p.MinImportance && pl.age(it) > limit
	})
	slices.SortFunc(old, pl.leastValuableFirst)
	for _, it := range old {
		it.gone = true
		imp, min := pair(it.m.Importance, pl.p.MinImportance, 2)
		age, limit := ages(span(pl.now, it.at), pl.p.MaxAge[it.tier])
		pl.emit(Decision{Kind: Forget, IDs: []string{it.m.ID},
			Reason: fmt.Sprintf("importance %s < %s and age %s > %s", imp, min, age, limit)})
	}
}

// groups splits the valid memories by tier and modality, groups in tier order then
// modality, members in keepFirst order.
func (pl *planner) groups(keep func(*item) bool) [][]*item {
	byKey := map[string][]*item{}
	var keys []string
	for _, it := range pl.items {
		if !it.valid() || !keep(it) {
			continue
		}
		k := fmt.Sprintf("%d/%s", slices.Index(memory.Tiers, it.tier), it.m.Modality)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], it)
	}
	slices.Sort(keys)
	out := make([][]*item, 0, len(keys))
	for _, k := range keys {
		g := byKey[k]
		slices.SortFunc(g, keepFirst)
		out = append(out, g)
	}
	return out
}

// duplicateByRule2 reports whether rule 2 calibrated a semantic pair of modality
// m at raw cosine raw to DuplicateThreshold or more (c, the conflict rule's own
// calibration, when rule 2 compared no vectors of that modality).
func (pl *planner) duplicateByRule2(m memory.Modality, raw, c float64) bool {
	if sc, ok := pl.dupScales[m]; ok {
		c = sc.of(raw)
	}
	return c >= pl.p.DuplicateThreshold
}

// dedupe is rule 2.
func (pl *planner) dedupe() {
	for _, g := range pl.groups(func(it *item) bool { return it.m.Hash != "" }) {
		kept := map[string]*item{}
		merged := map[*item][]string{}
		var keepers []*item
		for _, it := range g {
			k, ok := kept[it.m.Hash]
			if !ok {
				kept[it.m.Hash] = it
				continue
			}
			if merged[k] == nil {
				keepers = append(keepers, k)
			}
			merged[k] = append(merged[k], it.m.ID)
			it.gone, it.merged = true, true
			k.absorbed = append(k.absorbed, it.names()...)
		}
		for _, k := range keepers {
			pl.emit(Decision{Kind: Merge, Into: k.m.ID, IDs: merged[k],
				Reason: fmt.Sprintf("same content hash as %s", k.m.ID)})
		}
	}
	if pl.p.DuplicateThreshold < 0 {
		return
	}
	for _, g := range pl.groups(func(it *item) bool { return len(it.m.Vector) > 0 }) {
		// The cosines are calibrated from the group's floor: the median of its
		// pair cosines shrunk toward a prior (calibrate.go).
		sc := pl.dupScaleOf(g)
		if g[0].tier == memory.Semantic {
			if pl.dupScales == nil {
				pl.dupScales = map[memory.Modality]scale{}
			}
			pl.dupScales[g[0].m.Modality] = sc
		}
		near := pl.near(g, sc.raw(pl.p.DuplicateThreshold))
		for i, k := range g {
			if pl.err != nil {
				return
			}
			if k.gone {
				continue
			}
			var ids []string
			var cos []float64
			near.each(i, i+1, func(j int) bool { return g[j].gone }, func(j int, c float64) {
				if it := g[j]; sc.of(c) >= pl.p.DuplicateThreshold && !readOtherwise(k, it) && !pl.contradict(k, it) && !vectorSaysNothing(k, it) {
					it.gone, it.merged = true, true
					k.absorbed = append(k.absorbed, it.names()...)
					ids = append(ids, it.m.ID)
					cos = append(cos, c)
				}
			})
			if len(ids) > 0 {
				pl.emit(Decision{Kind: Merge, Into: k.m.ID, IDs: ids,
					Reason: fmt.Sprintf("%s with %s", sc.reason(cos, pl.p.DuplicateThreshold), k.m.ID)})
			}
		}
	}
}

// vectorSaysNothing reports whether a's and b's vectors are the same numbers while
// their texts share no word (pmem.Tokenize: no stopword): a real embedder gives
// two texts one vector only when they read the same to it, so this is an embedder
// answering one vector whatever it is given (a broken server, a caching proxy),
// and the cosine of 1 is no evidence that they are duplicates. Merging on it
// merged unrelated facts into one, the others then found by no search. Texts that
// share a word (two long ones cut at the embedder's limit alike) merge as before.
func vectorSaysNothing(a, b *item) bool {
	if !slices.Equal(a.m.Vector, b.m.Vector) {
		return false
	}
	words := map[string]bool{}
	for _, w := range pmem.Tokenize(a.m.Content) {
		words[w] = true
	}
	for _, w := range pmem.Tokenize(b.m.Content) {
		if words[w] {
			return false
		}
	}
	return true
}

// readOtherwise reports whether a's and b's texts, however close their vectors,
// say other things: they hold other numbers (numbersDiffer), other numbers of
// negations (negationDiffers), or other names (namesDiffer). Rule 2 does not merge
// such a pair; among facts, it goes to the conflict judgement.
func readOtherwise(a, b *item) bool {
	return numbersDiffer(a, b) || negationDiffers(a, b) || namesDiffer(a, b)
}

// namesDiffer reports whether each of a's and b's texts names someone or something
// (a word written with a capital, no stopword) that the other has in no case: the
// offline hashing embedder reads "… her manager is Carol from the billing team" and
// "… is Dave …" nearly alike (cosine 0.94 in a sentence of fifteen words), yet they
// are two facts. A text that names more than the other ("… in Lisbon") or writes a
// word with a capital the other writes without ("Billing") is not another fact by
// its names.
func namesDiffer(a, b *item) bool { return a.namesOutside(b) && b.namesOutside(a) }

// namesOutside reports whether it names (a word with a capital) something that o's words lack.
func (it *item) namesOutside(o *item) bool {
	it.readWords()
	o.readWords()
	for n := range it.named {
		if !o.words[n] {
			return true
		}
	}
	return false
}

// readWords sets it.words and it.named, once.
func (it *item) readWords() {
	if it.words != nil {
		return
	}
	it.words, it.named = map[string]bool{}, map[string]bool{}
	for _, w := range pmem.TokenizeStem(it.m.Content, nil) {
		it.words[w] = true
	}
	for _, w := range strings.FieldsFunc(it.m.Content, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' }) {
		// A name in single quotes ('Phoenix') is a name: its capital is after the quote.
		if r, _ := utf8.DecodeRuneInString(strings.TrimLeft(w, "'")); unicode.IsUpper(r) {
			for _, n := range pmem.TokenizeStem(w, nil) {
				it.named[n] = true
			}
		}
	}
}

// negationDiffers reports whether a's and b's texts hold other numbers of
// negations (negations). The offline hashing embedder reads a long sentence and its
// negation nearly alike (a fact of fifteen words and the same with "not": cosine
// 0.95, over a floor of about 0 in a tier of unrelated facts), yet they are two
// facts, the newer often the correction of the older: merging them folded "she is
// not allergic to peanuts" into "she is allergic to peanuts", found by no search.
// The counts are compared, not their parity: "he doesn't drink coffee and doesn't
// eat meat" denies two things, not none, and Spanish "no come nada" or Portuguese
// "não come nada" negates once in two words; read as even, each merged with the
// text that affirms.
func negationDiffers(a, b *item) bool { return a.negations() != b.negations() }

// negations returns how many negations the memory's content holds
// (pmem.Negations), once.
func (it *item) negations() int {
	if !it.negSet {
		it.negs, it.negSet = pmem.Negations(it.m.Content), true
	}
	return it.negs
}

// numbersDiffer reports whether a's and b's texts hold other numbers (a date, an
// amount, a room, a version: each number (see numbers), in any order, counted once). An
// embedder reads "the flight is on May 3" and "the flight is on May 5" nearly alike
// (multilingual-e5-small: cosine 0.96), yet they are two facts, the newer often the
// correction of the older: merging them kept the older (by importance, then age)
// and folded the correction into it, found by no search. Such a pair is left to
// the conflict rule (the model judges it) instead.
func numbersDiffer(a, b *item) bool {
	return a.numbers() != b.numbers()
}

// numbers returns the numbers of the memory's content (pmem.Numbers), once.
func (it *item) numbers() string {
	if !it.numsSet {
		it.nums, it.numsSet = pmem.Numbers(it.m.Content), true
	}
	return it.nums
}

// promote is rule 3.
func (pl *planner) promote() {
	if pl.p.PromoteAbove < 0 {
		return
	}
	up := pl.where(func(it *item) bool {
		return it.valid() && it.tier == memory.Working && it.m.Importance > pl.p.PromoteAbove
	})
	slices.SortFunc(up, keepFirst)
	for _, it := range up {
		it.tier = memory.Episodic
		imp, thr := pair(it.m.Importance, pl.p.PromoteAbove, 2)
		pl.emit(Decision{Kind: Promote, IDs: []string{it.m.ID}, To: memory.Episodic,
			Reason: fmt.Sprintf("importance %s > %s", imp, thr)})
	}
}

// capacity is rule 4.
func (pl *planner) capacity() {
	for _, t := range memory.Tiers {
		limit := pl.p.Capacity[t]
		if limit <= 0 {
			continue
		}
		in := pl.where(func(it *item) bool { return it.valid() && it.tier == t })
		over := len(in) - limit
		if over <= 0 {
			continue
		}
		decay, name := Recency, "recency"
		if t == memory.Working {
			// As the namespace ranks its working memories when a write takes the
			// tier past working_capacity: the two must agree on which go first.
			decay, name = pmem.WorkingTimeDecay, "working decay"
		}
		value := func(it *item) float64 { return it.m.Importance * decay(pl.age(it)) }
		slices.SortFunc(in, byValue(value))
		for _, it := range in[:over] {
			it.gone = true
			pl.emit(Decision{Kind: Forget, IDs: []string{it.m.ID},
				Reason: fmt.Sprintf("%s holds %d > capacity %d: value %s (importance %s × %s %s) is among the %d lowest",
					t, len(in), limit, num(value(it), 3), num(it.m.Importance, 2), name, num(decay(pl.age(it)), 2), over)})
		}
	}
}

// contradict reports whether a and b give different values to a functional relation
// of one subject: close as they may be, they are a conflict (rule 5), not duplicates.
func (pl *planner) contradict(a, b *item) bool {
	for _, x := range a.m.Relations {
		if !pl.functional[norm(x.Type)] {
			continue
		}
		for _, y := range b.m.Relations {
			if norm(x.Type) == norm(y.Type) && strings.EqualFold(strings.TrimSpace(x.From), strings.TrimSpace(y.From)) &&
				!strings.EqualFold(strings.TrimSpace(x.To), strings.TrimSpace(y.To)) {
				return true
			}
		}
	}
	return false
}

// fact is one functional relation of a semantic memory.
type fact struct {
	it       *item
	from, to string // as written
	toKey    string // normalised
}

// conflicts is rule 5.
func (pl *planner) conflicts() {
	semantic := pl.where(func(it *item) bool { return it.valid() && it.tier == memory.Semantic })
	byKey := map[string][]fact{}
	var keys []string
	for _, it := range semantic {
		for _, r := range it.m.Relations {
			typ := norm(r.Type)
			if !pl.functional[typ] || strings.TrimSpace(r.From) == "" {
				continue
			}
			k := strings.ToLower(strings.TrimSpace(r.From)) + "\x00" + typ
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], fact{it: it, from: r.From, to: r.To, toKey: strings.ToLower(strings.TrimSpace(r.To))})
		}
	}
	slices.Sort(keys)
	judged := map[[2]*item]bool{}
	for _, k := range keys {
		fs := byKey[k]
		// Newest first: it holds the value now.
		slices.SortStableFunc(fs, func(a, b fact) int { return newerFirst(a.it, b.it) })
		typ := k[strings.IndexByte(k, 0)+1:]
		newest := fs[0]
		var older []fact
		for _, f := range fs[1:] {
			if f.it == newest.it || f.toKey == newest.toKey || f.it.invalidated {
				continue
			}
			older = append(older, f)
		}
		slices.SortStableFunc(older, func(a, b fact) int { return olderFirst(a.it, b.it) })
		for _, f := range older {
			if f.it.invalidated {
				continue
			}
			f.it.invalidated = true
			judged[[2]*item{f.it, newest.it}] = true
			pl.emit(Decision{Kind: Invalidate, IDs: []string{f.it.m.ID}, By: newest.it.m.ID,
				Reason: fmt.Sprintf("newer %s (%s) says %s %s %s, this (%s) says %s %s %s: %s is functional",
					newest.it.m.ID, date(newest.it.at), newest.from, typ, newest.to,
					date(f.it.at), f.from, typ, f.to, typ)})
		}
	}
	pl.judgements(semantic, judged)
}

// judgements proposes the closest pairs of valid semantic facts (below the duplicate
// threshold) for the model to judge, each older fact once.
func (pl *planner) judgements(semantic []*item, done map[[2]*item]bool) {
	if pl.p.ConflictThreshold < 0 || pl.p.MaxJudgements == 0 {
		return
	}
	type cand struct {
		older, newer *item
		cos          float64 // calibrated (the order of candidates)
		raw          float64
	}
	closer := func(a, b cand) int {
		if c := cmp.Compare(b.cos, a.cos); c != 0 {
			return c
		}
		if c := olderFirst(a.older, b.older); c != 0 {
			return c
		}
		return olderFirst(a.newer, b.newer)
	}
	// Each older fact is judged once, against its closest newer one: only that
	// candidate of it is kept, not every close pair (thousands of nearly identical
	// facts are millions of pairs).
	best := map[*item]cand{}
	facts := slices.DeleteFunc(slices.Clone(semantic), func(it *item) bool { return !it.valid() || len(it.m.Vector) == 0 })
	// The band [ConflictThreshold, DuplicateThreshold) is of cosines calibrated from
	// the floor of the facts of each modality (calibrate.go), as rule 2's
	// duplicates are: a search at the least raw threshold of the modalities finds
	// the candidates of every one.
	scales := map[memory.Modality]scale{}
	search := 1.0
	for _, f := range facts {
		if _, ok := scales[f.m.Modality]; ok {
			continue
		}
		sc := pl.scaleOf(slices.DeleteFunc(slices.Clone(facts), func(it *item) bool { return it.m.Modality != f.m.Modality }))
		scales[f.m.Modality] = sc
		search = min(search, sc.raw(pl.p.ConflictThreshold))
	}
	near := pl.near(facts, search)
	for i, a := range facts {
		if pl.err != nil {
			return
		}
		sc := scales[a.m.Modality]
		near.each(i, i+1, func(j int) bool { return a.m.Modality != facts[j].m.Modality }, func(j int, raw float64) {
			c := sc.of(raw)
			if c < pl.p.ConflictThreshold {
				return // below the band: not close enough to judge
			}
			if pl.p.DuplicateThreshold >= 0 && pl.duplicateByRule2(a.m.Modality, raw, c) && !readOtherwise(a, facts[j]) {
				return // a duplicate by rule 2's measure, which it kept for a reason of its own
			}
			older, newer := a, facts[j]
			if newerFirst(older, newer) < 0 {
				older, newer = newer, older
			}
			if done[[2]*item{older, newer}] {
				return
			}
			if pl.settled(Decision{Kind: Invalidate, IDs: []string{older.m.ID}, By: newer.m.ID}) {
				return // judged compatible as they are: the next closest newer fact is a question
			}
			if b, ok := best[older]; !ok || closer(cand{older, newer, c, raw}, b) < 0 {
				best[older] = cand{older, newer, c, raw}
			}
		})
	}
	cs := slices.SortedFunc(maps.Values(best), closer)
	for n, c := range cs {
		if n == pl.p.MaxJudgements {
			break
		}
		pl.emit(Decision{Kind: Invalidate, IDs: []string{c.older.m.ID}, By: c.newer.m.ID, Judge: true,
			Reason: fmt.Sprintf("%s with newer %s", scales[c.older.m.Modality].reason([]float64{c.raw}, pl.p.ConflictThreshold), c.newer.m.ID)})
	}
}

// clusters is rule 6.
func (pl *planner) clusters() {
	if pl.p.ClusterThreshold < 0 {
		return
	}
	// The source sets of the semantic memories: a cluster they cover is distilled.
	// Those of a memory merged away count: the memory it goes into keeps them.
	var distilled []map[string]bool
	for _, it := range pl.items {
		if it.gone && !it.merged || it.tier != memory.Semantic {
			continue
		}
		set := map[string]bool{}
		for _, s := range it.m.Sources {
			if s.Kind == "memory" && s.ID != "" {
				set[s.ID] = true
			}
		}
		if len(set) > 0 {
			distilled = append(distilled, set)
		}
	}
	// And those of the facts forgotten: a cluster distilled into a fact that its
	// user (or a forgetting rule) let go is not distilled again.
	for _, ids := range pl.letGo {
		set := make(map[string]bool, len(ids))
		for _, id := range ids {
			set[id] = true
		}
		distilled = append(distilled, set)
	}
	// holding lists, for a memory, the source sets it is in: a set covering a
	// cluster holds its first member. A member is in a set under any of its names:
	// an episode merged into another is a source of a fact under its own ID, which
	// the memory it went into keeps as a source (before, the cluster of that memory
	// was distilled again, and a fact its user let go came back).
	holding := map[string][]map[string]bool{}
	for _, set := range distilled {
		for id := range set {
			holding[id] = append(holding[id], set)
		}
	}
	in := func(set map[string]bool, it *item) bool {
		return slices.ContainsFunc(it.names(), func(id string) bool { return set[id] })
	}
	covered := func(members []*item) bool {
		for _, name := range members[0].names() {
			for _, set := range holding[name] {
				all := true
				for _, m := range members {
					all = all && in(set, m)
				}
				if all {
					return true
				}
			}
		}
		return false
	}
	for _, g := range pl.groups(func(it *item) bool { return it.tier == memory.Episodic && len(it.m.Vector) > 0 }) {
		present := map[string]bool{}
		for _, it := range g {
			for _, n := range it.names() {
				present[n] = true
			}
		}
		// splits reports whether it, with these others, would split a source set
		// it is in: a cluster distilled already joins a new one whole (the cluster
		// grew) or not at all. A cut run planned again with a memory come since
		// gathered part of a distilled cluster with the newcomer, and the rest
		// with episodes the run had not reached: each was distilled a second time.
		// A source no longer in the tier does not count.
		splits := func(it *item, with map[string]bool) bool {
			for _, n := range it.names() {
				for _, set := range holding[n] {
					for id := range set {
						if present[id] && !with[id] {
							return true
						}
					}
				}
			}
			return false
		}
		// whole keeps of members (the seed first) those that split no source set,
		// until none does; false if the seed does.
		whole := func(members []*item) ([]*item, bool) {
			for {
				with := map[string]bool{}
				for _, m := range members {
					for _, n := range m.names() {
						with[n] = true
					}
				}
				kept := members[:0:0]
				for _, m := range members {
					if !splits(m, with) {
						kept = append(kept, m)
					}
				}
				if len(kept) == 0 || kept[0] != members[0] {
					return nil, false
				}
				if len(kept) == len(members) {
					return kept, true
				}
				members = kept
			}
		}
		taken := make([]bool, len(g))
		// Within a calibrated cosine of the seed (calibrate.go), as rule 2's
		// duplicates: with an embedder whose unrelated texts score 0.8 every
		// memory of the tier was within the raw threshold of every other.
		sc := pl.scaleOf(g)
		near := pl.near(g, sc.raw(pl.p.ClusterThreshold))
		for i, seed := range g {
			if pl.err != nil {
				return
			}
			if taken[i] {
				continue
			}
			type peer struct {
				it  *item
				at  int
				cos float64
			}
			var ns []peer
			near.each(i, 0, func(j int) bool { return taken[j] }, func(j int, c float64) {
				if sc.of(c) >= pl.p.ClusterThreshold {
					ns = append(ns, peer{g[j], j, c})
				}
			})
			if len(ns)+1 < pl.p.MinCluster {
				continue
			}
			slices.SortStableFunc(ns, func(a, b peer) int { return cmp.Compare(b.cos, a.cos) })
			keep := func() bool {
				all := []*item{seed}
				for _, n := range ns {
					all = append(all, n.it)
				}
				kept, ok := whole(all)
				if !ok {
					return false
				}
				ns = slices.DeleteFunc(ns, func(n peer) bool { return !slices.Contains(kept, n.it) })
				return len(ns)+1 >= pl.p.MinCluster
			}
			if !keep() {
				continue
			}
			if len(ns) > pl.p.MaxCluster-1 {
				ns = ns[:pl.p.MaxCluster-1]
				if !keep() {
					continue
				}
			}
			members := []*item{seed}
			lowest, imp := 1.0, seed.m.Importance
			for _, n := range ns {
				members = append(members, n.it)
				lowest = math.Min(lowest, n.cos)
				imp = math.Max(imp, n.it.m.Importance)
			}
			slices.SortFunc(members, olderFirst)
			ids := make([]string, len(members))
			for j, m := range members {
				ids[j] = m.m.ID
			}
			// A cluster distilled already keeps its members, as when it was
			// proposed: left free, they gathered with the memories not yet
			// distilled into clusters of their own (a run cut short after some
			// of its distillations, planned again, distilled them twice).
			taken[i] = true
			for _, n := range ns {
				taken[n.at] = true
			}
			if covered(members) {
				continue
			}
			if pl.settled(Decision{Kind: Distill, IDs: ids}) {
				continue // the model found no durable fact in them as they are
			}
			pl.emit(Decision{Kind: Distill, IDs: ids, Importance: imp,
				Reason: fmt.Sprintf("%d episodic memories within %s of %s, not yet distilled",
					len(ids), sc.reason([]float64{lowest}, pl.p.ClusterThreshold), seed.m.ID)})
		}
	}
}

// newerFirst orders by time, newest first, then the larger ID first.
func newerFirst(a, b *item) int { return olderFirst(b, a) }

func norm(relType string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(relType)), " ", "_")
}

func date(t time.Time) string { return t.UTC().Format("2006-01-02") }

// dot is the dot product of a and b, of the same length, in float64.
func dot(a, b []float32) float64 {
	b = b[:len(a)]
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}
