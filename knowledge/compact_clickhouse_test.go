package knowledge_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// The compaction of a knowledge base on the ClickHouse log, which deletes with
// mutations: TROUPE_TEST_CLICKHOUSE names the server (host:port, native).

// chLog is a ClickHouse log and a connection of the test's own to its database.
type chLog struct {
	*clickhouse.Log
	conn driver.Conn
}

func openClickHouse(t *testing.T, compactMin int) chLog {
	t.Helper()
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to host:port")
	}
	db := chtest.Database(t, addr, "kbtest_")
	l, err := clickhouse.Open(testCtx(t), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db,
		FlushInterval: time.Millisecond, CompactMin: compactMin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	conn, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(addr), Protocol: ch.Native, Auth: ch.Auth{Database: db}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return chLog{l, conn}
}

func chBases(t *testing.T, log eventlog.Log) *knowledge.Bases {
	t.Helper()
	bs, err := knowledge.Open(knowledge.Config{Log: log, Vectors: openStore(t, ""), Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing",
		Now: func() time.Time { return t0 }, EmbedBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close() })
	return bs
}

func chBase(t *testing.T, bs *knowledge.Bases, name string) *knowledge.Base {
	t.Helper()
	b, err := bs.Base(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storedEvents counts the events of a knowledge base's stream in ClickHouse:
// the distinct seqs its rows hold (Read dedupes; a count() of the raw table
// may count a row written twice until its parts merge).
func storedEvents(t *testing.T, l chLog, name string) int {
	t.Helper()
	var n uint64
	if err := l.conn.QueryRow(testCtx(t), "SELECT uniqExact(seq) FROM events WHERE session_id = ?", knowledge.Stream(name)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// TestCompactionBoundsTheStreamOnClickHouse re-ingests 300 documents 8 times on
// the ClickHouse log, with its default batch of deletions: the stream stays
// within the live documents, the tail and a batch, where it held 2,400 events
// before; the summary counts what is left, and a base folded anew is the same.
func TestCompactionBoundsTheStreamOnClickHouse(t *testing.T) {
	const docs, rounds = 300, 8
	log := openClickHouse(t, 0)
	b := chBase(t, chBases(t, log), "docs")
	bound := docs + knowledge.CompactTail + clickhouse.DefaultCompactMin + 2
	for round := range rounds {
		reingest(t, b, docs, round)
		if n := storedEvents(t, log, "docs"); n > bound {
			t.Fatalf("after round %d ClickHouse holds %d events of the stream for %d documents (bound %d)", round+1, n, docs, bound)
		}
	}
	for d := range 10 {
		if err := b.Remove(testCtx(t), fmt.Sprintf("docs/%03d.md", d), ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Compact(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	live := len(b.Documents())
	n := storedEvents(t, log, "docs")
	t.Logf("%d live documents: %d events stored after %d writes", live, n, docs*rounds+10)
	if max := live + knowledge.CompactTail + 2; n > max {
		t.Fatalf("after compaction ClickHouse holds %d events for %d live documents, want at most %d", n, live, max)
	}
	infos, err := log.Sessions(testCtx(t), eventlog.Filter{Prefix: knowledge.Stream("docs")})
	if err != nil || len(infos) != 1 || infos[0].Events != n {
		t.Fatalf("the log's summary of the stream: %+v, %v; want %d events", infos, err, n)
	}
	again := chBase(t, chBases(t, log), "docs")
	if fmt.Sprint(again.Documents()) != fmt.Sprint(b.Documents()) {
		t.Fatalf("documents folded anew differ:\n got %v\nwant %v", again.Documents(), b.Documents())
	}
}

// gatedLog holds an Append to a knowledge base's stream until released: the
// writer folded the stream, decided, and waits to append at its next seq.
type gatedLog struct {
	eventlog.Log
	held, release chan struct{}
}

func (g *gatedLog) Append(ctx context.Context, events []messages.Envelope) error {
	if g.held != nil && len(events) > 0 && eventlog.Compactable(events[0].SessionID) {
		close(g.held)
		g.held = nil
		<-g.release
	}
	return g.Log.Append(ctx, events)
}

// TestCompactionRefusesAStaleWriterAtAHole: a node folded a base and is about
// to append at its next seq when the owner writes past it and compacts, which
// deletes the event at that seq. The append must be refused (a hole below the
// stream's highest seq): filling it would put the document before events the
// owner folded already, so that the owner, catching up from its own seq,
// would never see it. Refused, the writer folds again and appends after them.
func TestCompactionRefusesAStaleWriterAtAHole(t *testing.T) {
	const docs = 20
	log := openClickHouse(t, 0)
	owner := chBase(t, chBases(t, log), "docs")
	reingest(t, owner, docs, 0)
	gate := &gatedLog{Log: log, held: make(chan struct{}), release: make(chan struct{})}
	late := chBase(t, chBases(t, gate), "docs")
	held := gate.held
	wrote := make(chan error, 1)
	go func() {
		_, err := late.AddText(testCtx(t), "docs/late.md", "# Late\n\nWritten by a node that folded before the compaction.", "")
		wrote <- err
	}()
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("the late writer never appended")
	}
	for round := 1; round < 5; round++ {
		reingest(t, owner, docs, round)
	}
	deleted, err := owner.Compact(testCtx(t))
	if err != nil || deleted < docs {
		t.Fatalf("Compact = %d, %v; want the first rounds' events deleted", deleted, err)
	}
	highest := uint64(docs * 5)
	close(gate.release)
	if err := <-wrote; err != nil {
		t.Fatalf("the late writer: %v", err)
	}
	es := events(t, log, "docs")
	if last := es[len(es)-1]; last.Seq != highest+1 {
		t.Fatalf("the stream ends at seq %d (%s), want the late document at %d, after the owner's events", last.Seq, last.Type, highest+1)
	}
	if err := owner.Refresh(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := len(owner.Documents()); got != docs+1 {
		t.Fatalf("the owner, caught up, has %d documents, want %d", got, docs+1)
	}
	again := chBase(t, chBases(t, log), "docs")
	if fmt.Sprint(again.Documents()) != fmt.Sprint(owner.Documents()) || fmt.Sprint(late.Documents()) != fmt.Sprint(owner.Documents()) {
		t.Fatalf("the bases differ:\n anew %v\n late %v\nowner %v", again.Documents(), late.Documents(), owner.Documents())
	}
}

// TestCompactionUnderConcurrentFoldsOnClickHouse folds the base anew, again
// and again, while its owner re-ingests its documents and compacts (a batch of
// 64 here, for many mutations); the stream also holds documents removed, whose
// events go too. Each fold, which may read the stream while a mutation has
// rewritten some of its parts and not others, finds the live documents, once.
func TestCompactionUnderConcurrentFoldsOnClickHouse(t *testing.T) {
	const docs, gone = 60, 20
	log := openClickHouse(t, knowledge.CompactMin)
	b := chBase(t, chBases(t, log), "docs")
	reingest(t, b, docs, 0)
	for d := range gone {
		addText(t, b, fmt.Sprintf("gone/%03d.md", d), fmt.Sprintf("# Gone %d\n\nA document removed soon.", d))
	}
	for d := range gone {
		if err := b.Remove(testCtx(t), fmt.Sprintf("gone/%03d.md", d), ""); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	errs := make(chan error, 1)
	folds := 0
	go func() {
		defer close(errs)
		for {
			select {
			case <-done:
				return
			default:
			}
			bs, err := knowledge.Open(knowledge.Config{Log: log, Vectors: openStore(t, ""), Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing",
				Now: func() time.Time { return t0 }})
			if err != nil {
				errs <- err
				return
			}
			base, err := bs.Base(testCtx(t), "docs")
			if err == nil && len(base.Documents()) != docs {
				err = fmt.Errorf("a fold during the compactions found %d documents, want %d: %v", len(base.Documents()), docs, base.Documents())
			}
			_ = bs.Close()
			if err != nil {
				errs <- err
				return
			}
			folds++
		}
	}()
	for round := 1; round < 6; round++ {
		reingest(t, b, docs, round)
	}
	close(done)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	n := storedEvents(t, log, "docs")
	t.Logf("%d folds; %d events stored", folds, n)
	if n >= 4*docs {
		t.Fatalf("the stream holds %d events: it was not compacted", n)
	}
}
