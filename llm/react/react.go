package react

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// ErrUnparseable is wrapped when a model's replies stayed unparseable after retries.
var ErrUnparseable = errors.New("react: the model's reply could not be parsed")

// Options configures the protocol.
type Options struct {
	// MaxRetries is how often an unparseable reply is sent back with the parse error
	// (default 2).
	MaxRetries int
	// OnRequest, for a model that calls tools natively, speaks the text protocol
	// only to the requests that ask for it (llm.Request.Protocol is
	// llm.ProtocolReAct: an agent of the react paradigm) and passes the others
	// through.
	OnRequest bool
}

// Model is a llm.Model that speaks the ReAct text protocol to the model it wraps.
type Model struct {
	inner llm.Model
	opts  Options
}

var _ llm.Model = (*Model)(nil)

// Wrap returns m speaking the text protocol.
func Wrap(m llm.Model, opts Options) *Model {
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = 2
	}
	return &Model{inner: m, opts: opts}
}

// Name implements llm.Model.
func (m *Model) Name() string { return m.inner.Name() }

// Provider names the wrapped model's provider (gateway.ProviderNamer: its
// concurrency limit is per provider), else its name.
func (m *Model) Provider() string {
	if p, ok := m.inner.(interface{ Provider() string }); ok {
		return p.Provider()
	}
	return m.inner.Name()
}

// Capabilities reports native tools: the wrapper turns text into tool calls.
func (m *Model) Capabilities() llm.Capabilities {
	c := llm.CapabilitiesOf(m.inner)
	c.NativeTools = true
	return c
}

// Generate implements llm.Model. Its answer's Usage is that of every attempt, the
// unparseable replies sent back included; when it fails, the Response it returns
// with the error carries that Usage and nothing else (llm.Model).
func (m *Model) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if len(req.Tools) == 0 || m.opts.OnRequest && req.Protocol != llm.ProtocolReAct {
		return llm.StreamOrGenerate(ctx, m.inner, req)
	}
	text := req
	text.Tools = nil
	text.Messages = Render(req.Messages, req.Tools)
	rendered := text.Messages[:len(text.Messages):len(text.Messages)]
	var usage messages.Usage
	for attempt := 0; ; attempt++ {
		// Streamed when the caller asks (llm.WithDeltas): the increments are the
		// protocol's text, and each reply sent back for a parse error is an attempt.
		resp, err := llm.StreamOrGenerate(ctx, m.inner, text)
		usage = usage.Add(resp.Usage)
		if err != nil {
			return llm.Response{Usage: usage}, err // the attempts before spent tokens too
		}
		msg, perr := Parse(resp.Message.Content, req.Tools, req.Step)
		if perr == nil {
			resp.Message, resp.Usage = msg, usage
			return resp, nil
		}
		if attempt >= m.opts.MaxRetries {
			return llm.Response{Usage: usage}, fmt.Errorf("%w after %d attempts: %v; last reply: %q", ErrUnparseable, attempt+1, perr, clip(resp.Message.Content))
		}
		// Only the latest reply goes back, clipped: the request filled the context
		// window less the answer's reserve, and replies appended whole (each up to
		// the model's output limit) would take the retry past the window, which a
		// provider refuses.
		text.Messages = append(rendered,
			messages.ChatMessage{Role: messages.RoleAssistant, Content: textclip.Middle(resp.Message.Content, replyHead, replyTail, " of this reply")},
			messages.ChatMessage{Role: messages.RoleUser, Content: fmt.Sprintf(
				"Your reply could not be parsed: %v. Reply with \"Thought: …\" followed by exactly one line \"Action: tool_name[input]\" or \"Finish[final answer]\".", perr)})
	}
}

// Bounds of a reply sent back for a parse error, whole up to their sum, else its
// head and tail around how much was left out (textclip.Middle), in bytes.
const (
	replyHead = 800
	replyTail = 200
)

func clip(s string) string {
	if len(s) > 200 {
		return s[:197] + "..."
	}
	return s
}

