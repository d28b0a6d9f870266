package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	milvus "github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"
	"github.com/segmentio/kafka-go"
)

// serviceAddr returns the address in the environment variable name, or skips
// the test with the reason when it is unset.
func serviceAddr(t *testing.T, name, service string) string {
	t.Helper()
	addr := os.Getenv(name)
	if addr == "" {
		t.Skipf("%s is not set: skipping the %s smoke test (start the services with deploy/services.sh up, then export the variables it prints)", name, service)
	}
	return addr
}

// uniqueName returns prefix followed by a random suffix, so that concurrent
// or repeated runs against one server never share a topic, collection or table.
func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random name: %v", err)
	}
	return prefix + hex.EncodeToString(b)
}

// cleanupContext is for t.Cleanup work, which runs after the test's own
// context may have expired.
func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// TestKafkaSmoke creates a topic, produces keyed messages, consumes them
// through a consumer group that commits its offsets, and checks both the
// messages and the committed offsets.
func TestKafkaSmoke(t *testing.T) {
	addr := serviceAddr(t, "TROUPE_TEST_KAFKA", "Kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const partitions = 3
	const count = 30
	topic := uniqueName(t, "troupe.smoke.")
	group := uniqueName(t, "troupe-smoke-")
	client := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 20 * time.Second}

	created, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}},
	})
	if err != nil {
		t.Fatalf("create topic %s on %s: %v", topic, addr, err)
	}
	if err := created.Errors[topic]; err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		res, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topic}})
		if err == nil {
			err = res.Errors[topic]
		}
		if err != nil {
			t.Errorf("delete topic %s: %v", topic, err)
		}
	})

	writer := &kafka.Writer{
		Addr:         kafka.TCP(addr),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 10 * time.Millisecond,
		MaxAttempts:  20, // the new topic's leaders may take a moment to appear
	}
	defer writer.Close()
	want := make(map[string]string, count)
	msgs := make([]kafka.Message, 0, count)
	for i := range count {
		key := fmt.Sprintf("session-%02d", i)
		value := fmt.Sprintf("task %d for %s", i, topic)
		want[key] = value
		msgs = append(msgs, kafka.Message{Key: []byte(key), Value: []byte(value)})
	}
	if err := writer.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce %d messages to %s: %v", count, topic, err)
	}

	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:        []string{addr},
		GroupID:        group,
		Topic:          topic,
		StartOffset:    kafka.FirstOffset,
		MinBytes:       1,
		MaxBytes:       1 << 20,
		MaxWait:        250 * time.Millisecond,
		CommitInterval: 0, // CommitMessages commits synchronously
	})
	defer reader.Close()
	got := make(map[string]string, count)
	for len(got) < count {
		m, err := reader.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("consume from %s as group %s after %d of %d messages: %v", topic, group, len(got), count, err)
		}
		if _, dup := got[string(m.Key)]; dup {
			t.Fatalf("message %q delivered twice", m.Key)
		}
		got[string(m.Key)] = string(m.Value)
		if err := reader.CommitMessages(ctx, m); err != nil {
			t.Fatalf("commit offset %d of partition %d: %v", m.Offset, m.Partition, err)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("message %s: got %q, want %q", k, got[k], v)
		}
	}

	// Every message was committed, so the group's committed offsets (one past
	// the last consumed message of each partition) add up to the count.
	ids := make([]int, partitions)
	for p := range ids {
		ids[p] = p
	}
	offsets, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: group,
		Topics:  map[string][]int{topic: ids},
	})
	if err != nil {
		t.Fatalf("fetch committed offsets of group %s: %v", group, err)
	}
	if offsets.Error != nil {
		t.Fatalf("fetch committed offsets of group %s: %v", group, offsets.Error)
	}
	var committed int64
	for _, p := range offsets.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("committed offset of partition %d: %v", p.Partition, p.Error)
		}
		if p.CommittedOffset > 0 {
			committed += p.CommittedOffset
		}
	}
	if committed != count {
		t.Errorf("committed offsets add up to %d, want %d (%+v)", committed, count, offsets.Topics[topic])
	}
}

