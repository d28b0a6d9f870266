package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"golang.org/x/text/width"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/cliflags"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

const memoryUsage = `usage:
  node memory add --namespace NS [--tier T] [--importance X] [--timestamp RFC3339] [--metadata JSON] "content"
  node memory search --namespace NS [--tier T,...] [--limit K] [--mode hybrid|vector|keyword] [--json] "query"
  node memory import FILE.jsonl     (one memory object per line, as POST /v1/memories takes)
  node memory consolidate --namespace NS [--json]
  node memory history ID [--namespace NS] [--json]

Every command also takes --config FILE and --data DIR (the node's): the memories
are events in the node's event log (memory/<namespace> streams), their vectors in
DATA/memory/vectors.log or the configured Milvus (--milvus, TROUPE_MILVUS; its
collections named with --milvus-prefix, TROUPE_MILVUS_PREFIX, as node serve's). A
node serving the same data directory holds it locked: use its HTTP API
(/v1/memories) meanwhile.
import checks every line before it writes any, and writes in batches of 1,000 under
keys derived from the file's content, so running it again writes nothing twice;
it prints how many memories it wrote and how many were there already.
`

// memoryCmd runs "node memory ...": args are what follows "memory".
func memoryCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, memoryUsage)
		return 2
	}
	sub := args[0]
	switch sub {
	case "add", "search", "import", "consolidate", "history":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, memoryUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "error: unknown command \"node memory %s\": want add, search, import, consolidate or history\n%s", sub, memoryUsage)
		return 2
	}
	fs := flag.NewFlagSet("node memory "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // flagsFailed prints it
	configPath := fs.String("config", "", "configuration file")
	dataFlag := fs.String("data", "", "data directory of the embedded event log")
	milvusFlag := fs.String("milvus", "", "Milvus server host:port (TROUPE_MILVUS)")
	milvusPrefix := fs.String("milvus-prefix", "", "prefix of every Milvus collection name (TROUPE_MILVUS_PREFIX, default troupe_)")
	namespace := fs.String("namespace", "", "memory namespace, like user:alice")
	tier := fs.String("tier", "", "tier: working, episodic, semantic or perceptual (search: a comma-separated list)")
	importance := fs.Float64("importance", 0.5, "importance in [0, 1]")
	timestamp := fs.String("timestamp", "", "when it happened, RFC 3339 (default now)")
	metadata := fs.String("metadata", "", "metadata, a JSON object")
	limit := fs.String("limit", "", "search: results, 1 to 100 (default 10)")
	mode := fs.String("mode", "", "search: hybrid (default), vector or keyword")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := cliflags.Parse(fs, args[1:])
	if err != nil {
		return flagsFailed(err, stdout, stderr, memoryUsage)
	}
	if want := map[string]string{"add": "the content", "search": "the query", "import": "the file", "history": "the memory ID"}[sub]; want != "" && len(pos) != 1 {
		fmt.Fprintf(stderr, "error: node memory %s wants %s as its one argument (quote it), got %d arguments\n%s", sub, want, len(pos), memoryUsage)
		return 2
	} else if want == "" && len(pos) != 0 {
		fmt.Fprintf(stderr, "error: node memory %s takes no argument, got %q\n%s", sub, pos, memoryUsage)
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *namespace == "" && (sub == "add" || sub == "search" || sub == "consolidate") {
		fmt.Fprintf(stderr, "error: node memory %s needs --namespace NS (a namespace such as user:alice or agent:planner)\n", sub)
		return 2
	}
	arg := strings.Join(pos, "")
	// Check what can be checked before opening anything.
	var (
		inputs []memory.Input
		lines  []int // of inputs in the import file
	)
	switch sub {
	case "add":
		in := memory.Input{Namespace: *namespace, Tier: *tier, Content: arg, Timestamp: *timestamp, Metadata: json.RawMessage(*metadata)}
		if in.Tier == "" {
			in.Tier = string(memory.Semantic)
		}
		if set["importance"] {
			in.Importance = importance
		}
		if err := in.Check(); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
		inputs = []memory.Input{in}
	case "import":
		var err error
		if inputs, lines, err = readJSONL(arg); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
	case "search", "consolidate":
		if err := memory.CheckNamespace(*namespace); err != nil {
			fmt.Fprintln(stderr, "error: --namespace:", err)
			return 2
		}
	case "history":
		if *namespace != "" {
			if err := memory.CheckNamespace(*namespace); err != nil {
				fmt.Fprintln(stderr, "error: --namespace:", err)
				return 2
			}
		}
	}
	var query memory.Query
	if sub == "search" {
		vals := map[string]string{"namespace": *namespace, "q": arg, "limit": *limit, "tier": *tier, "mode": *mode}
		var err error
		if _, query, err = node.ParseMemoryQuery(func(k string) string { return vals[k] }); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 2
		}
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
	mems, closeAll, err := openCLIMemories(ctx, fc, *configPath, *dataFlag, *milvusFlag)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer closeAll()

	// The limits of the write (content size, a timestamp ahead) are the memories':
	// checked for every input before anything is written.
	var errs []error
	bad := 0
	for i, in := range inputs {
		if err := mems.Check(in); err != nil {
			if bad++; len(errs) < maxReportedLines {
				if sub == "import" {
					err = fmt.Errorf("%s:%d: %w", arg, lines[i], err)
				}
				errs = append(errs, err)
			}
		}
	}
	if bad > 0 {
		if sub == "import" {
			if bad > len(errs) {
				errs = append(errs, fmt.Errorf("%s: %d more bad lines", arg, bad-len(errs)))
			}
			fmt.Fprintf(stderr, "error: %s: nothing imported: %d of %d memories are bad:\n%v\n", arg, bad, len(inputs), errors.Join(errs...))
		} else {
			fmt.Fprintln(stderr, "error:", errs[0])
		}
		return 2
	}

	switch sub {
	case "add":
		res, err := node.AddMemories(ctx, mems.Memories, "cli/"+cliKey(), inputs, "added by node memory add")
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		fmt.Fprintln(stdout, res[0].ID)
	case "import":
		return importMemories(ctx, mems.Memories, arg, inputs, stdout, stderr)
	case "search":
		ns, err := mems.Namespace(ctx, *namespace)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		// The note says what a hybrid search ranked without the vector store (the
		// HTTP API's "note"): in the JSON, and on stderr below the table.
		results, note, err := ns.SearchNoted(ctx, query)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		hits := node.SearchHits(results)
		if *asJSON {
			return printJSON(stdout, stderr, node.SearchAnswer{Results: hits, Note: note})
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SCORE\tTIER\tID\tCONTENT")
		for _, h := range hits {
			fmt.Fprintf(tw, "%.4f\t%s\t%s\t%s\n", h.Score, h.Tier, h.ID, oneLine(h.Content, 100))
		}
		_ = tw.Flush()
		if note != "" {
			fmt.Fprintln(stderr, "note:", printable(note))
		}
	case "consolidate":
		ns, err := mems.Namespace(ctx, *namespace)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		report, err := mems.Consolidate(ctx, ns, "cli/"+cliKey())
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		if *asJSON {
			if report.Decisions == nil {
				report.Decisions = []consolidator.Decision{} // [], not null
			}
			return printJSON(stdout, stderr, report)
		}
		fmt.Fprintln(stdout, printable(report.String()))
	case "history":
		ans, err := node.MemoryHistory(ctx, mems.Memories, *namespace, arg)
		if err != nil {
			if errors.Is(err, memory.ErrNotFound) && *namespace != "" {
				err = fmt.Errorf("%w in namespace %s (leave --namespace out to look in every namespace)", err, *namespace)
			}
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		if *asJSON {
			return printJSON(stdout, stderr, ans)
		}
		writeHistory(stdout, ans)
	}
	return 0
}

// writeHistory writes a memory's history as node memory history's table.
func writeHistory(w io.Writer, ans node.HistoryAnswer) {
	fmt.Fprintf(w, "memory %s in %s\n", printable(ans.ID), printable(ans.Namespace))
	rows := [][]string{{"SEQ", "AT", "CHANGE", "REASON", "CONTENT", "BY"}}
	for _, c := range ans.History {
		content := ""
		if c.Memory != nil {
			content = oneLine(c.Memory.Content, 60)
		}
		reason := c.Reason
		if len(c.Related) > 0 {
			reason += " [" + strings.Join(c.Related, ", ") + "]"
		}
		reason = oneLine(reason, 200)
		// BY: the key the change was made under, the session's event, the
		// client's request or the consolidation run ("-" for none).
		by := "-"
		if c.Key != "" {
			by = oneLine(c.Key, 80)
		}
		rows = append(rows, []string{strconv.FormatUint(c.Seq, 10), c.At.UTC().Format(time.RFC3339), string(c.Type), reason, content, by})
	}
	writeTable(w, rows)
}

// writeTable writes rows as columns two spaces apart, each as wide on a
// terminal as its widest cell (displayWidth), the last one unpadded:
// text/tabwriter counts every character one column wide, so that a cell in
// wide characters (CJK, most emoji) pushed the columns after it, on its line,
// off the others'. The cells hold no newline (oneLine).
func writeTable(w io.Writer, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], displayWidth(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		b.Reset()
		for i, cell := range row {
			b.WriteString(cell)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-displayWidth(cell)+2))
			}
		}
		b.WriteByte('\n')
		io.WriteString(w, b.String())
	}
}

