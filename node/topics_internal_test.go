package node

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/troupe-run/troupe/kafka"
)

// deploy/kafka/topics.txt, the layout operators copy into --topics (and that
// deploy/kafka.sh and docker-compose create), names every topic a node creates.
// A topic missing from it is created with the default layout, one replica: the
// poison topic was, so with one broker down a node could not poison a bad record
// whose partition lived there and retried it until the broker came back.
func TestDeployTopicsFileNamesEveryTopicOfANode(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "deploy", "kafka", "topics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	topics, err := kafka.ParseTopics(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckLayoutTopics(slices.Collect(maps.Keys(topics))); err != nil {
		t.Error(err)
	}
	for _, name := range ownTopics() {
		if _, ok := topics[name]; !ok {
			t.Errorf("deploy/kafka/topics.txt lacks %s", name)
		}
	}
}
