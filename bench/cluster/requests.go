package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// requestCounter counts, at kfake, the requests every client of the process sends
// (-requests): by kind, and for Produce and Fetch by topic (the name after the
// run's prefix), with the records produced. A control function that handles
// nothing observes each request in kfake's loop before kfake serves it.
type requestCounter struct {
	mu      sync.Mutex
	counts  map[string]int
	records map[string]int // records produced, by topic
}

func countRequests(c *kfake.Cluster) *requestCounter {
	rc := &requestCounter{counts: map[string]int{}, records: map[string]int{}}
	c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		rc.observe(req)
		return nil, nil, false
	})
	return rc
}

func (rc *requestCounter) observe(req kmsg.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.counts[kmsg.NameForKey(req.Key())]++
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		for _, t := range r.Topics {
			topic := shortTopic(t.Topic)
			rc.counts["Produce "+topic]++
			for _, p := range t.Partitions {
				rc.records[topic] += recordsIn(p.Records)
			}
		}
	case *kmsg.FetchRequest:
		for _, t := range r.Topics {
			rc.counts["Fetch "+shortTopic(t.Topic)]++
		}
	}
}

// recordsIn counts the records of the record batches in b.
func recordsIn(b []byte) int {
	n := 0
	for len(b) > 0 {
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(b); err != nil {
			break
		}
		n += int(batch.NumRecords)
		size := 12 + int(batch.Length) // FirstOffset and Length precede the Length bytes
		if size <= 12 || size > len(b) {
			break
		}
		b = b[size:]
	}
	return n
}

// shortTopic is a topic's name after the run's prefix: troupe.tasks, troupe.events, ...
func shortTopic(wire string) string {
	if i := strings.Index(wire, ".troupe."); i >= 0 {
		return wire[i+1:]
	}
	return wire
}

// take returns what was counted since the last take, per task of tasks ("" if
// nothing), and starts again.
func (rc *requestCounter) take(tasks int) string {
	if rc == nil {
		return ""
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.counts) == 0 {
		return ""
	}
	per := func(n int) string { return fmt.Sprintf("%.3f", float64(n)/float64(tasks)) }
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range rc.counts {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s %d (%s)", k, rc.counts[k], per(rc.counts[k])))
	}
	var recs []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range rc.records {
			if !yield(k) {
				return
			}
		}
	}) {
		recs = append(recs, fmt.Sprintf("%s %d (%s)", k, rc.records[k], per(rc.records[k])))
	}
	rc.counts, rc.records = map[string]int{}, map[string]int{}
	return fmt.Sprintf("kfake requests of the measured tasks (per task): %s; records produced: %s", strings.Join(parts, ", "), strings.Join(recs, ", "))
}