// displayWidth is the number of terminal columns s takes: two for each East
// Asian wide or fullwidth character, none for a combining mark or a format
// character (a zero-width joiner), one for any other.
func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		case width.LookupRune(r).Kind() == width.EastAsianWide || width.LookupRune(r).Kind() == width.EastAsianFullwidth:
			n += 2
		default:
			n++
		}
	}
	return n
}

// readJSONL reads and checks every line of an import file; a blank line is
// skipped. The error names every bad line as FILE:LINE (the first 100, then how
// many more), so one run shows what to fix.
func readJSONL(path string) ([]memory.Input, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var (
		inputs []memory.Input
		lines  []int
		errs   []error
		line   int
		bad    int
	)
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if line == 1 {
			b = messages.TrimByteOrderMark(b) // the byte order mark some editors write
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		in, err := memory.DecodeInput(b)
		if err != nil {
			if bad++; len(errs) < maxReportedLines {
				errs = append(errs, fmt.Errorf("%s:%d: %w", path, line, err))
			}
			continue
		}
		inputs, lines = append(inputs, in), append(lines, line)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, nil, fmt.Errorf("%s:%d: %w (a line is at most 1 MiB)", path, line+1, err)
	} else if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if bad > len(errs) {
		errs = append(errs, fmt.Errorf("%s: %d more bad lines", path, bad-len(errs)))
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%s: nothing imported: %d of %d lines are bad:\n%w", path, bad, line, errors.Join(errs...))
	}
	if len(inputs) == 0 {
		return nil, nil, fmt.Errorf("%s: no memories in the file", path)
	}
	return inputs, lines, nil
}

