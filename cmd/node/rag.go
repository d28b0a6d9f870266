package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/vectorstore"
)

const ragUsage = `usage:
  node rag add --kb NAME [--workers N] [--prune] [--json] PATH...
  node rag search --kb NAME [--limit K] [--mode hybrid|vector|bm25] [--multi-query N] [--hyde] [--fusion convex|rrf|wrrf] [--alpha A] [--json] "query"
  node rag ask --kb NAME [--limit K] [--mode M] [--multi-query N] [--hyde] [--fusion F] [--alpha A] [--extractive] [--json] "question"
  node rag list [--kb NAME] [--json]
  node rag remove --kb NAME SOURCE...

Knowledge bases for retrieval-augmented generation. add ingests files and folders
(walked recursively; hidden names skipped) in parallel, each file under its path as
given ("docs/guide.md"): Markdown, text, HTML, CSV, JSON, code, DOCX, XLSX and PDF
text. A file that cannot be ingested (unreadable, a corrupt PDF, no text, over
32 MiB) is reported and skipped; the others are ingested. A file whose content is
unchanged is skipped without embedding; --prune also removes the documents under the
folders given whose files are gone (deleted or renamed). On a terminal a live line shows the
progress; otherwise each file gets a line on stderr. The summary goes to stdout.
search prints the best passages, each with its citation label [source > heading];
ask answers citing them, then lists the citations (without a language model the
answer is extractive: quoted from the passages). --multi-query and --hyde need a
language model (--model, TROUPE_MODEL or the configuration's). A hybrid search
mixes the normalised vector score and the BM25 score (over the share of the query
a passage matches) with --alpha, the vector share (default 0.5: --fusion convex);
--fusion rrf and wrrf fuse the lists' ranks instead.

Every command also takes --config FILE and --data DIR (the node's): a knowledge base
is the stream kb/<name> of the node's event log, its vectors in DATA/knowledge or
the configured Milvus (--milvus, TROUPE_MILVUS; --milvus-prefix,
TROUPE_MILVUS_PREFIX, as node serve's), its embedder the configuration's
"knowledge" (else "memory") embedder, else the offline hashing embedder. A node
serving the same data directory holds it locked: use its HTTP API (/v1/kb) meanwhile.

Exit status: 0 success; 1 the command failed (nothing or not everything done, as
said); 2 bad usage; 3 add ingested some files but failed others (listed).
`

// exitPartial is node rag add's exit status when some files failed and the others
// were ingested.
const exitPartial = 3

