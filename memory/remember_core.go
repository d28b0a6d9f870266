//go:build memcore

package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/troupe-run/troupe/llm"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// RememberOptions tunes Remember.
type RememberOptions struct {
	// Tier is the tier every fact goes to; empty: each fact's own (semantic, or
	// episodic for something that happened). Its memories are the fact's
	// neighbours.
	Tier Tier
	// Neighbours is how many of the nearest memories each fact is compared with:
	// default 5, at most MaxNeighbours.
	Neighbours int
	// Metadata is a JSON object given to every memory Remember adds.
	Metadata json.RawMessage
}

// Bounds of RememberOptions.
const (
	DefaultNeighbours = 5
	MaxNeighbours     = 20
)

// Remember is the write path: it turns a conversation turn into memories of the
// namespace, as Mem0 does.
//
//  1. The turn's facts are extracted (ExtractFacts, with the namespace's model when
//     it has one, Config.Model; the offline heuristic otherwise).
//  2. A fact repeated within the turn, or whose content hash (pmem.ContentHash) is a
//     live memory's, is NONE at once: no model call is made for it.
//  3. Each other fact is compared with its nearest memories of its tier (a vector
//     Search) and decided (DecideFact): ADD, UPDATE, DELETE or NONE.
//  4. The decision is applied: ADD adds the fact; UPDATE updates the target with the
//     decided content (and the fact's importance when it is higher), or becomes
//     NONE when that would change nothing; DELETE adds the
//     fact and invalidates the target, marked as contradicted by the new memory (it
//     stays, with its history); NONE writes nothing.
//
// Every event's reason says which decision made it and why ("mem0 ADD: new fact",
// "mem0 UPDATE: richer version of m_…", "mem0 DELETE: contradicted by m_…: …"), and
// every memory added has the turn's Source. The writes are keyed key+"/"+i for the
// i-th fact (key+"/"+i+"/invalidate" for a DELETE's invalidation), and the model
// calls key+"/extract" (step 1) and key+"/decide/"+i (step i+2, whether or not the
// calls before it were made), so that a Remember retried with the same key, against
// a gateway that records its answers, changes nothing twice. A failure stops at the
// fact it happened to, with the earlier facts applied: a retry with the same key
// completes it, and reports the facts applied before as NONE, naming their memories.
//
// It returns the decisions, in the order of the facts, with MemoryID set to the
// memory each added or updated. Invalid options wrap ErrInvalid.
func (ns *Namespace) Remember(ctx context.Context, key string, turn Turn, opts RememberOptions) ([]Decision, error) {
	if opts.Tier != "" {
		if _, err := ParseTier(string(opts.Tier)); err != nil {
			return nil, err
		}
	}
	if opts.Neighbours < 0 || opts.Neighbours > MaxNeighbours {
		return nil, fmt.Errorf("%w: neighbours %d outside [1, %d]", ErrInvalid, opts.Neighbours, MaxNeighbours)
	}
	if len(opts.Metadata) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(opts.Metadata, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%w: remember metadata must be a JSON object", ErrInvalid)
		}
	}
	neighbours := opts.Neighbours
	if neighbours == 0 {
		neighbours = DefaultNeighbours
	}
	model := ns.cfg.Model
	sub := func(parts ...string) string {
		if key == "" {
			return ""
		}
		k := key
		for _, p := range parts {
			k += "/" + p
		}
		return k
	}
	facts, err := extractFacts(ctx, model, llm.Request{Key: sub("extract"), Step: 1}, turn)
	if err != nil {
		return nil, err
	}
	for i := range facts {
		if opts.Tier != "" {
			facts[i].Tier = opts.Tier
		}
		if ns.cfg.Redact != nil {
			facts[i].Content = ns.cfg.Redact(facts[i].Content)
		}
	}
	if model == nil && len(facts) > 0 { // the offline decisions compare vectors
		texts := make([]string, len(facts))
		for i, f := range facts {
			texts[i] = f.Content
		}
		vectors, err := ns.cfg.Embedder.Embed(ctx, texts)
		if err != nil {
			return nil, fmt.Errorf("memory: remember: embedding the facts: %w", err)
		}
		for i := range facts {
			if i < len(vectors) {
				facts[i].Vector = vectors[i]
			}
		}
	}

	decisions := make([]Decision, 0, len(facts))
	seen := map[string]int{} // hash -> index of the fact that had it first
	for i, fact := range facts {
		hash := pmem.ContentHash(fact.Content)
		if j, ok := seen[hash]; ok {
			first := decisions[j] // one decision per fact so far
			decisions = append(decisions, Decision{Event: eventNone, TargetID: cmp.Or(first.MemoryID, first.TargetID), Content: fact.Content,
				Fact: fact, Reason: "repeats fact " + strconv.Itoa(j+1) + " of the turn"})
			continue
		}
		seen[hash] = i
		near, dup, err := ns.neighbours(ctx, fact, hash, neighbours)
		if err != nil {
			return decisions, err
		}
		var d Decision
		switch {
		case dup != "":
			d = Decision{Event: eventNone, TargetID: dup, Content: fact.Content, Fact: fact, Reason: "same content as " + dup}
		case model != nil && hasLive(near):
			d, err = decideFact(ctx, model, llm.Request{Key: sub("decide", strconv.Itoa(i)), Step: i + 2}, fact, near)
		default:
			d, err = decideFact(ctx, nil, llm.Request{}, fact, near)
		}
		if err != nil {
			return decisions, err
		}
		if err := ns.apply1(ctx, sub(strconv.Itoa(i)), turn, opts, near, &d); err != nil {
			return decisions, fmt.Errorf("memory: remember fact %d (%s): %w", i+1, d.Event, err)
		}
		decisions = append(decisions, d)
	}
	return decisions, nil
}

