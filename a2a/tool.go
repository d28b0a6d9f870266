package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"golang.org/x/sync/singleflight"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
	"github.com/troupe-run/troupe/tools"
)

// ToolPrefix starts the name of a remote A2A agent's tool: a2a__<name>.
const ToolPrefix = "a2a__"

// ToolConfig configures a remote agent's tool.
type ToolConfig struct {
	// Name names the tool a2a__<Name>: letters, digits, '_' and '-'.
	Name string
	// CardURL is the agent card's URL (https://host/.well-known/agent-card.json).
	// Its credentials (a query string such as ?api_key=..., a user and password) go
	// with the card's fetch and with the calls to an endpoint the card names on the
	// same origin, never elsewhere; descriptions and errors show them redacted.
	CardURL string
	// CardTimeout bounds fetching the card (0: 10s); CallTimeout a call (0: 5m): the
	// tool's own timeout (Limits), not its performer's default one. A call that runs
	// past it cancels the remote task (tasks/cancel).
	CardTimeout, CallTimeout time.Duration
	// MaxAnswerBytes bounds the answer a call gives the model: the remote agent's
	// message, or the artifacts and status message of its task as its stream
	// assembles them or tasks/get returns them (artifactSize: their text, data,
	// file descriptions, names and metadata, and a few bytes for each artifact and
	// for each part that is empty or carries metadata) (0: 16 MiB). A file part
	// counts its description (name, media type, size), not its bytes, which the
	// answer does not hold. A larger answer fails the call (ErrAnswerTooLarge) and
	// cancels the remote task.
	MaxAnswerBytes int
	// MaxStreamBytes bounds what a call reads of the remote agent's answer as
	// sent, files' bytes included: a response, or a whole stream (0: the larger of
	// 64 MiB and MaxAnswerBytes). Past it the call fails (ErrAnswerTooLarge,
	// saying so) and cancels the remote task.
	MaxStreamBytes int
	// HTTPClient sends the requests (nil: http.DefaultClient, bounded by the
	// timeouts).
	HTTPClient *http.Client
	// CancelRemote says whether a call whose context ended with cause (context.Cause)
	// cancels the remote task (tasks/cancel), as when the calling session's task was
	// cancelled or ran past its deadline; nil: never. A call that ends for a reason
	// after which it is performed again (the node stopping) leaves the remote task
	// running: the call performed again is the same message, which answers it.
	CancelRemote func(cause error) bool
}

// DefaultMaxAnswerBytes is ToolConfig.MaxAnswerBytes's default.
const DefaultMaxAnswerBytes = 16 << 20

// DefaultMaxStreamBytes is ToolConfig.MaxStreamBytes's default (or MaxAnswerBytes
// when larger).
const DefaultMaxStreamBytes = 64 << 20

// errCallTimeout is the cause of a call's context that ran past its CallTimeout.
var errCallTimeout = errors.New("the call ran past its timeout")

