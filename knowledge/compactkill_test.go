package knowledge_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/vectorstore"
)

// compactChildEnv tells a re-executed test binary to act as
// TestCompactionKillNineHelper in the directory it names.
const compactChildEnv = "TROUPE_KB_COMPACT_CHILD"

const killDocs = 100

// TestCompactionKillNineHelper is not a test: TestCompactionSurvivesKillNine runs
// the test binary again with compactChildEnv set, and this function then
// re-ingests every document round after round (compacting as it goes), printing
// each round it finished, until it is killed.
func TestCompactionKillNineHelper(t *testing.T) {
	dir := os.Getenv(compactChildEnv)
	if dir == "" {
		t.Skip("runs only as TestCompactionSurvivesKillNine's child")
	}
	first, _ := strconv.Atoi(os.Getenv(compactChildEnv + "_ROUND"))
	log := openLog(t, dir)
	store, err := vectorstore.Open(vectorstore.Config{Path: filepath.Join(dir, "vectors"), NoSync: true})
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
	for round := first; ; round++ {
		reingest(t, b, killDocs, round)
		fmt.Printf("round %d done\n", round)
	}
}

// TestCompactionSurvivesKillNine kills a process re-ingesting and compacting a
// base with SIGKILL, at a different point each time, and folds the base from
// what it left: every document is there once, at least in the version of the
// last round the process finished, and the stream stays bounded.
func TestCompactionSurvivesKillNine(t *testing.T) {
	if testing.Short() {
		// .ci/run's race pass (-short) would kill and start its children under the
		// race detector, minutes on two busy cores; its plain pass runs it.
		t.Skip("kills and restarts whole processes: run without -short")
	}
	dir := t.TempDir()
	round := 0
	for kill := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCompactionKillNineHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), compactChildEnv+"="+dir, compactChildEnv+"_ROUND="+strconv.Itoa(round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Past 3 rounds compactions ran; kill within the next round, at a point
		// that moves with each kill.
		lines := bufio.NewScanner(out)
		done := 0
		for done < 3 && lines.Scan() {
			if strings.HasSuffix(lines.Text(), " done") {
				n, _ := strconv.Atoi(strings.Fields(lines.Text())[1])
				round, done = n+1, done+1
			}
		}
		if done < 3 {
			t.Fatalf("kill %d: the child ended after %d rounds", kill, done)
		}
		time.Sleep(time.Duration(kill*37) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		cancel()
		for lines.Scan() { // rounds finished before the kill landed
			if strings.HasSuffix(lines.Text(), " done") {
				n, _ := strconv.Atoi(strings.Fields(lines.Text())[1])
				round = n + 1
			}
		}

		log := openLog(t, dir)
		bs, err := knowledge.Open(knowledge.Config{Log: log, Vectors: openStore(t, ""), Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := bs.Base(testCtx(t), "docs")
		if err != nil {
			t.Fatalf("kill %d: folding the base: %v", kill, err)
		}
		docs := b.Documents()
		if len(docs) != killDocs {
			t.Fatalf("kill %d: %d documents, want %d", kill, len(docs), killDocs)
		}
		for _, d := range docs {
			hits, _ := b.Chunks(d.Source)
			text := strings.Join(func() []string {
				var s []string
				for _, h := range hits {
					s = append(s, h.Content)
				}
				return s
			}(), " ")
			v := -1
			if _, err := fmt.Sscanf(text[strings.Index(text, "Revision "):], "Revision %d", &v); err != nil || v < round-1 {
				t.Fatalf("kill %d: %s is at revision %d (%v), but round %d was finished", kill, d.Source, v, err, round-1)
			}
		}
		n, _ := streamSize(t, log, "docs")
		if bound := 2*killDocs + knowledge.CompactTail + knowledge.CompactMin + 2; n > bound {
			t.Fatalf("kill %d: the stream holds %d events for %d documents (bound %d)", kill, n, killDocs, bound)
		}
		t.Logf("kill %d after round %d: %d documents, %d events", kill, round-1, len(docs), n)
		if err := bs.Close(); err != nil {
			t.Fatal(err)
		}
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
