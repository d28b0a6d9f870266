package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/troupe-run/troupe/kafka"
)

// DefaultReplyTopicPrefixes are the names of the reply topics a node creates
// when missing, by default: a task's reply_topic starting with "replies."
// (logical names: with --topic-prefix P, the Kafka topic is P + "replies.…").
var DefaultReplyTopicPrefixes = []string{"replies."}

// DefaultMaxReplyTopics caps the reply topics one node process creates, by
// default.
const DefaultMaxReplyTopics = 100

// MaxReplyTopicsMax bounds ReplyTopics.Max as a flag sets it.
const MaxReplyTopicsMax = 100_000

// ReplyTopicPartitions is the partition count of a reply topic the node
// creates (unless a --topics file lists it, ReplyTopics.Listed): one. A reply topic is a client's
// inbox, read by one consumer; one partition keeps every result on it in
// order, and each topic a client can make the node create costs the cluster
// as little as a topic can. An operator who wants more creates it first: the
// node publishes to any existing topic.
const ReplyTopicPartitions = 1

// ErrReplyTopicNotCreated is the error of a publish to a reply topic that does
// not exist and that the node may not create (ReplyTopics): its messages are
// dropped, logged and counted (troupe_bus_reply_topic_refusals_total).
var ErrReplyTopicNotCreated = errors.New("node: reply topic not created")

// ReplyTopics decides which missing topics a node on Kafka creates (its
// Creatable and Settled are kafka.TopicLayout's): the node's own troupe. topics
// and those Listed always; a task's reply_topic only when its name starts with one
// of Create and the node created fewer than Max reply topics so far. A reply topic
// that exists is published to whatever its name. Its zero value creates no reply
// topic. It is safe for concurrent use.
//
// A reply topic takes a place under Max when its creation is allowed (Creatable),
// so that concurrent creations cannot pass Max together, and keeps it only if it
// was created (Settled): a creation the broker refused or that failed, or a topic
// another client created meanwhile, gives it back. Before, every topic allowed
// kept its place, created or not, and a node whose creations failed 100 times
// refused reply topics for good. Creatable used without Settled (a layout that
// sets only Creatable) counts as before: every topic allowed keeps its place.
type ReplyTopics struct {
	// Create are the prefixes of the reply topics created when missing, by
	// logical name; "*" is any name. Empty: none.
	Create []string
	// Max caps the reply topics this process creates (0: none).
	Max int
	// Listed are the topics of the layout's Topics (--topics): a reply topic
	// listed is created, as its line says, whatever its name, uncounted.
	Listed []string

	mu sync.Mutex
	// made are the reply topics Settled said this process created; creating,
	// those whose creations were allowed and have not settled, with how many
	// there are. Both hold a place under Max (places).
	made     map[string]struct{}
	creating map[string]int
	settles  bool // Settled was called: the layout tells how creations end
}

// places returns how many reply topics hold a place under Max: those made and
// those being created. Called with r.mu held.
func (r *ReplyTopics) places() int {
	n := len(r.made)
	for topic := range r.creating {
		if _, ok := r.made[topic]; !ok {
			n++
		}
	}
	return n
}

// holds reports whether topic holds a place under Max. Called with r.mu held.
func (r *ReplyTopics) holds(topic string) bool {
	_, made := r.made[topic]
	_, creating := r.creating[topic]
	return made || creating
}

// Created returns how many reply topics this process created (as Settled said;
// without Settled, how many it allowed).
func (r *ReplyTopics) Created() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.settles {
		return r.places()
	}
	return len(r.made)
}

// uncounted reports whether topic is created whatever the cap: the node's own,
// or one the operator listed.
func (r *ReplyTopics) uncounted(topic string) bool {
	// A reply_topic is never in the node's namespace.
	return strings.HasPrefix(topic, ownNamespace) || slices.Contains(r.Listed, topic)
}

// Creatable implements kafka.TopicLayout.Creatable. A reply topic it allows takes
// a place under Max, kept until Settled says it was not created.
func (r *ReplyTopics) Creatable(topic string, tc kafka.TopicConfig) (kafka.TopicConfig, error) {
	if r.uncounted(topic) {
		return tc, nil // created as the layout says
	}
	if !r.allows(topic) {
		return tc, fmt.Errorf("%w: %s does not exist, and the node creates %s (--reply-topics-create): create it beforehand", ErrReplyTopicNotCreated, topic, r.rule())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.holds(topic) {
		if taken := r.places(); taken >= r.Max {
			pending := ""
			if n := taken - len(r.made); n > 0 {
				pending = fmt.Sprintf(" (%d of them being created)", n)
			}
			return tc, fmt.Errorf("%w: %s does not exist, and the node created %d reply topics already%s, its most (--reply-topics-max %d)", ErrReplyTopicNotCreated, topic, taken, pending, r.Max)
		}
	}
	if r.creating == nil {
		r.creating = map[string]int{}
	}
	r.creating[topic]++
	tc.Partitions = ReplyTopicPartitions
	return tc, nil
}

// Settled implements kafka.TopicLayout.Settled: a reply topic whose creation
// Creatable allowed keeps its place under Max if it was created, and gives it
// back otherwise (unless created before, or still being created by another
// call).
func (r *ReplyTopics) Settled(topic string, created bool) {
	if r.uncounted(topic) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settles = true
	if n := r.creating[topic]; n > 1 {
		r.creating[topic] = n - 1
	} else {
		delete(r.creating, topic)
	}
	if created {
		if r.made == nil {
			r.made = map[string]struct{}{}
		}
		r.made[topic] = struct{}{}
	}
}

func (r *ReplyTopics) allows(topic string) bool {
	for _, p := range r.Create {
		if p == "*" || strings.HasPrefix(topic, p) {
			return true
		}
	}
	return false
}

func (r *ReplyTopics) rule() string {
	if len(r.Create) == 0 {
		return "no reply topic"
	}
	return "only the reply topics named " + strings.Join(r.Create, "…, ") + "…"
}

// ParseReplyTopicPrefixes reads --reply-topics-create: comma-separated prefixes
// of reply topic names (letters, digits, '.', '_', '-'), "*" for any name, or
// "none".
func ParseReplyTopicPrefixes(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "none" || s == "" {
		return nil, nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "*":
		case p == "":
			return nil, fmt.Errorf("an empty prefix in %q (none: \"none\"; any name: \"*\")", s)
		default:
			if err := checkReplyTopic(p); err != nil {
				return nil, fmt.Errorf("prefix %q: %w", p, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}
