package openai

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf16"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/troupe-run/troupe/internal/jsonesc"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// Delta is one increment of a streamed answer: llm.Delta, named here too.
type Delta = llm.Delta

// Streamer is the optional streaming capability of a model: llm.Streamer, named here
// too. The gateway streams through it when its caller asks for increments
// (llm.WithDeltas).
type Streamer = llm.Streamer

var _ Streamer = (*Model)(nil)

// Stream implements Streamer with a streamed chat completion (stream_options
// include_usage). The response is assembled by the SDK's ChatCompletionAccumulator.
// The answer is whole once every choice came with its finish_reason, whether [DONE]
// follows or the stream closes, is cut or stalls after it (the provider ended, and
// bills, that answer: a retry would pay for it twice). A finish_reason stays once
// given (a later chunk without one does not clear it; a later one replaces it),
// and the chunks that follow it still count: more of the answer, its usage. The
// answer is returned at [DONE], or once every choice finished and no chunk came
// for answerEndGrace (5 s), with the usage reported so far: a stream that stalls
// after its answer is not waited for until Config.Timeout. A stream the
// connection cuts short before that fails with ErrTruncatedStream (transient) and
// never returns a partial answer; one that sends nothing for Config.StreamIdleTimeout
// once its answer began (a chunk with content, reasoning or a tool call) fails with
// ErrStalledStream (transient), and any fails at Config.Timeout. A provider that answers whole (a JSON
// chat completion: it does not stream, even one it labels text/event-stream) is read as Generate reads it, with no
// increments; when its body is cut or stalls part-way the failure returns the usage
// it reported in the part that came, or an estimate of the prompt (partialUsage). When Stream fails, the increments already
// delivered belong to no answer: a retry streams again from the start. An error from
// onDelta stops the stream and is returned (wrapped) as is. A failure returns what
// the call spent (llm.Model): the usage the provider reported, or, when it began
// answering and reported none, an estimate of the prompt and of what it streamed,
// or, when it timed out before its first chunk, its request sent, an estimate of
// the prompt (timedOutSpend).
func (m *Model) Stream(ctx context.Context, req llm.Request, onDelta func(Delta) error) (llm.Response, error) {
	const op = "stream"
	if err := ctx.Err(); err != nil {
		return llm.Response{}, m.who.errorf(op, "%w", err)
	}
	params, err := m.params(op, req)
	if err != nil {
		return llm.Response{}, err
	}
	call, cancel := context.WithTimeoutCause(ctx, m.who.callTimeout, errCallTimeout)
	defer cancel()
	// cut ends the request of an answer that is whole while its stream has not
	// ended (answerEndGrace), with the cause errAnswerEnded.
	reqCtx, cut := context.WithCancelCause(call)
	defer cut(nil)
	var (
		x   *exchange
		raw *http.Response
	)
	send := func() error {
		params.StreamOptions = sdk.ChatCompletionStreamOptionsParam{}
		if !m.noStreamOptions.Load() {
			params.StreamOptions.IncludeUsage = sdk.Bool(true)
		}
		// A response that sends nothing for the idle bound ends its request: it
		// fails as a dropped connection does (ErrStalledStream).
		x, raw = &exchange{limit: maxAnswerBytes, idle: m.cfg.streamIdleTimeout(), stall: func() { cut(errStreamStalled) }}, nil
		// The response body is decoded here (not by NewStreaming) to see whether
		// the stream really ended with [DONE].
		_, err := m.chat.New(reqCtx, params, append(idempotency(req, m.cfg.Model), option.WithMiddleware(x.middleware),
			option.WithJSONSet("stream", true), option.WithResponseBodyInto(&raw))...)
		return err
	}
	err = send()
	if err != nil && !m.noStreamOptions.Load() && refusedStreamOptions(x) {
		// An API that takes no stream_options (Mistral's; it reports usage in the
		// stream unasked) refused the request without answering it: send it again
		// without them, as every later stream of this model is.
		m.noStreamOptions.Store(true)
		err = send()
	}
	if err != nil {
		return timedOutSpend(req, ctx, call, x), m.who.classify(op, ctx, call, x, err)
	}
	if raw == nil || raw.Body == nil {
		return llm.Response{}, m.who.errorf(op, "%w: no response body", ErrMalformedResponse)
	}
	defer raw.Body.Close()
	switch mt, _, _ := mime.ParseMediaType(raw.Header.Get("Content-Type")); mt {
	case "text/event-stream":
		// A body labelled an event stream that is a JSON object (an error object of a
		// proxy or router, a whole answer) or a page is read as Generate reads it: as
		// an event stream it holds no event, and would end as a stream cut short.
		br := bufio.NewReader(raw.Body)
		raw.Body = struct {
			io.Reader
			io.Closer
		}{br, raw.Body}
		if c := firstByte(br); c == '{' || c == '<' {
			x.arm()
			return m.whole(op, req, raw, x)
		}
	case "application/json":
		// A provider that does not stream (some OpenAI-compatible servers ignore
		// "stream") answers whole: the same answer, with no increments. Its body
		// comes once the answer is made: a silence in it is a stall.
		x.arm()
		return m.whole(op, req, raw, x)
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(raw.Body, maxErrorBody))
		if ct, head := x.wrongType(); ct != "" {
			return llm.Response{}, m.who.notJSON(op, raw.StatusCode, ct, head)
		}
		return llm.Response{}, m.who.errorf(op, "%w: expected an event stream, got Content-Type %q", ErrMalformedResponse, mt)
	}
	dec := &doneDecoder{Decoder: ssestream.NewDecoder(raw)}
	stream := ssestream.NewStream[sdk.ChatCompletionChunk](dec, nil)
	defer stream.Close()

	var acc sdk.ChatCompletionAccumulator
	var u sdk.CompletionUsage
	began, reported := false, false // a chunk came; the provider reported usage
	calls := streamedCalls{}
	var halves surrogates
	ends := finishes{}
	id := ""              // the stream's id: its first chunk's that has one
	var grace *time.Timer // runs while every choice finished and no chunk comes
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	// report hands the increments of a chunk's first choice to onDelta.
	report := func(chunk sdk.ChatCompletionChunk) error {
		for _, ch := range chunk.Choices {
			if ch.Index != 0 || onDelta == nil {
				continue
			}
			for _, d := range deltas(ch.Delta) {
				if err := onDelta(d); err != nil {
					return m.who.errorf(op, "delta callback: %w", err)
				}
			}
		}
		return nil
	}
	for stream.Next() {
		if grace != nil {
			// A chunk came: the grace counts the time waited for the next one only.
			grace.Stop()
		}
		chunk := stream.Current()
		// One response is one answer, whatever ids its chunks carry: some servers
		// give each chunk an id of its own, or the usage chunk none, which the
		// accumulator would refuse as another completion's.
		if id == "" {
			id = chunk.ID
		}
		chunk.ID = id
		for i := range chunk.Choices {
			if text, ok := partsText(chunk.Choices[i].Delta.JSON.Content.Raw()); ok {
				chunk.Choices[i].Delta.Content = text
			}
		}
		calls.place(&chunk)
		halves.join(&chunk)
		ends.keep(&chunk)
		if !acc.AddChunk(chunk) {
			return llm.Response{}, m.who.errorf(op, "%w: chunk %q does not continue the stream", ErrMalformedResponse, m.who.quote(chunk.RawJSON()))
		}
		began = true
		if answering(chunk) {
			// The answer began: from here a silence is a stall (the idle bound).
			x.arm()
		}
		if chunk.JSON.Usage.Valid() {
			u, reported = chunk.Usage, true
		}
		if err := report(chunk); err != nil {
			return llm.Response{}, err
		}
		// [DONE] ends the stream. Chunks may follow a finish_reason (more text or
		// tool calls of a proxy that sends one early or with each call, usage
		// reported after the answer, a content filter's annotations), so a chunk
		// never ends it. Once every choice finished, a server that then sends
		// nothing for answerEndGrace has given its answer and stalls: it is not
		// waited for until Config.Timeout.
		if finished(acc.ChatCompletion) {
			if grace == nil {
				grace = time.AfterFunc(answerEndGrace, func() { cut(errAnswerEnded) })
			} else {
				grace.Reset(answerEndGrace)
			}
		}
	}
	// A high half still held (a chunk after the one that finished its choice
	// ended with it) is U+FFFD: nothing follows to join.
	if rest, ok := halves.rest(id); ok {
		ends.keep(&rest)
		if !acc.AddChunk(rest) {
			return llm.Response{}, m.who.errorf(op, "%w: the stream's last halves of surrogate pairs do not continue it", ErrMalformedResponse)
		}
		if err := report(rest); err != nil {
			return llm.Response{}, err
		}
	}
	// A failed call returns the usage the provider reported before it failed
	// (llm.Model): a stream cut after its usage chunk, an answer refused.
	spent := llm.Response{Usage: usage(u)}
	switch {
	case !reported && began:
		// The provider took the prompt and began answering, then stalled or was
		// cut before its usage chunk: it bills what it took and streamed all the
		// same, so the failure says so, estimated (llm.EstimateTokens).
		spent.Usage = estimatedUsage(req, acc.ChatCompletion)
	case !reported:
		// It timed out before its first chunk, its request sent: the provider
		// took the prompt, as of a whole call that timed out (timedOutSpend).
		spent = timedOutSpend(req, ctx, call, x)
	}
	cc := acc.ChatCompletion
	// An answer whose every choice finished is whole, though the stream closed (or
	// was cut, or stalled) before [DONE]. It is the answer the provider bills;
	// sending it again would be paid twice. Its usage is what the provider
	// reported, or none (the gateway counts it, as for a provider that reports no
	// usage). Any other answer is whole only when the stream ended well.
	if !finished(cc) || ctx.Err() != nil || !endedAfterAnswer(stream.Err(), reqCtx, x) {
		if err := stream.Err(); err != nil {
			var se *ssestream.StreamError
			if errors.As(err, &se) {
				// An error event before any chunk is the server's answer to the
				// request, as an error response is (a request refused is not sent
				// again; vLLM's 400 is no refusal: errorObject); one after a chunk
				// is a failure once it began answering.
				where, at := "the provider reported an error mid-stream", midStream
				if !began {
					where, at = "the provider answered with an error event", firstEvent
				}
				if err := m.who.errorObject(op, where, se.Event.Data, at); err != nil {
					return spent, err
				}
				return spent, m.who.errorf(op, "%s: %s: %w", where, m.who.errorMessage(se.Event.Data), llm.ErrTransient)
			}
			if bad, ok := undecodedEvent(dec, call, x); ok {
				return spent, m.who.errorf(op, "%w: an event of the stream is not a chat completion chunk (%v): %q",
					ErrMalformedResponse, err, m.who.quote(strings.TrimSpace(string(bad))))
			}
			return spent, m.who.classify(op, ctx, call, x, err)
		}
		if err := call.Err(); err != nil {
			return spent, m.who.classify(op, ctx, call, x, err)
		}
		switch {
		case len(cc.Choices) == 0 || cc.Choices[0].FinishReason == "":
			return spent, m.who.errorf(op, "%w (no finish_reason): %w", ErrTruncatedStream, llm.ErrTransient)
		case !dec.done:
			return spent, m.who.errorf(op, "%w (no [DONE]): %w", ErrTruncatedStream, llm.ErrTransient)
		}
	}
	msg, err := m.message(req, cc.Choices[0].Message)
	if err != nil {
		return spent, err
	}
	return llm.Response{Message: msg, Usage: usage(u), FinishReason: llm.AbnormalFinish(cc.Choices[0].FinishReason)}, nil
}