var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,48}$`)

// Tool calls a remote A2A agent: message/send with the model's message, whose
// messageId is the call's name outside the log (tools.Call.OutwardKey), so that a
// call performed again after a crash is the same message (an A2A server that
// dedupes by messageId, as Troupe's does, runs it once), while the calls of
// another event log (another deployment, a node whose data directory was reset)
// with the same session name and seq are other messages, not answered with this
// one's answer and context. The card is fetched at the first call, and again when the
// endpoint it names is gone (the agent moved).
type Tool struct {
	cfg ToolConfig

	// shown is cfg.CardURL as the model and the events see it: its credentials (a
	// password, ?api_key=...) redacted (redact.URL).
	shown string

	mu  sync.Mutex
	cur *remote // nil until the card is read, and while it is read again

	// refetches reads the card again once for the calls that found the same
	// remote's endpoint gone (keyed by the remote).
	refetches singleflight.Group
	// resends sends a message once more once for the calls of that message
	// (keyed by its ID) that found the endpoint gone.
	resendMu sync.Mutex
	resends  map[string]*resending
}

// resending is a message sent once more for the calls that wait for it: its send
// runs under ctx, which ends when the last of them stops waiting.
type resending struct {
	ctx     context.Context
	stop    context.CancelCauseFunc
	waiting int           // the calls waiting for it
	done    chan struct{} // closed once res, taskID and err are set
	res     sdk.SendMessageResult
	taskID  sdk.TaskID
	err     error
}

// remote is a remote agent as one reading of its card left it: the card and the
// client built from it.
type remote struct {
	client *a2aclient.Client
	card   *sdk.AgentCard
}

// NewTool checks cfg and returns the tool; it fetches nothing yet.
func NewTool(cfg ToolConfig) (*Tool, error) {
	if !toolNamePattern.MatchString(cfg.Name) {
		return nil, fmt.Errorf("a2a_agents: name %q: want 1-48 letters, digits, '_' or '-'", cfg.Name)
	}
	u, err := url.Parse(cfg.CardURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("a2a_agents: %s: card URL %q: want an http or https URL", cfg.Name, cfg.CardURL)
	}
	if cfg.CardTimeout <= 0 {
		cfg.CardTimeout = 10 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Minute
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if cfg.MaxStreamBytes <= 0 {
		cfg.MaxStreamBytes = max(DefaultMaxStreamBytes, cfg.MaxAnswerBytes)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	return &Tool{cfg: cfg, shown: redact.URL(cfg.CardURL)}, nil
}

var (
	_ tools.Tool    = (*Tool)(nil)
	_ tools.Sourced = (*Tool)(nil)
	_ tools.Limits  = (*Tool)(nil)
)

// Limits implements tools.Limits: a call's timeout is the tool's own, long enough
// for the card's fetch, the call (CallTimeout) and the remote task's cancellation,
// so that the call's own timeout ends it first and cancels the remote task; a
// performer's default (a node's 30 s) would cut a remote agent that takes minutes.
func (t *Tool) Limits() tools.CallLimits {
	return tools.CallLimits{Timeout: t.cfg.CallTimeout + 3*t.cfg.CardTimeout}
}

// cancels says whether a call that ended with cause cancels its remote task: when
// it ran past its own timeout, or CancelRemote says so.
func (t *Tool) cancels(cause error) bool {
	return errors.Is(cause, errCallTimeout) || t.cfg.CancelRemote != nil && t.cfg.CancelRemote(cause)
}

// Source implements tools.Sourced: "a2a:<name>", the remote agent it calls.
func (t *Tool) Source() string { return "a2a:" + t.cfg.Name }

type toolArgs struct {
	Message   string `json:"message"`
	ContextID string `json:"context_id,omitempty"`
	TaskID    string `json:"task_id,omitempty"`
}

// The tool's spec names task_id since 2026-12 (tools/prior.go keeps the spec from
// before, which replay's verify takes for sessions recorded then).
const (
	toolContinues = "Pass the context_id it returns to continue the same conversation."
	toolAnswers   = " When it answers that it needs more input, answer with the task_id it gives, and the context_id, to go on with that task."
	toolTaskParam = `,"task_id":{"type":"string","maxLength":256,"description":"The task_id of an answer that needs more input, to answer it"}`
)

// Spec implements tools.Tool.
func (t *Tool) Spec() messages.ToolSpec {
	return messages.ToolSpec{
		Name: ToolPrefix + t.cfg.Name,
		Description: fmt.Sprintf("Send a message to the remote A2A agent %q (%s) and return its answer. ", t.cfg.Name, t.shown) +
			toolContinues + toolAnswers,
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"message":{"type":"string","minLength":1,"maxLength":100000,"description":"What to ask the agent"},` +
			`"context_id":{"type":"string","maxLength":256,"description":"The context_id of an earlier answer, to continue that conversation"}` +
			toolTaskParam + `},` +
			`"required":["message"],"additionalProperties":false}`),
	}
}

// connect fetches the card and builds the client, once.
func (t *Tool) connect(ctx context.Context) (*remote, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur != nil {
		return t.cur, nil
	}
	u, _ := url.Parse(t.cfg.CardURL)
	hc, u := withCardCredentials(t.cfg.HTTPClient, u)
	cctx, cancel := context.WithTimeout(ctx, t.cfg.CardTimeout)
	defer cancel()
	card, err := fetchCard(cctx, hc, u.String())
	if err != nil {
		return nil, fmt.Errorf("fetching the agent card %s: %w", t.shown, err)
	}
	client, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithTransport(sdk.TransportProtocolJSONRPC,
		a2aclient.TransportFactoryFn(func(_ context.Context, url string, _ *sdk.AgentCard) (a2aclient.Transport, error) {
			return &rpcTransport{url: url, client: hc, maxRaw: t.cfg.MaxStreamBytes}, nil
		})))
	if err != nil {
		return nil, fmt.Errorf("agent card %s: %w", t.shown, err)
	}
	t.cur = &remote{client: client, card: card}
	return t.cur, nil
}

