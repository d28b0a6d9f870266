package context

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
)

// ErrInvalidItems is wrapped by Build's errors about its input.
var ErrInvalidItems = errors.New("context: invalid items")

// Reasons of a dropped item (messages.ContextItem.Reason).
const (
	ReasonBudget   = "budget"
	ReasonGroup    = "group"
	ReasonReplaced = "replaced by "
)

// where an item is rendered.
type placement int

const (
	placeSystem   placement = iota // the system message (Role & Policies, stable State)
	placeConv                      // the conversation, as a chat message
	placeBriefing                  // the briefing after the conversation
)

// cand is an item in the making.
type cand struct {
	Item
	idx     int // index in the input
	score   float64
	raw     float64 // the score a pinned item would have had
	group   int     // index into groups
	kind    int     // the rank of its Kind among the build's kinds (scoreAll)
	place   placement
	out     bool // replaced or older: not a candidate
	kept    bool
	from    int    // tokens before a cut; 0 when not truncated
	orig    string // the text before a cut
	dropped string
}

type group struct {
	members []int // indices into cands, in input order
	pinned  bool
	stable  bool // a member is a Stable State item: packed first
	score   float64
	pos     int // the newest member's Pos
	first   int // the first member's input index
}

// Build selects, structures and compresses items into a context (see the package
// comment). It fails only on invalid input: an empty or duplicate ID, an unknown
// section, or no Tokenizer for an item to count.
func (b Builder) Build(items []Item) (*Context, error) {
	ctx := new(Context)
	if err := b.build(items, ctx); err != nil {
		return nil, err
	}
	return ctx, nil
}

// BuildMessages builds the context of items as Build does and returns its messages
// (Context.Messages) and its report, without the context's items: a caller that
// sends the messages and keeps the report spares the items' copy (a build's kept
// items are rendered from a buffer reused from build to build).
func (b Builder) BuildMessages(items []Item) ([]messages.ChatMessage, *messages.ContextReport, error) {
	buf := keptPool.Get().(*[]Item)
	ctx := Context{Items: (*buf)[:0]}
	err := b.build(items, &ctx)
	var msgs []messages.ChatMessage
	if err == nil {
		msgs = ctx.Messages()
	}
	clear(ctx.Items[:cap(ctx.Items)]) // the buffer keeps no text or message
	if cap(ctx.Items) <= maxPooledItems {
		*buf = ctx.Items[:0]
		keptPool.Put(buf)
	}
	if err != nil {
		return nil, nil, err
	}
	// The report alone goes to the heap, not the context around it (a size class
	// smaller).
	rep := new(messages.ContextReport)
	*rep = ctx.Report
	return msgs, rep, nil
}

// keptPool holds the buffers BuildMessages renders the kept items from.
var keptPool = sync.Pool{New: func() any { return new([]Item) }}