// answerEndGrace is how long a stream whose every choice finished may send nothing
// before Stream stops waiting for its [DONE]: a server that stalls so (before
// [DONE]) has given its answer all the same, which is returned as it stands, with
// the usage it reported, if any (else the gateway counts the tokens, as for a
// provider that reports no usage). Each chunk starts it again: a server may send
// its usage some seconds after the answer (computed once generation ended), and a
// proxy may send a finish_reason before more of the answer.
const answerEndGrace = 5 * time.Second

// errStreamStalled is the cause of a request that Stream ended when its response
// sent nothing for Config.StreamIdleTimeout.
var errStreamStalled = errors.New("llm/openai: the stream stalled")

// errAnswerEnded is the cause of a request that Stream ended after answerEndGrace.
var errAnswerEnded = errors.New("llm/openai: the answer ended, its stream did not")

// firstByte is the first byte of a body that is neither white space nor a
// byte-order mark, looking no further than its first 512 bytes (0 for none). It
// reads only as far as that byte.
func firstByte(br *bufio.Reader) byte {
	for n := 1; n <= 512; n++ {
		b, err := br.Peek(n)
		if err != nil || len(b) < n {
			return 0
		}
		switch c := b[n-1]; c {
		case ' ', '\t', '\r', '\n', 0xEF, 0xBB, 0xBF:
		default:
			return c
		}
	}
	return 0
}