// reconnect reads the card again for a call that found no endpoint where old's
// card said; ok says the card names another endpoint, to try. The calls that
// found old's endpoint gone together read the card once and share what it says
// (one that waited for another's reading did not fail with old's error); a call
// that finds it read again since old was gets the remote it names.
func (t *Tool) reconnect(ctx context.Context, old *remote) (*remote, bool) {
	ch := t.refetches.DoChan(fmt.Sprintf("%p", old), func() (any, error) {
		t.mu.Lock()
		if t.cur != nil && t.cur != old { // read again since
			now := t.cur
			t.mu.Unlock()
			return now, nil
		}
		t.cur = nil
		t.mu.Unlock()
		// The calls waiting share the reading, which the card's timeout bounds:
		// the end of the first one's context does not fail the others'.
		return t.connect(context.WithoutCancel(ctx))
	})
	select {
	case <-ctx.Done():
		return nil, false
	case r := <-ch:
		if r.Err != nil {
			return nil, false
		}
		now := r.Val.(*remote)
		return now, endpointOf(now.card) != endpointOf(old.card)
	}
}

// resend sends msg once more, at the endpoint the card read again named: calls
// of one message (its ID: a call performed again while the first still runs)
// that found the old endpoint gone together send it once and share its answer,
// where each sent it, and an agent that does not dedupe by messageId ran it
// twice. The send runs for as long as one of them waits: a call whose context
// ends stops waiting, with no task to cancel while another call waits; the last
// one to stop ends the send (its context's cause) and gets what it left, the
// remote task to cancel included.
func (t *Tool) resend(ctx context.Context, client *a2aclient.Client, msg *sdk.Message) (sdk.SendMessageResult, sdk.TaskID, error) {
	t.resendMu.Lock()
	r := t.resends[msg.ID]
	if r == nil {
		if t.resends == nil {
			t.resends = map[string]*resending{}
		}
		r = &resending{done: make(chan struct{})}
		r.ctx, r.stop = context.WithCancelCause(context.WithoutCancel(ctx))
		t.resends[msg.ID] = r
		go func() {
			res, taskID, err := t.send(r.ctx, client, msg)
			t.resendMu.Lock()
			if t.resends[msg.ID] == r {
				delete(t.resends, msg.ID)
			}
			t.resendMu.Unlock()
			r.stop(nil)
			r.res, r.taskID, r.err = res, taskID, err
			close(r.done)
		}()
	}
	r.waiting++
	t.resendMu.Unlock()
	select {
	case <-r.done:
		return r.res, r.taskID, r.err
	case <-ctx.Done():
	}
	t.resendMu.Lock()
	r.waiting--
	last := r.waiting == 0
	if last {
		// A call that comes now sends the message anew.
		if t.resends[msg.ID] == r {
			delete(t.resends, msg.ID)
		}
		r.stop(context.Cause(ctx))
	}
	t.resendMu.Unlock()
	if !last {
		return nil, "", context.Cause(ctx)
	}
	<-r.done // soon: send reads on only until the remote names its task
	return r.res, r.taskID, r.err
}

// endpointOf names where and how a card says to send requests.
func endpointOf(c *sdk.AgentCard) string {
	s := fmt.Sprintf("%s %s %v", c.URL, c.PreferredTransport, c.Capabilities.Streaming)
	for _, i := range c.AdditionalInterfaces {
		s += fmt.Sprintf(" %s %s", i.URL, i.Transport)
	}
	return s
}

// MaxCardBytes bounds a remote agent's card as the tool reads it.
const MaxCardBytes = 1 << 20

// fetchCard GETs the agent card at rawURL, of at most MaxCardBytes (the SDK's
// resolver reads a card whole, however large, until the card's timeout).
func fetchCard(ctx context.Context, hc *http.Client, rawURL string) (*sdk.AgentCard, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("card request failed: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the card's URL answered HTTP %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxCardBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the card: %w", err)
	}
	if len(body) > MaxCardBytes {
		return nil, fmt.Errorf("the card is larger than %d bytes", MaxCardBytes)
	}
	var card sdk.AgentCard
	if err := json.Unmarshal(body, &card); err != nil {
		return nil, fmt.Errorf("the card is not an A2A agent card: %w", err)
	}
	return &card, nil
}

