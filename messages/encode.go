package messages

import (
	"encoding/json"
	"math"
	"strconv"
	"sync"
	"unicode/utf8"
)

// The payloads every step of a task records (a model's request and answer, a tool's
// call and result, a task's start and end) encode themselves: NewEnvelope appends
// their JSON without reflection. The bytes are exactly json.Marshal's (HTML-safe
// string escapes, its float format, omitempty as it reads it): an event's payload
// is hashed, compared by replay verification and stored, and must not depend on
// which encoder wrote it. encode_test.go checks every such type against json.Marshal
// on values with every field set, so a field added to one of them and not here
// fails the test.

// jsonAppender is a payload that appends its JSON encoding, json.Marshal's bytes, to
// b. ok is false when json.Marshal would fail (a NaN or infinite float): the
// caller then encodes with json.Marshal, which says why.
type jsonAppender interface {
	appendJSON(b []byte) (out []byte, ok bool)
}

var (
	_ jsonAppender = (*TaskSubmitted)(nil)
	_ jsonAppender = (*ModelRequested)(nil)
	_ jsonAppender = (*ModelResponded)(nil)
	_ jsonAppender = (*ToolCallRequested)(nil)
	_ jsonAppender = (*ToolCallCompleted)(nil)
	_ jsonAppender = (*TaskCompleted)(nil)
	_ jsonAppender = (*TaskFailed)(nil)
)

// encodeBuffers holds the buffers payloads are appended to; the encoding is copied
// out at its exact length, as json.Marshal does.
var encodeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuffer bounds the buffers kept for reuse: one that grew for a large
// payload (a long tool result) is left to the collector.
const maxPooledBuffer = 64 << 10

// appendedJSON returns p's encoding by its appendJSON, or ok false.
func appendedJSON(p jsonAppender) ([]byte, bool) {
	bp := encodeBuffers.Get().(*[]byte)
	b, ok := p.appendJSON((*bp)[:0])
	var out []byte
	if ok {
		out = make([]byte, len(b))
		copy(out, b)
	}
	if cap(b) <= maxPooledBuffer {
		*bp = b[:0]
		encodeBuffers.Put(bp)
	}
	return out, ok
}

// appendJSONString appends s as encoding/json encodes a string with HTML escaping
// (json.Marshal's): quoted; '"', '\\' and the control characters escaped (\b, \f,
// \n, \r, \t by name, others as \u00XX), as are '<', '>' and '&' (\u003c, …),
// U+2028 and U+2029; each byte of invalid UTF-8 replaced by \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe[b] {
				// Plain ASCII text goes eight bytes at a time.
				i = plainEnd(s, i+1)
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe says which ASCII bytes appendJSONString copies as they are: not a
// control character, '"', '\\', '<', '>' nor '&' (a constant table).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for b := range t {
		t[b] = b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

// plainEnd returns i moved past the eight-byte chunks of s from i on whose bytes
// are all jsonSafe: ASCII, none below 0x20, none of '"', '\\', '<', '>' and '&'.
// Each test below is exact for "some byte of the chunk is": a borrow can only
// flag a byte above one that truly is.
func plainEnd(s string, i int) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(s); i += 8 {
		c := s[i : i+8]
		x := uint64(c[0]) | uint64(c[1])<<8 | uint64(c[2])<<16 | uint64(c[3])<<24 |
			uint64(c[4])<<32 | uint64(c[5])<<40 | uint64(c[6])<<48 | uint64(c[7])<<56
		// '"' (0x22) and '&' (0x26) differ in one bit, as do '<' (0x3c) and '>'
		// (0x3e): a byte is one of a pair when it equals the first with that bit cleared.
		q := x&^(lo*0x04) ^ (lo * '"')
		l := x&^(lo*0x02) ^ (lo * '<')
		b := x ^ (lo * '\\')
		if (x|(x-lo*0x20)&^x|(q-lo)&^q|(l-lo)&^l|(b-lo)&^b)&hi != 0 {
			break
		}
	}
	return i
}

