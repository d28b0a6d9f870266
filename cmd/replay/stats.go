package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/node"
)

// parseSince reads --since (eventlog.ParseSince).
func parseSince(s string, now time.Time) (int64, error) {
	us, err := eventlog.ParseSince(s, now)
	if err != nil {
		return 0, fmt.Errorf("--%w", err)
	}
	return us, nil
}

func stats(ctx context.Context, log eventlog.Log, since, agent string, asJSON bool, stdout, stderr io.Writer) int {
	a, ok := log.(eventlog.Analytics)
	if !ok {
		fmt.Fprintln(stderr, "error: this event log has no analytics")
		return 1
	}
	sinceUS, err := parseSince(since, time.Now())
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 2
	}
	s, err := a.Report(ctx, eventlog.StatsFilter{SinceUS: sinceUS, Agent: agent})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	if asJSON {
		return writeJSON(stdout, stderr, s)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "MODELS\tDAY\tAGENT\tMODEL\tCALLS\tPROMPT\tCOMPLETION\tCACHED\tCOST USD\t")
	for _, m := range s.Models {
		fmt.Fprintf(tw, "\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.6f\t\n", m.Day, esc(m.Agent), esc(m.Model), m.Calls, m.PromptTokens, m.CompletionTokens, m.CachedTokens, m.CostUSD)
	}
	fmt.Fprintln(tw, "TOOLS\tTOOL\tCALLS\tERRORS\tERROR RATE\tP50\tP95\t")
	for _, t := range s.Tools {
		fmt.Fprintf(tw, "\t%s\t%d\t%d\t%.1f%%\t%s\t%s\t\n", esc(t.Tool), t.Calls, t.Errors, 100*t.ErrorRate, us(t.P50US), us(t.P95US))
	}
	fmt.Fprintln(tw, "SESSIONS\tAGENT\tSESSIONS\tCOMPLETED\tFAILED\tRUNNING\tAVG STEPS\tP50 DURATION\tP95 DURATION\t")
	for _, a := range s.Sessions {
		fmt.Fprintf(tw, "\t%s\t%d\t%d\t%d\t%d\t%.1f\t%s\t%s\t\n", esc(a.Agent), a.Sessions, a.Completed, a.Failed, a.Running, a.AvgSteps, us(a.P50DurationUS), us(a.P95DurationUS))
	}
	fmt.Fprintln(tw, "MEMORY\tTIER\tOP\tCOUNT\t")
	for _, m := range s.Memory {
		fmt.Fprintf(tw, "\t%s\t%s\t%d\t\n", esc(m.Tier), esc(m.Op), m.Count)
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// esc escapes a name the log recorded (a tool's is the model's choice) for the
// terminal, as list and show do (node.EscapeControls), and its tabs and newlines,
// which would break the table's columns and rows; --json has it as recorded.
func esc(s string) string { return cellEscaper.Replace(node.EscapeControls(s)) }

var cellEscaper = strings.NewReplacer("\t", `\t`, "\n", `\n`)

func us(v int64) string { return (time.Duration(v) * time.Microsecond).String() }
