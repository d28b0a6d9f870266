package a2a

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// A2A 1.0 over the same endpoint. A 1.0 JSON-RPC client (the JavaScript SDK
// @a2a-js/sdk 1.x in its default mode) calls PascalCase methods with the 1.0 wire
// format (proto-JSON: enum names such as "TASK_STATE_COMPLETED" and "ROLE_USER",
// parts without "kind" — {"text"}, {"data"}, {"raw"}, {"url"} —, results wrapped by
// type: {"task": …}, {"statusUpdate": …}). The server translates such a request to
// its 0.3 method and shape, has the 0.3 handler answer it, and translates the answer
// (each event of a stream as it comes) back to 1.0. The agent card lists both
// versions under supportedInterfaces (1.0 first), beside 0.3's url and
// preferredTransport.

// V1ProtocolVersion is the A2A 1.0 version a card's supportedInterfaces names.
const V1ProtocolVersion = "1.0"

// v1Method is how a 1.0 JSON-RPC method maps to a 0.3 one: the 0.3 method, whether
// it streams, and the translation of its params and of its result.
type v1Method struct {
	legacy  string
	stream  bool
	params  func(map[string]any) (map[string]any, error)
	result  func(any) (any, error)
	missing any // the result when the 0.3 handler answered nothing (delete)
}

// v1Methods are the A2A 1.0 JSON-RPC methods served, by name.
var v1Methods = map[string]v1Method{
	"SendMessage":                      {legacy: "message/send", params: v1SendParams, result: v1SendResult},
	"SendStreamingMessage":             {legacy: "message/stream", stream: true, params: v1SendParams, result: v1StreamEvent},
	"GetTask":                          {legacy: "tasks/get", params: v1TaskIDParams, result: v1TaskResult},
	"CancelTask":                       {legacy: "tasks/cancel", params: v1TaskIDParams, result: v1TaskResult},
	"SubscribeToTask":                  {legacy: "tasks/resubscribe", stream: true, params: v1TaskIDParams, result: v1StreamEvent},
	"CreateTaskPushNotificationConfig": {legacy: "tasks/pushNotificationConfig/set", params: v1SetPushParams, result: v1PushConfig},
	"GetTaskPushNotificationConfig":    {legacy: "tasks/pushNotificationConfig/get", params: v1PushIDParams, result: v1PushConfig},
	"ListTaskPushNotificationConfigs":  {legacy: "tasks/pushNotificationConfig/list", params: v1PushIDParams, result: v1PushConfigs},
	"DeleteTaskPushNotificationConfig": {legacy: "tasks/pushNotificationConfig/delete", params: v1PushIDParams, result: func(any) (any, error) { return map[string]any{}, nil }, missing: map[string]any{}},
}

// v1Unserved are 1.0 methods with no 0.3 counterpart, and why.
var v1Unserved = map[string]string{
	"ListTasks":            "tasks are not listed: call GetTask with a task's id",
	"GetExtendedAgentCard": "the card has no extended version: read /.well-known/agent-card.json",
}