// appendJSONFloat appends f as encoding/json encodes a float64: like ES6's number
// to string, %f between 1e-6 and 1e21, else %e without a padded exponent. ok is
// false for a NaN or an infinity, which JSON cannot represent.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// Each type's appendJSON writes its members as encoding/json orders and omits
// struct fields: in declaration order, an omitempty one left out at its zero value.
// The first member of each is never omitted, so every later one starts with a comma.

// appendJSONStrings appends a []string: null when nil, as encoding/json does.
func appendJSONStrings(b []byte, v []string) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONItems appends a []ContextItem: null when nil.
func appendJSONItems(b []byte, v []ContextItem) ([]byte, bool) {
	if v == nil {
		return append(b, "null"...), true
	}
	b = append(b, '[')
	all := true
	for i := range v {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		b, ok = v[i].appendJSON(b)
		all = all && ok
	}
	return append(b, ']'), all
}

// AppendChatJSON appends the JSON encoding of msgs to b: exactly json.Marshal's
// bytes (null for a nil slice), without reflection. llm.PromptHash hashes it.
func AppendChatJSON(b []byte, msgs []ChatMessage) []byte {
	if msgs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = msgs[i].appendJSON(b)
	}
	return append(b, ']')
}

func (m *ChatMessage) appendJSON(b []byte) []byte {
	b = append(b, `{"role":`...)
	b = appendJSONString(b, string(m.Role))
	if m.Content != "" {
		b = append(b, `,"content":`...)
		b = appendJSONString(b, m.Content)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			c := &m.ToolCalls[i]
			b = append(b, `{"id":`...)
			b = appendJSONString(b, c.ID)
			b = append(b, `,"name":`...)
			b = appendJSONString(b, c.Name)
			b = append(b, `,"arguments":`...)
			b = appendJSONString(b, c.Arguments)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendJSONString(b, m.ToolCallID)
	}
	if m.Name != "" {
		b = append(b, `,"name":`...)
		b = appendJSONString(b, m.Name)
	}
	return append(b, '}')
}

func (u *Usage) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	if u.CachedTokens != 0 {
		b = append(b, `,"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CachedTokens), 10)
	}
	ok := true
	if u.CostUSD != 0 {
		b = append(b, `,"cost_usd":`...)
		b, ok = appendJSONFloat(b, u.CostUSD)
	}
	return append(b, '}'), ok
}

func (it *ContextItem) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, it.ID)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, it.Kind)
	b = append(b, `,"tokens":`...)
	b = strconv.AppendInt(b, int64(it.Tokens), 10)
	if it.From != 0 {
		b = append(b, `,"from":`...)
		b = strconv.AppendInt(b, int64(it.From), 10)
	}
	b = append(b, `,"score":`...)
	b, ok := appendJSONFloat(b, it.Score)
	if it.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, it.Reason)
	}
	return append(b, '}'), ok
}

func (r *ContextReport) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"window":`...)
	b = strconv.AppendInt(b, int64(r.Window), 10)
	b = append(b, `,"reserved":`...)
	b = strconv.AppendInt(b, int64(r.Reserved), 10)
	b = append(b, `,"system":`...)
	b = strconv.AppendInt(b, int64(r.System), 10)
	b = append(b, `,"budget":`...)
	b = strconv.AppendInt(b, int64(r.Budget), 10)
	b = append(b, `,"used":`...)
	b = strconv.AppendInt(b, int64(r.Used), 10)
	if r.Over != 0 {
		b = append(b, `,"over":`...)
		b = strconv.AppendInt(b, int64(r.Over), 10)
	}
	b = append(b, `,"kept":`...)
	b, ok := appendJSONItems(b, r.Kept)
	if len(r.Dropped) > 0 {
		var dok bool
		b = append(b, `,"dropped":`...)
		b, dok = appendJSONItems(b, r.Dropped)
		ok = ok && dok
	}
	if len(r.Truncated) > 0 {
		var tok bool
		b = append(b, `,"truncated":`...)
		b, tok = appendJSONItems(b, r.Truncated)
		ok = ok && tok
	}
	if r.Older != 0 {
		b = append(b, `,"older":`...)
		b = strconv.AppendInt(b, int64(r.Older), 10)
	}
	if len(r.Summarize) > 0 {
		b = append(b, `,"summarize":`...)
		b = appendJSONStrings(b, r.Summarize)
	}
	if len(r.Notes) > 0 {
		b = append(b, `,"notes":`...)
		b = appendJSONStrings(b, r.Notes)
	}
	return append(b, '}'), ok
}

