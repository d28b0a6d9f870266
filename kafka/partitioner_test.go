package kafka_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
)

// javaMurmur2 is Utils.murmur2 of the Kafka Java client
// (clients/src/main/java/org/apache/kafka/common/utils/Utils.java), transcribed with
// Java's int arithmetic: 32-bit two's complement, >>> as an unsigned shift, and the
// switch on the trailing bytes falling through.
func javaMurmur2(data []byte) int32 {
	length := int32(len(data))
	const seed = int32(-1756908916) // 0x9747b28c
	const m = int32(0x5bd1e995)
	const r = 24
	h := seed ^ length
	for i := int32(0); i < length/4; i++ {
		i4 := i * 4
		k := int32(data[i4+0]&0xff) + int32(data[i4+1]&0xff)<<8 + int32(data[i4+2]&0xff)<<16 + int32(data[i4+3]&0xff)<<24
		k *= m
		k ^= int32(uint32(k) >> r)
		k *= m
		h *= m
		h ^= k
	}
	switch length % 4 {
	case 3:
		h ^= int32(data[(length&^3)+2]&0xff) << 16
		fallthrough
	case 2:
		h ^= int32(data[(length&^3)+1]&0xff) << 8
		fallthrough
	case 1:
		h ^= int32(data[length&^3] & 0xff)
		h *= m
	}
	h ^= int32(uint32(h) >> 13)
	h *= m
	h ^= int32(uint32(h) >> 15)
	return h
}

// javaPartition is the Java client's partition for a keyed record:
// Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions.
func javaPartition(key []byte, numPartitions int) int {
	return int(javaMurmur2(key)&0x7fffffff) % numPartitions
}

// TestJavaMurmur2Reference checks the transcription against hashes the Java client
// is known to produce: UtilsTest.testMurmur2 in the Kafka source, and librdkafka's
// Java-compatibility table (rdmurmur2.c).
func TestJavaMurmur2Reference(t *testing.T) {
	for key, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc":   479470107,
		"kafka": int32(-798503068), // 0xd067cf64
		"":      0x106e08d9,
	} {
		if got := javaMurmur2([]byte(key)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", key, got, want)
		}
	}
}

// partitionVectors are key -> partition pairs of the Java client, computed with
// javaMurmur2. A change to Balancer that moves any of them would move live
// sessions between partitions.
var partitionVectors = []struct {
	key        string
	partitions int
	want       int
}{
	{"s-9", 3, 0}, // kafka-go's Hash says 2, librdkafka's consistent_random (CRC32) 1
	{"s-9", 4, 2},
	{"s-9", 12, 6},
	{"s-1", 2, 1},
	{"s-1", 3, 1},
	{"s-1", 4, 3},
	{"s-1", 12, 7},
	{"s-2", 3, 0},
	{"s-2", 12, 3},
	{"s-3", 4, 2},
	{"s-3", 12, 10},
	{"session-1", 3, 1},
	{"session-1", 12, 4},
	{"kafka", 1, 0},
}

func TestPartitionMatchesJavaClient(t *testing.T) {
	for _, v := range partitionVectors {
		if ref := javaPartition([]byte(v.key), v.partitions); ref != v.want {
			t.Fatalf("vector %q/%d: the Java reference says %d, the table %d", v.key, v.partitions, ref, v.want)
		}
		if got := kafka.Partition([]byte(v.key), v.partitions); got != v.want {
			t.Errorf("Partition(%q, %d) = %d, want %d (Java client)", v.key, v.partitions, got, v.want)
		}
	}
	// Random keys, every length remainder, up to 64 partitions.
	rng := rand.New(rand.NewPCG(1, 2))
	parts := make([]int, 64)
	for i := range parts {
		parts[i] = i
	}
	b := kafka.Balancer()
	for range 5000 {
		key := make([]byte, rng.IntN(40))
		for i := range key {
			key[i] = byte(rng.IntN(256))
		}
		n := 1 + rng.IntN(64)
		want := javaPartition(key, n)
		if got := b.Balance(kafkago.Message{Key: key}, parts[:n]...); got != want {
			t.Fatalf("Balancer puts key %x on partition %d of %d, the Java client on %d", key, got, n, want)
		}
	}
}

// TestPartitionersDisagree records why the partitioner is pinned: the three common
// defaults put the same key on three different partitions.
func TestPartitionersDisagree(t *testing.T) {
	parts := []int{0, 1, 2}
	msg := kafkago.Message{Key: []byte("s-9")}
	got := map[string]int{
		"murmur2 (Java, Troupe)":      kafka.Balancer().Balance(msg, parts...),
		"kafka-go Hash (FNV-1a)":      (&kafkago.Hash{}).Balance(msg, parts...),
		"CRC32 (librdkafka/kcat dft)": kafkago.CRC32Balancer{}.Balance(msg, parts...),
	}
	want := map[string]int{"murmur2 (Java, Troupe)": 0, "kafka-go Hash (FNV-1a)": 2, "CRC32 (librdkafka/kcat dft)": 1}
	for name, p := range want {
		if got[name] != p {
			t.Errorf("%s puts s-9 on partition %d of 3, want %d", name, got[name], p)
		}
	}
}

// TestPublisherPartitionsBySession publishes through the Publisher and checks that
// each record landed on the Java client's partition for its session key.
func TestPublisherPartitionsBySession(t *testing.T) {
	c := newCluster(t)
	const partitions = 3
	topic := uniqueName(t, "troupe.test.partitions.")
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) {
		cfg.Topics.Topics = map[string]kafka.TopicConfig{topic: {Partitions: partitions}}
	})
	sub := c.subscriber(t, "", nil)
	defer closeAll(t, pub, sub)

	want := map[string]int{} // message UUID -> partition
	var batch []*message.Message
	for i := range 30 {
		sid := fmt.Sprintf("s-%d", i%10)
		msg := sessionMessage(sid, fmt.Sprint(i))
		want[msg.UUID] = javaPartition([]byte(sid), partitions)
		batch = append(batch, msg)
	}
	if err := pub.Publish(topic, batch...); err != nil {
		t.Fatalf("publish: %v", err)
	}
	ch, err := sub.Subscribe(testContext(t, time.Minute), topic)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	for range len(want) {
		msg := receive(t, ch, 30*time.Second)
		rec, ok := kafka.Record(msg.Context())
		if !ok {
			t.Fatalf("message %s has no record info in its context", msg.UUID)
		}
		if rec.Partition != want[msg.UUID] || string(rec.Key) != msg.Metadata.Get("session_id") {
			t.Errorf("message of %s (key %q) on partition %d, want %d", msg.Metadata.Get("session_id"), rec.Key, rec.Partition, want[msg.UUID])
		}
		msg.Ack()
	}
}