// build builds the context of items into ctx; ctx.Items, when not nil, is the
// buffer the kept items are put in.
func (b Builder) build(items []Item, ctx *Context) error {
	o := b.Options.withDefaults()
	sp := scratchPool.Get().(*scratchSpace)
	defer sp.release()
	cs := sp.cands(len(items))
	byID := idIndex{cs: cs}
	if len(items) > smallBuild {
		byID.m = make(map[string]int, len(items))
	}
	for i, it := range items {
		if it.ID == "" {
			return fmt.Errorf("%w: item %d has no ID", ErrInvalidItems, i)
		}
		if _, dup := byID.find(it.ID, i); dup {
			return fmt.Errorf("%w: two items have the ID %q", ErrInvalidItems, it.ID)
		}
		if it.Section < 0 || it.Section >= numSections {
			return fmt.Errorf("%w: item %q has unknown section %d", ErrInvalidItems, it.ID, it.Section)
		}
		if byID.m != nil {
			byID.m[it.ID] = i
		}
		cs[i] = cand{Item: it, idx: i, place: placeOf(it)}
	}
	rep := messages.ContextReport{Window: o.Window, Reserved: o.ReservedOutput}

	// Replacements: a summary or a masked observation stands for the items it names.
	for i := range cs {
		for _, id := range cs[i].Replaces {
			if j, ok := byID.find(id, len(cs)); ok && j != i && cs[j].dropped == "" {
				cs[j].out, cs[j].dropped = true, ReasonReplaced+cs[i].ID
			}
		}
	}
	gs := groupsOf(cs, sp)
	// A group that lost a member to an item outside it would send a call without
	// its results, or results without their call: it goes whole.
	for gi := range gs {
		g := &gs[gi]
		broken := false
		for _, m := range g.members {
			if cs[m].out && cs[m].dropped != "" && !replacedWithin(cs, byID, m, gi) {
				broken = true
			}
		}
		if broken {
			for _, m := range g.members {
				if !cs[m].out {
					cs[m].out, cs[m].dropped = true, ReasonGroup
				}
			}
		}
		for _, m := range g.members {
			g.pinned = g.pinned || (cs[m].Pinned && !cs[m].out) || (cs[m].Section == SectionRole && !cs[m].out)
			g.stable = g.stable || cs[m].place == placeSystem
		}
	}
	rep.Older = b.historyWindow(o, cs, gs)

	// Count what is still a candidate.
	for i := range cs {
		c := &cs[i]
		if c.out || c.Tokens > 0 {
			continue
		}
		if b.Tokenizer == nil {
			return fmt.Errorf("%w: item %q has no token count and the builder no Tokenizer", ErrInvalidItems, c.ID)
		}
		if c.Message != nil {
			c.Tokens = CountMessage(b.Tokenizer, *c.Message)
		} else {
			c.Tokens = CountText(b.Tokenizer, c.Text)
		}
	}
	scratch := sp.intsOf(2 * len(cs))[:0] // scoreAll's, then the packing order and the kept items
	scoreAll(o, cs, scratch)
	for gi := range gs {
		g := &gs[gi]
		g.score, g.pos, g.first = -1, math.MinInt, math.MaxInt
		for _, m := range g.members {
			if cs[m].out {
				continue
			}
			g.score = max(g.score, cs[m].score)
			g.pos = max(g.pos, cs[m].Pos)
			g.first = min(g.first, cs[m].idx)
		}
	}

	// The stable prefix is outside the budget.
	for i := range cs {
		if cs[i].Section == SectionRole && !cs[i].out {
			rep.System += cs[i].Tokens
			cs[i].kept = true
		}
	}
	budget := max(0, o.Window-o.ReservedOutput-rep.System)
	rep.Budget = budget

	// Select: pinned groups first, then the rest best first.
	p := packer{b: b}
	order := scratch[:0]
	for gi := range gs {
		if gs[gi].score >= 0 && !gs[gi].pinned {
			order = append(order, gi)
		}
	}
	slices.SortFunc(order, func(x, y int) int {
		gx, gy := &gs[x], &gs[y]
		if gx.stable != gy.stable {
			if gx.stable {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(gy.score, gx.score); c != 0 {
			return c
		}
		if c := cmp.Compare(gy.pos, gx.pos); c != 0 {
			return c
		}
		return cmp.Compare(gx.first, gy.first)
	})
	for gi := range gs {
		if gs[gi].pinned {
			for _, m := range gs[gi].members {
				if c := &cs[m]; !c.out && c.Section != SectionRole {
					p.used += p.add(c)
					c.kept = true
				}
			}
		}
	}
	for _, gi := range order {
		cost, st := 0, p.st
		for _, m := range gs[gi].members {
			if !cs[m].out {
				cost += p.add(&cs[m])
			}
		}
		if p.used+cost > budget {
			p.st = st
			for _, m := range gs[gi].members {
				if !cs[m].out {
					cs[m].dropped = ReasonBudget
				}
			}
			continue
		}
		p.used += cost
		for _, m := range gs[gi].members {
			if !cs[m].out {
				cs[m].kept = true
			}
		}
	}

	// The messages of several items, counted as they are sent: a join can count
	// more than JoinTokens. Over budget, drop the lowest-value groups kept.
	exact := b.exactJoins(o)
	if exact {
		p.used = b.sentTokens(cs, sp)
		for k := len(order) - 1; k >= 0 && p.used > budget; {
			need, freed := p.used-budget, 0
			for ; k >= 0 && freed < need; k-- {
				ms := gs[order[k]].members
				if j := slices.IndexFunc(ms, func(m int) bool { return !cs[m].out }); j < 0 || !cs[ms[j]].kept {
					continue
				}
				for _, m := range ms {
					if c := &cs[m]; !c.out {
						c.kept, c.dropped = false, ReasonBudget
						freed += c.Tokens
						if c.place != placeConv {
							freed += JoinTokens
						}
					}
				}
			}
			p.used = b.sentTokens(cs, sp)
		}
	}

	// Compress: cut pinned text, lowest value first, while over budget.
	if p.used > budget && b.Tokenizer != nil {
		cut := make([]int, 0, 4)
		for i := range cs {
			if c := &cs[i]; c.kept && c.Section != SectionRole && truncatable(c.Item) {
				cut = append(cut, i)
			}
		}
		slices.SortFunc(cut, func(x, y int) int {
			if c := cmp.Compare(cs[x].raw, cs[y].raw); c != 0 {
				return c
			}
			if c := cmp.Compare(cs[y].Tokens, cs[x].Tokens); c != 0 {
				return c
			}
			return cmp.Compare(x, y)
		})
		// A cut can land a token or two above its target (the marker's own count,
		// merges at the cut): a second pass takes what is left.
		for pass := 0; pass < 3 && p.used > budget; pass++ {
			for _, i := range cut {
				if p.used <= budget {
					break
				}
				c := &cs[i]
				before := c.Tokens
				if !b.truncate(c, before-(p.used-budget)) {
					continue
				}
				p.used -= before - c.Tokens
			}
			if exact {
				p.used = b.sentTokens(cs, sp)
			}
		}
	}
	rep.Used = p.used
	if p.used > budget {
		rep.Over = p.used - budget
	}

	// Structure: sections in order, then position, then input order.
	kept := keptInOrder(cs, scratch[len(cs):len(cs)])
	if ctx.Items == nil {
		ctx.Items = make([]Item, 0, len(kept))
	} else {
		ctx.Items = slices.Grow(ctx.Items[:0], len(kept))
	}
	rep.Kept = make([]messages.ContextItem, 0, len(kept))
	for _, i := range kept {
		c := &cs[i]
		ctx.Items = append(ctx.Items, c.Item)
		ci := reportItem(c)
		ci.From = c.from
		rep.Kept = append(rep.Kept, ci)
		if c.from > 0 {
			rep.Truncated = append(rep.Truncated, ci)
		}
	}
	var summarize []int
	for i := range cs {
		c := &cs[i]
		switch {
		case c.kept:
			if o.Summarize && c.from > 0 {
				summarize = append(summarize, i)
			}
		case c.dropped != "": // older turns are counted, not listed
			rep.Dropped = append(rep.Dropped, reportItem(c))
			if o.Summarize && c.dropped == ReasonBudget && (c.Section == SectionContext || c.Section == SectionEvidence || c.Stable) {
				summarize = append(summarize, i)
			}
		}
	}
	if len(summarize) > 0 {
		// Lowest value first: the dropped items, then the cut ones in the order
		// compression cut them (a pinned item scores 1: by what it would have).
		slices.SortStableFunc(summarize, func(x, y int) int {
			if c := cmp.Compare(cs[x].score, cs[y].score); c != 0 {
				return c
			}
			return cmp.Compare(cs[x].raw, cs[y].raw)
		})
		for _, i := range summarize {
			rep.Summarize = append(rep.Summarize, cs[i].ID)
		}
	}
	ctx.Report = rep
	return nil
}

// scratchSpace is a build's working memory, reused from build to build (a session
// builds a context for every model call).
type scratchSpace struct {
	cs   []cand
	gs   []group
	flat []int
	ints []int
	// sentTokens': the kept items in rendering order, a message's parts, and the
	// bytes around its joins.
	sent  []int
	parts []part
	join  joinScratch
}

// maxPooledItems bounds the builds whose working memory is kept for the next.
const maxPooledItems = 1024

// maxPooledBytes bounds the bytes around joins a build's working memory keeps.
const maxPooledBytes = 1 << 16

var scratchPool = sync.Pool{New: func() any { return new(scratchSpace) }}

func (sp *scratchSpace) cands(n int) []cand {
	if cap(sp.cs) < n {
		sp.cs = make([]cand, n)
	}
	sp.cs = sp.cs[:n]
	return sp.cs
}

func (sp *scratchSpace) groupsOf(n int) []group {
	if cap(sp.gs) < n {
		sp.gs = make([]group, n)
	}
	sp.gs = sp.gs[:n]
	clear(sp.gs)
	return sp.gs
}

func (sp *scratchSpace) flatOf(n int) []int {
	if cap(sp.flat) < n {
		sp.flat = make([]int, n)
	}
	return sp.flat[:n]
}

func (sp *scratchSpace) intsOf(n int) []int {
	if cap(sp.ints) < n {
		sp.ints = make([]int, n)
	}
	return sp.ints[:n]
}

// release returns sp to the pool, holding no item (nor the texts it points to),
// unless it grew too large to keep.
func (sp *scratchSpace) release() {
	if cap(sp.cs) > maxPooledItems {
		return
	}
	clear(sp.cs[:cap(sp.cs)])
	clear(sp.gs[:cap(sp.gs)])
	clear(sp.parts[:cap(sp.parts)])
	if cap(sp.join.buf) > maxPooledBytes {
		sp.join.buf = nil
	}
	clear(sp.join.buf[:cap(sp.join.buf)]) // the bytes around joins are the items' text
	scratchPool.Put(sp)
}

// smallBuild is the number of items up to which a build looks items up by
// scanning them rather than through maps: a session's usual build, which then
// allocates less.
const smallBuild = 64

// idIndex finds items by ID: through a map in a large build, by scanning in a
// small one.
type idIndex struct {
	cs []cand
	m  map[string]int
}

// find returns the index of the item with this ID among the first n.
func (x idIndex) find(id string, n int) (int, bool) {
	if x.m != nil {
		i, ok := x.m[id]
		return i, ok && i < n
	}
	for i := range n {
		if x.cs[i].ID == id {
			return i, true
		}
	}
	return 0, false
}

func isReplaced(reason string) bool {
	return len(reason) > len(ReasonReplaced) && reason[:len(ReasonReplaced)] == ReasonReplaced
}

// replacedWithin reports whether cs[m] was replaced by an item of group gi.
func replacedWithin(cs []cand, byID idIndex, m, gi int) bool {
	if !isReplaced(cs[m].dropped) {
		return false
	}
	j, ok := byID.find(cs[m].dropped[len(ReasonReplaced):], len(cs))
	return ok && cs[j].group == gi
}

// placeOf returns where an item is rendered.
func placeOf(it Item) placement {
	switch {
	case it.Message != nil:
		return placeConv
	case it.Section == SectionRole, it.Section == SectionState && it.Stable:
		return placeSystem
	}
	return placeBriefing
}

// groupsOf assigns every item its group: the items sharing a Group, or itself.
// The groups' member lists share one array.
func groupsOf(cs []cand, sp *scratchSpace) []group {
	var named map[string]int
	n := 0
	for i := range cs {
		if g := cs[i].Group; g != "" {
			if len(cs) <= smallBuild {
				if j := slices.IndexFunc(cs[:i], func(c cand) bool { return c.Group == g }); j >= 0 {
					cs[i].group = cs[j].group
					continue
				}
			} else {
				if named == nil {
					named = map[string]int{}
				}
				if gi, ok := named[g]; ok {
					cs[i].group = gi
					continue
				}
				named[g] = n
			}
		}
		cs[i].group = n
		n++
	}
	gs := sp.groupsOf(n)
	for i := range cs {
		gs[cs[i].group].first++ // the group's size, for now
	}
	flat, at := sp.flatOf(len(cs)), 0
	for gi := range gs {
		gs[gi].members, at = flat[at:at:at+gs[gi].first], at+gs[gi].first
		gs[gi].first = 0
	}
	for i := range cs {
		g := &gs[cs[i].group]
		g.members = append(g.members, i)
	}
	return gs
}

// historyWindow leaves out the turns older than the latest HistoryTurns (items of
// the Context section in groups that are not pinned), a group the cut would split
// whole, and returns how many it left out.
func (b Builder) historyWindow(o Options, cs []cand, gs []group) int {
	if o.HistoryTurns < 0 || len(cs) <= o.HistoryTurns {
		return 0
	}
	turns := make([]int, 0, len(cs))
	for i := range cs {
		if c := &cs[i]; c.Section == SectionContext && !c.out && !gs[c.group].pinned {
			turns = append(turns, i)
		}
	}
	if len(turns) <= o.HistoryTurns {
		return 0
	}
	slices.SortStableFunc(turns, func(x, y int) int { return cmp.Compare(cs[y].Pos, cs[x].Pos) })
	older := 0
	cutGroups := map[int]bool{}
	for _, i := range turns[o.HistoryTurns:] {
		cutGroups[cs[i].group] = true
	}
	for _, i := range turns {
		if cutGroups[cs[i].group] {
			cs[i].out = true
			older++
		}
	}
	return older
}

// scoreAll scores the candidates: recency ranks each among the candidates of its
// kind by Pos. A pinned item scores 1; raw keeps what it would have scored. idx is
// scratch space.
func scoreAll(o Options, cs []cand, idx []int) {
	var buf [8]string
	kinds := buf[:0]
	for i := range cs {
		if cs[i].out || cs[i].Section == SectionRole {
			continue
		}
		k := slices.Index(kinds, cs[i].Kind)
		if k < 0 {
			k = len(kinds)
			kinds = append(kinds, cs[i].Kind)
		}
		cs[i].kind = k
		idx = append(idx, i)
	}
	slices.SortStableFunc(idx, func(x, y int) int {
		if c := cmp.Compare(cs[x].kind, cs[y].kind); c != 0 {
			return c
		}
		return cmp.Compare(cs[y].Pos, cs[x].Pos)
	})
	start, newer := 0, 0
	for r, i := range idx {
		if r > 0 && cs[idx[r-1]].kind != cs[i].kind {
			start, newer = r, 0
		} else if r > start && cs[idx[r-1]].Pos > cs[i].Pos {
			newer = r - start
		}
		cs[i].raw = o.score(cs[i].Relevance, newer)
		cs[i].score = cs[i].raw
		if cs[i].Pinned {
			cs[i].score = 1
		}
	}
	for i := range cs {
		if cs[i].Section == SectionRole {
			cs[i].score, cs[i].raw = 1, 1
		}
	}
}

// packer counts the framing an item adds where it is rendered.
type packer struct {
	b  Builder
	st struct {
		system   bool
		briefing bool
		sections [numSections]bool
	}
	used int
	tags [numSections]int // tokens of a section's tags, counted once
}

// add returns the tokens c adds to the context (its own and its framing's), and
// notes where it went.
func (p *packer) add(c *cand) int {
	switch c.place {
	case placeSystem:
		return c.Tokens + JoinTokens
	case placeConv:
		return c.Tokens
	}
	n := c.Tokens
	if p.st.sections[c.Section] {
		return n + JoinTokens
	}
	p.st.sections[c.Section] = true
	n += p.tagTokens(c.Section)
	if p.st.briefing {
		return n + JoinTokens
	}
	p.st.briefing = true
	return n + MessageOverhead
}

func (p *packer) tagTokens(s Section) int {
	if p.tags[s] == 0 {
		open, closing := tags(s)
		if p.b.Tokenizer == nil {
			p.tags[s] = len(open) + len(closing)
		} else {
			p.tags[s] = p.b.Tokenizer.Count(open) + p.b.Tokenizer.Count(closing)
		}
	}
	return p.tags[s]
}

// tags returns the opening and closing tags of a section's block.
func tags(s Section) (open, closing string) {
	return "<" + sectionTags[s] + ">\n", "\n</" + sectionTags[s] + ">"
}

// truncatable reports whether an item has text that a cut can shorten.
func truncatable(it Item) bool {
	if it.Message != nil {
		return it.Message.Content != ""
	}
	return it.Text != ""
}

// Marker returns the text that replaces n cut tokens.
func Marker(n int) string { return "[… " + strconv.Itoa(n) + " tokens truncated]" }

// headWithin returns the end of the longest head of text, cut between runes, that
// counts at most room tokens (Options.HeadCut).
func (b Builder) headWithin(text string, room int) int {
	if room <= 0 {
		return 0
	}
	cuts := make([]int, 0, utf8.RuneCountInString(text)+1)
	for i := range text {
		cuts = append(cuts, i)
	}
	cuts = append(cuts, len(text))
	l, h := 0, len(cuts)-1
	for l < h {
		mid := (l + h + 1) / 2
		if b.within(text[:cuts[mid]], room) {
			l = mid
		} else {
			h = mid - 1
		}
	}
	return cuts[l]
}

// truncate cuts the middle out of c's original text so that c counts at most
// target tokens with the marker in the cut's place: it keeps the head (two thirds
// of the room) and the tail (the rest), where a text's purpose and its last word
// usually are, or the marker alone when there is no room. It counts the result,
// and reports whether c is now shorter than it was; if not, c is left as it was.
func (b Builder) truncate(c *cand, target int) bool {
	if c.from == 0 {
		c.orig, c.from = c.Text, c.Tokens
		if c.Message != nil {
			c.orig = c.Message.Content
		}
	}
	text := c.orig
	whole := b.Tokenizer.Count(text)
	frame := c.from - whole // the message's framing and calls
	room := target - frame - b.Tokenizer.Count("\n"+Marker(whole)+"\n")
	head, tail := 0, len(text)
	if b.Options.HeadCut {
		room = target - frame - b.Tokenizer.Count("\n"+Marker(whole))
		head = b.headWithin(text, room)
	} else if room > 0 {
		cuts := make([]int, 0, utf8.RuneCountInString(text)+1)
		for i := range text {
			cuts = append(cuts, i)
		}
		cuts = append(cuts, len(text))
		// The longest head within two thirds of the room, then the longest tail
		// within what the head left.
		l, h := 0, len(cuts)-1
		for l < h {
			mid := (l + h + 1) / 2
			if b.within(text[:cuts[mid]], room*2/3) {
				l = mid
			} else {
				h = mid - 1
			}
		}
		head = cuts[l]
		left := room - b.Tokenizer.Count(text[:head])
		first := l
		l, h = first, len(cuts)-1
		for l < h {
			mid := (l + h) / 2
			if b.within(text[cuts[mid]:], left) {
				h = mid
			} else {
				l = mid + 1
			}
		}
		tail = cuts[l]
	}
	keepHead, keepTail := text[:head], text[tail:]
	out := Marker(whole - b.Tokenizer.Count(keepHead) - b.Tokenizer.Count(keepTail))
	if keepHead != "" {
		out = keepHead + "\n" + out
	}
	if keepTail != "" {
		out += "\n" + keepTail
	}
	tokens := b.Tokenizer.Count(out) + frame
	if tokens >= c.Tokens {
		if c.Tokens == c.from {
			c.from = 0 // never cut
		}
		return false
	}
	c.Tokens = tokens
	if c.Message != nil {
		m := *c.Message
		m.Content = out
		c.Message = &m
	} else {
		c.Text = out
	}
	return true
}

// reportItem returns c as the report lists it.
func reportItem(c *cand) messages.ContextItem {
	return messages.ContextItem{ID: c.ID, Kind: c.Kind, Tokens: c.Tokens, Score: math.Round(c.score*1000) / 1000, Reason: c.dropped}
}

// keptInOrder returns into (empty, its room reused) with the indexes of the kept candidates in the order
// they are rendered: by section, then position, then input order.
func keptInOrder(cs []cand, into []int) []int {
	for i := range cs {
		if cs[i].kept {
			into = append(into, i)
		}
	}
	slices.SortFunc(into, func(x, y int) int {
		if c := cmp.Compare(cs[x].Section, cs[y].Section); c != 0 {
			return c
		}
		if c := cmp.Compare(cs[x].Pos, cs[y].Pos); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	return into
}

// exactJoins reports whether the build counts a message of several items as it
// is sent (Options.AdditiveJoins): it can with a Cl100k Tokenizer.
func (b Builder) exactJoins(o Options) bool {
	_, ok := b.Tokenizer.(*Cl100k)
	return ok && !o.AdditiveJoins
}

// sentTokens returns the tokens the kept items take of the budget as Messages
// sends them: the conversation's messages, the system message's stable State
// items (what they add to its Role & Policies items, which are outside the
// budget) and the briefing, each message of several items counted whole
// (countJoined), each item's count standing for its text.
func (b Builder) sentTokens(cs []cand, sp *scratchSpace) int {
	kept := keptInOrder(cs, sp.sent[:0]) // the rendering order
	sp.sent = kept
	tok := b.Tokenizer.(*Cl100k)
	used := 0
	stable, hasRole := false, false
	for _, i := range kept {
		c := &cs[i]
		switch {
		case c.Section == SectionRole:
			hasRole = true
		case c.place == placeConv:
			used += c.Tokens
		case c.place == placeSystem && c.Text != "":
			stable = true
		}
	}
	if stable {
		// What the stable items add to the system message: its count with them
		// less its count without them (a Role item's count holds the message's
		// framing, as Build's callers count it; without one, their message adds
		// it). The system message joins its non-empty texts (System).
		parts, roles := sp.parts[:0], 0
		for _, i := range kept {
			c := &cs[i]
			if c.place != placeSystem || c.Text == "" {
				continue
			}
			if len(parts) > 0 {
				parts = append(parts, part{"\n\n", -1})
			}
			parts = append(parts, part{c.Text, c.Tokens})
			if c.Section == SectionRole {
				roles = len(parts)
			}
		}
		with, without := tok.countJoined(parts, &sp.join), 0
		if roles > 0 {
			without = tok.countJoined(parts[:roles], &sp.join)
		} else if !hasRole {
			without = -MessageOverhead
		}
		used += with - without
		sp.parts = parts[:0]
	}
	parts, section := sp.parts[:0], Section(-1)
	for _, i := range kept {
		c := &cs[i]
		if c.place != placeBriefing {
			continue
		}
		if c.Section != section {
			if section >= 0 {
				_, closing := tagsOf(section)
				parts = append(parts, part{closing, -1}, part{"\n\n", -1})
			}
			section = c.Section
			open, _ := tagsOf(section)
			parts = append(parts, part{open, -1})
		} else {
			parts = append(parts, part{"\n\n", -1})
		}
		parts = append(parts, part{c.Text, c.Tokens})
	}
	if section >= 0 {
		_, closing := tagsOf(section)
		parts = append(parts, part{closing, -1})
		used += MessageOverhead + tok.countJoined(parts, &sp.join)
	}
	sp.parts = parts[:0]
	return used
}

// tagsOf is tags without building the strings: from a table.
func tagsOf(s Section) (open, closing string) { return sectionOpen[s], sectionClose[s] }

// sectionOpen and sectionClose are the sections' tags (constant tables, never
// written after).
var sectionOpen, sectionClose = func() (open, closing [numSections]string) {
	for s := range numSections {
		open[s], closing[s] = tags(s)
	}
	return
}()
