package nodeconfig

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// CompressionFile is the conversation compression of a context section
// (actors.Compression), its fields beside the context's own:
//
//	context:
//	  window: 32000
//	  compression: summary      # window, summary, hierarchical, importance, mask, proactive, extract, compact;
//	                            # or one with mask and/or proactive: summary+mask
//	  keep_turns: 8             # turns sent verbatim (default 8)
//	  step_turns: 4             # turns the window moves at a time (default keep_turns/2; at most keep_turns)
//	  summary_model: none       # the model of summaries, as model: (agents files only); the agent's own when absent; none: truncate instead
//	  summary_words: 200        # a summary's length, as its prompt asks
//	  observation_tokens: 500   # mask, proactive: the size of a tool result from which it is masked or digested
//	  compact_tokens: 8000      # compact: the size of the conversation from which it is compacted
//	  middle_summaries: 4       # hierarchical: chunk summaries kept before the oldest are condensed
//	  importance_tokens: 6000   # importance: what the conversation may send
//	  facts_block: facts        # extract: the core memory block its facts are appended to (needs the memory tool)
//
// Absent, a field is its default (actors.Compression's zero value: no compression).
// A setting needs compression in the same section: without it, it is refused
// (settingWithoutStrategy), since it would do nothing.
type CompressionFile struct {
	Strategy          string `json:"compression,omitempty"`
	KeepTurns         int    `json:"keep_turns,omitempty"`
	StepTurns         int    `json:"step_turns,omitempty"`
	SummaryModel      string `json:"summary_model,omitempty"`
	SummaryWords      int    `json:"summary_words,omitempty"`
	ObservationTokens int    `json:"observation_tokens,omitempty"`
	CompactTokens     int    `json:"compact_tokens,omitempty"`
	MiddleSummaries   int    `json:"middle_summaries,omitempty"`
	ImportanceTokens  int    `json:"importance_tokens,omitempty"`
	FactsBlock        string `json:"facts_block,omitempty"`
	// summaryLine is where an agents file gives summary_model; summary is the
	// model it names, once resolved (AgentsFile.ResolveModels). turnsLine is
	// where it gives keep_turns or step_turns, the later of the two.
	summaryLine int
	summary     llm.Model
	turnsLine   int
}

// compressionFieldNames are the compression fields of a context section.
var compressionFieldNames = []string{"compression", "keep_turns", "step_turns", "summary_model", "summary_words",
	"observation_tokens", "compact_tokens", "middle_summaries", "importance_tokens", "facts_block"}

// maxCompressionSetting bounds the integer settings of compression.
const maxCompressionSetting = 10_000_000

// Compression returns the section's compression as actors takes it. Its Model is
// NoSummaryModel, or the name of the summary model an agents file names once
// resolved (the node serves it: node.NamedAgent.SummaryModel), else "" (the
// agent's own). The memory tool extract writes to (MemoryTool) is the node's to
// fill in (node.Config).
func (c CompressionFile) Compression() actors.Compression {
	model := ""
	switch {
	case c.SummaryModel == actors.NoSummaryModel:
		model = actors.NoSummaryModel
	case c.summary != nil:
		model = c.summary.Name()
	}
	return actors.Compression{Strategy: c.Strategy, Window: c.KeepTurns, Step: c.StepTurns, Model: model,
		SummaryWords: c.SummaryWords, ObservationTokens: c.ObservationTokens, CompactTokens: c.CompactTokens,
		MiddleChunks: c.MiddleSummaries, HistoryTokens: c.ImportanceTokens, MemoryBlock: c.FactsBlock}
}

// defaultKeepTurns is keep_turns when it is absent (actors.Compression's default).
const defaultKeepTurns = 8

// validateTurns reports a step_turns over keep_turns. The window keeps between
// keep_turns and keep_turns+step_turns-1 turns verbatim and moves step_turns at a
// time: a step over keep_turns would send up to that many more turns than
// keep_turns says (keep 4, step 50: 53 turns).
func (c CompressionFile) validateTurns() error {
	keep, given := c.KeepTurns, "keep_turns"
	if keep == 0 {
		keep, given = defaultKeepTurns, "keep_turns (its default)"
	}
	if c.StepTurns > keep {
		return fmt.Errorf("step_turns %d is more than %s %d: the window keeps from keep_turns up to keep_turns+step_turns-1 turns verbatim, "+
			"so step_turns must be at most keep_turns (default keep_turns/2): lower step_turns, or raise keep_turns", c.StepTurns, given, keep)
	}
	return nil
}