// serveV1 answers the 1.0 request of method m with id and params through next
// (the 0.3 handler).
func (s *Server) serveV1(w http.ResponseWriter, r *http.Request, next http.Handler, m v1Method, id any, rawParams json.RawMessage) {
	params := map[string]any{}
	if len(bytes.TrimSpace(rawParams)) > 0 && string(bytes.TrimSpace(rawParams)) != "null" {
		if err := decodeJSON(rawParams, &params); err != nil {
			writeRefusal(w, id, -32602, "invalid params: want an object: "+err.Error(), m.stream, false)
			return
		}
	}
	legacy, err := m.params(params)
	if err == nil && (m.legacy == "message/send" || m.legacy == "message/stream") {
		err = checkAnswerMembers(rawParams)
	}
	if err != nil {
		writeRefusal(w, id, -32602, "invalid params: "+err.Error(), m.stream, false)
		return
	}
	lp, err := json.Marshal(legacy)
	if err != nil {
		writeRefusal(w, id, -32603, err.Error(), m.stream, false)
		return
	}
	if mk, ok := paramsOf[m.legacy]; ok {
		// As guard does for 0.3: params of the wrong shape (a text that is a
		// number) are invalid params, not the SDK's parse error.
		if err := json.Unmarshal(lp, mk()); err != nil {
			writeRefusal(w, id, -32602, "invalid params: "+err.Error(), m.stream, false)
			return
		}
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": m.legacy, "params": json.RawMessage(lp)})
	if err != nil {
		writeRefusal(w, id, -32603, err.Error(), m.stream, false)
		return
	}
	r = r.Clone(context.WithValue(r.Context(), v1Request{}, true))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	tw := &v1Writer{w: w, m: m, id: id, stream: m.stream}
	next.ServeHTTP(tw, r)
	tw.finish()
}

// v1Request marks, in its context, a request made with a 1.0 method: where the
// versions' semantics differ (SubscribeToTask), the handler answers as 1.0 says.
type v1Request struct{}

// isV1 reports whether ctx is a 1.0 request's.
func isV1(ctx context.Context) bool {
	v, _ := ctx.Value(v1Request{}).(bool)
	return v
}

// v1Writer translates the 0.3 handler's answer to 1.0: a JSON answer once whole, a
// stream's events (SSE "data:" lines) one by one.
type v1Writer struct {
	w       http.ResponseWriter
	m       v1Method
	id      any
	stream  bool
	status  int
	buf     bytes.Buffer
	started bool // the stream's header was written
}

func (t *v1Writer) Header() http.Header { return t.w.Header() }

func (t *v1Writer) WriteHeader(status int) {
	if t.status == 0 {
		t.status = status
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (t *v1Writer) Unwrap() http.ResponseWriter { return t.w }

func (t *v1Writer) isStream() bool {
	return t.stream && strings.HasPrefix(t.w.Header().Get("Content-Type"), "text/event-stream")
}

func (t *v1Writer) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if t.isStream() {
		if err := t.pump(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush implements http.Flusher: a stream's complete events go out translated.
func (t *v1Writer) Flush() {
	if t.isStream() {
		_ = t.pump()
		if f, ok := t.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// pump writes out the complete SSE events buffered, their data translated.
func (t *v1Writer) pump() error {
	if !t.started {
		t.started = true
		if t.status != 0 {
			t.w.WriteHeader(t.status)
		}
	}
	for {
		b := t.buf.Bytes()
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			return nil
		}
		event := string(b[:i])
		t.buf.Next(i + 2)
		var out strings.Builder
		sc := bufio.NewScanner(strings.NewReader(event))
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			line := sc.Text()
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				line = "data: " + string(t.translate([]byte(data)))
			}
			out.WriteString(line)
			out.WriteByte('\n')
		}
		out.WriteByte('\n')
		if _, err := t.w.Write([]byte(out.String())); err != nil {
			return err
		}
	}
}

// finish writes out a JSON answer, translated.
func (t *v1Writer) finish() {
	if t.started {
		return
	}
	if t.isStream() {
		// A stream that ended before its first event (the server's stop cut it:
		// its last event follows, Server.guard) is a stream all the same.
		_ = t.pump()
		return
	}
	body := bytes.TrimSpace(t.buf.Bytes())
	if len(body) == 0 {
		if t.m.missing == nil {
			writeRPCError(t.w, http.StatusOK, t.id, -32603, "the server answered nothing")
			return
		}
		body, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": t.id, "result": t.m.missing})
	} else {
		body = t.translate(body)
	}
	t.w.Header().Del("Content-Length")
	if t.status != 0 {
		t.w.WriteHeader(t.status)
	}
	_, _ = t.w.Write(append(body, '\n'))
}

// translate turns a 0.3 JSON-RPC response into 1.0's: its result translated, an
// error as it is (the codes are the same).
func (t *v1Writer) translate(data []byte) []byte {
	var resp map[string]any
	if err := decodeJSON(data, &resp); err != nil {
		return data
	}
	res, ok := resp["result"]
	if !ok {
		if e, ok := resp["error"].(map[string]any); !ok || !withReason(e) {
			return data
		}
		out, err := json.Marshal(resp)
		if err != nil {
			return data
		}
		return out
	}
	v, err := t.m.result(res)
	if err != nil {
		resp = map[string]any{"jsonrpc": "2.0", "id": resp["id"], "error": map[string]any{"code": -32603, "message": "translating the answer to A2A 1.0: " + err.Error()}}
	} else {
		resp["result"] = v
	}
	out, err := json.Marshal(resp)
	if err != nil {
		return data
	}
	return out
}

// withReason puts the reason an error's data gives ({"error": "..."}, as the SDK
// and the node write it) in its message, and reports whether it did: a 1.0 client
// reads only a list of details (google.rpc) in data, and the Python SDK shows the
// message alone ("invalid params", without why).
func withReason(e map[string]any) bool {
	d, _ := e["data"].(map[string]any)
	why, _ := d["error"].(string)
	msg, _ := e["message"].(string)
	if why == "" || strings.Contains(msg, why) {
		return false
	}
	why = strings.TrimPrefix(why, "a2a: ")
	if !strings.HasPrefix(why, msg) {
		why = msg + ": " + why
	}
	e["message"] = why
	return true
}

func decodeJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

// Requests: 1.0 → 0.3.

func v1SendParams(p map[string]any) (map[string]any, error) {
	msg, ok := p["message"].(map[string]any)
	if !ok {
		return nil, errors.New(`"message" is required`)
	}
	m, err := v1ToMessage(msg)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"message": m}
	if md, ok := p["metadata"].(map[string]any); ok {
		out["metadata"] = md
	}
	if c, ok := p["configuration"].(map[string]any); ok {
		cfg := map[string]any{}
		ret, _ := c["returnImmediately"].(bool)
		cfg["blocking"] = !ret
		if modes, ok := c["acceptedOutputModes"].([]any); ok {
			cfg["acceptedOutputModes"] = modes
		}
		if h, ok := c["historyLength"]; ok {
			cfg["historyLength"] = h
		}
		if pc, ok := c["taskPushNotificationConfig"].(map[string]any); ok {
			cfg["pushNotificationConfig"] = v1ToPushConfig(pc)
		}
		out["configuration"] = cfg
	}
	return out, nil
}

func v1TaskIDParams(p map[string]any) (map[string]any, error) {
	id, _ := p["id"].(string)
	if id == "" {
		return nil, errors.New(`"id" (the task's) is required`)
	}
	out := map[string]any{"id": id}
	if h, ok := p["historyLength"]; ok {
		out["historyLength"] = h
	}
	if md, ok := p["metadata"].(map[string]any); ok {
		out["metadata"] = md
	}
	return out, nil
}

func v1SetPushParams(p map[string]any) (map[string]any, error) {
	task, _ := p["taskId"].(string)
	if task == "" {
		return nil, errors.New(`"taskId" is required`)
	}
	if u, _ := p["url"].(string); u == "" {
		return nil, errors.New(`"url" is required`)
	}
	return map[string]any{"taskId": task, "pushNotificationConfig": v1ToPushConfig(p)}, nil
}

// v1PushIDParams: {taskId, id} → {id: taskId, pushNotificationConfigId: id}.
func v1PushIDParams(p map[string]any) (map[string]any, error) {
	task, _ := p["taskId"].(string)
	if task == "" {
		return nil, errors.New(`"taskId" is required`)
	}
	out := map[string]any{"id": task}
	if id, _ := p["id"].(string); id != "" {
		out["pushNotificationConfigId"] = id
	}
	return out, nil
}

func v1ToPushConfig(p map[string]any) map[string]any {
	out := map[string]any{"url": p["url"]}
	for _, k := range []string{"id", "token"} {
		if s, _ := p[k].(string); s != "" {
			out[k] = s
		}
	}
	if a, ok := p["authentication"].(map[string]any); ok {
		auth := map[string]any{"schemes": []any{}}
		if s, _ := a["scheme"].(string); s != "" {
			auth["schemes"] = []any{s}
		}
		if c, _ := a["credentials"].(string); c != "" {
			auth["credentials"] = c
		}
		out["authentication"] = auth
	}
	return out
}

var v1Roles = map[string]string{"ROLE_USER": "user", "ROLE_AGENT": "agent"}

func v1ToMessage(m map[string]any) (map[string]any, error) {
	out := map[string]any{"kind": "message"}
	for _, k := range []string{"messageId", "contextId", "taskId", "metadata", "extensions", "referenceTaskIds"} {
		if v, ok := m[k]; ok && v != "" {
			out[k] = v
		}
	}
	id, _ := out["messageId"].(string)
	if id == "" {
		return nil, errors.New(`"message.messageId" is required`)
	}
	if err := checkMessageID(id); err != nil {
		return nil, err
	}
	var role string
	switch v := m["role"].(type) {
	case string:
		role = v1Roles[v]
	case json.Number:
		role = map[string]string{"1": "user", "2": "agent"}[v.String()]
	}
	if role == "" {
		return nil, fmt.Errorf(`"message.role" %v: want "ROLE_USER" or "ROLE_AGENT"`, m["role"])
	}
	out["role"] = role
	parts, _ := m["parts"].([]any)
	legacy := make([]any, 0, len(parts))
	for i, p := range parts {
		pm, ok := p.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("message.parts[%d] is not an object", i)
		}
		lp, err := v1ToPart(pm)
		if err != nil {
			return nil, fmt.Errorf("message.parts[%d]: %w", i, err)
		}
		legacy = append(legacy, lp)
	}
	out["parts"] = legacy
	return out, nil
}

// dataCompat is the metadata flag of a 0.3 data part that wraps a value that is not
// an object as {"value": …} (as the JavaScript SDK's compatibility layer does).
const dataCompat = "data_part_compat"

func v1ToPart(p map[string]any) (map[string]any, error) {
	if err := checkPartV1(p); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if md, ok := p["metadata"].(map[string]any); ok {
		out["metadata"] = md
	}
	file := func(key string, v any) map[string]any {
		f := map[string]any{key: v}
		if s, _ := p["mediaType"].(string); s != "" {
			f["mimeType"] = s
		}
		if s, _ := p["filename"].(string); s != "" {
			f["name"] = s
		}
		out["kind"], out["file"] = "file", f
		return out
	}
	if t, ok := p["text"]; ok {
		out["kind"], out["text"] = "text", t
		return out, nil
	}
	if raw, ok := p["raw"]; ok {
		return file("bytes", raw), nil
	}
	if u, ok := p["url"]; ok {
		return file("uri", u), nil
	}
	if d, ok := p["data"]; ok {
		out["kind"] = "data"
		if obj, ok := d.(map[string]any); ok {
			out["data"] = obj
		} else {
			out["data"] = map[string]any{"value": d}
			md, _ := out["metadata"].(map[string]any)
			if md == nil {
				md = map[string]any{}
			}
			md[dataCompat] = true
			out["metadata"] = md
		}
		return out, nil
	}
	return nil, errors.New(`a part has one of "text", "raw", "url" or "data"`)
}

// Answers: 0.3 → 1.0.

func v1SendResult(res any) (any, error) {
	m, ok := res.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("result %T is not an object", res)
	}
	switch m["kind"] {
	case "task":
		return map[string]any{"task": v1Task(m)}, nil
	case "message":
		return map[string]any{"message": v1Message(m)}, nil
	}
	return nil, fmt.Errorf("result of kind %v", m["kind"])
}

func v1StreamEvent(res any) (any, error) {
	m, ok := res.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("event %T is not an object", res)
	}
	switch m["kind"] {
	case "task":
		return map[string]any{"task": v1Task(m)}, nil
	case "message":
		return map[string]any{"message": v1Message(m)}, nil
	case "status-update":
		ev := copyKeys(m, "taskId", "contextId", "metadata")
		if st, ok := m["status"].(map[string]any); ok {
			ev["status"] = v1Status(st)
		}
		return map[string]any{"statusUpdate": ev}, nil
	case "artifact-update":
		ev := copyKeys(m, "taskId", "contextId", "metadata", "append", "lastChunk")
		if a, ok := m["artifact"].(map[string]any); ok {
			ev["artifact"] = v1Artifact(a)
		}
		return map[string]any{"artifactUpdate": ev}, nil
	}
	return nil, fmt.Errorf("event of kind %v", m["kind"])
}

