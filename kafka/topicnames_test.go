package kafka_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/kafka"
)

// A topics file line whose name Kafka would refuse, or that a byte order mark
// (an editor's) makes another name, was taken: the topic the operator meant got
// the default layout (12 partitions, one replica) without a word.
func TestParseTopicsRefusesNamesKafkaRefuses(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"\ufefftroupe.tasks 24 3 604800000\n", "line 1"},
		{"# t\ntroupe/tasks 24 3 604800000\n", "line 2"},
		{"troupe.tasks 24 3 604800000\n" + strings.Repeat("x", 250) + " 1 1 1\n", "line 2"},
	} {
		_, err := kafka.ParseTopics(strings.NewReader(c.file))
		if !errors.Is(err, kafka.ErrInvalidTopic) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want ErrInvalidTopic at %s", c.file[:20], err, c.want)
		}
	}
}
