package kafka

import (
	kafkago "github.com/segmentio/kafka-go"
)

// Balancer returns the partitioner of every Troupe producer: the Java client's
// murmur2 (see the package doc). Records of other producers that land elsewhere on
// troupe.tasks (kcat's default hashes keys with CRC32) cost a node a forward to the
// session's partition; kcat's -X partitioner=murmur2_random puts them there directly.
func Balancer() kafkago.Balancer {
	return kafkago.Murmur2Balancer{}
}

// Partition returns the partition a record with key goes to on a topic with
// numPartitions partitions: toPositive(murmur2(key)) % numPartitions, as the Java
// client computes it. A nil key is hashed like an empty one here, although a
// producer puts a record without a key on a random partition. It panics if
// numPartitions < 1.
func Partition(key []byte, numPartitions int) int {
	if numPartitions < 1 {
		panic("kafka: Partition needs at least one partition")
	}
	if key == nil {
		key = []byte{} // a nil key would be placed at random
	}
	var parts []int
	if numPartitions <= len(partitionIDs) {
		parts = partitionIDs[:numPartitions]
	} else {
		parts = make([]int, numPartitions)
		for i := range parts {
			parts[i] = i
		}
	}
	return kafkago.Murmur2Balancer{}.Balance(kafkago.Message{Key: key}, parts...)
}

// partitionIDs are 0, 1, … for Partition, which would otherwise make the list of a
// topic's partitions with every call (the node computes a session's partition for
// every task it reads).
var partitionIDs = func() []int {
	ids := make([]int, 1024)
	for i := range ids {
		ids[i] = i
	}
	return ids
}()