// Call implements tools.Tool: it sends the message and returns the agent's answer
// and the context to continue in, or what went wrong in words the model reads.
func (t *Tool) Call(ctx context.Context, c tools.Call) (string, error) {
	// Read as every tool's arguments are (tools.ArgumentParser, for the tool's
	// schema): a key written twice, a key in another case, text after the object
	// or a value past its maxLength is refused naming the field, not taken.
	var a toolArgs
	if err := tools.DecodeArguments(t.Spec(), c.Arguments, &a); err != nil {
		return "", err
	}
	if a.TaskID != "" && a.ContextID == "" {
		return "", fmt.Errorf("%w: task_id %q needs the context_id the same answer gave", tools.ErrInvalidArguments, a.TaskID)
	}
	if strings.TrimSpace(a.Message) == "" {
		return "", fmt.Errorf("%w: message is empty", tools.ErrInvalidArguments)
	}
	rem, err := t.connect(ctx)
	if err != nil {
		return "", fmt.Errorf("remote agent %s is unreachable: %w", t.cfg.Name, err)
	}
	client := rem.client
	ctx, cancel := context.WithTimeoutCause(ctx, t.cfg.CallTimeout, errCallTimeout)
	defer cancel()
	msg := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: a.Message})
	if k := c.OutwardKey(); k != "" {
		msg.ID = k
	}
	msg.ContextID = a.ContextID
	msg.TaskID = sdk.TaskID(a.TaskID)
	res, taskID, err := t.send(ctx, client, msg)
	if moved := (*notThereError)(nil); err != nil && taskID == "" && errors.As(err, &moved) {
		// The card is read at the first call: an agent that moved since names its
		// new endpoint in it. The message ran nowhere; it is sent once more there.
		if again, ok := t.reconnect(ctx, rem); ok {
			res, taskID, err = t.resend(ctx, again.client, msg)
			client = again.client
		}
	}
	if task, ok := res.(*sdk.Task); ok && err != nil {
		// The stream broke after it named the task (send): the task runs on at
		// the agent, or where the agent's next run resumes it, and tasks/get
		// follows it, as a stream that closed early.
		broke := err
		if res, err = t.follow(ctx, client, task); err != nil {
			err = fmt.Errorf("%w; then %w", broke, err)
		}
	} else if ok && err == nil && !answered(task.Status.State) {
		// A blocking message/send answered before the task ended (a server's own
		// bound on blocking, or one that does not block), or a stream cut before
		// its final event: the task runs on at the agent, and tasks/get follows it.
		res, err = t.follow(ctx, client, task)
	}
	if err != nil {
		if taskID != "" && (ctx.Err() != nil && t.cancels(context.Cause(ctx)) || errors.Is(err, ErrAnswerTooLarge)) {
			t.cancelRemote(ctx, client, taskID)
		}
		if errors.Is(err, errCallTimeout) {
			return "", fmt.Errorf("remote agent %s did not answer within %s", t.cfg.Name, t.cfg.CallTimeout)
		}
		return "", fmt.Errorf("remote agent %s: %w", t.cfg.Name, err)
	}
	return describe(t.cfg.Name, res)
}