// maxReportedLines is how many bad lines of an import file are named one by one.
const maxReportedLines = 100

// importBatch is how many memories one append of an import carries.
const importBatch = 1000

func importMemories(ctx context.Context, m *memory.Memories, path string, inputs []memory.Input, stdout, stderr io.Writer) int {
	sum := sha256.New()
	for _, in := range inputs {
		b, _ := json.Marshal(in)
		sum.Write(b)
	}
	key := "import/" + hex.EncodeToString(sum.Sum(nil))[:24]
	done, written := 0, 0
	for start := 0; start < len(inputs); start += importBatch {
		end := min(start+importBatch, len(inputs))
		res, err := node.AddMemories(ctx, m, fmt.Sprintf("%s/%d", key, start/importBatch), inputs[start:end], "imported from "+path)
		if err != nil {
			fmt.Fprintf(stderr, "error: after %d of %d memories (%d written now): %v (run the import again: what was written is not written twice)\n", done, len(inputs), written, err)
			return 1
		}
		for _, r := range res {
			if r.Event == memory.EventAdd && !r.Repeat {
				written++
			}
		}
		done = end
	}
	// A memory not written now was there already: imported by an earlier run of
	// this file (its key), or the same content stored before (an exact duplicate).
	fmt.Fprintf(stdout, "%s: %d memories: %d written, %d already there\n", path, len(inputs), written, len(inputs)-written)
	return 0
}

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// oneLine is s for a cell of a table: on one line, its control characters shown
// escaped (printable), cut to n runes.
func oneLine(s string, n int) string {
	s = printable(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// printable is s safe to print on a terminal: a memory's content and a reason come
// from users, tools and models, and an escape sequence among them (ESC, BEL, C1
// controls, the bidirectional overrides) would otherwise be run by the terminal
// (clearing it, setting its title, reordering what it shows). Each such character
// is shown escaped, as \x1b or \u202e; newlines are kept.
func printable(s string) string {
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !unprintable(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// unprintable reports a character printable escapes: a control character other
// than a newline or a tab, or a bidirectional embedding, override or isolate.
func unprintable(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case unicode.IsControl(r):
		return true
	case 0x202a <= r && r <= 0x202e, 0x2066 <= r && r <= 0x2069:
		return true
	}
	return false
}

func cliKey() string {
	var b [8]byte
	sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d", time.Now().UnixNano(), os.Getpid()))
	copy(b[:], sum[:])
	return hex.EncodeToString(b[:])
}

// cliMemories is the agent memory of node memory: that of a node built on the data
// directory (or the configured ClickHouse), not run, so that the vectors, the
// consolidator and the model are exactly node serve's.
type cliMemories struct {
	*memory.Memories
	n *node.Node
}

// Consolidate runs the consolidator on ns now.
func (c cliMemories) Consolidate(ctx context.Context, ns *memory.Namespace, key string) (consolidator.Report, error) {
	return c.n.Consolidate(ctx, ns.Name(), key)
}

func openCLIMemories(ctx context.Context, fc nodeconfig.File, configPath, data, milvusAddr string) (cliMemories, func(), error) {
	or := func(vs ...string) string {
		for _, v := range vs {
			if v != "" {
				return v
			}
		}
		return ""
	}
	memCfg, closeVectors, embKey, err := fc.MemoryConfig(ctx, or(milvusAddr, os.Getenv("TROUPE_MILVUS")))
	if err != nil {
		return cliMemories{}, nil, err
	}
	llmBase, err := provider.LoadSection(configPath, fc.LLM, nil) // as read: the file may be a pipe
	if err != nil {
		_ = closeVectors()
		return cliMemories{}, nil, err
	}
	model, _, key, err := provider.FromSpec(ctx, or(os.Getenv("TROUPE_MODEL"), fc.Model, "auto"), llmBase, nil)
	if err != nil {
		_ = closeVectors()
		return cliMemories{}, nil, err
	}
	cfg := node.Config{DataDir: or(data, os.Getenv("TROUPE_DATA"), fc.Data, ".troupe"), Model: model, Memory: &memCfg,
		Consolidation: consolidation(fc.Memory, false),
		Secrets:       append(llmBase.Secrets(nil), key, embKey), Resume: node.ResumeNone,
		Logger: slog.New(slog.DiscardHandler),
		// A serving node owns the log (ClickHouse): this command writes beside it.
		ShareLog: true}
	log, err := openConfiguredLog(ctx, fc)
	if err != nil {
		_ = closeVectors()
		return cliMemories{}, nil, err
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
			return cliMemories{}, nil, fmt.Errorf("the memories of %s: %w\n(a node serving this directory holds it: use its HTTP API, POST /v1/memories, GET /v1/memories/search and /v1/memories/{id}/history, or stop it first)", cfg.DataDir, err)
		}
		return cliMemories{}, nil, fmt.Errorf("the memories of %s: %w", cfg.DataDir, err)
	}
	return cliMemories{Memories: n.Memories(), n: n}, func() {
		_ = n.Close()
		if log != nil {
			_ = log.Close()
		}
		_ = closeVectors()
	}, nil
}

// consolidation is the consolidator of the "memory" section: its policy always
// (a consolidate asked for by node memory, the memory tool or node run applies the
// configured rules, not the defaults), and its schedule and write threshold only
// when background is set and the section does not disable it.
func consolidation(m *nodeconfig.MemoryFile, background bool) *consolidator.SchedulerConfig {
	policy, interval, threshold, disabled := m.Consolidation()
	if !background || disabled {
		interval, threshold = -1, -1
	}
	return &consolidator.SchedulerConfig{Consolidator: consolidator.Config{Policy: policy}, Interval: interval, Threshold: threshold}
}

// milvusPrefixOf is the prefix of Milvus collection names of node memory and node
// rag: the --milvus-prefix flag, else TROUPE_MILVUS_PREFIX, else the
// configuration's milvus_prefix; checked as node serve checks it.
func milvusPrefixOf(flag string, fc nodeconfig.File) (string, error) {
	p := cmp.Or(flag, os.Getenv("TROUPE_MILVUS_PREFIX"), fc.MilvusPrefix)
	if err := nodeconfig.CheckMilvusPrefix(p); err != nil {
		return "", fmt.Errorf("--milvus-prefix: %w", err)
	}
	return p, nil
}
