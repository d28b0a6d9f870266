package kafka

import (
	"cmp"
	"encoding/json"
	"slices"
	"sync"

	kafkago "github.com/segmentio/kafka-go"
)

// StickyProtocol is the name of the group protocol of stickyBalancer.
const StickyProtocol = "troupe-sticky"

// stickyBalancer assigns a consumer group's partitions as evenly as range
// assignment does, but leaves each partition with the member that held it in the
// previous generation when the balance allows: a member that joins, leaves or
// restarts moves only the partitions it must. Kafka-go's own balancers (range,
// round robin) deal the partitions out again by member ID, which is new at every
// join: a rebalance moved most partitions, and every moved partition's sessions
// were taken over by a process that had not run them (their actors folded again,
// their latest results published again, since the new owner cannot tell that the
// old one published them).
//
// Each member tells the group, in its JoinGroup metadata (UserData), the
// partitions it holds; the group's leader keeps a member's claims up to its share,
// in partition order, and deals out the rest to the members under their share. A
// partition two members claim (one paused past its session timeout, that never
// learnt it lost it) goes to the claim of the later generation. Members of a build
// without this protocol support range and round robin only, so a group that has
// one of them agrees on range (Kafka picks a protocol every member supports): a
// rolling upgrade works, and is sticky once every member has it.
type stickyBalancer struct {
	mu     sync.Mutex
	claims stickyClaims
}

// stickyClaims is stickyBalancer's UserData: the partitions the member was
// assigned last, by topic, and in which generation.
type stickyClaims struct {
	Generation int32            `json:"generation"`
	Held       map[string][]int `json:"held,omitempty"`
}

func (*stickyBalancer) ProtocolName() string { return StickyProtocol }

// hold records the partitions of topic this member was assigned in generation:
// its claims at the next join, the generation's end notwithstanding.
func (b *stickyBalancer) hold(generation int32, topic string, partitions []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.claims.Held == nil {
		b.claims.Held = map[string][]int{}
	}
	b.claims.Generation = generation
	b.claims.Held[topic] = slices.Clone(partitions)
}

func (b *stickyBalancer) UserData() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return json.Marshal(b.claims)
}

// AssignGroups deals out the partitions of each topic among the members that
// consume it: each gets ⌊n/m⌋ or ⌈n/m⌉ of them, keeping its claims first.
func (*stickyBalancer) AssignGroups(members []kafkago.GroupMember, partitions []kafkago.Partition) kafkago.GroupMemberAssignments {
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b kafkago.GroupMember) int { return cmp.Compare(a.ID, b.ID) })
	claims := make([]stickyClaims, len(members))
	for i, m := range members {
		_ = json.Unmarshal(m.UserData, &claims[i]) // no claims, or a foreign form: none
	}
	byTopic := map[string][]int{}
	for _, p := range partitions {
		byTopic[p.Topic] = append(byTopic[p.Topic], p.ID)
	}
	out := kafkago.GroupMemberAssignments{}
	for _, m := range members {
		out[m.ID] = map[string][]int{}
	}
	for topic, ids := range byTopic {
		slices.Sort(ids)
		var consumers []int // indexes into members
		for i, m := range members {
			if slices.Contains(m.Topics, topic) {
				consumers = append(consumers, i)
			}
		}
		if len(consumers) == 0 {
			continue
		}
		// The later generation's claims first: a partition claimed twice goes to
		// the member that held it last.
		slices.SortStableFunc(consumers, func(a, b int) int { return cmp.Compare(claims[b].Generation, claims[a].Generation) })
		got := dealSticky(ids, len(consumers), func(c int) []int { return claims[consumers[c]].Held[topic] })
		for c, parts := range got {
			out[members[consumers[c]].ID][topic] = parts
		}
	}
	return out
}

// dealSticky assigns the partitions ids (sorted) to n consumers, each getting
// len(ids)/n of them, and one more for len(ids)%n of them, the first to need one:
// first each consumer keeps what it claims (claimed(c)) up to the smaller share,
// then consumers with more claims keep one more while larger shares are left,
// then the partitions nobody kept go to the consumers under their share, in order.
func dealSticky(ids []int, n int, claimed func(c int) []int) [][]int {
	base, extra := len(ids)/n, len(ids)%n
	exists := make(map[int]bool, len(ids))
	for _, id := range ids {
		exists[id] = true
	}
	taken := make(map[int]bool, len(ids))
	got := make([][]int, n)
	keep := func(c, limit int) {
		for _, id := range claimed(c) {
			if len(got[c]) >= limit {
				return
			}
			if exists[id] && !taken[id] {
				taken[id] = true
				got[c] = append(got[c], id)
			}
		}
	}
	for c := range n {
		keep(c, base)
	}
	for c := range n {
		if extra == 0 {
			break
		}
		if before := len(got[c]); before == base {
			keep(c, base+1)
			if len(got[c]) > before {
				extra--
			}
		}
	}
	next := 0 // into ids
	give := func(c, limit int) {
		for len(got[c]) < limit && next < len(ids) {
			if id := ids[next]; !taken[id] {
				taken[id] = true
				got[c] = append(got[c], id)
			}
			next++
		}
	}
	for c := range n {
		give(c, base)
	}
	for c := range n {
		if extra == 0 {
			break
		}
		if len(got[c]) == base {
			give(c, base+1)
			extra--
		}
	}
	for c := range got {
		slices.Sort(got[c])
	}
	return got
}