func v1TaskResult(res any) (any, error) {
	m, ok := res.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("result %T is not a task", res)
	}
	return v1Task(m), nil
}

func v1PushConfig(res any) (any, error) {
	m, ok := res.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("result %T is not a push config", res)
	}
	out := copyKeys(m, "taskId")
	pc, _ := m["pushNotificationConfig"].(map[string]any)
	for k, v := range copyKeys(pc, "id", "url", "token") {
		out[k] = v
	}
	if a, ok := pc["authentication"].(map[string]any); ok {
		auth := copyKeys(a, "credentials")
		if s, _ := a["schemes"].([]any); len(s) > 0 {
			auth["scheme"] = s[0]
		}
		out["authentication"] = auth
	}
	return out, nil
}

func v1PushConfigs(res any) (any, error) {
	list, _ := res.([]any)
	configs := make([]any, 0, len(list))
	for _, c := range list {
		v, err := v1PushConfig(c)
		if err != nil {
			return nil, err
		}
		configs = append(configs, v)
	}
	return map[string]any{"configs": configs}, nil
}

var v1States = map[string]string{
	"submitted": "TASK_STATE_SUBMITTED", "working": "TASK_STATE_WORKING", "input-required": "TASK_STATE_INPUT_REQUIRED",
	"completed": "TASK_STATE_COMPLETED", "canceled": "TASK_STATE_CANCELED", "failed": "TASK_STATE_FAILED",
	"rejected": "TASK_STATE_REJECTED", "auth-required": "TASK_STATE_AUTH_REQUIRED", "unknown": "TASK_STATE_UNSPECIFIED",
}

