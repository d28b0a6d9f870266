package consolidator_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// namespaceOf makes n memories shaped like a busy namespace, the same for the same
// n and seed: 384-dimensional unit vectors around a topic each (about 50 memories a
// topic, within-topic cosines mostly 0.55–0.85), 3% near-duplicates of another
// memory (cosine about 0.96), 1% exact duplicates (same Hash), spread over the tiers
// (episodic 60%, semantic 30%, working 6%, perceptual 4%) and 60 days, semantic
// facts with a functional relation now and then.
func namespaceOf(n int, seed uint64) []memory.Memory {
	const dim = 384
	r := rand.New(rand.NewPCG(seed, 1))
	unit := func(v []float32) []float32 {
		var s float64
		for _, x := range v {
			s += float64(x) * float64(x)
		}
		f := float32(1 / math.Sqrt(s))
		for i := range v {
			v[i] *= f
		}
		return v
	}
	gauss := func() []float32 {
		v := make([]float32, dim)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return unit(v)
	}
	// mix is a·u + b·noise, normalised: a cosine of about a/sqrt(a²+b²) with u.
	mix := func(u []float32, a, b float64) []float32 {
		v := gauss()
		for i := range v {
			v[i] = float32(a)*u[i] + float32(b)*v[i]
		}
		return unit(v)
	}
	topics := make([][]float32, max(1, n/50))
	for i := range topics {
		topics[i] = gauss()
	}
	mems := make([]memory.Memory, n)
	for i := range mems {
		var tier memory.Tier
		switch x := r.IntN(100); {
		case x < 60:
			tier = memory.Episodic
		case x < 90:
			tier = memory.Semantic
		case x < 96:
			tier = memory.Working
		default:
			tier = memory.Perceptual
		}
		age := time.Duration(r.Int64N(int64(60 * day)))
		if tier == memory.Working {
			age /= 60
		}
		m := mem(fmt.Sprintf("m_%07d", i), tier, r.Float64(), age)
		m.Hash = fmt.Sprintf("h%d", i)
		switch x := r.IntN(100); {
		case x < 3 && i > 0:
			m.Vector = mix(mems[r.IntN(i)].Vector, 1, 0.3)
		case x < 4 && i > 0:
			o := mems[r.IntN(i)]
			m.Hash, m.Vector, m.Tier = o.Hash, o.Vector, o.Tier
		default:
			m.Vector = mix(topics[r.IntN(len(topics))], 1, 0.4+0.6*r.Float64())
		}
		if m.Tier == memory.Semantic && r.IntN(10) == 0 {
			m.Relations = []messages.MemoryRelation{{From: fmt.Sprintf("person%d", r.IntN(n/20+1)), Type: "lives_in", To: fmt.Sprintf("city%d", r.IntN(5))}}
		}
		mems[i] = m
	}
	return mems
}

// BenchmarkPlan plans a busy namespace with the default policy.
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 50_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			mems := namespaceOf(n, 1)
			b.ResetTimer()
			for b.Loop() {
				consolidator.Plan(now, mems, consolidator.Policy{})
			}
		})
	}
}

// textsOf gives mems contents shaped like facts a model extracts, the same for the
// same seed: a person, a verb, a thing and a place, a negation in one of eight and
// a number in one of ten, so that dedupe reads their numbers, negations and names
// (numbersDiffer, negationDiffers, namesDiffer) for each pair near enough. A memory
// whose vector is another's (a near or exact duplicate) says what the other says in
// other punctuation.
func textsOf(mems []memory.Memory, seed uint64) []memory.Memory {
	r := rand.New(rand.NewPCG(seed, 2))
	people := []string{"Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Niaj"}
	verbs := []string{"likes", "prefers", "bought", "visited", "recommends", "reviewed", "ordered", "mentioned"}
	things := []string{"green tea", "the premium plan", "a red bicycle", "the quarterly report", "sourdough bread",
		"the new laptop", "a vintage camera", "the billing dashboard", "a window seat", "the annual conference"}
	places := []string{"Lisbon", "Porto", "Berlin", "the office", "the harbour district", "Paris", "home", "the airport"}
	byVector := map[*float32]string{}
	for i := range mems {
		if len(mems[i].Vector) > 0 {
			if s, ok := byVector[&mems[i].Vector[0]]; ok {
				mems[i].Content = s + "."
				continue
			}
		}
		s := people[r.IntN(len(people))] + " " + verbs[r.IntN(len(verbs))]
		if r.IntN(8) == 0 {
			s = people[r.IntN(len(people))] + " never " + verbs[r.IntN(len(verbs))]
		}
		s += " " + things[r.IntN(len(things))] + " in " + places[r.IntN(len(places))]
		if r.IntN(10) == 0 {
			s += " on May " + fmt.Sprint(1+r.IntN(28))
		}
		mems[i].Content = s
		if len(mems[i].Vector) > 0 {
			byVector[&mems[i].Vector[0]] = s
		}
	}
	return mems
}

// BenchmarkPlanTexts plans a busy namespace of 20,000 memories whose contents are
// sentences (textsOf), where BenchmarkPlan's hold an ID: what reading their
// numbers, negations and names costs a plan.
func BenchmarkPlanTexts(b *testing.B) {
	mems := textsOf(namespaceOf(20_000, 1), 1)
	b.ResetTimer()
	for b.Loop() {
		consolidator.Plan(now, mems, consolidator.Policy{})
	}
}