// settingWithoutStrategy returns the first setting of a compression given without
// compression (its strategy), or "" for none. Such a setting did nothing: with no
// strategy the conversation is sent as history_turns cuts it, and a named agent
// that names no strategy takes the default agent's compression whole, settings
// included. summary_model is not one: it names the summary model of the
// compression the agent takes.
func (c CompressionFile) settingWithoutStrategy() string {
	if c.Strategy != "" {
		return ""
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"keep_turns", c.KeepTurns != 0}, {"step_turns", c.StepTurns != 0}, {"summary_words", c.SummaryWords != 0},
		{"observation_tokens", c.ObservationTokens != 0}, {"compact_tokens", c.CompactTokens != 0},
		{"middle_summaries", c.MiddleSummaries != 0}, {"importance_tokens", c.ImportanceTokens != 0}, {"facts_block", c.FactsBlock != ""}} {
		if f.set {
			return f.name
		}
	}
	return ""
}

// withoutStrategyError is the error of a setting given without compression.
func withoutStrategyError(field, whose string) error {
	return fmt.Errorf("%s is given without compression: it is a setting of a compression strategy, and %s; "+
		"set compression too (compression: window sends only the latest keep_turns turns verbatim), "+
		"or remove %s (history_turns cuts the messages considered without compression)", field, whose, field)
}

// validateRanges reports an integer setting of the configuration file's
// compression out of the range an agents file takes (1 to maxCompressionSetting;
// 0, absent, is the default), naming the field.
func (c CompressionFile) validateRanges() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"keep_turns", c.KeepTurns}, {"step_turns", c.StepTurns}, {"summary_words", c.SummaryWords}, {"observation_tokens", c.ObservationTokens},
		{"compact_tokens", c.CompactTokens}, {"middle_summaries", c.MiddleSummaries}, {"importance_tokens", c.ImportanceTokens}} {
		if f.v < 0 || f.v > maxCompressionSetting {
			return fmt.Errorf("%s %d: want an integer from 1 to %d (absent: the default)", f.name, f.v, maxCompressionSetting)
		}
	}
	return nil
}

// validateFileCompression reports a summary_model of the configuration file
// other than none: the file's models are the node's own (--model, --fallback), and
// a summary model of its own is an agents file agent's.
func (c CompressionFile) validateFileCompression() error {
	if c.SummaryModel != "" && c.SummaryModel != actors.NoSummaryModel {
		return fmt.Errorf("summary_model %q: the configuration file takes none only (summaries then go to the node's model, or are truncated with none); "+
			"an agents file's agent may name a model of its own", c.SummaryModel)
	}
	return nil
}

// parseCompressionField reads field k of a context section into c when it is a
// compression field: handled is false for another field; problem says what is
// wrong with its value ("" for nothing).
func parseCompressionField(c *CompressionFile, k, v *yaml.Node) (handled bool, problem string) {
	str := v.Kind == yaml.ScalarNode && v.Tag == "!!str"
	var n int
	isInt := v.Kind == yaml.ScalarNode && v.Tag == "!!int" && v.Decode(&n) == nil && n >= 1 && n <= maxCompressionSetting
	intField := func(dst *int, what string) (bool, string) {
		if !isInt {
			return true, fmt.Sprintf("%s %q: want %s, an integer from 1 to %d", k.Value, v.Value, what, maxCompressionSetting)
		}
		*dst = n
		return true, ""
	}
	switch k.Value {
	case "compression":
		if !str {
			return true, fmt.Sprintf("compression %q: want one of %s", v.Value, strings.Join(pctx.CompressStrategies, ", "))
		}
		if err := (actors.Compression{Strategy: v.Value}).Validate(); err != nil {
			return true, err.Error()
		}
		c.Strategy = v.Value
	case "summary_model":
		if !str || v.Value != actors.NoSummaryModel && checkAgentModel(v.Value) != "" {
			return true, fmt.Sprintf("summary_model %q: want a model (offline, scripted:FILE or PROVIDER[:MODEL]), or none for no summaries (truncation instead)", v.Value)
		}
		c.SummaryModel, c.summaryLine = v.Value, v.Line
	case "facts_block":
		if !str || strings.TrimSpace(v.Value) == "" || len(v.Value) > 64 {
			return true, fmt.Sprintf("facts_block %q: want the label of a core memory block, at most 64 characters", v.Value)
		}
		c.FactsBlock = strings.ToLower(strings.TrimSpace(v.Value))
	case "keep_turns":
		c.turnsLine = max(c.turnsLine, v.Line)
		return intField(&c.KeepTurns, "the latest turns sent verbatim")
	case "step_turns":
		c.turnsLine = max(c.turnsLine, v.Line)
		return intField(&c.StepTurns, "the turns the window moves at a time")
	case "summary_words":
		return intField(&c.SummaryWords, "the words of a summary")
	case "observation_tokens":
		return intField(&c.ObservationTokens, "the tokens of a tool result from which it is masked or digested")
	case "compact_tokens":
		return intField(&c.CompactTokens, "the tokens of the conversation from which it is compacted")
	case "middle_summaries":
		return intField(&c.MiddleSummaries, "the chunk summaries kept before the oldest are condensed")
	case "importance_tokens":
		return intField(&c.ImportanceTokens, "the tokens the conversation may send")
	default:
		return false, ""
	}
	return true, ""
}