// finished reports whether every choice of a streamed answer came with its
// finish_reason: the provider ended the answer.
func finished(cc sdk.ChatCompletion) bool {
	if len(cc.Choices) == 0 {
		return false
	}
	for _, c := range cc.Choices {
		if c.FinishReason == "" {
			return false
		}
	}
	return true
}

// finishes keeps the finish_reason of each choice of a stream (by index): a chunk
// that comes after it with none (a content filter's annotations of Azure, more of
// the answer from a proxy that finishes early) keeps it, where the accumulator
// would clear it; a later finish_reason replaces it.
type finishes map[int64]string

func (f finishes) keep(chunk *sdk.ChatCompletionChunk) {
	for i := range chunk.Choices {
		ch := &chunk.Choices[i]
		if ch.FinishReason == "" {
			ch.FinishReason = f[ch.Index]
		} else {
			f[ch.Index] = ch.FinishReason
		}
	}
}

// endedAfterAnswer reports whether a stream ended in a way that leaves a finished
// answer whole: closed (err nil, [DONE] or not), its connection cut, cut by this
// client past answerEndGrace, or stalled until Config.Timeout. An error event from
// the provider does not, nor an answer past the size bound. call is the context of
// the request.
func endedAfterAnswer(err error, call context.Context, x *exchange) bool {
	if err == nil || context.Cause(call) == errAnswerEnded {
		return true
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		return false
	}
	x.mu.Lock()
	readErr, tooLarge := x.readErr, x.tooLarge
	x.mu.Unlock()
	return !tooLarge && (readErr != nil || context.Cause(call) == errCallTimeout)
}