// ToolSection is the text the protocol writes after the system prompt in place
// of the tools' schemas: each tool described, then the reply format. A session
// counts it against the context window for an agent of the react paradigm
// (decision rules 11 on).
func ToolSection(tools []messages.ToolSpec) string {
	var b strings.Builder
	b.WriteString("You can use these tools:\n")
	for _, t := range tools {
		fmt.Fprintf(&b, "- %s: %s", t.Name, strings.TrimSpace(t.Description))
		if len(t.Parameters) > 0 {
			fmt.Fprintf(&b, " Input: a JSON object matching %s", t.Parameters)
		}
		b.WriteString("\n")
	}
	b.WriteString(`
Reply in exactly this format:
Thought: what you think about the task
Action: tool_name[input]
Then stop: the tool's result comes back as "Observation: …". When you know the answer, reply:
Thought: why you know it
Finish[the final answer]`)
	return b.String()
}

// WithToolSection is the system message's text system with the protocol's
// section (ToolSection) after it.
func WithToolSection(system, section string) string {
	return strings.TrimSpace(system + "\n\n" + section)
}

// Render turns a native conversation into the text protocol: the tools are described
// after the system prompt, tool calls become "Action:" lines and tool results become
// "Observation:" messages from the user.
func Render(msgs []messages.ChatMessage, tools []messages.ToolSpec) []messages.ChatMessage {
	protocol := ToolSection(tools)
	out := make([]messages.ChatMessage, 0, len(msgs)+1)
	sawSystem := false
	for _, msg := range msgs {
		switch msg.Role {
		case messages.RoleSystem:
			if !sawSystem {
				msg.Content = WithToolSection(msg.Content, protocol)
				sawSystem = true
			}
			out = append(out, msg)
		case messages.RoleAssistant:
			var s strings.Builder
			if msg.Content != "" {
				s.WriteString("Thought: " + msg.Content + "\n")
			}
			for _, c := range msg.ToolCalls {
				fmt.Fprintf(&s, "Action: %s[%s]\n", c.Name, c.Arguments)
			}
			if len(msg.ToolCalls) == 0 {
				s.Reset()
				fmt.Fprintf(&s, "Finish[%s]", msg.Content)
			}
			out = append(out, messages.ChatMessage{Role: messages.RoleAssistant, Content: strings.TrimSpace(s.String())})
		case messages.RoleTool:
			out = append(out, messages.ChatMessage{Role: messages.RoleUser, Content: "Observation: " + msg.Content})
		default:
			out = append(out, msg)
		}
	}
	if !sawSystem {
		out = append([]messages.ChatMessage{{Role: messages.RoleSystem, Content: protocol}}, out...)
	}
	return out
}

var (
	fence    = regexp.MustCompile("(?s)```[a-zA-Z]*\\s*(.*?)```")
	finishRe = regexp.MustCompile(`(?is)finish\s*\[(.*)`)
	// finishLine is a Finish that opens its line.
	finishLine  = regexp.MustCompile(`(?i)(?:^|\n)\s*finish\s*\[`)
	finalRe     = regexp.MustCompile(`(?is)final answer\s*:\s*(.+)`)
	actionRe    = regexp.MustCompile(`(?is)action\s*\d*\s*:\s*[` + "`" + `"']?([a-zA-Z0-9_.-]+)[` + "`" + `"']?\s*(\[(.*)\])?`)
	actionInput = regexp.MustCompile(`(?is)action\s+input\s*\d*\s*:\s*(.+)`)
	thoughtRe   = regexp.MustCompile(`(?is)thought\s*\d*\s*:\s*(.*?)(?:\n\s*(?:action|finish)|$)`)
)

