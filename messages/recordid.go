package messages

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RecordID is the message ID of a record without a UUID header:
// "kafka:<topic>/<partition>/<offset>@<timestamp>", the topic as named on the
// wire and the timestamp the record's, in Unix milliseconds (its CreateTime,
// which its producer set, or its LogAppendTime, which its broker did). A record
// read again (after a crash, a rebalance) has the same ID, and so does a copy of
// it that keeps its timestamp (MirrorMaker's). Coordinates alone do not name a
// record: a topic deleted and created again, or a new cluster in front of the
// same log, numbers its records from offset 0 again; the timestamp tells its
// records from the earlier ones. A record with no timestamp (-1, a message
// format before Kafka 0.10) gets its coordinates alone,
// "kafka:<topic>/<partition>/<offset>".
func RecordID(topic string, partition int, offset int64, ts time.Time) string {
	id := CoordinatesID(topic, partition, offset)
	if ms := ts.UnixMilli(); !ts.IsZero() && ms > 0 {
		id += "@" + strconv.FormatInt(ms, 10)
	}
	return id
}

// CoordinatesID is "kafka:<topic>/<partition>/<offset>", the ID versions before
// RecordID gave a record without a UUID header: such a task is recorded under it.
func CoordinatesID(topic string, partition int, offset int64) string {
	return fmt.Sprintf("kafka:%s/%d/%d", topic, partition, offset)
}

// SplitRecordID returns the coordinates' ID (CoordinatesID) and the timestamp of
// an ID RecordID made with a timestamp; ok is false for any other ID.
func SplitRecordID(id string) (coordinates string, ts time.Time, ok bool) {
	rest, found := strings.CutPrefix(id, "kafka:")
	if !found {
		return "", time.Time{}, false
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return "", time.Time{}, false
	}
	ms, err := strconv.ParseInt(rest[at+1:], 10, 64)
	if err != nil || ms <= 0 || strconv.FormatInt(ms, 10) != rest[at+1:] {
		return "", time.Time{}, false
	}
	parts := strings.Split(rest[:at], "/")
	if len(parts) != 3 || parts[0] == "" {
		return "", time.Time{}, false
	}
	for _, n := range parts[1:] {
		if v, err := strconv.ParseInt(n, 10, 64); err != nil || v < 0 || strconv.FormatInt(v, 10) != n {
			return "", time.Time{}, false
		}
	}
	return id[:len(id)-len(rest[at:])], time.UnixMilli(ms).UTC(), true
}