// TestMilvusSmoke creates a collection, inserts vectors, indexes and loads it,
// and checks that a search returns the nearest neighbour.
func TestMilvusSmoke(t *testing.T) {
	addr := serviceAddr(t, "TROUPE_TEST_MILVUS", "Milvus")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	step := func(what string) { t.Logf("%-28s done at %v", what, time.Since(start).Round(time.Millisecond)) }

	dialCtx, dialCancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := milvus.NewClient(dialCtx, milvus.Config{Address: addr})
	dialCancel()
	if err != nil {
		t.Fatalf("connect to Milvus at %s: %v", addr, err)
	}
	step("connect")
	// Cleanups run last-registered first: the collection is dropped before
	// the client closes.
	t.Cleanup(func() { c.Close() })

	const dim = 8
	const rows = 200
	coll := uniqueName(t, "troupe_smoke_")
	schema := entity.NewSchema().
		WithName(coll).
		WithDescription("troupe deploy smoke test").
		WithField(entity.NewField().WithName("id").WithDataType(entity.FieldTypeVarChar).
			WithIsPrimaryKey(true).WithMaxLength(64)).
		WithField(entity.NewField().WithName("chunk").WithDataType(entity.FieldTypeInt64)).
		WithField(entity.NewField().WithName("embedding").WithDataType(entity.FieldTypeFloatVector).
			WithDim(dim))
	if err := c.CreateCollection(ctx, schema, 1, milvus.WithConsistencyLevel(entity.ClStrong)); err != nil {
		t.Fatalf("create collection %s: %v", coll, err)
	}
	step("create collection")
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		if err := c.DropCollection(ctx, coll); err != nil {
			t.Errorf("drop collection %s: %v", coll, err)
		}
	})

	rng := mathrand.New(mathrand.NewPCG(7, 11))
	ids := make([]string, rows)
	chunks := make([]int64, rows)
	vectors := make([][]float32, rows)
	for i := range rows {
		ids[i] = fmt.Sprintf("doc-%03d", i)
		chunks[i] = int64(i)
		v := make([]float32, dim)
		for j := range v {
			v[j] = rng.Float32()*2 - 1
		}
		vectors[i] = v
	}
	if _, err := c.Insert(ctx, coll, "",
		entity.NewColumnVarChar("id", ids),
		entity.NewColumnInt64("chunk", chunks),
		entity.NewColumnFloatVector("embedding", dim, vectors),
	); err != nil {
		t.Fatalf("insert %d rows into %s: %v", rows, coll, err)
	}
	step("insert")
	if err := c.Flush(ctx, coll, false); err != nil {
		t.Fatalf("flush %s: %v", coll, err)
	}
	step("flush")
	idx, err := entity.NewIndexFlat(entity.L2)
	if err != nil {
		t.Fatalf("flat index: %v", err)
	}
	if err := c.CreateIndex(ctx, coll, "embedding", idx, false); err != nil {
		t.Fatalf("create index on %s: %v", coll, err)
	}
	step("create index")
	if err := c.LoadCollection(ctx, coll, false); err != nil {
		t.Fatalf("load %s: %v", coll, err)
	}
	step("load")

	// Query with a slightly moved copy of one row: that row is the nearest.
	const target = 137
	query := make([]float32, dim)
	for j, x := range vectors[target] {
		query[j] = x + 0.001
	}
	wantID, wantDist := nearest(vectors, query)
	if wantID != target {
		t.Fatalf("test data: nearest row is %d, want %d", wantID, target)
	}
	sp, err := entity.NewIndexFlatSearchParam()
	if err != nil {
		t.Fatalf("search param: %v", err)
	}
	res, err := c.Search(ctx, coll, nil, "", []string{"chunk"},
		[]entity.Vector{entity.FloatVector(query)}, "embedding", entity.L2, 3, sp,
		milvus.WithSearchQueryConsistencyLevel(entity.ClStrong))
	if err != nil {
		t.Fatalf("search %s: %v", coll, err)
	}
	step("search")
	if len(res) != 1 || res[0].ResultCount == 0 {
		t.Fatalf("search %s: got %d result sets (%+v), want 1 with hits", coll, len(res), res)
	}
	top, err := res[0].IDs.GetAsString(0)
	if err != nil {
		t.Fatalf("read top hit ID: %v", err)
	}
	if top != ids[target] {
		t.Errorf("nearest neighbour is %s, want %s", top, ids[target])
	}
	chunkCol := res[0].Fields.GetColumn("chunk")
	if chunkCol == nil {
		t.Fatalf("search result lacks output field chunk")
	}
	chunk, err := chunkCol.GetAsInt64(0)
	if err != nil || chunk != target {
		t.Errorf("top hit chunk = %d (err %v), want %d", chunk, err, target)
	}
	// Milvus reports squared L2 distance for L2.
	if got := float64(res[0].Scores[0]); math.Abs(got-wantDist) > 1e-4 {
		t.Errorf("top hit distance = %g, want %g", got, wantDist)
	}
}

