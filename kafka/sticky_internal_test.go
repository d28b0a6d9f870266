package kafka

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
)

func stickyMember(t *testing.T, id string, gen int32, held map[string][]int, topics ...string) kafkago.GroupMember {
	t.Helper()
	b := &stickyBalancer{}
	for topic, ps := range held {
		b.hold(gen, topic, ps)
	}
	data, err := b.UserData()
	if err != nil {
		t.Fatal(err)
	}
	return kafkago.GroupMember{ID: id, Topics: topics, UserData: data}
}

func topicPartitions(topic string, n int) []kafkago.Partition {
	ps := make([]kafkago.Partition, n)
	for i := range ps {
		ps[i] = kafkago.Partition{Topic: topic, ID: i}
	}
	return ps
}

// checkDealt fails unless every partition of topic went to exactly one of the
// members, each getting ⌊n/m⌋ or ⌈n/m⌉.
func checkDealt(t *testing.T, got kafkago.GroupMemberAssignments, topic string, n int, members ...string) {
	t.Helper()
	var all []int
	for _, m := range members {
		ps := got[m][topic]
		if len(ps) < n/len(members) || len(ps) > (n+len(members)-1)/len(members) {
			t.Errorf("%s got %v of %d partitions among %d members: unbalanced (%v)", m, ps, n, len(members), got)
		}
		all = append(all, ps...)
	}
	slices.Sort(all)
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(all, want) {
		t.Errorf("partitions dealt: %v, want each of 0..%d once (%v)", all, n-1, got)
	}
}

func TestStickyKeepsTheSurvivorsPartitions(t *testing.T) {
	b := &stickyBalancer{}
	parts := topicPartitions("t", 12)
	// Four members that held three partitions each; the one with 3..5 left.
	got := b.AssignGroups([]kafkago.GroupMember{
		stickyMember(t, "d", 4, map[string][]int{"t": {9, 10, 11}}, "t"),
		stickyMember(t, "a", 4, map[string][]int{"t": {0, 1, 2}}, "t"),
		stickyMember(t, "c", 4, map[string][]int{"t": {6, 7, 8}}, "t"),
	}, parts)
	checkDealt(t, got, "t", 12, "a", "c", "d")
	for m, held := range map[string][]int{"a": {0, 1, 2}, "c": {6, 7, 8}, "d": {9, 10, 11}} {
		for _, p := range held {
			if !slices.Contains(got[m]["t"], p) {
				t.Errorf("%s lost partition %d it held: %v", m, p, got)
			}
		}
	}
}

func TestStickyJoinerTakesOnlyTheExcess(t *testing.T) {
	b := &stickyBalancer{}
	got := b.AssignGroups([]kafkago.GroupMember{
		stickyMember(t, "a", 7, map[string][]int{"t": {0, 1, 2, 3, 4, 5}}, "t"),
		stickyMember(t, "b", 7, map[string][]int{"t": {6, 7, 8, 9, 10, 11}}, "t"),
		stickyMember(t, "new", 0, nil, "t"), // a restarted process claims nothing
	}, topicPartitions("t", 12))
	checkDealt(t, got, "t", 12, "a", "b", "new")
	moved := 0
	for _, p := range got["new"]["t"] {
		if p < 6 && !slices.Contains(got["a"]["t"], p) || p >= 6 && !slices.Contains(got["b"]["t"], p) {
			moved++
		}
	}
	if moved != 4 {
		t.Errorf("the joiner got %d partitions from the others, want 4: %v", moved, got)
	}
	if len(got["a"]["t"])+len(got["b"]["t"]) != 8 {
		t.Errorf("a and b keep %v and %v", got["a"]["t"], got["b"]["t"])
	}
}

func TestStickyLaterGenerationWinsAClaimedTwicePartition(t *testing.T) {
	b := &stickyBalancer{}
	// "a" sorts first, but its claim is of generation 3: "b" held 0..2 since.
	got := b.AssignGroups([]kafkago.GroupMember{
		stickyMember(t, "a", 3, map[string][]int{"t": {0, 1, 2}}, "t"),
		stickyMember(t, "b", 5, map[string][]int{"t": {0, 1, 2}}, "t"),
	}, topicPartitions("t", 6))
	checkDealt(t, got, "t", 6, "a", "b")
	if !slices.Equal(got["b"]["t"], []int{0, 1, 2}) {
		t.Errorf("b got %v, want the partitions it held last, 0..2 (%v)", got["b"]["t"], got)
	}
}

func TestStickyIgnoresForeignAndStaleClaims(t *testing.T) {
	b := &stickyBalancer{}
	got := b.AssignGroups([]kafkago.GroupMember{
		{ID: "x", Topics: []string{"t"}, UserData: []byte("not json")},
		stickyMember(t, "y", 2, map[string][]int{"t": {7, 8, 40}, "gone": {1}}, "t"), // 40: no such partition
		stickyMember(t, "z", 2, map[string][]int{"u": {0, 1}}, "u"),                  // another topic only
	}, append(topicPartitions("t", 4), topicPartitions("u", 2)...))
	checkDealt(t, got, "t", 4, "x", "y")
	checkDealt(t, got, "u", 2, "z")
	if len(got["z"]["t"]) != 0 || len(got["x"]["u"])+len(got["y"]["u"]) != 0 {
		t.Errorf("a member got partitions of a topic it does not consume: %v", got)
	}
}

// Random memberships and claims: always a balanced deal of every partition, and
// a member keeps every claim it can within its share when no one else claims it.
func TestStickyRandomDeals(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		n, m := 1+r.IntN(40), 1+r.IntN(8)
		owner := make([]int, n) // -1: nobody claims it
		var members []kafkago.GroupMember
		held := make([][]int, m)
		for p := range owner {
			owner[p] = r.IntN(m+1) - 1
			if owner[p] >= 0 {
				held[owner[p]] = append(held[owner[p]], p)
			}
		}
		var names []string
		for i := range m {
			name := fmt.Sprintf("m%02d", i)
			names = append(names, name)
			members = append(members, stickyMember(t, name, int32(r.IntN(3)), map[string][]int{"t": held[i]}, "t"))
		}
		got := (&stickyBalancer{}).AssignGroups(members, topicPartitions("t", n))
		checkDealt(t, got, "t", n, names...)
		for i, name := range names {
			kept := 0
			for _, p := range held[i] {
				if slices.Contains(got[name]["t"], p) {
					kept++
				}
			}
			if want := min(len(held[i]), n/m); kept < want {
				t.Fatalf("round %d: %s kept %d of its %d claims, want at least %d (share %d): %v", round, name, kept, len(held[i]), want, n/m, got)
			}
		}
		if t.Failed() {
			return
		}
	}
	var c stickyClaims
	if err := json.Unmarshal([]byte(`{"generation":3,"held":{"t":[1]}}`), &c); err != nil || c.Generation != 3 {
		t.Fatalf("claims: %+v %v", c, err)
	}
}