func (p *TaskSubmitted) appendJSON(b []byte) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	b = append(b, `{"input":`...)
	b = appendJSONString(b, p.Input)
	if p.Agent != "" {
		b = append(b, `,"agent":`...)
		b = appendJSONString(b, p.Agent)
	}
	if p.Model != "" {
		b = append(b, `,"model":`...)
		b = appendJSONString(b, p.Model)
	}
	if p.MaxSteps != 0 {
		b = append(b, `,"max_steps":`...)
		b = strconv.AppendInt(b, int64(p.MaxSteps), 10)
	}
	if p.MaxTokens != 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(p.MaxTokens), 10)
	}
	if p.MaxCostUSD != 0 {
		var ok bool
		b = append(b, `,"max_cost_usd":`...)
		if b, ok = appendJSONFloat(b, p.MaxCostUSD); !ok {
			return b, false
		}
	}
	if p.DeadlineUS != 0 {
		b = append(b, `,"deadline_us":`...)
		b = strconv.AppendInt(b, p.DeadlineUS, 10)
	}
	if p.ReplyTopic != "" {
		b = append(b, `,"reply_topic":`...)
		b = appendJSONString(b, p.ReplyTopic)
	}
	if p.Memory != "" {
		b = append(b, `,"memory":`...)
		b = appendJSONString(b, p.Memory)
	}
	if r := p.Parent; r != nil {
		b = append(b, `,"parent":{"session_id":`...)
		b = appendJSONString(b, r.SessionID)
		b = append(b, `,"key":`...)
		b = appendJSONString(b, r.Key)
		b = append(b, `,"depth":`...)
		b = strconv.AppendInt(b, int64(r.Depth), 10)
		b = append(b, '}')
	}
	if p.Depth != 0 {
		b = append(b, `,"depth":`...)
		b = strconv.AppendInt(b, int64(p.Depth), 10)
	}
	if p.TraceParent != "" {
		b = append(b, `,"traceparent":`...)
		b = appendJSONString(b, p.TraceParent)
	}
	if p.TraceState != "" {
		b = append(b, `,"tracestate":`...)
		b = appendJSONString(b, p.TraceState)
	}
	if p.Rules != 0 {
		b = append(b, `,"rules":`...)
		b = strconv.AppendInt(b, int64(p.Rules), 10)
	}
	if p.TaskID != "" {
		b = append(b, `,"task_id":`...)
		b = appendJSONString(b, p.TaskID)
	}
	if p.ConfigDigest != "" {
		b = append(b, `,"config_digest":`...)
		b = appendJSONString(b, p.ConfigDigest)
	}
	if p.Config != nil {
		c, err := json.Marshal(p.Config) // once per change of the configuration
		if err != nil {
			return b, false
		}
		b = append(b, `,"config":`...)
		b = append(b, c...)
	}
	return append(b, '}'), true
}

func (p *ModelRequested) appendJSON(b []byte) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	b = append(b, `{"key":`...)
	b = appendJSONString(b, p.Key)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, p.Model)
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(p.Step), 10)
	b = append(b, `,"messages":`...)
	b = strconv.AppendInt(b, int64(p.Messages), 10)
	b = append(b, `,"prompt_hash":`...)
	b = appendJSONString(b, p.PromptHash)
	if len(p.Tools) > 0 {
		b = append(b, `,"tools":`...)
		b = appendJSONStrings(b, p.Tools)
	}
	if p.Protocol != "" {
		b = append(b, `,"protocol":`...)
		b = appendJSONString(b, p.Protocol)
	}
	if p.Purpose != "" {
		b = append(b, `,"purpose":`...)
		b = appendJSONString(b, p.Purpose)
	}
	ok := true
	if p.Context != nil {
		b = append(b, `,"context":`...)
		b, ok = p.Context.appendJSON(b)
	}
	return append(b, '}'), ok
}

