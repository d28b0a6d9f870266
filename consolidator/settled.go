package consolidator

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
)

// Settled has the run take the questions named (Answer, Report.Settled) as answered:
// the model found nothing to change in them (two facts judged compatible, a cluster
// without a durable fact) about their memories as they were then. The run does not
// ask them again while those memories are as they were (their versions and contents):
// the next closest pair of an older fact, the other clusters, are asked instead.
func Settled(answers ...string) RunOption {
	return func(o *runOptions) {
		if o.settled == nil {
			o.settled = map[string]bool{}
		}
		for _, a := range answers {
			o.settled[a] = true
		}
	}
}

// Answer names the answer of a question (Question) about memories as they are
// (state gives the version and content of each): the key Settled takes,
// "distill-1f2e…@3c4d…", the question then a digest of its memories' states.
func Answer(d Decision, state func(id string) (version uint64, content string)) string {
	h := sha256.New()
	for _, id := range d.needs() {
		v, c := state(id)
		h.Write([]byte(id))
		h.Write([]byte{0})
		h.Write(strconv.AppendUint(nil, v, 10))
		h.Write([]byte{0})
		h.Write([]byte(c))
		h.Write([]byte{0})
	}
	return Question(d) + "@" + hex.EncodeToString(h.Sum(nil)[:8])
}

// settled reports whether the question d puts about the memories its items hold was
// answered without a change (Settled), and keeps it in the plan's list of answers
// that still hold (Report.Settled).
func (pl *planner) settled(d Decision) bool {
	if len(pl.answered) == 0 {
		return false
	}
	// The question first, cheap (its memories' IDs), then the digest of their
	// contents for a question answered only.
	if !pl.asked[Question(d)] {
		return false
	}
	a := Answer(d, pl.state)
	if !pl.answered[a] {
		return false
	}
	pl.stillSettled = append(pl.stillSettled, a)
	return true
}

// state is the version and content of the memory id as planned.
func (pl *planner) state(id string) (uint64, string) {
	if it := pl.itemOf(id); it != nil {
		return it.m.Version, it.m.Content
	}
	return 0, ""
}

// itemOf is the item of the memory id (nil when there is none).
func (pl *planner) itemOf(id string) *item {
	if i, ok := slices.BinarySearchFunc(pl.items, id, func(it *item, id string) int { return cmp.Compare(it.m.ID, id) }); ok {
		return pl.items[i]
	}
	return nil
}