func hasLive(ms []Memory) bool {
	for _, m := range ms {
		if m.InvalidAt == nil {
			return true
		}
	}
	return false
}

// neighbours returns the memories nearest to fact in its tier (vector search), and
// the ID of a live memory of any tier with the fact's content hash, if there is one
// (a keyword search finds it: the same words score highest).
func (ns *Namespace) neighbours(ctx context.Context, fact Fact, hash string, k int) (near []Memory, dup string, err error) {
	same, err := ns.Search(ctx, Query{Text: fact.Content, Mode: ModeKeyword, Limit: 5})
	if err != nil {
		return nil, "", fmt.Errorf("memory: remember: %w", err)
	}
	for _, r := range same {
		if r.Memory.Hash == hash && r.Memory.InvalidAt == nil {
			return nil, r.Memory.ID, nil
		}
	}
	results, err := ns.Search(ctx, Query{Text: fact.Content, Tiers: []Tier{fact.Tier}, Mode: ModeVector, Limit: k})
	if err != nil {
		return nil, "", fmt.Errorf("memory: remember: %w", err)
	}
	for _, r := range results {
		if r.Memory.Hash == hash && r.Memory.InvalidAt == nil {
			return nil, r.Memory.ID, nil
		}
		near = append(near, r.Memory)
	}
	return near, "", nil
}

// apply1 applies one decision under key, setting its MemoryID (and turning it into
// NONE when the namespace turns out to hold its content already).
func (ns *Namespace) apply1(ctx context.Context, key string, turn Turn, opts RememberOptions, near []Memory, d *Decision) error {
	add := func(reason string) error {
		imp := d.Fact.Importance
		req := AddRequest{Tier: d.Fact.Tier, Content: d.Content, Importance: &imp, Metadata: opts.Metadata, Reason: reason}
		if turn.Source.Kind != "" {
			req.Sources = append(req.Sources, turn.Source)
		}
		res, err := ns.Add(ctx, key, []AddRequest{req})
		if err != nil {
			return err
		}
		if len(res) == 1 {
			d.MemoryID = res[0].ID
			if res[0].Event == eventNone && d.Event == eventAdd {
				d.Event, d.TargetID, d.MemoryID = eventNone, res[0].ID, ""
				d.Reason += " (the namespace holds this content already)"
			}
		}
		return nil
	}
	switch d.Event {
	case eventAdd:
		return add("mem0 ADD: " + d.Reason)
	case EventUpdate:
		u := UpdateRequest{Content: &d.Content, Reason: "mem0 UPDATE: " + d.Reason}
		for _, n := range near {
			if n.ID != d.TargetID {
				continue
			}
			if d.Fact.Importance > n.Importance {
				imp := d.Fact.Importance
				u.Importance = &imp
			} else if sameTextKey(n.Content) == sameTextKey(d.Content) {
				d.Event, d.Reason = eventNone, "the update would change nothing in "+n.ID
				return nil
			}
		}
		m, err := ns.Update(ctx, key, d.TargetID, u)
		if errors.Is(err, ErrNotFound) { // the target went meanwhile: the fact is new again
			d.Event, d.TargetID = eventAdd, ""
			d.Reason = "new fact: the memory it would have updated is gone"
			return add("mem0 ADD: " + d.Reason)
		}
		if err != nil {
			return err
		}
		d.MemoryID = m.ID
		return nil
	case EventDelete:
		target := d.TargetID
		if err := add("mem0 DELETE: replaces " + target + ": " + d.Reason); err != nil {
			return err
		}
		by := d.MemoryID // the new memory, or the live one holding its content already
		if by == target {
			return nil
		}
		ikey := ""
		if key != "" {
			ikey = key + "/invalidate"
		}
		err := ns.Invalidate(ctx, ikey, target, by, "mem0 DELETE: contradicted by "+by+": "+d.Reason)
		if errors.Is(err, ErrNotFound) {
			return nil // forgotten meanwhile: nothing is left to invalidate
		}
		return err
	}
	return nil // NONE
}
