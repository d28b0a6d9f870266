package memory

import (
	"cmp"
	"context"
	"fmt"
	"html"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/troupe-run/troupe/internal/tagquote"
	"github.com/troupe-run/troupe/messages"
)

// Block is a core block: text that is always in the agent's context (its system
// prompt), size-limited and edited through tools. persona and human always exist.
type Block struct {
	Label       string `json:"label"`
	Value       string `json:"value"`
	Description string `json:"description,omitempty"`
	// Limit bounds Value, in characters.
	Limit int `json:"limit"`
}

// The default blocks, present (empty) until set.
const (
	BlockPersona = "persona"
	BlockHuman   = "human"
	// MaxBlockLabel bounds a block's label, in bytes.
	MaxBlockLabel = 64
)

var defaultDescriptions = map[string]string{
	BlockPersona: "who the agent is: its role, its voice and the rules it keeps",
	BlockHuman:   "what the agent knows of the person it talks with",
}

// Blocks returns the core blocks, persona and human always among them, by label.
func (ns *Namespace) Blocks() []Block {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.blocks()
}

func (ns *Namespace) blocks() []Block {
	out := make([]Block, 0, len(ns.st.blocks)+2)
	for _, label := range []string{BlockPersona, BlockHuman} {
		if ns.st.blocks[label] == nil {
			out = append(out, Block{Label: label, Description: defaultDescriptions[label], Limit: ns.cfg.BlockLimit})
		}
	}
	for _, b := range ns.st.blocks {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b Block) int { return strings.Compare(a.Label, b.Label) })
	return out
}

// checkLabel accepts 1 to MaxBlockLabel letters, digits, '_', '-' and '.', and
// returns the label lowercased.
func checkLabel(label string) (string, error) {
	l := strings.ToLower(strings.TrimSpace(label))
	ok := l != "" && len(l) <= MaxBlockLabel
	for _, r := range l {
		ok = ok && (r == '_' || r == '-' || r == '.' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'))
	}
	if !ok {
		return "", fmt.Errorf("%w: block label %q: use 1 to %d letters, digits, '_', '-' or '.'", ErrInvalid, label, MaxBlockLabel)
	}
	return l, nil
}

// SetBlock sets a core block's value (and its description and limit, when given;
// otherwise they stay, or take their defaults). A value over the limit fails with
// ErrInvalid.
func (ns *Namespace) SetBlock(ctx context.Context, key string, b Block, reason string) error {
	label, err := checkLabel(b.Label)
	if err != nil {
		return err
	}
	if b.Limit < 0 {
		return fmt.Errorf("%w: block %s: negative limit", ErrInvalid, label)
	}
	value := ns.redact(strings.TrimSpace(b.Value))
	if !utf8.ValidString(value) {
		return fmt.Errorf("%w: block %s: the value is not UTF-8 text", ErrInvalid, label)
	}
	if i := strings.IndexByte(value, 0); i >= 0 {
		return fmt.Errorf("%w: block %s: the value holds a NUL byte (at byte %d): binary content is no block", ErrInvalid, label, i)
	}
	return ns.write(ctx, key, func() ([]messages.Payload, error) {
		old := ns.st.blocks[label]
		limit, desc := b.Limit, strings.TrimSpace(b.Description)
		if old != nil {
			limit, desc = cmp.Or(limit, old.Limit), cmp.Or(desc, old.Description)
		}
		limit, desc = cmp.Or(limit, ns.cfg.BlockLimit), cmp.Or(desc, defaultDescriptions[label])
		if n := utf8.RuneCountInString(value); n > limit {
			return nil, fmt.Errorf("%w: block %s: %d characters; its limit is %d", ErrInvalid, label, n, limit)
		}
		return []messages.Payload{&messages.MemoryBlockSet{Key: key, Reason: ns.why(reason, "block set"), Label: label,
			Value: value, Limit: limit, Description: desc}}, nil
	}, nil)
}

// DeleteBlock deletes a core block (persona and human go back to empty). An unknown
// label fails with ErrNotFound.
func (ns *Namespace) DeleteBlock(ctx context.Context, key, label, reason string) error {
	l, err := checkLabel(label)
	if err != nil {
		return err
	}
	return ns.write(ctx, key, func() ([]messages.Payload, error) {
		if ns.st.blocks[l] == nil {
			return nil, fmt.Errorf("%w: no block %q in namespace %s", ErrNotFound, l, ns.name)
		}
		return []messages.Payload{&messages.MemoryBlockDeleted{Key: key, Reason: ns.why(reason, "block deleted"), Label: l}}, nil
	}, nil)
}

// RenderBlocks is the text of the blocks put in an agent's system prompt: each an
// element named by its label, with its description and fill, around its value. A
// value cannot end its element, forge another block's or end the section the
// blocks are put in (CoreSectionTag): a tag in it that names a block or the section
// ("</human>", "<persona ...>", "</core_memory>", "< /Core_Memory >", any case,
// spaces around its "/") is written with "&lt;" for its "<". Other text, "<"
// included, is written as it is.
func RenderBlocks(blocks []Block) string {
	labels := make([]string, len(blocks), len(blocks)+1)
	for i, b := range blocks {
		labels[i] = b.Label
	}
	labels = append(labels, CoreSectionTag)
	var sb strings.Builder
	for _, b := range blocks {
		fmt.Fprintf(&sb, "<%s description=\"%s\" chars=\"%d/%d\">\n", b.Label, html.EscapeString(b.Description),
			utf8.RuneCountInString(b.Value), b.Limit)
		if b.Value != "" {
			sb.WriteString(escapeBlockTags(b.Value, labels))
			sb.WriteByte('\n')
		}
		fmt.Fprintf(&sb, "</%s>\n", b.Label)
	}
	return sb.String()
}

// CoreSectionTag names the element an agent's prompt puts its core memory blocks
// in (<core_memory>…</core_memory>): a block's value cannot write its tags
// (RenderBlocks).
const CoreSectionTag = "core_memory"

// escapeBlockTags writes "&lt;" for the "<" of every tag of v that names one of
// labels: "<label" or "</label" (any case, spaces around the "/") followed by a
// character a label cannot hold, or by the end. A tag is read as a model reads it
// (cjk.Visible): its "<" may be the full-width "＜" or the small "﹤", its name
// full-width, with characters that show nothing in it.
func escapeBlockTags(v string, labels []string) string {
	return tagquote.Lookalike(v, labels, labelByte)
}

// labelByte reports whether c may continue a block's label: a letter or digit of
// ASCII, "_", "-" or ".".
func labelByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}