// ragCmd runs "node rag ...": args are what follows "rag".
func ragCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, ragUsage)
		return 2
	}
	sub := args[0]
	switch sub {
	case "add", "search", "ask", "list", "remove":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, ragUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "error: unknown command \"node rag %s\": want add, search, ask, list or remove\n%s", sub, ragUsage)
		return 2
	}
	fs := flag.NewFlagSet("node rag "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // flagsFailed prints it
	configPath := fs.String("config", "", "configuration file")
	dataFlag := fs.String("data", "", "data directory of the embedded event log")
	milvusFlag := fs.String("milvus", "", "Milvus server host:port (TROUPE_MILVUS)")
	milvusPrefix := fs.String("milvus-prefix", "", "prefix of every Milvus collection name (TROUPE_MILVUS_PREFIX, default troupe_)")
	modelFlag := fs.String("model", "", "model spec for ask, --multi-query and --hyde (TROUPE_MODEL, default the configuration's, else auto)")
	kb := fs.String("kb", "", "knowledge base, like docs")
	workers := fs.Int("workers", 0, "add: files ingested at once (default: the number of CPUs)")
	prune := fs.Bool("prune", false, "add: remove the documents under the folders given whose files are gone")
	limit := fs.String("limit", "", "search, ask: passages, 1 to 100 (default 5)")
	mode := fs.String("mode", "", "search, ask: hybrid (default), vector or bm25")
	multiQuery := fs.String("multi-query", "", "search, ask: rewrites of the query by the model, 0 to 8")
	hyde := fs.Bool("hyde", false, "search, ask: also search by a hypothetical answer the model writes")
	fusion := fs.String("fusion", "", "search, ask: how hybrid lists are fused: convex (default), rrf or wrrf")
	alpha := fs.String("alpha", "", "search, ask: the vector share of convex fusion, above 0 and at most 1 (default 0.5)")
	extractive := fs.Bool("extractive", false, "ask: quote the passages instead of asking the model")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := cliflags.Parse(fs, args[1:])
	if err != nil {
		return flagsFailed(err, stdout, stderr, ragUsage)
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "error: "+format+"\n", a...)
		return 2
	}
	switch sub {
	case "add":
		if len(pos) == 0 {
			return usageErr("node rag add wants the files or folders to ingest")
		}
	case "search", "ask":
		if len(pos) != 1 {
			return usageErr("node rag %s wants the %s as its one argument (quote it), got %d arguments", sub, map[string]string{"search": "query", "ask": "question"}[sub], len(pos))
		}
	case "remove":
		if len(pos) == 0 {
			return usageErr("node rag remove wants the sources of the documents to remove (as node rag list --kb %s shows them)", *kb)
		}
	case "list":
		if len(pos) != 0 {
			return usageErr("node rag list takes no argument, got %q", pos)
		}
	}
	if *kb == "" && sub != "list" {
		return usageErr("node rag %s needs --kb NAME (a knowledge base such as docs)", sub)
	}
	if *kb != "" {
		if err := knowledge.CheckName(*kb); err != nil {
			return usageErr("--kb: %v", err)
		}
	}
	if *workers < 0 || *workers > 256 {
		return usageErr("--workers %d: want 1 to 256", *workers)
	}
	var query knowledge.Query
	if sub == "search" || sub == "ask" {
		vals := map[string]string{"q": pos[0], "limit": *limit, "mode": *mode, "multi_query": *multiQuery, "fusion": *fusion, "alpha": *alpha}
		if query, err = node.ParseKBQuery(func(k string) string { return vals[k] }); err != nil {
			return usageErr("%v", err)
		}
		query.HyDE = *hyde
	}

	fc, err := loadConfig(configPath)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	if fc.MilvusPrefix, err = milvusPrefixOf(*milvusPrefix, fc); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	n, closeAll, err := openCLIKnowledge(ctx, fc, *configPath, *dataFlag, *milvusFlag, *modelFlag)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer closeAll()
	bs := n.Knowledge()

	switch sub {
	case "add":
		return ragAdd(ctx, bs, *kb, pos, knowledge.FolderOptions{Workers: *workers, Prune: *prune}, *asJSON, stdout, stderr)
	case "search":
		b, err := bs.Base(ctx, *kb)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		if b.Stats().Seq == 0 {
			fmt.Fprintf(stderr, "error: no knowledge base %q: add documents first (node rag add --kb %s PATH...)\n", *kb, *kb)
			return 1
		}
		res, err := b.Search(ctx, query)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		for _, note := range res.Notes {
			fmt.Fprintln(stderr, "note:", printable(note))
		}
		if *asJSON {
			out := node.KBSearchHits(res.Hits)
			out.Notes = res.Notes
			return printPlainJSON(stdout, stderr, out)
		}
		if len(res.Hits) == 0 {
			fmt.Fprintf(stdout, "nothing in knowledge base %s matches %q\n", *kb, query.Text)
			return 0
		}
		for i, h := range res.Hits {
			// A heading is a document's text: its escape sequences are shown, not run.
			fmt.Fprintf(stdout, "%d. [%s]  score %.4f  chunk %s\n", i+1, printable(h.Label()), h.Score, h.ChunkID)
			fmt.Fprintf(stdout, "   %s\n\n", oneLine(h.Content, 240))
		}
	case "ask":
		b, err := bs.Base(ctx, *kb)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		if b.Stats().Seq == 0 {
			fmt.Fprintf(stderr, "error: no knowledge base %q: add documents first (node rag add --kb %s PATH...)\n", *kb, *kb)
			return 1
		}
		ans, err := b.Ask(ctx, query.Text, knowledge.AskOptions{Limit: query.Limit, Mode: query.Mode, MultiQuery: query.MultiQuery,
			HyDE: query.HyDE, Fusion: query.Fusion, Alpha: query.Alpha, Extractive: *extractive})
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		if *asJSON {
			return printPlainJSON(stdout, stderr, ans)
		}
		for _, note := range ans.Notes {
			fmt.Fprintln(stderr, "note:", printable(note))
		}
		// The answer quotes the documents (or the model wrote it): shown, not run.
		fmt.Fprint(stdout, printable(node.FormatKBAnswer(ans)))
	case "list":
		return ragList(ctx, bs, *kb, *asJSON, stdout, stderr)
	case "remove":
		b, err := bs.Base(ctx, *kb)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		code := 0
		for _, src := range pos {
			if err := b.Remove(ctx, src, "cli/"+cliKey()); err != nil {
				fmt.Fprintf(stderr, "error: %s: %v\n", src, err)
				code = 1
				continue
			}
			fmt.Fprintf(stdout, "removed %s from knowledge base %s\n", src, *kb)
		}
		return code
	}
	return 0
}

