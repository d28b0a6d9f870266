package kafka_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

func TestConfigValidate(t *testing.T) {
	brokers := []string{"127.0.0.1:9092"}
	for name, cfg := range map[string]kafka.PublisherConfig{
		"no brokers":       {},
		"empty broker":     {Brokers: []string{" "}},
		"negative timeout": {Brokers: brokers, PublishTimeout: -time.Second},
		"backoff order":    {Brokers: brokers, RetryBackoffMin: time.Second, RetryBackoffMax: time.Millisecond},
		"negative topic":   {Brokers: brokers, Topics: kafka.TopicLayout{Topics: map[string]kafka.TopicConfig{"t": {Partitions: -1}}}},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("publisher config %q: Validate accepted it", name)
		}
		if _, err := kafka.NewPublisher(cfg, nil); err == nil {
			t.Errorf("publisher config %q: NewPublisher accepted it", name)
		}
	}
	for name, cfg := range map[string]kafka.SubscriberConfig{
		"no brokers":         {},
		"initial offset":     {Brokers: brokers, InitialOffset: 7},
		"nack sleep":         {Brokers: brokers, NackResendSleep: -2 * time.Second},
		"max in flight":      {Brokers: brokers, MaxInFlight: -1},
		"heartbeat/session":  {Brokers: brokers, HeartbeatInterval: 10 * time.Second, SessionTimeout: 6 * time.Second},
		"empty topic name":   {Brokers: brokers, Topics: kafka.TopicLayout{Topics: map[string]kafka.TopicConfig{"": {}}}},
		"listener, no group": {Brokers: brokers, Rebalance: memberListener{}},
		"negative handoff":   {Brokers: brokers, HandoffWait: -time.Second},
		"handoff, default":   {Brokers: brokers, HandoffWait: 30 * time.Second},
		"handoff/rebalance":  {Brokers: brokers, HandoffWait: 5 * time.Second, RebalanceTimeout: 5 * time.Second},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("subscriber config %q: Validate accepted it", name)
		}
		if _, err := kafka.NewSubscriber(cfg, nil); err == nil {
			t.Errorf("subscriber config %q: NewSubscriber accepted it", name)
		}
	}
	if err := (kafka.PublisherConfig{Brokers: brokers}).Validate(); err != nil {
		t.Errorf("minimal publisher config: %v", err)
	}
	if err := (kafka.SubscriberConfig{Brokers: brokers, NackResendSleep: kafka.NoNackResendSleep}).Validate(); err != nil {
		t.Errorf("minimal subscriber config: %v", err)
	}
}

// TestParseTopicsDeployFile parses the repository's topic layout, so that the
// adapter and deploy/kafka.sh read the same file the same way.
func TestParseTopicsDeployFile(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "deploy", "kafka", "topics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	topics, err := kafka.ParseTopics(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{messages.TopicTasks, messages.TopicEvents, messages.TopicResults} {
		tc, ok := topics[name]
		if !ok {
			t.Errorf("deploy/kafka/topics.txt lacks %s", name)
			continue
		}
		if tc.Partitions < 1 || tc.ReplicationFactor < 1 || tc.Configs["retention.ms"] == "" {
			t.Errorf("%s: %+v", name, tc)
		}
	}
}

func TestParseTopicsErrors(t *testing.T) {
	for _, bad := range []string{
		"a 12 1",
		"a x 1 1000",
		"a 0 1 1000",
		"a 1 1 1000\na 2 1 1000",
	} {
		if _, err := kafka.ParseTopics(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseTopics accepted %q", bad)
		}
	}
	got, err := kafka.ParseTopics(strings.NewReader("# comment\n\n  t 3 2 -1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tc := got["t"]; tc.Partitions != 3 || tc.ReplicationFactor != 2 || tc.Configs["retention.ms"] != "-1" {
		t.Errorf("parsed %+v", got)
	}
}