// send sends msg as message/stream (message/send to an agent whose card says it
// does not stream) and returns the answer: the message, or the task as its events
// left it. taskID is the remote task's, once an event named it, also when err is
// not nil, so that a cancelled call can cancel it (a blocking message/send would
// name it only in its answer); a stream that broke after it named the task
// returns the task as it left it with the error, for the caller to follow. A call whose context ends before the remote named
// its task, and whose remote task is to be cancelled, reads on until it does, for
// up to the card timeout.
func (t *Tool) send(ctx context.Context, client *a2aclient.Client, msg *sdk.Message) (res sdk.SendMessageResult, taskID sdk.TaskID, err error) {
	stream, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	named := make(chan struct{})
	go func() {
		select {
		case <-stream.Done():
			return
		case <-ctx.Done():
		}
		if t.cancels(context.Cause(ctx)) {
			wait := time.NewTimer(t.cfg.CardTimeout)
			defer wait.Stop()
			select {
			case <-named:
			case <-wait.C:
			case <-stream.Done():
			}
		}
		stop(context.Cause(ctx))
	}()
	var task *sdk.Task
	sizes := map[string]int{} // of each artifact of the task (artifactSize)
	size := 0                 // their sum
	status := 0               // the size of the task's status message (partsSize)
	tooLarge := func() error {
		if taskID == "" && task != nil {
			taskID = task.ID
		}
		return fmt.Errorf("%w: its answer passed %d bytes", ErrAnswerTooLarge, t.cfg.MaxAnswerBytes)
	}
	for ev, err := range client.SendStreamingMessage(stream, &sdk.MessageSendParams{Message: msg}) {
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			if task != nil && taskID == "" && errors.Is(err, ErrAnswerTooLarge) {
				taskID = task.ID // to be cancelled
			}
			if taskID != "" && ctx.Err() == nil && !errors.Is(err, ErrAnswerTooLarge) {
				// The stream broke after it named the task (the agent killed or
				// stopping, a proxy): the task as the stream left it, to follow.
				return task, taskID, err
			}
			return nil, taskID, err
		}
		switch v := ev.(type) {
		case *sdk.Message:
			if partsSize(v.Parts) > t.cfg.MaxAnswerBytes {
				return nil, taskID, tooLarge()
			}
			return v, taskID, nil
		case *sdk.Task:
			task = v
			clear(sizes)
			size, status = 0, statusSize(v.Status)
			for _, a := range v.Artifacts {
				if a != nil {
					n := artifactSize(a)
					sizes[string(a.ID)] += n
					size += n
				}
			}
			if size+status > t.cfg.MaxAnswerBytes {
				return nil, taskID, tooLarge()
			}
			if answered(v.Status.State) {
				return task, task.ID, nil
			}
		case *sdk.TaskStatusUpdateEvent:
			if task == nil {
				task = &sdk.Task{ID: v.TaskID, ContextID: v.ContextID}
			}
			task.Status = v.Status
			if status = statusSize(v.Status); size+status > t.cfg.MaxAnswerBytes {
				return nil, taskID, tooLarge()
			}
			if v.Final || v.Status.State.Terminal() {
				// The end of the answer, whether or not the stream closes after it
				// (keep-alive comments, a proxy holding the connection).
				return task, task.ID, nil
			}
		case *sdk.TaskArtifactUpdateEvent:
			if task == nil {
				task = &sdk.Task{ID: v.TaskID, ContextID: v.ContextID}
			}
			task.Artifacts = updateArtifacts(task.Artifacts, v)
			if v.Artifact != nil {
				id := string(v.Artifact.ID)
				old, kept := sizes[id]
				n := artifactSize(v.Artifact)
				if v.Append && kept {
					n = old + partsSize(v.Artifact.Parts) // the artifact's own fields stay as they were
				}
				sizes[id] = n
				size += n - old
			}
			if size+status > t.cfg.MaxAnswerBytes {
				return nil, taskID, tooLarge()
			}
		}
		if task != nil && taskID == "" && task.ID != "" {
			taskID = task.ID
			close(named)
		}
		if ctx.Err() != nil {
			return nil, taskID, context.Cause(ctx)
		}
	}
	if ctx.Err() != nil { // the stream ended because the call did
		return nil, taskID, context.Cause(ctx)
	}
	if task == nil {
		return nil, taskID, errors.New("the stream ended without an answer")
	}
	return task, taskID, nil
}

// statusSize is what MaxAnswerBytes counts of a task's status: its message's
// parts (partsSize), which the answer shows when no artifact has text.
func statusSize(st sdk.TaskStatus) int {
	if st.Message == nil {
		return 0
	}
	return partsSize(st.Message.Parts)
}

// answered says whether a task in state st answers the call: it ended, or it
// waits for its caller (input or authentication).
func answered(st sdk.TaskState) bool {
	return st.Terminal() || st == sdk.TaskStateInputRequired || st == sdk.TaskStateAuthRequired
}

// Polling of a task that runs on after the answer to its message: the first
// tasks/get after pollFirst, each next one pollGrowth times later, at most
// pollMax apart.
var (
	pollFirst  = 250 * time.Millisecond
	pollMax    = 5 * time.Second
	pollGrowth = 1.5
	// pollFailures tasks/get failing in a row fail the call; those that find no
	// connection to the agent (it restarts) fail it once it has been away for
	// pollAway in a row.
	pollFailures = 3
	pollAway     = 30 * time.Second
)