func v1Task(m map[string]any) map[string]any {
	out := copyKeys(m, "id", "contextId", "metadata")
	if st, ok := m["status"].(map[string]any); ok {
		out["status"] = v1Status(st)
	}
	if arts, ok := m["artifacts"].([]any); ok {
		var list []any
		for _, a := range arts {
			if am, ok := a.(map[string]any); ok {
				list = append(list, v1Artifact(am))
			}
		}
		out["artifacts"] = list
	}
	if hist, ok := m["history"].([]any); ok {
		var list []any
		for _, h := range hist {
			if hm, ok := h.(map[string]any); ok {
				list = append(list, v1Message(hm))
			}
		}
		out["history"] = list
	}
	return out
}

func v1Status(st map[string]any) map[string]any {
	out := copyKeys(st, "timestamp")
	s, _ := st["state"].(string)
	if v, ok := v1States[s]; ok {
		out["state"] = v
	} else {
		out["state"] = "TASK_STATE_UNSPECIFIED"
	}
	if msg, ok := st["message"].(map[string]any); ok {
		out["message"] = v1Message(msg)
	}
	return out
}

func v1Message(m map[string]any) map[string]any {
	out := copyKeys(m, "messageId", "contextId", "taskId", "metadata", "extensions", "referenceTaskIds")
	if m["role"] == "user" {
		out["role"] = "ROLE_USER"
	} else {
		out["role"] = "ROLE_AGENT"
	}
	out["parts"] = v1Parts(m["parts"])
	return out
}