func (p *ModelResponded) appendJSON(b []byte) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	b = append(b, `{"key":`...)
	b = appendJSONString(b, p.Key)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, p.Model)
	b = append(b, `,"message":`...)
	b = p.Message.appendJSON(b)
	b = append(b, `,"usage":`...)
	b, ok := p.Usage.appendJSON(b)
	b = append(b, `,"latency_us":`...)
	b = strconv.AppendInt(b, p.LatencyUS, 10)
	if p.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, p.Error)
	}
	if p.Cached {
		b = append(b, `,"cached":true`...)
	}
	if p.FinishReason != "" {
		b = append(b, `,"finish_reason":`...)
		b = appendJSONString(b, p.FinishReason)
	}
	return append(b, '}'), ok
}

func (p *ToolCallRequested) appendJSON(b []byte) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	b = append(b, `{"key":`...)
	b = appendJSONString(b, p.Key)
	b = append(b, `,"call_id":`...)
	b = appendJSONString(b, p.CallID)
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, p.Tool)
	b = append(b, `,"arguments":`...)
	b = appendJSONString(b, p.Arguments)
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(p.Step), 10)
	if p.Chain != "" {
		b = append(b, `,"chain":`...)
		b = appendJSONString(b, p.Chain)
	}
	if p.ChainStep != "" {
		b = append(b, `,"chain_step":`...)
		b = appendJSONString(b, p.ChainStep)
	}
	if p.Purpose != "" {
		b = append(b, `,"purpose":`...)
		b = appendJSONString(b, p.Purpose)
	}
	return append(b, '}'), true
}

func (p *ToolCallCompleted) appendJSON(b []byte) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	b = append(b, `{"key":`...)
	b = appendJSONString(b, p.Key)
	b = append(b, `,"call_id":`...)
	b = appendJSONString(b, p.CallID)
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, p.Tool)
	if p.Result != "" {
		b = append(b, `,"result":`...)
		b = appendJSONString(b, p.Result)
	}
	if p.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, p.Error)
	}
	b = append(b, `,"latency_us":`...)
	b = strconv.AppendInt(b, p.LatencyUS, 10)
	ok := true
	if !p.Usage.IsZero() {
		b = append(b, `,"usage":`...)
		b, ok = p.Usage.appendJSON(b)
	}
	return append(b, '}'), ok
}

func (p *TaskCompleted) appendJSON(b []byte) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	b = append(b, `{"output":`...)
	b = appendJSONString(b, p.Output)
	b = append(b, `,"steps":`...)
	b = strconv.AppendInt(b, int64(p.Steps), 10)
	b = append(b, `,"usage":`...)
	b, ok := p.Usage.appendJSON(b)
	if !p.SubAgentsUsage.IsZero() {
		var ok2 bool
		b = append(b, `,"sub_agents_usage":`...)
		b, ok2 = p.SubAgentsUsage.appendJSON(b)
		ok = ok && ok2
	}
	if p.Note != "" {
		b = append(b, `,"note":`...)
		b = appendJSONString(b, p.Note)
	}
	return append(b, '}'), ok
}

func (p *TaskFailed) appendJSON(b []byte) ([]byte, bool) {
	if p == nil {
		return append(b, "null"...), true
	}
	b = append(b, `{"reason":`...)
	b = appendJSONString(b, p.Reason)
	b = append(b, `,"error":`...)
	b = appendJSONString(b, p.Error)
	b = append(b, `,"steps":`...)
	b = strconv.AppendInt(b, int64(p.Steps), 10)
	b = append(b, `,"usage":`...)
	b, ok := p.Usage.appendJSON(b)
	if !p.SubAgentsUsage.IsZero() {
		var ok2 bool
		b = append(b, `,"sub_agents_usage":`...)
		b, ok2 = p.SubAgentsUsage.appendJSON(b)
		ok = ok && ok2
	}
	return append(b, '}'), ok
}