// Parse reads one text-protocol reply: an action becomes a tool call (its ID derived
// from step, so it is deterministic), Finish becomes the final answer.
func Parse(reply string, tools []messages.ToolSpec, step int) (messages.ChatMessage, error) {
	text := strings.TrimSpace(reply)
	if m := fence.FindStringSubmatch(text); m != nil && !strings.Contains(strings.ToLower(text[:strings.Index(text, "```")]), "action") {
		text = strings.TrimSpace(strings.Replace(text, m[0], m[1], 1))
	}
	thought := ""
	if m := thoughtRe.FindStringSubmatch(text); m != nil {
		thought = strings.TrimSpace(m[1])
	}
	a := actionRe.FindStringSubmatchIndex(text)
	f := finishRe.FindStringSubmatchIndex(text)
	if a != nil {
		switch l := finishLine.FindStringIndex(text); {
		case strings.EqualFold(text[a[2]:a[3]], "finish") && a[6] >= 0 && !hasTool(tools, "finish"):
			// The ReAct paper's "Action: Finish[answer]".
			f = []int{a[0], a[1], a[6], a[7]}
		case f != nil && f[0] < a[0] && l != nil && l[0] < a[0]:
			// A Finish of its own line before the action ends the task.
			f = finishRe.FindStringSubmatchIndex(text[l[0]:])
			for i := range f {
				f[i] += l[0]
			}
		default:
			f = nil // none, after the action, or one a thought mentions ("I cannot finish [it] yet")
		}
	}
	if f != nil {
		return messages.ChatMessage{Role: messages.RoleAssistant, Content: strings.TrimSpace(balanced(text[f[2]:f[3]]))}, nil
	}
	if a == nil {
		if m := finalRe.FindStringSubmatch(text); m != nil {
			return messages.ChatMessage{Role: messages.RoleAssistant, Content: strings.TrimSpace(m[1])}, nil
		}
		if text == "" {
			return messages.ChatMessage{}, errors.New("the reply is empty")
		}
		return messages.ChatMessage{}, errors.New("it has neither an \"Action: tool[input]\" line nor \"Finish[answer]\"")
	}
	name := text[a[2]:a[3]]
	var input string
	switch {
	case a[6] >= 0:
		input = text[a[6]:a[7]]
		// Keep the input up to its own closing bracket when more text follows.
		input = balanced(input)
	default:
		m := actionInput.FindStringSubmatch(text[a[1]:])
		if m == nil {
			return messages.ChatMessage{}, fmt.Errorf("the action %q has no input: write it as %s[input]", name, name)
		}
		input = firstLineOrJSON(m[1])
	}
	spec, ok := findTool(tools, name)
	if !ok {
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = t.Name
		}
		return messages.ChatMessage{}, fmt.Errorf("there is no tool %q (tools: %s)", name, strings.Join(names, ", "))
	}
	args, err := arguments(strings.TrimSpace(input), spec)
	if err != nil {
		return messages.ChatMessage{}, err
	}
	return messages.ChatMessage{Role: messages.RoleAssistant, Content: thought, ToolCalls: []messages.ToolCall{
		{ID: fmt.Sprintf("react_%d", step), Name: spec.Name, Arguments: args}}}, nil
}

func balanced(s string) string {
	depth := 0
	for i, r := range s {
		switch r {
		case '[', '{', '(':
			depth++
		case ']', '}', ')':
			if depth == 0 && r == ']' {
				return s[:i]
			}
			depth--
		}
	}
	return s
}

func firstLineOrJSON(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		d := json.NewDecoder(strings.NewReader(s))
		var raw json.RawMessage
		if d.Decode(&raw) == nil {
			return string(raw)
		}
	}
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func hasTool(tools []messages.ToolSpec, name string) bool {
	_, ok := findTool(tools, name)
	return ok
}

func findTool(tools []messages.ToolSpec, name string) (messages.ToolSpec, bool) {
	for _, t := range tools {
		if strings.EqualFold(t.Name, name) {
			return t, true
		}
	}
	return messages.ToolSpec{}, false
}

// arguments turns an action input into the JSON arguments of a tool: a JSON object as
// is; key=value pairs (tools.ParsePairs: quoted values keep their commas and escapes)
// as an object of strings, which the tool coerces to its schema's types, when every
// key is one of the tool's parameters; anything else as the value of the tool's one
// parameter, or of its one required parameter, else as {"input": …}.
func arguments(input string, spec messages.ToolSpec) (string, error) {
	input = strings.Trim(input, "`")
	if strings.HasPrefix(input, "{") {
		// Compacted, not decoded and encoded again: a number keeps its digits
		// (9007199254740993 is no float64), and a key written twice stays for the
		// tool to refuse rather than one of the two being dropped unseen.
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(input)); err != nil {
			return "", fmt.Errorf("the input of %s looks like JSON but is not valid: %v", spec.Name, err)
		}
		return b.String(), nil
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	_ = json.Unmarshal(spec.Parameters, &schema)
	if pairs, err := tools.ParsePairs(input); err == nil {
		known := true
		for k := range pairs {
			if _, ok := schema.Properties[k]; !ok && len(schema.Properties) > 0 {
				known = false
			}
		}
		if known {
			b, _ := json.Marshal(pairs)
			return string(b), nil
		}
	}
	key := "input"
	switch {
	case len(schema.Properties) == 1:
		for k := range schema.Properties {
			key = k
		}
	case len(schema.Required) == 1:
		key = schema.Required[0]
	}
	b, _ := json.Marshal(map[string]string{key: strings.Trim(input, `"'`)})
	return string(b), nil
}
