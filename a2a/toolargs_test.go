package a2a_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// The tool reads its arguments as every tool's are read (tools.ArgumentParser,
// for its schema): encoding/json took a key written twice at its last value, a
// key in another case ("Message") as the field, text after the object as
// nothing, and a message past the schema's maxLength whole; a wrong type reached
// the model in the decoder's words about Go struct fields. Each is now refused
// naming the field, before any agent is reached.
func TestToolReadsArgumentsAsEveryToolDoes(t *testing.T) {
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "nowhere", CardURL: "http://127.0.0.1:1" + a2a.CardPath})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		{`{"message":"hello","message":"goodbye"}`, `the key "message" appears twice`},
		{`{"Message":"hello"}`, `Message`},
		{`{"message":"hello"} {"message":"goodbye"}`, `message`},
		{`{"message":["hello"]}`, `"message" must be a string`},
		{`{"message":"` + strings.Repeat("x", 100001) + `"}`, `message`},
		{`{"message":"hello","task_id":"t-1"}`, `task_id "t-1" needs the context_id`},
	} {
		_, err := tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: c.args})
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Go struct") {
			t.Errorf("%.60s: %v; want an argument error saying %s", c.args, err, c.want)
		}
	}
}