func v1Artifact(a map[string]any) map[string]any {
	out := copyKeys(a, "artifactId", "name", "description", "metadata", "extensions")
	out["parts"] = v1Parts(a["parts"])
	return out
}

func v1Parts(v any) []any {
	parts, _ := v.([]any)
	out := make([]any, 0, len(parts))
	for _, p := range parts {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		np := copyKeys(pm, "metadata")
		switch pm["kind"] {
		case "text":
			np["text"] = pm["text"]
		case "data":
			d := pm["data"]
			if md, ok := pm["metadata"].(map[string]any); ok && md[dataCompat] == true {
				if dm, ok := d.(map[string]any); ok {
					d = dm["value"]
				}
				rest := map[string]any{}
				for k, v := range md {
					if k != dataCompat {
						rest[k] = v
					}
				}
				delete(np, "metadata")
				if len(rest) > 0 {
					np["metadata"] = rest
				}
			}
			np["data"] = d
		case "file":
			f, _ := pm["file"].(map[string]any)
			if b, ok := f["bytes"]; ok {
				np["raw"] = b
			} else {
				np["url"] = f["uri"]
			}
			if s, _ := f["mimeType"].(string); s != "" {
				np["mediaType"] = s
			}
			if s, _ := f["name"].(string); s != "" {
				np["filename"] = s
			}
		default:
			continue
		}
		out = append(out, np)
	}
	return out
}

// copyKeys copies the keys of m that are set.
func copyKeys(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := m[k]; ok && v != nil {
			out[k] = v
		}
	}
	return out
}
