package knowledge_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/vectorstore"
)

// chKillChildEnv tells a re-executed test binary to act as
// TestCompactionKillNineOnClickHouseHelper: its value is the database, and
// chKillChildEnv+"_DIR" the directory of the vector store.
const chKillChildEnv = "TROUPE_KB_CH_COMPACT_CHILD"

const (
	chKillDocs = 30 // live documents
	chKillGone = 8  // documents added and removed in the first round
)

// TestCompactionKillNineOnClickHouseHelper is not a test:
// TestCompactionKillNineOnClickHouse runs the test binary again with
// chKillChildEnv set, and this function then re-ingests every document round
// after round on the ClickHouse log (compacting as it goes, a batch of 64),
// printing each round it finished, until it is killed.
func TestCompactionKillNineOnClickHouseHelper(t *testing.T) {
	db := os.Getenv(chKillChildEnv)
	if db == "" {
		t.Skip("runs only as TestCompactionKillNineOnClickHouse's child")
	}
	first, _ := strconv.Atoi(os.Getenv(chKillChildEnv + "_ROUND"))
	log, err := clickhouse.Open(testCtx(t), clickhouse.Config{Addr: clickhouse.SplitAddr(os.Getenv("TROUPE_TEST_CLICKHOUSE")),
		Database: db, FlushInterval: time.Millisecond, CompactMin: knowledge.CompactMin})
	if err != nil {
		t.Fatal(err)
	}
	store, err := vectorstore.Open(vectorstore.Config{Path: filepath.Join(os.Getenv(chKillChildEnv+"_DIR"), "vectors"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := knowledge.Open(knowledge.Config{Log: log, Vectors: store, Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bs.Base(context.Background(), "docs")
	if err != nil {
		t.Fatal(err)
	}
	if first == 0 {
		for d := range chKillGone {
			addText(t, b, fmt.Sprintf("gone/%03d.md", d), fmt.Sprintf("# Gone %d\n\nA document removed at once: the word is ocelot%d.", d, d))
			if err := b.Remove(testCtx(t), fmt.Sprintf("gone/%03d.md", d), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := first; ; round++ {
		reingest(t, b, chKillDocs, round)
		fmt.Printf("round %d done\n", round)
	}
}

// mutationsOn counts the mutations of table in database, and those not done.
func mutationsOn(t *testing.T, conn driver.Conn, db, table string) (all, running int) {
	t.Helper()
	var n, left uint64
	if err := conn.QueryRow(testCtx(t), "SELECT count(), countIf(is_done = 0) FROM system.mutations WHERE database = ? AND table = ?",
		db, table).Scan(&n, &left); err != nil {
		t.Fatal(err)
	}
	return int(n), int(left)
}

// TestCompactionKillNineOnClickHouse kills a process that re-ingests a base
// on the ClickHouse log with SIGKILL at points of its compactions: as the
// mutations that delete the events start (they go on in the server); once
// they are done, before the stream's summary is written anew (the process
// frozen with SIGSTOP meanwhile); and there, with the summary's row deleted
// as a kill right after the summary's own deletion leaves it. After each, a
// process that opens the log finds the base whole: every live document once,
// at least at the revision of the last round finished, none of the removed
// ones; the base listed, its summary counting the events stored; a search
// that answers; and the process started again compacts on.
func TestCompactionKillNineOnClickHouse(t *testing.T) {
	if testing.Short() {
		// .ci/run's race pass (-short) would kill and start its children under the
		// race detector, minutes on two busy cores; its plain pass runs it.
		t.Skip("kills and restarts whole processes: run without -short")
	}
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set: start ClickHouse (deploy/clickhouse.sh) and set it to host:port")
	}
	db := chtest.Database(t, addr, "kbkill_")
	dir := t.TempDir()
	admin, err := ch.Open(&ch.Options{Addr: clickhouse.SplitAddr(addr), Protocol: ch.Native})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	round := 0
	for kill, how := range []string{"mutating", "before the summary", "summary deleted", "mutating", "before the summary"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCompactionKillNineOnClickHouseHelper$", "-test.count=1", "-test.timeout=0")
		cmd.Env = append(os.Environ(), chKillChildEnv+"="+db, chKillChildEnv+"_DIR="+dir, chKillChildEnv+"_ROUND="+strconv.Itoa(round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		seen := 0
		if kill > 0 {
			seen, _ = mutationsOn(t, admin, db, "events")
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		rounds := make(chan int, 1000)
		go func() {
			defer close(rounds)
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "round" && f[2] == "done" {
					n, _ := strconv.Atoi(f[1])
					rounds <- n
				}
			}
			_, _ = io.Copy(io.Discard, out)
		}()
		// Wait for the child's next compaction: a new mutation of events.
		for {
			n, _ := mutationsOn(t, admin, db, "events")
			if n > seen {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("kill %d: no compaction ran", kill)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if how == "mutating" {
			_ = cmd.Process.Signal(syscall.SIGKILL)
		} else {
			_ = cmd.Process.Signal(syscall.SIGSTOP)
			for {
				_, left := mutationsOn(t, admin, db, "events")
				_, leftIDs := mutationsOn(t, admin, db, "event_ids")
				if left+leftIDs == 0 {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("kill %d: the mutations never ended", kill)
				}
				time.Sleep(10 * time.Millisecond)
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			if how == "summary deleted" {
				if err := admin.Exec(testCtx(t), "ALTER TABLE "+db+".sessions DELETE WHERE session_id = ?", knowledge.Stream("docs")); err != nil {
					t.Fatal(err)
				}
			}
		}
		for n := range rounds { // to the pipe's end: the rounds finished before the kill landed
			round = n + 1
		}
		_ = cmd.Wait()
		cancel()
		checkKilledBase(t, addr, db, fmt.Sprintf("kill %d (%s) after round %d", kill, how, round-1), round)
	}
}

// checkKilledBase opens the log and the base as a restarted process would and
// checks what TestCompactionKillNineOnClickHouse says.
func checkKilledBase(t *testing.T, addr, db, what string, round int) {
	t.Helper()
	log, err := clickhouse.Open(testCtx(t), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = log.Close() }()
	bs, err := knowledge.Open(knowledge.Config{Log: log, Vectors: openStore(t, ""), Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bs.Close() }()
	b, err := bs.Base(testCtx(t), "docs")
	if err != nil {
		t.Fatalf("%s: folding the base: %v", what, err)
	}
	docs := b.Documents()
	if len(docs) != chKillDocs {
		t.Fatalf("%s: %d documents, want %d: %v", what, len(docs), chKillDocs, docs)
	}
	for _, d := range docs {
		if !strings.HasPrefix(d.Source, "docs/") {
			t.Fatalf("%s: %s is back", what, d.Source)
		}
		chunks, _ := b.Chunks(d.Source)
		var text []string
		for _, c := range chunks {
			text = append(text, c.Content)
		}
		all := strings.Join(text, " ")
		v := -1
		if i := strings.Index(all, "Revision "); i >= 0 {
			_, _ = fmt.Sscanf(all[i:], "Revision %d", &v)
		}
		if v < round-1 {
			t.Fatalf("%s: %s is at revision %d, but round %d was finished", what, d.Source, v, round-1)
		}
	}
	res, err := b.Search(testCtx(t), knowledge.Query{Text: "harbour log of pier 7", Mode: knowledge.ModeBM25, Limit: 3})
	if err != nil || len(res.Hits) == 0 || res.Hits[0].Source != "docs/007.md" {
		t.Fatalf("%s: search: %+v, %v; want docs/007.md first", what, res.Hits, err)
	}
	if res, err := b.Search(testCtx(t), knowledge.Query{Text: "ocelot3", Mode: knowledge.ModeBM25}); err != nil || len(res.Hits) != 0 {
		t.Fatalf("%s: a removed document is found: %+v, %v", what, res.Hits, err)
	}
	// The summary counts what is stored, and lists the base: a restarted
	// process repairs one a compaction left stale, in the background.
	stored := len(events(t, log, "docs"))
	deadline := time.Now().Add(time.Minute) // a hang guard
	for {
		infos, err := log.Sessions(testCtx(t), eventlog.Filter{Prefix: knowledge.Stream("docs")})
		if err != nil {
			t.Fatal(err)
		}
		names, err := bs.List(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) == 1 && infos[0].Events == stored && slices.Equal(names, []string{"docs"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the log's summary of the stream is %+v and the bases listed %v; want %d events stored", what, infos, names, stored)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s: %d documents, %d events", what, len(docs), stored)
}