// follow asks the agent for task with tasks/get until it is answered (answered),
// the call's context ends, tasks/get fails pollFailures times in a row (or finds
// no connection to the agent for pollAway), or its
// artifacts and status message pass MaxAnswerBytes. A task that
// names no ID cannot be followed and fails the call as it stands.
func (t *Tool) follow(ctx context.Context, client *a2aclient.Client, task *sdk.Task) (sdk.SendMessageResult, error) {
	if task.ID == "" {
		return task, nil // describe says how it stands
	}
	wait := pollFirst
	timer := time.NewTimer(wait)
	defer timer.Stop()
	failed := 0        // tasks/get failed this many times in a row
	var gone time.Time // when tasks/get first found the agent not there, of those in a row
	for {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-timer.C:
		}
		wait = min(time.Duration(float64(wait)*pollGrowth), pollMax)
		timer.Reset(wait)
		got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID})
		switch {
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case err != nil:
			if away(err) {
				// No connection, or a proxy's 503 or 504: the agent restarts
				// (a task its next run resumes).
				if gone.IsZero() {
					gone = time.Now()
				}
				if time.Since(gone) < pollAway {
					continue
				}
				return nil, fmt.Errorf("following task %s (tasks/get): the agent was not there for %s: %w", task.ID, pollAway, err)
			}
			gone = time.Time{}
			if failed++; failed < pollFailures {
				continue // a proxy's hiccup
			}
			return nil, fmt.Errorf("following task %s (tasks/get, %d times in a row): %w", task.ID, failed, err)
		case got == nil || got.ID != task.ID:
			return nil, fmt.Errorf("following task %s (tasks/get): the agent answered with another task", task.ID)
		case got.ContextID != "" && task.ContextID != "" && got.ContextID != task.ContextID:
			// Its answer, and the context the model would go on in, would be
			// another conversation's.
			return nil, fmt.Errorf("following task %s (tasks/get): the agent answered with it in context %q, not %q", task.ID, got.ContextID, task.ContextID)
		}
		size := statusSize(got.Status)
		for _, a := range got.Artifacts {
			size += artifactSize(a)
		}
		if size > t.cfg.MaxAnswerBytes {
			return nil, fmt.Errorf("%w: its artifacts passed %d bytes", ErrAnswerTooLarge, t.cfg.MaxAnswerBytes)
		}
		if got.ContextID == "" {
			got.ContextID = task.ContextID
		}
		if answered(got.Status.State) {
			return got, nil
		}
		failed, gone = 0, time.Time{}
	}
}

// filesSize is the size of the file parts of parts (their bytes or URI). The
// tool's transport reads none (withoutFileBytes describes each as text); a part
// made otherwise counts so.
func filesSize(parts sdk.ContentParts) int {
	n := 0
	for _, p := range parts {
		if f, ok := p.(sdk.FilePart); ok {
			switch c := f.File.(type) {
			case sdk.FileBytes:
				n += len(c.Bytes) + len(c.Name) + len(c.MimeType)
			case sdk.FileURI:
				n += len(c.URI) + len(c.Name) + len(c.MimeType)
			}
		}
	}
	return n
}

// Overheads counted besides what they hold for each artifact an answer adds and
// for each of its parts that holds nothing (no text, data or file) or carries
// metadata, so that a stream of empty ones grows toward MaxAnswerBytes as the
// memory that keeps them does. A part that holds something counts what it holds
// only: an agent that streams its answer a token a part stays within a bound of
// some times its text.
const (
	partOverhead = 32
	// partFloor is the least a part counts: a token streamed as a part of its own
	// ("tok ") counts about what it holds, a stream of one-byte parts (each kept
	// at tens of bytes) not much less than it costs.
	partFloor        = 16
	artifactOverhead = 64
)

// artifactSize is what MaxAnswerBytes counts of an artifact: its parts
// (partsSize), its ID, name, description, extensions and metadata (encoded), and
// artifactOverhead.
func artifactSize(a *sdk.Artifact) int {
	if a == nil {
		return 0
	}
	n := artifactOverhead + len(a.ID) + len(a.Name) + len(a.Description) + metadataSize(a.Metadata) + partsSize(a.Parts)
	for _, e := range a.Extensions {
		n += len(e)
	}
	return n
}