// undecodedEvent returns the data of the event a stream stopped at because it did
// not decode as a chunk (a frame cut short or garbled by the server or a proxy),
// when that is why it stopped: the event stream itself read well (no transport
// error, no line past the decoder's bound, within the size bound and the call's
// time). Its error would otherwise be taken for that of a body that is no event
// stream at all.
func undecodedEvent(dec *doneDecoder, call context.Context, x *exchange) ([]byte, bool) {
	if dec.Err() != nil || call.Err() != nil {
		return nil, false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.readErr != nil || x.tooLarge {
		return nil, false
	}
	return dec.evt.Data, true
}

// refusedStreamOptions reports whether the server refused a request for its
// stream_options: a 400 or 422 whose error names them.
func refusedStreamOptions(x *exchange) bool {
	_, status, _, body, _ := x.snapshot()
	return (status == http.StatusBadRequest || status == http.StatusUnprocessableEntity) && bytes.Contains(body, []byte("stream_options"))
}

// estimatedUsage estimates what a stream that failed before its usage chunk cost:
// the prompt of req and the part of the answer cc holds (none before its first
// text or tool call).
func estimatedUsage(req llm.Request, cc sdk.ChatCompletion) messages.Usage {
	u := messages.Usage{PromptTokens: llm.EstimateTokens(req.Messages)}
	if len(cc.Choices) > 0 && (cc.Choices[0].Message.Content != "" || len(cc.Choices[0].Message.ToolCalls) > 0) {
		part := messages.ChatMessage{Role: messages.RoleAssistant, Content: cc.Choices[0].Message.Content}
		for _, c := range cc.Choices[0].Message.ToolCalls {
			part.ToolCalls = append(part.ToolCalls, messages.ToolCall{Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		u.CompletionTokens = llm.EstimateTokens([]messages.ChatMessage{part})
	}
	return u
}

// whole is the answer of a chat completion body, as Generate reads it.
func (m *Model) whole(op string, req llm.Request, raw *http.Response, x *exchange) (llm.Response, error) {
	b, err := io.ReadAll(raw.Body)
	if errors.Is(err, errAnswerTooLarge) {
		return llm.Response{}, m.who.tooLarge(op, maxAnswerBytes)
	}
	x.mu.Lock()
	stalled := x.stalled
	x.mu.Unlock()
	// A body cut short or stalled was an answer all the same, which the provider
	// bills: the failure returns what it reported of it, or an estimate
	// (partialUsage), as a stream cut short does.
	if err != nil && stalled {
		return llm.Response{Usage: partialUsage(req, b)}, m.who.errorf(op, "%w: nothing came for %s: %w", ErrStalledStream, x.idle, llm.ErrTransient)
	}
	if err != nil {
		return llm.Response{Usage: partialUsage(req, b)}, m.who.errorf(op, "reading the answer: %w: %w", err, llm.ErrTransient)
	}
	var cc sdk.ChatCompletion
	if err := json.Unmarshal(b, &cc); err != nil {
		if !jsonObject(b) {
			return llm.Response{}, m.who.notJSON(op, raw.StatusCode, raw.Header.Get("Content-Type"), b[:min(len(b), maxHead)])
		}
		return llm.Response{}, m.who.errorf(op, "%w: %w", ErrMalformedResponse, err)
	}
	if len(cc.Choices) == 0 {
		if err := m.who.errorObject(op, "the provider answered with an error", b, inBody); err != nil {
			return llm.Response{}, err
		}
		return llm.Response{}, m.who.errorf(op, "%w: the response has no choices", ErrMalformedResponse)
	}
	if isChunk(cc) || slices.ContainsFunc(cc.Choices, func(c sdk.ChatCompletionChoice) bool { return !c.JSON.Message.Valid() }) {
		// A chunk of an event stream sent bare, with no "data:" (a server or proxy
		// that does not frame its events), holds no message: read as a whole
		// answer, it was an empty one.
		return llm.Response{}, m.who.errorf(op, "%w: the body is no event stream and no chat completion (a choice with no message): %q",
			ErrMalformedResponse, m.who.quote(strings.TrimSpace(string(b))))
	}
	msg, err := m.message(req, cc.Choices[0].Message)
	if err != nil {
		return llm.Response{Usage: usage(cc.Usage)}, err // what the refused answer cost (llm.Model)
	}
	return llm.Response{Message: msg, Usage: usage(cc.Usage), FinishReason: llm.AbnormalFinish(cc.Choices[0].FinishReason)}, nil
}

// isChunk reports whether cc, decoded from a body, says it is a chunk of an event
// stream, not a chat completion.
func isChunk(cc sdk.ChatCompletion) bool {
	return cc.JSON.Object.Raw() == `"chat.completion.chunk"`
}

// streamedCalls places the tool-call pieces of a stream's first choice before the
// accumulator adds them, for the servers that do not follow OpenAI's numbering:
//   - a piece that brings another id than the call its index holds is another call
//     (some servers stream parallel calls each whole at index 0): it goes to a new
//     index, after every other, and so do the pieces without an id that follow it
//     at that index (a server's index that such a call took goes after every
//     other too);
//   - a piece whose name is the whole name its call has so far repeats it (some
//     servers send the name with every piece): the name is dropped, for the
//     accumulator concatenates the pieces of a name ("getget").
type streamedCalls struct {
	at    map[int64]int64  // the server's index -> the index the pieces go to
	ids   map[int64]string // the id of the call at each index
	names map[int64]string // the name so far of the call at each index
	taken map[int64]bool   // the indices the pieces went to
	next  int64            // an index past every one taken
}

func (c *streamedCalls) place(chunk *sdk.ChatCompletionChunk) {
	if c.at == nil {
		c.at, c.ids, c.names, c.taken = map[int64]int64{}, map[int64]string{}, map[int64]string{}, map[int64]bool{}
	}
	for i := range chunk.Choices {
		if chunk.Choices[i].Index != 0 {
			continue
		}
		pieces := chunk.Choices[i].Delta.ToolCalls
		for j := range pieces {
			tc := &pieces[j]
			given := max(tc.Index, 0) // -1 for a lone call: the accumulator reads it as 0
			idx, ok := c.at[given]
			switch {
			case !ok && c.taken[given]: // a call moved to a new index holds it
				idx = c.next
			case !ok:
				idx = given
			case tc.ID != "" && c.ids[idx] != "" && tc.ID != c.ids[idx]:
				idx = c.next
			}
			c.at[given], c.taken[idx], c.next = idx, true, max(c.next, idx+1)
			if tc.ID != "" {
				c.ids[idx] = tc.ID
			}
			tc.Index = idx
			switch name := tc.Function.Name; {
			case name == "":
			case c.names[idx] == name:
				tc.Function.Name = ""
			default:
				c.names[idx] += name
			}
		}
	}
}

// surrogates joins the two halves of a UTF-16 surrogate pair that a stream escapes
// ("\ud83d\ude00", a character outside the Basic Multilingual Plane) in two chunks,
// in a choice's content or in the arguments of one of its tool calls: each chunk is
// JSON of its own, where a lone half decodes as U+FFFD. A content (or a piece of
// arguments) that ends with the escape of a high half has that U+FFFD held back,
// unless the chunk finishes the choice. The choice's next content (the call's next
// piece of arguments) starts with the character when it starts with the escape of
// a low half, else with the U+FFFD held back. A chunk that finishes the choice
// gives back the halves its calls still hold, as pieces of their arguments; what
// is held when the stream ends (a chunk came after the one that finished its
// choice) rest gives back. The chunk's tool calls must be placed (streamedCalls) first: the halves are held by
// the index a call's pieces go to.
type surrogates struct {
	content map[int64]rune    // choice index -> the high half held back
	args    map[[2]int64]rune // choice index, tool-call index -> the high half held back
}

func (s *surrogates) join(chunk *sdk.ChatCompletionChunk) {
	if s.content == nil {
		s.content, s.args = map[int64]rune{}, map[[2]int64]rune{}
	}
	for i := range chunk.Choices {
		ch := &chunk.Choices[i]
		raw := ch.Delta.JSON.Content.Raw()
		if high, ok := s.content[ch.Index]; ok {
			delete(s.content, ch.Index)
			ch.Delta.Content = joinHalf(high, raw, ch.Delta.Content)
		}
		last := ch.FinishReason != "" // the choice's last chunk: nothing follows to join
		if !last {
			if text, high, ok := holdHalf(raw, ch.Delta.Content); ok {
				ch.Delta.Content, s.content[ch.Index] = text, high
			}
		}
		for j := range ch.Delta.ToolCalls {
			tc := &ch.Delta.ToolCalls[j]
			at := [2]int64{ch.Index, max(tc.Index, 0)} // -1 for a lone call: the accumulator reads it as 0
			raw := tc.Function.JSON.Arguments.Raw()
			if high, ok := s.args[at]; ok {
				delete(s.args, at)
				tc.Function.Arguments = joinHalf(high, raw, tc.Function.Arguments)
			}
			if !last {
				if text, high, ok := holdHalf(raw, tc.Function.Arguments); ok {
					tc.Function.Arguments, s.args[at] = text, high
				}
			}
		}
		if last {
			var held []int64
			for at := range s.args {
				if at[0] == ch.Index {
					held = append(held, at[1])
				}
			}
			slices.Sort(held)
			for _, idx := range held {
				delete(s.args, [2]int64{ch.Index, idx})
				ch.Delta.ToolCalls = append(ch.Delta.ToolCalls, sdk.ChatCompletionChunkChoiceDeltaToolCall{
					Index: idx, Function: sdk.ChatCompletionChunkChoiceDeltaToolCallFunction{Arguments: "\uFFFD"}})
			}
		}
	}
}

// rest is a chunk of stream id that gives back every high half still held, as
// U+FFFD: a choice's content, a call's piece of arguments. ok is false when none
// is held.
func (s *surrogates) rest(id string) (chunk sdk.ChatCompletionChunk, ok bool) {
	chunk.ID = id
	choices := map[int64]int{} // choice index -> its place in chunk.Choices
	choice := func(index int64) *sdk.ChatCompletionChunkChoice {
		i, ok := choices[index]
		if !ok {
			i = len(chunk.Choices)
			choices[index] = i
			chunk.Choices = append(chunk.Choices, sdk.ChatCompletionChunkChoice{Index: index})
		}
		return &chunk.Choices[i]
	}
	for _, index := range slices.Sorted(maps.Keys(s.content)) {
		choice(index).Delta.Content = "\uFFFD"
	}
	held := slices.SortedFunc(maps.Keys(s.args), func(a, b [2]int64) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	for _, at := range held {
		ch := choice(at[0])
		ch.Delta.ToolCalls = append(ch.Delta.ToolCalls, sdk.ChatCompletionChunkChoiceDeltaToolCall{
			Index: at[1], Function: sdk.ChatCompletionChunkChoiceDeltaToolCallFunction{Arguments: "\uFFFD"}})
	}
	clear(s.content)
	clear(s.args)
	slices.SortFunc(chunk.Choices, func(a, b sdk.ChatCompletionChunkChoice) int { return cmp.Compare(a.Index, b.Index) })
	return chunk, len(chunk.Choices) > 0
}

// joinHalf is text, decoded from raw (the JSON of a string), after a high half held
// back: the character of the pair when raw starts with the escape of a low half,
// else U+FFFD for the lone high half.
func joinHalf(high rune, raw, text string) string {
	if low, ok := surrogateEscape(raw, 1, true); ok && strings.HasPrefix(text, "\uFFFD") {
		return string(utf16.DecodeRune(high, low)) + strings.TrimPrefix(text, "\uFFFD")
	}
	return "\uFFFD" + text
}

// holdHalf reports whether raw (the JSON of a string, decoded as text) ends with
// the escape of a high half, and then returns text without the U+FFFD it decoded
// as, and the half.
func holdHalf(raw, text string) (string, rune, bool) {
	if high, ok := surrogateEscape(raw, len(raw)-7, false); ok && strings.HasSuffix(text, "\uFFFD") && backslashes(raw[:len(raw)-7])%2 == 0 {
		return strings.TrimSuffix(text, "\uFFFD"), high, true
	}
	return text, 0, false
}

// surrogateEscape reads the escape at raw[at:], the JSON of a string, as a \uXXXX
// escape of a surrogate half: a low one (DC00 to DFFF) when low, else a high one
// (D800 to DBFF). It does not look at what precedes raw[at].
func surrogateEscape(raw string, at int, low bool) (rune, bool) {
	if at < 1 || len(raw) < at+6 || raw[0] != '"' || raw[len(raw)-1] != '"' || raw[at] != '\\' || raw[at+1] != 'u' {
		return 0, false
	}
	r, ok := jsonesc.Hex4(raw[at+2:])
	if !ok {
		return 0, false
	}
	if low && r >= 0xDC00 && r <= 0xDFFF || !low && r >= 0xD800 && r <= 0xDBFF {
		return r, true
	}
	return 0, false
}

// backslashes counts the backslashes that end s.
func backslashes(s string) int {
	n := 0
	for n < len(s) && s[len(s)-1-n] == '\\' {
		n++
	}
	return n
}

// deltas lists a chunk's increments: content (or refusal), then tool-call pieces.
func deltas(d sdk.ChatCompletionChunkChoiceDelta) []Delta {
	var out []Delta
	if d.Content != "" {
		out = append(out, Delta{Content: d.Content})
	} else if d.Refusal != "" {
		out = append(out, Delta{Content: d.Refusal})
	}
	for _, tc := range d.ToolCalls {
		idx := int(tc.Index)
		if idx < 0 { // some servers send -1 for a lone call; the accumulator reads it as 0
			idx = 0
		}
		if tc.ID == "" && tc.Function.Name == "" && tc.Function.Arguments == "" {
			continue
		}
		out = append(out, Delta{ToolCallIndex: idx, ToolCallID: tc.ID, ToolName: tc.Function.Name, ArgumentsDelta: tc.Function.Arguments})
	}
	return out
}

// answering reports whether a chunk carries some of the answer: content (or a
// refusal), reasoning (reasoning_content, reasoning) or a tool call. A chunk with a
// role alone, usage alone or a finish_reason alone does not.
func answering(chunk sdk.ChatCompletionChunk) bool {
	for _, ch := range chunk.Choices {
		d := ch.Delta
		if d.Content != "" || d.Refusal != "" || len(d.ToolCalls) > 0 {
			return true
		}
		for _, name := range []string{"reasoning_content", "reasoning"} {
			if f, ok := d.JSON.ExtraFields[name]; ok {
				if raw := f.Raw(); raw != "" && raw != "null" && raw != `""` {
					return true
				}
			}
		}
	}
	return false
}

// doneDecoder notes whether the event stream reached its [DONE] sentinel; the SDK's
// stream ends the same way on [DONE] and on a closed connection. It also drops an
// "error" member that is null from an event (no error: some servers put it in every
// chunk), which the SDK would take for the provider's error, as any "error" member.
type doneDecoder struct {
	ssestream.Decoder
	done bool
	evt  ssestream.Event
}

func (d *doneDecoder) Next() bool {
	if d.Decoder == nil || !d.Decoder.Next() {
		return false
	}
	d.evt = d.Decoder.Event()
	if bytes.HasPrefix(d.evt.Data, []byte("[DONE]")) {
		d.done = true
	}
	d.evt.Data = errorEvent(withoutNullError(d.evt.Data))
	return true
}

// errorEvent is data, a bare error object ({"object": "error", ...}: vLLM's), as
// the error member of an event ({"error": data}), which the SDK's stream reports as
// the provider's error; any other data as it is. Read as a chunk, it was one with
// no choices, and the stream ended as one cut short.
func errorEvent(data []byte) []byte {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return data
	}
	var obj struct {
		Object string          `json:"object"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &obj) != nil || obj.Object != "error" || obj.Error != nil {
		return data
	}
	return append(append([]byte(`{"error":`), data...), '}')
}

func (d *doneDecoder) Event() ssestream.Event { return d.evt }

// withoutNullError is data, a JSON object, without its top-level "error" member when
// that member is null; any other data as it is.
func withoutNullError(data []byte) []byte {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return data
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return data
	}
	if e, ok := obj["error"]; !ok || !bytes.Equal(bytes.TrimSpace(e), []byte("null")) {
		return data
	}
	delete(obj, "error")
	b, err := json.Marshal(obj)
	if err != nil {
		return data
	}
	return b
}

func (d *doneDecoder) Err() error {
	if d.Decoder == nil {
		return nil
	}
	return d.Decoder.Err()
}

func (d *doneDecoder) Close() error {
	if d.Decoder == nil {
		return nil
	}
	return d.Decoder.Close()
}