// ragAdd ingests paths into knowledge base name and prints the progress (stderr)
// and the summary (stdout).
func ragAdd(ctx context.Context, bs *knowledge.Bases, name string, paths []string, opts knowledge.FolderOptions, asJSON bool, stdout, stderr io.Writer) int {
	b, err := bs.Base(ctx, name)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	live := false
	if f, ok := stderr.(*os.File); ok && !asJSON {
		live = cliflags.IsTerminal(f)
	}
	p := &addProgress{w: stderr, live: live, quiet: asJSON}
	start := time.Now()
	opts.Progress, opts.Key = p.report, "cli/"+cliKey()
	res, err := knowledge.AddFolder(ctx, b, paths, opts)
	p.done()
	if err != nil && len(res.Results) == 0 && len(res.Failed) == 0 {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	elapsed := time.Since(start)
	chunks := 0
	for _, r := range res.Results {
		if !r.Skipped() {
			chunks += r.Chunks
		}
	}
	if asJSON {
		out := struct {
			KB        string                `json:"kb"`
			Results   []knowledge.AddResult `json:"results"`
			Failed    []knowledge.FileError `json:"failed"`
			Files     int                   `json:"files"`
			Bytes     int64                 `json:"bytes"`
			Added     int                   `json:"added"`
			Replaced  int                   `json:"replaced"`
			Unchanged int                   `json:"unchanged"`
			Removed   []string              `json:"removed"`
			Chunks    int                   `json:"chunks"`
			Seconds   float64               `json:"seconds"`
			Error     string                `json:"error,omitempty"`
		}{KB: name, Results: res.Results, Failed: res.Failed, Files: res.Files, Bytes: res.Bytes, Added: res.Added, Replaced: res.Replaced,
			Unchanged: res.Unchanged, Removed: res.Removed, Chunks: chunks, Seconds: elapsed.Seconds()}
		if out.Removed == nil {
			out.Removed = []string{}
		}
		if out.Results == nil {
			out.Results = []knowledge.AddResult{}
		}
		if out.Failed == nil {
			out.Failed = []knowledge.FileError{}
		}
		if err != nil {
			out.Error = err.Error()
		}
		if code := printPlainJSON(stdout, stderr, out); code != 0 {
			return code
		}
	} else {
		// The progress named each failure as it came; the summary counts them.
		for _, src := range res.Removed {
			fmt.Fprintf(stderr, "removed %s (its file is gone)\n", src)
		}
		removed := ""
		if opts.Prune {
			removed = fmt.Sprintf(", %d removed", len(res.Removed))
		}
		fmt.Fprintf(stdout, "knowledge base %s: %d ingested (%d new, %d replaced), %d unchanged (skipped)%s, %d failed; %d chunks, %s, %s\n",
			name, res.Added+res.Replaced, res.Added, res.Replaced, res.Unchanged, removed, len(res.Failed), chunks, byteSize(res.Bytes), max(elapsed.Round(time.Millisecond), time.Millisecond))
	}
	switch {
	case err != nil && errors.Is(err, knowledge.ErrDimension):
		fmt.Fprintln(stderr, "error:", err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "error: %v (run node rag add again: what was ingested is skipped as unchanged)\n", err)
		return 1
	case len(res.Failed) > 0:
		return exitPartial
	}
	return 0
}

// addProgress prints node rag add's progress: a line rewritten in place on a
// terminal, a line per file otherwise.
type addProgress struct {
	w     io.Writer
	live  bool
	quiet bool // --json: only the failures
	mu    sync.Mutex
	width int // of the live line
}

func (p *addProgress) report(pr knowledge.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live {
		if pr.Err != nil {
			p.clear()
			fmt.Fprintf(p.w, "failed %s: %v\n", printable(pr.Source), pr.Err)
		}
		head := fmt.Sprintf("[%d/%d] %s of %s  %s ", pr.Done, pr.Total, byteSize(pr.BytesDone), byteSize(pr.BytesTotal), pr.Status)
		line := head + lineTail(printable(pr.Source), max(liveWidth-len([]rune(head)), 16))
		p.clear()
		fmt.Fprint(p.w, line)
		p.width = len([]rune(line))
		return
	}
	switch {
	case pr.Err != nil:
		// A file's name is shown with its escapes, not run (the error quotes it).
		fmt.Fprintf(p.w, "[%d/%d] failed %s: %v\n", pr.Done, pr.Total, printable(pr.Source), pr.Err)
	case !p.quiet:
		fmt.Fprintf(p.w, "[%d/%d] %s %s (%s)\n", pr.Done, pr.Total, pr.Status, printable(pr.Source), byteSize(pr.Bytes))
	}
}

// liveWidth bounds the live progress line: a line longer than the terminal wraps,
// and "\r" then returns to the start of its last row only, leaving a row behind at
// each update. 79 fits the narrowest common terminal.
const liveWidth = 79

// lineTail writes s on one line of at most n characters, keeping its end (a
// file's name) and marking what it cut: "…/deep/folder/guide.md".
func lineTail(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return "…" + string(r[len(r)-n+1:])
	}
	return s
}