// partsSize is what MaxAnswerBytes counts of parts: of each, its text or data
// (partsText), its file (filesSize), its metadata (encoded), partOverhead when
// it is empty (partSize) or carries metadata, and at least partFloor.
func partsSize(parts sdk.ContentParts) int {
	n := 0
	for _, p := range parts {
		size, empty := partSize(p)
		if m, ok := p.(interface{ Meta() map[string]any }); ok {
			if meta := metadataSize(m.Meta()); meta > 0 {
				size += meta + partOverhead
			}
		}
		if empty {
			size += partOverhead
		}
		n += max(size, partFloor)
	}
	return n
}

// partSize is what a part holds, as partsText and filesSize count it (its text,
// its data encoded, its file), and whether it holds nothing: a text part with no
// text, a data part with no data, a file part with neither bytes nor a URI, a part
// of no kind this tool knows.
func partSize(p sdk.Part) (size int, empty bool) {
	switch v := p.(type) {
	case sdk.TextPart:
		return len(v.Text), v.Text == ""
	case sdk.DataPart:
		b, _ := json.Marshal(v.Data)
		return len(b), len(v.Data) == 0
	case sdk.FilePart:
		size = filesSize(sdk.ContentParts{v})
		switch c := v.File.(type) {
		case sdk.FileBytes:
			return size, c.Bytes == ""
		case sdk.FileURI:
			return size, c.URI == ""
		}
		return size, true
	}
	return 0, true
}

// metadataSize is the size of metadata encoded as JSON (0 when empty).
func metadataSize(m map[string]any) int {
	if len(m) == 0 {
		return 0
	}
	b, err := json.Marshal(m)
	if err != nil {
		return 0 // decoded from JSON, it encodes
	}
	return len(b)
}

// updateArtifacts applies an artifact update to a task's artifacts: its parts are
// appended to the artifact of the same ID (Append), or it replaces it, or it is
// added.
func updateArtifacts(arts []*sdk.Artifact, ev *sdk.TaskArtifactUpdateEvent) []*sdk.Artifact {
	if ev.Artifact == nil {
		return arts
	}
	for i, a := range arts {
		if a.ID != ev.Artifact.ID {
			continue
		}
		if ev.Append {
			merged := *a
			merged.Parts = append(slices.Clip(a.Parts), ev.Artifact.Parts...)
			arts[i] = &merged
		} else {
			arts[i] = ev.Artifact
		}
		return arts
	}
	return append(arts, ev.Artifact)
}

// cancelRemote asks the remote agent to cancel its task, bounded by the card
// timeout, and logs nothing: a remote that fails to cancel runs its task to its own
// end, as before the call was cancelled.
func (t *Tool) cancelRemote(ctx context.Context, client *a2aclient.Client, id sdk.TaskID) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.CardTimeout)
	defer cancel()
	_, _ = client.CancelTask(cctx, &sdk.TaskIDParams{ID: id})
}

// describe renders what a remote agent answered.
func describe(name string, res sdk.SendMessageResult) (string, error) {
	switch v := res.(type) {
	case *sdk.Message:
		return fmt.Sprintf("%s\n\n(context_id: %s)", partsText(v.Parts), v.ContextID), nil
	case *sdk.Task:
		var answer []string
		for _, a := range v.Artifacts {
			if s := partsText(a.Parts); s != "" {
				answer = append(answer, s)
			}
		}
		status := ""
		if v.Status.Message != nil {
			status = partsText(v.Status.Message.Parts)
		}
		if len(answer) == 0 && status != "" {
			answer = append(answer, status)
		}
		text := strings.Join(answer, "\n")
		switch v.Status.State {
		case sdk.TaskStateCompleted:
			return fmt.Sprintf("%s\n\n(context_id: %s)", text, v.ContextID), nil
		case sdk.TaskStateInputRequired, sdk.TaskStateAuthRequired:
			return fmt.Sprintf("The remote agent %s needs more input (state %s): %s\n\n(task_id: %s, context_id: %s)", name, v.Status.State, status, v.ID, v.ContextID), nil
		default:
			return "", fmt.Errorf("remote agent %s: task %s ended %s: %s", name, v.ID, v.Status.State, status)
		}
	}
	return "", fmt.Errorf("remote agent %s: unexpected answer %T", name, res)
}

func partsText(parts sdk.ContentParts) string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case sdk.TextPart:
			out = append(out, v.Text)
		case sdk.DataPart:
			b, _ := json.Marshal(v.Data)
			out = append(out, string(b))
		}
	}
	return strings.Join(out, "\n")
}