// nearest returns the index of the row nearest to q and its squared L2 distance.
func nearest(rows [][]float32, q []float32) (int, float64) {
	best, bestDist := -1, math.Inf(1)
	for i, r := range rows {
		var d float64
		for j := range r {
			x := float64(r[j] - q[j])
			d += x * x
		}
		if d < bestDist {
			best, bestDist = i, d
		}
	}
	return best, bestDist
}

// TestClickHouseSmoke creates a database and a MergeTree table, batch-inserts
// rows with an explicit column list, reads them back and checks them.
//
// The DDL and queries stay within what ClickHouse 18.16 (Debian's package)
// and current releases both accept: MergeTree with ORDER BY, DateTime (not
// DateTime64), and inserts through PrepareBatch (Exec of INSERT ... VALUES
// hangs against 18.16).
func TestClickHouseSmoke(t *testing.T) {
	addr := serviceAddr(t, "TROUPE_TEST_CLICKHOUSE", "ClickHouse")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		Protocol:    clickhouse.Native,
		Auth:        clickhouse.Auth{Database: "default", Username: "default"},
		DialTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatalf("open ClickHouse at %s: %v", addr, err)
	}
	// Cleanups run last-registered first: the database is dropped before the
	// connection closes.
	t.Cleanup(func() { conn.Close() })
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("ping ClickHouse at %s: %v", addr, err)
	}

	db := uniqueName(t, "troupe_smoke_")
	if err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatalf("create database %s: %v", db, err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("drop database %s: %v", db, err)
		}
	})
	table := db + ".events"
	if err := conn.Exec(ctx, `CREATE TABLE `+table+` (
		session_id String,
		seq UInt64,
		type String,
		ts DateTime,
		payload String
	) ENGINE = MergeTree() ORDER BY (session_id, seq)`); err != nil {
		t.Fatalf("create table %s: %v", table, err)
	}

	type event struct {
		session string
		seq     uint64
		typ     string
		ts      time.Time
		payload string
	}
	base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var want []event
	for s := range 3 {
		for q := range 20 {
			want = append(want, event{
				session: fmt.Sprintf("session-%d", s),
				seq:     uint64(q + 1),
				typ:     []string{"TaskReceived", "LLMResponded", "ToolCompleted"}[q%3],
				ts:      base.Add(time.Duration(s*100+q) * time.Second),
				payload: fmt.Sprintf(`{"step":%d}`, q),
			})
		}
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" (session_id, seq, type, ts, payload)")
	if err != nil {
		t.Fatalf("prepare batch for %s: %v", table, err)
	}
	for _, e := range want {
		if err := batch.Append(e.session, e.seq, e.typ, e.ts, e.payload); err != nil {
			t.Fatalf("append to batch: %v", err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("send batch of %d rows to %s: %v", len(want), table, err)
	}

	rows, err := conn.Query(ctx, "SELECT session_id, seq, type, ts, payload FROM "+table+" ORDER BY session_id, seq")
	if err != nil {
		t.Fatalf("select from %s: %v", table, err)
	}
	var got []event
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.session, &e.seq, &e.typ, &e.ts, &e.payload); err != nil {
			rows.Close()
			t.Fatalf("scan row %d: %v", len(got), err)
		}
		got = append(got, e)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatalf("read rows of %s: %v", table, err)
	}
	sort.Slice(want, func(i, j int) bool {
		if want[i].session != want[j].session {
			return want[i].session < want[j].session
		}
		return want[i].seq < want[j].seq
	})
	if len(got) != len(want) {
		t.Fatalf("read %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.session != w.session || g.seq != w.seq || g.typ != w.typ || g.payload != w.payload || !g.ts.Equal(w.ts) {
			t.Errorf("row %d: got %+v, want %+v", i, g, w)
		}
	}

	// An aggregate over the same rows: the gap-free seq invariant per session.
	var sessions, maxSeq, total uint64
	if err := conn.QueryRow(ctx, "SELECT uniqExact(session_id), max(seq), count() FROM "+table).
		Scan(&sessions, &maxSeq, &total); err != nil {
		t.Fatalf("aggregate over %s: %v", table, err)
	}
	if sessions != 3 || maxSeq != 20 || total != 60 {
		t.Errorf("aggregate = (%d sessions, max seq %d, %d rows), want (3, 20, 60)", sessions, maxSeq, total)
	}
}