// clear erases the live line.
func (p *addProgress) clear() {
	if p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}

func (p *addProgress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live {
		p.clear()
	}
}

// byteSize writes n bytes for a person: 512 B, 3.2 KB, 14.0 MB.
func byteSize(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000_000:
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	case n < 1000_000_000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}

// ragList prints the knowledge bases, or the documents of one.
func ragList(ctx context.Context, bs *knowledge.Bases, name string, asJSON bool, stdout, stderr io.Writer) int {
	names := []string{name}
	if name == "" {
		var err error
		if names, err = bs.List(ctx); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
	}
	type listed struct {
		knowledge.Stats
		DocumentList []knowledge.Document `json:"document_list"`
	}
	var out []listed
	for _, nm := range names {
		b, err := bs.Base(ctx, nm)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		if name != "" && b.Stats().Seq == 0 {
			fmt.Fprintf(stderr, "error: no knowledge base %q\n", name)
			return 1
		}
		docs := b.Documents()
		if docs == nil {
			docs = []knowledge.Document{}
		}
		out = append(out, listed{Stats: b.Stats(), DocumentList: docs})
	}
	if asJSON {
		if out == nil {
			out = []listed{}
		}
		return printPlainJSON(stdout, stderr, map[string][]listed{"bases": out})
	}
	if len(out) == 0 {
		fmt.Fprintln(stdout, "no knowledge bases: add documents with node rag add --kb NAME PATH...")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for i, l := range out {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "knowledge base %s: %d documents, %d chunks, %d tokens, %s, embedder %s\n", l.Name, l.Documents, l.Chunks, l.Tokens, byteSize(l.Bytes), l.Embedder)
		if len(l.DocumentList) > 0 {
			fmt.Fprintln(tw, "  SOURCE\tCHUNKS\tTOKENS\tBYTES\tUPDATED")
			for _, d := range l.DocumentList {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%s\n", printable(d.Source), d.Chunks, d.Tokens, byteSize(int64(d.Bytes)), d.Updated.UTC().Format(time.RFC3339))
			}
		}
	}
	_ = tw.Flush()
	return 0
}

