package mcp

import (
	"bytes"
	"encoding/json"
	"sync"
)

// taskOnlyTools are the names of a server's tools that it runs only as tasks: its
// tools/list gives them "execution": {"taskSupport": "required"} (MCP 2025-11-25),
// and it refuses a plain tools/call of them (server-everything's
// simulate-research-query answers -32601 "requires task augmentation"). The
// client does not call tools as tasks, so they are left out of the catalog rather
// than offered to a model that could only fail with them. The SDK's Tool drops the
// field, so the connection notes it from the raw answers of tools/list (the HTTP
// transport's bodies, a stdio connection's messages).
type taskOnlyTools struct {
	mu    sync.Mutex
	names map[string]bool
	// last is the last result whose tools were noted: the same listing again
	// (a client lists the tools at each refresh) changes no mark, so it is not
	// decoded again.
	last []byte
}

// note reads the result of a tools/list answer (or any result: one with no tools
// changes nothing), and marks its tools as task-only or not: each listing of a
// tool replaces its mark, so that a tool its server no longer runs only as a
// task (an answer without "execution", after an upgrade or a reconnection) is
// offered again. Every answer with "tools" is read for that, not only those
// that mark one.
func (k *taskOnlyTools) note(result []byte) {
	if !bytes.Contains(result, []byte(`"tools"`)) {
		return
	}
	k.mu.Lock()
	same := bytes.Equal(result, k.last)
	k.mu.Unlock()
	if same {
		return
	}
	var list struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution *struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &list) != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last = bytes.Clone(result)
	for _, t := range list.Tools {
		if t.Execution != nil && t.Execution.TaskSupport == "required" {
			if k.names == nil {
				k.names = map[string]bool{}
			}
			k.names[t.Name] = true
		} else {
			delete(k.names, t.Name)
		}
	}
}

// noteMessage notes the result of a JSON-RPC response msg.
func (k *taskOnlyTools) noteMessage(msg []byte) {
	if !bytes.Contains(msg, []byte(`"tools"`)) {
		return
	}
	var resp struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(msg, &resp) == nil && len(resp.Result) > 0 {
		k.note(resp.Result)
	}
}

// noteEvent notes the JSON-RPC response an event of a stream carries (its data
// lines, joined as the SSE format joins them).
func (k *taskOnlyTools) noteEvent(ev []byte) {
	if !bytes.Contains(ev, []byte(`"tools"`)) {
		return
	}
	k.noteMessage(eventData(ev))
}

// eventData is the data of an event of a stream: its data lines, joined as the
// SSE format joins them.
func eventData(ev []byte) []byte {
	var data []byte
	for line := range bytes.Lines(ev) {
		line = bytes.TrimRight(line, "\r\n")
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(rest, []byte(" "))...)
		}
	}
	return data
}

func (k *taskOnlyTools) required(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.names[name]
}
