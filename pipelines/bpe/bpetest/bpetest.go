// Package bpetest gives tests tiktoken-go's own counts of OpenAI's encodings,
// and the pieces its regular expressions split a text into: the reference that
// bpe.Counter and the counters built on it are held to. Its counts take time
// that grows with the square of a piece's length: use it on short texts only.
package bpetest

import (
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Patterns are the encodings' pre-tokenisation patterns, as tiktoken-go v0.1.8
// defines them.
var patterns = map[string]string{
	"cl100k_base": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	"o200k_base": strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|"),
	"p50k_base": `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
	"r50k_base": `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
}

// Tiktoken is tiktoken-go's encoder of one encoding, built from the offline ranks
// without touching tiktoken-go's package-level loader.
type Tiktoken struct {
	enc     *tiktoken.Tiktoken
	pattern *regexp2.Regexp
}

// New returns tiktoken-go's encoder of an encoding: cl100k_base, o200k_base,
// p50k_base, p50k_edit or r50k_base.
func New(encoding string) (*Tiktoken, error) {
	file := encoding
	if encoding == "p50k_edit" {
		file = "p50k_base"
	}
	pattern, ok := patterns[file]
	if !ok {
		return nil, fmt.Errorf("bpetest: unknown encoding %q", encoding)
	}
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe(file + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("bpetest: load %s ranks: %w", encoding, err)
	}
	core, err := tiktoken.NewCoreBPE(ranks, map[string]int{}, pattern)
	if err != nil {
		return nil, fmt.Errorf("bpetest: build %s encoder: %w", encoding, err)
	}
	enc := tiktoken.NewTiktoken(core, &tiktoken.Encoding{Name: encoding, PatStr: pattern, MergeableRanks: ranks}, map[string]any{})
	return &Tiktoken{enc: enc, pattern: regexp2.MustCompile(pattern, regexp2.None)}, nil
}

// Pieces returns the pieces the encoding's pattern splits text into, as
// tiktoken-go splits it (with regexp2, reading the text as runes).
func (t *Tiktoken) Pieces(text string) []string {
	runes := []rune(text)
	var out []string
	m, _ := t.pattern.FindStringMatch(text)
	for m != nil {
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
		m, _ = t.pattern.FindNextMatch(m)
	}
	return out
}

// Count returns tiktoken-go's count of text's tokens, special tokens read as
// ordinary text.
func (t *Tiktoken) Count(text string) int {
	return len(t.enc.EncodeOrdinary(text))
}