// openCLIKnowledge builds a node on the data directory (or the configured
// ClickHouse) with the knowledge bases of the configuration, not run, so that the
// embedder, the vectors and the model are node serve's.
func openCLIKnowledge(ctx context.Context, fc nodeconfig.File, configPath, data, milvusAddr, modelSpec string) (*node.Node, func(), error) {
	or := func(vs ...string) string {
		for _, v := range vs {
			if v != "" {
				return v
			}
		}
		return ""
	}
	kbCfg, closeVectors, embKey, err := fc.KnowledgeConfig(ctx, or(milvusAddr, os.Getenv("TROUPE_MILVUS")))
	if err != nil {
		return nil, nil, err
	}
	llmBase, err := provider.LoadSection(configPath, fc.LLM, nil) // as read: the file may be a pipe
	if err != nil {
		_ = closeVectors()
		return nil, nil, err
	}
	model, _, key, err := provider.FromSpec(ctx, or(modelSpec, os.Getenv("TROUPE_MODEL"), fc.Model, "auto"), llmBase, nil)
	if err != nil {
		_ = closeVectors()
		return nil, nil, err
	}
	cfg := node.Config{DataDir: or(data, os.Getenv("TROUPE_DATA"), fc.Data, ".troupe"), Model: model, Knowledge: &kbCfg,
		Secrets: append(llmBase.Secrets(nil), key, embKey), Resume: node.ResumeNone,
		Logger: slog.New(slog.DiscardHandler),
		// A serving node owns the log (ClickHouse): this command writes beside it.
		ShareLog: true}
	log, err := openConfiguredLog(ctx, fc)
	if err != nil {
		_ = closeVectors()
		return nil, nil, err
	}
	if log != nil {
		cfg.Log = log
	}
	n, err := node.New(ctx, cfg)
	if err != nil {
		if log != nil {
			_ = log.Close()
		}
		_ = closeVectors()
		if errors.Is(err, eventlog.ErrLocked) {
			return nil, nil, fmt.Errorf("the knowledge bases of %s: %w\n(a node serving this directory holds it: use its HTTP API, POST /v1/kb/NAME/documents, GET /v1/kb/NAME/search, or stop it first)", cfg.DataDir, err)
		}
		return nil, nil, fmt.Errorf("the knowledge bases of %s: %w", cfg.DataDir, err)
	}
	return n, func() {
		_ = n.Close()
		if log != nil {
			_ = log.Close()
		}
		_ = closeVectors()
	}, nil
}

// printPlainJSON prints v as indented JSON without HTML escapes, so that the
// citation labels read "guide.md > Install", not "guide.md \u003e Install".
func printPlainJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// cliKnowledgeBases returns the knowledge bases of node tools: on shared's log
// (the memory tool's node) when given, else those of a node built on the data
// directory (openCLIKnowledge), and the log they are on (the notes tool's then).
func cliKnowledgeBases(ctx context.Context, fc nodeconfig.File, configPath, data string, shared *node.Node) (*knowledge.Bases, eventlog.Log, func(), error) {
	if shared == nil {
		n, closeAll, err := openCLIKnowledge(ctx, fc, configPath, data, "", "")
		if err != nil {
			return nil, nil, nil, err
		}
		return n.Knowledge(), n.Log(), closeAll, nil
	}
	prefix, err := milvusPrefixOf("", fc)
	if err != nil {
		return nil, nil, nil, err
	}
	fc.MilvusPrefix = prefix
	cfg, closeVectors, _, err := fc.KnowledgeConfig(ctx, os.Getenv("TROUPE_MILVUS"))
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.Log = shared.Log()
	closeAll := func() { _ = closeVectors() }
	if cfg.Vectors == nil {
		v, err := vectorstore.Open(vectorstore.Config{Path: node.KnowledgeVectorsPath(shared.DataDir(), false, ""), NoSync: true, Index: vectorstore.IndexHNSW})
		if err != nil {
			_ = closeVectors()
			return nil, nil, nil, fmt.Errorf("knowledge: vectors: %w", err)
		}
		cfg.Vectors, closeAll = v, func() { _ = v.Close() }
	}
	bs, err := knowledge.Open(cfg)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return bs, cfg.Log, func() { _ = bs.Close(); closeAll() }, nil
}
